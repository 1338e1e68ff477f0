//! Packing the weights (RHS) into a [`RhsLayout`], once, at session creation; and reading packed weights back
//! (tests unpack every layout to the source weights through these accessors).
//!
//! g_idx: when g_idx reorders K (act-order GPTQ), the packer regroups K so that each group's rows are
//! contiguous, padded to whole blocks; `k_map` records, for each packed K position, the source column of A
//! (or none: a zero). The LHS packer gathers A through it, and from then on the kernels see plain blocks.

use super::layout::{Codes, RecordLayout, RhsLayout, ZpStorage, code_position};
use crate::format::{FormatError, Params, Weights, ZeroPoints};
use std::sync::Arc;

/// Weights packed for one layout. Immutable after packing; shared by all threads.
#[derive(Debug, Clone)]
pub struct PackedRhs {
    pub(crate) params: Params,
    pub(crate) layout: RhsLayout,
    /// Packed blocks per panel: k_blocks, or more when g_idx regrouping pads groups.
    pub(crate) blocks: usize,
    pub(crate) record: RecordLayout,
    /// For each packed K position, the source column of A, or `NO_SOURCE` (a zero). None = identity.
    pub(crate) k_map: Option<Vec<u32>>,
    pub(crate) data: RhsBytes,
    /// Σ_k w[n, k] over every packed K position as the family's kernels see the weights, per column: the
    /// `ActQuant::Row` numerics' zero-point term, made on first use (`crate::Selected::matmul`).
    pub(crate) col_sums: std::sync::OnceLock<Vec<f32>>,
}

/// Where packed weights live.
#[derive(Clone)]
pub enum RhsBytes {
    /// Allocated and owned by the [`PackedRhs`] ([`PackedRhs::pack`]).
    Owned(Vec<u8>),
    /// Packed by [`PackedRhs::pack_into`] into memory the caller provided and keeps alive behind this handle (a
    /// host allocator's block, a mapped file, a buffer shared between sessions): read in place, never copied.
    Borrowed(Arc<dyn AsRef<[u8]> + Send + Sync>),
}

impl RhsBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            RhsBytes::Owned(v) => v,
            RhsBytes::Borrowed(b) => (**b).as_ref(),
        }
    }
}

impl std::fmt::Debug for RhsBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if matches!(self, RhsBytes::Owned(_)) { "Owned" } else { "Borrowed" };
        write!(f, "{kind}({} bytes)", self.as_slice().len())
    }
}

/// `k_map` entry for a packed position that reads no column of A.
pub const NO_SOURCE: u32 = u32::MAX;

impl PackedRhs {
    /// Packs validated weights into `layout` (on several threads for large weights).
    ///
    /// Errors if the layout cannot hold them (block geometry, or zero points a `ZpStorage::None` layout
    /// cannot store). Scale precision is the caller's choice (see [`RhsLayout::can_hold`]).
    pub fn pack(w: &Weights<'_>, layout: RhsLayout) -> Result<Self, FormatError> {
        let p = w.params;
        Self::pack_with_threads(w, layout, pack_threads(p.n * p.k_padded(), p.n.div_ceil(layout.nr)))
    }

    /// [`PackedRhs::pack`] on exactly `threads` threads (panels are split between them).
    pub fn pack_with_threads(w: &Weights<'_>, layout: RhsLayout, threads: usize) -> Result<Self, FormatError> {
        let (mut rhs, block_src) = Self::header(w, layout)?;
        let mut data = vec![0u8; rhs.panels() * rhs.panel_bytes()];
        rhs.fill(w, &block_src, threads, &mut data);
        rhs.data = RhsBytes::Owned(data);
        Ok(rhs)
    }

    /// The size in bytes of `w` packed into `layout`: what [`PackedRhs::pack_into`] needs, known before packing.
    pub fn packed_len(w: &Weights<'_>, layout: RhsLayout) -> Result<usize, FormatError> {
        let (rhs, _) = Self::header(w, layout)?;
        Ok(rhs.panels() * rhs.panel_bytes())
    }

    /// Packs `w` into `out`, a buffer of exactly [`PackedRhs::packed_len`] bytes the caller provides (any
    /// contents: it is overwritten), with the same bytes [`PackedRhs::pack`] makes. Read it back in place with
    /// [`PackedRhs::borrowed`].
    pub fn pack_into(w: &Weights<'_>, layout: RhsLayout, out: &mut [u8]) -> Result<(), FormatError> {
        let (rhs, block_src) = Self::header(w, layout)?;
        let need = rhs.panels() * rhs.panel_bytes();
        if out.len() != need {
            return Err(FormatError(format!(
                "a buffer of {} bytes cannot hold these weights packed as {layout}: they take {need}",
                out.len()
            )));
        }
        out.fill(0);
        let p = w.params;
        rhs.fill(w, &block_src, pack_threads(p.n * p.k_padded(), rhs.panels()), out);
        Ok(())
    }

    /// Packed weights read in place from `bytes`, which [`PackedRhs::pack_into`] filled from the same `w` and
    /// `layout` (its length is checked; its contents are the caller's word).
    pub fn borrowed(
        w: &Weights<'_>,
        layout: RhsLayout,
        bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    ) -> Result<Self, FormatError> {
        let (mut rhs, _) = Self::header(w, layout)?;
        let (have, need) = ((*bytes).as_ref().len(), rhs.panels() * rhs.panel_bytes());
        if have != need {
            return Err(FormatError(format!("packed weights of {have} bytes, but {layout} packing takes {need}")));
        }
        rhs.data = RhsBytes::Borrowed(bytes);
        Ok(rhs)
    }

    /// Whether the packed bytes are the caller's ([`PackedRhs::borrowed`]).
    pub fn is_borrowed(&self) -> bool {
        matches!(self.data, RhsBytes::Borrowed(_))
    }

    /// Checks that `layout` can hold `w` and lays out the packed weights (no bytes yet); also returns the source
    /// block of each packed block.
    fn header(w: &Weights<'_>, layout: RhsLayout) -> Result<(Self, Vec<u32>), FormatError> {
        let p = w.params;
        let has_zp = !matches!(w.zero_points, ZeroPoints::Default);
        if !layout.holds_blocks(p.bits, p.block_size) {
            return Err(FormatError(format!(
                "layout {layout} cannot hold bits={} block_size={}",
                p.bits, p.block_size
            )));
        }
        if has_zp && layout.zero_points == ZpStorage::None {
            return Err(FormatError(format!("layout {layout} cannot hold weights with zero points")));
        }
        let bl = p.block_size;
        // Packed block → (source block whose scale/zp it uses), and packed K → source k.
        let (block_src, k_map) = if w.has_reordering_g_idx() {
            let (bs, km) = regroup(w);
            (bs, Some(km))
        } else {
            ((0..p.k_blocks() as u32).collect(), None)
        };
        let blocks = block_src.len();
        let rec = layout.record(p.bits, bl, has_zp);
        Ok((
            PackedRhs {
                params: p,
                layout,
                blocks,
                record: rec,
                k_map,
                data: RhsBytes::Owned(Vec::new()),
                col_sums: std::sync::OnceLock::new(),
            },
            block_src,
        ))
    }

    /// Writes the packed weights into `data` (zeroed, `panels · panel_bytes` long) on `threads` threads.
    fn fill(&self, w: &Weights<'_>, block_src: &[u32], threads: usize, data: &mut [u8]) {
        let (p, layout, rec, rhs) = (w.params, self.layout, self.record, self);
        let bl = p.block_size;
        let panels = rhs.panels();
        let record = rec.bytes;
        // Where each block offset lands for column 0 (a column adds col·kr bytes): computed once, not per code.
        let dest: Vec<(usize, u32)> = (0..bl).map(|o| code_position(&layout, p.bits, bl, 0, o)).collect();
        // With g_idx regrouping, the source k of each packed position (None: padding, whose field stays 0, i.e.
        // v = 0, since its A value is always 0). Without, packed k = source k and positions past K are padding.
        let source_k: Vec<Option<usize>> = match &rhs.k_map {
            Some(m) => m.iter().map(|&s| (s != NO_SOURCE).then_some(s as usize)).collect(),
            None => Vec::new(),
        };
        let k_map = rhs.k_map.as_deref();
        let m_v = layout.code_offset(p.bits);
        let field_mask = p.max_code();
        // The stored field of code q: q, or q − m in two's complement (= q XOR m).
        let field = |q: u8| match layout.codes {
            Codes::Unsigned => q,
            Codes::Signed => q ^ (m_v as u8),
        };
        let value = |f: u8| match layout.codes {
            Codes::Unsigned => f as i32,
            Codes::Signed => f as i32 - if f as i32 >= m_v { 2 * m_v } else { 0 },
        };
        // Fast path (no g_idx regrouping): a block's fields are unpacked once into `fields` (padding past K stays
        // 0), then written a kr-group at a time, lane by lane, to the positions `code_position` defines. The
        // per-code path below (through `dest`) serves g_idx and is what the fast one is tested against.
        let (bits, cpb) = (p.bits as usize, p.codes_per_byte());
        let chunk = RhsLayout::chunk(bl);
        let lane_len = chunk / cpb;
        let chunk_bytes = chunk * layout.nr * bits / 8;
        let fast = k_map.is_none() && lane_len.is_multiple_of(layout.kr) && self_test_fast_path();
        let flip = match layout.codes {
            Codes::Unsigned => 0u8,
            Codes::Signed => m_v as u8,
        };
        let pack_panel = |panel: usize, out: &mut [u8]| {
            let mut fields = vec![0u8; if fast { bl } else { 0 }];
            // Row by row (B is read sequentially; the panel's records, nr rows wide, stay in cache), a row's
            // scales and zero points converted at once.
            let kb = p.k_blocks();
            let mut row_scale_bytes = vec![0u8; kb * layout.scales.bytes()];
            let mut row_scale_rounded = vec![0f32; kb];
            let mut row_zp = vec![0f32; if rec.has_zp { kb } else { 0 }];
            for col in 0..layout.nr {
                let n = panel * layout.nr + col;
                if n >= p.n {
                    break; // padding columns: zero fields, zero scale, zero correction
                }
                layout.scales.encode(&w.scales[n * kb..][..kb], &mut row_scale_bytes, &mut row_scale_rounded);
                if rec.has_zp {
                    w.zero_point_row(n, &mut row_zp);
                }
                for (vb, &src_blk) in block_src.iter().enumerate() {
                    let rec_bytes = &mut out[vb * record..][..record];
                    let mut sum = 0i32;
                    if fast && bits == 4 && chunk == 32 && !layout.block_sums && vb * bl + bl <= p.k {
                        // The common case (4-bit, whole block, blocks of 32+): fixed-size chunks LLVM unrolls.
                        let blob = &w.b[(n * p.k_blocks() + vb) * p.blob_size()..][..p.blob_size()];
                        for (c, src) in blob.chunks_exact(16).enumerate() {
                            let bytes = interleave_chunk4(src.try_into().expect("16 bytes"), flip);
                            let dst = &mut rec_bytes[c * chunk_bytes..][..chunk_bytes];
                            match layout.kr {
                                4 => scatter_groups::<4>(&bytes, dst, layout.nr, col),
                                8 => scatter_groups::<8>(&bytes, dst, layout.nr, col),
                                kr => {
                                    for (g, group) in bytes.chunks_exact(kr).enumerate() {
                                        dst[(g * layout.nr + col) * kr..][..kr].copy_from_slice(group);
                                    }
                                }
                            }
                        }
                    } else if fast {
                        let blob = &w.b[(n * p.k_blocks() + vb) * p.blob_size()..][..p.blob_size()];
                        let valid = bl.min(p.k - vb * bl);
                        match bits {
                            2 => unpack_fields::<2>(blob, &mut fields, valid, flip),
                            4 => unpack_fields::<4>(blob, &mut fields, valid, flip),
                            _ => unpack_fields::<8>(blob, &mut fields, valid, flip),
                        }
                        if layout.block_sums {
                            sum = fields[..valid].iter().map(|&f| value(f)).sum();
                        }
                        for (c, chunk_fields) in fields.chunks_exact(chunk).enumerate() {
                            // Byte pos of a lane-interleaved chunk holds lane l's field pos at bit l·bits.
                            let mut bytes = [0u8; 32];
                            for (lane, lane_fields) in chunk_fields.chunks_exact(lane_len).enumerate() {
                                for (b, &f) in bytes[..lane_len].iter_mut().zip(lane_fields) {
                                    *b |= f << (lane * bits);
                                }
                            }
                            let dst = &mut rec_bytes[c * chunk_bytes..][..chunk_bytes];
                            match layout.kr {
                                4 => scatter_groups::<4>(&bytes[..lane_len], dst, layout.nr, col),
                                8 => scatter_groups::<8>(&bytes[..lane_len], dst, layout.nr, col),
                                kr => {
                                    for (g, group) in bytes[..lane_len].chunks_exact(kr).enumerate() {
                                        dst[(g * layout.nr + col) * kr..][..kr].copy_from_slice(group);
                                    }
                                }
                            }
                        }
                    } else {
                        let mut put = |o: usize, q: u8| {
                            let (byte, shift) = dest[o];
                            let f = field(q) & field_mask;
                            rec_bytes[byte + col * layout.kr] |= f << shift;
                            sum += value(f);
                        };
                        if k_map.is_none() {
                            // Block vb of row n is one contiguous blob of B, codes in K order.
                            let blob = &w.b[(n * p.k_blocks() + vb) * p.blob_size()..][..p.blob_size()];
                            let cpb_log2 = cpb.trailing_zeros();
                            for o in 0..bl.min(p.k - vb * bl) {
                                put(o, (blob[o >> cpb_log2] >> ((o & ((1 << cpb_log2) - 1)) * bits)) & p.max_code());
                            }
                        } else {
                            for (o, k) in source_k[vb * bl..(vb + 1) * bl].iter().enumerate() {
                                if let Some(k) = *k {
                                    put(o, w.code(n, k));
                                }
                            }
                        }
                    }
                    let (src_blk, sb) = (src_blk as usize, layout.scales.bytes());
                    rec_bytes[rec.scales + col * sb..][..sb].copy_from_slice(&row_scale_bytes[src_blk * sb..][..sb]);
                    if rec.has_zp {
                        let z = row_zp[src_blk];
                        let stored = match layout.zero_points {
                            ZpStorage::PerBlock => z,
                            // From the scale as stored, so that v·s + c is the stored weight.
                            ZpStorage::Correction => row_scale_rounded[src_blk] * (m_v as f32 - z),
                            ZpStorage::None => unreachable!("checked above"),
                        };
                        rec_bytes[rec.zp + 4 * col..][..4].copy_from_slice(&stored.to_le_bytes());
                    }
                    if layout.block_sums {
                        rec_bytes[rec.sums + 4 * col..][..4].copy_from_slice(&sum.to_le_bytes());
                    }
                }
            }
        };
        // Panels are independent: large weights are packed on all cores (session creation time matters for
        // multi-GB models; ORT gives custom ops no thread pool at kernel creation).
        let panel_bytes = rhs.panel_bytes();
        if threads <= 1 || panel_bytes == 0 {
            for (panel, out) in data.chunks_exact_mut(panel_bytes.max(1)).enumerate() {
                pack_panel(panel, out);
            }
        } else {
            let per_thread = panels.div_ceil(threads);
            std::thread::scope(|scope| {
                for (t, part) in data.chunks_mut(per_thread * panel_bytes).enumerate() {
                    let pack_panel = &pack_panel;
                    scope.spawn(move || {
                        for (i, out) in part.chunks_exact_mut(panel_bytes).enumerate() {
                            pack_panel(t * per_thread + i, out);
                        }
                    });
                }
            });
        }
    }

    pub fn params(&self) -> Params {
        self.params
    }

    pub fn layout(&self) -> RhsLayout {
        self.layout
    }

    /// Packed blocks per panel.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Whether records carry zero points (or corrections); else every block has z = 2^(bits−1).
    pub fn has_zero_points(&self) -> bool {
        self.record.has_zp
    }

    /// Byte offsets inside one record.
    pub fn record_layout(&self) -> RecordLayout {
        self.record
    }

    /// The g_idx regrouping map (packed K position → source column of A, or `NO_SOURCE`), if any.
    pub fn k_map(&self) -> Option<&[u32]> {
        self.k_map.as_deref()
    }

    /// Length in values of a packed LHS row.
    pub fn k_packed(&self) -> usize {
        self.blocks * self.params.block_size
    }

    /// Number of panels (N rounded up to nr).
    pub fn panels(&self) -> usize {
        self.params.n.div_ceil(self.layout.nr)
    }

    /// Bytes of one panel (all its records).
    pub fn panel_bytes(&self) -> usize {
        self.blocks * self.record.bytes
    }

    /// The packed bytes (records of all panels).
    pub fn bytes(&self) -> &[u8] {
        self.data.as_slice()
    }

    fn rec(&self, panel: usize, vb: usize) -> &[u8] {
        &self.data.as_slice()[(panel * self.blocks + vb) * self.record.bytes..][..self.record.bytes]
    }

    /// The stored field of (column n, packed k).
    fn field_at(&self, n: usize, kk: usize) -> u8 {
        let (bl, nr) = (self.params.block_size, self.layout.nr);
        let (byte, shift) = code_position(&self.layout, self.params.bits, bl, n % nr, kk % bl);
        (self.rec(n / nr, kk / bl)[byte] >> shift) & self.params.max_code()
    }

    /// The model's code q of (column n, packed k), read back from the layout.
    pub fn code_at(&self, n: usize, kk: usize) -> u8 {
        let f = self.field_at(n, kk);
        match self.layout.codes {
            Codes::Unsigned => f,
            Codes::Signed => f ^ self.layout.code_offset(self.params.bits) as u8,
        }
    }

    /// The value v a kernel multiplies at (column n, packed k): q, or q − 2^(bits−1) for signed codes.
    pub fn value_at(&self, n: usize, kk: usize) -> i32 {
        self.code_at(n, kk) as i32 - self.layout.code_offset(self.params.bits)
    }

    /// Scale of packed block `vb` of column n, as stored.
    pub fn scale_at(&self, n: usize, vb: usize) -> f32 {
        let (nr, st) = (self.layout.nr, self.layout.scales);
        st.read(&self.rec(n / nr, vb)[self.record.scales + (n % nr) * st.bytes()..])
    }

    fn zp_field(&self, n: usize, vb: usize) -> Option<f32> {
        let nr = self.layout.nr;
        self.record.has_zp.then(|| {
            let b = &self.rec(n / nr, vb)[self.record.zp + 4 * (n % nr)..];
            f32::from_le_bytes([b[0], b[1], b[2], b[3]])
        })
    }

    /// The per-block term c of `w = v·s + c` for packed block `vb` of column n.
    pub fn correction_at(&self, n: usize, vb: usize) -> f32 {
        let m_v = self.layout.code_offset(self.params.bits) as f32;
        let s = self.scale_at(n, vb);
        match (self.layout.zero_points, self.zp_field(n, vb)) {
            (ZpStorage::Correction, Some(c)) => c,
            (_, Some(z)) => s * (m_v - z),
            (_, None) => s * (m_v - self.params.default_zero_point() as f32),
        }
    }

    /// Zero point of packed block `vb` of column n, in code units (recovered from the correction term when the
    /// layout stores that: exact up to f32 rounding, undefined for a zero scale).
    pub fn zero_point_at(&self, n: usize, vb: usize) -> f32 {
        let m_v = self.layout.code_offset(self.params.bits) as f32;
        match (self.layout.zero_points, self.zp_field(n, vb)) {
            (ZpStorage::Correction, Some(c)) => m_v - c / self.scale_at(n, vb),
            (_, Some(z)) => z,
            (_, None) => self.params.default_zero_point() as f32,
        }
    }

    /// The dequantized weight at (column n, packed k) as the layout stores it: (q − z)·s, or v·s + c.
    pub fn weight_at(&self, n: usize, kk: usize) -> f64 {
        let vb = kk / self.params.block_size;
        let s = self.scale_at(n, vb) as f64;
        match (self.layout.zero_points, self.zp_field(n, vb)) {
            (ZpStorage::Correction, Some(c)) => self.value_at(n, kk) as f64 * s + c as f64,
            _ => (self.code_at(n, kk) as f64 - self.zero_point_at(n, vb) as f64) * s,
        }
    }

    /// Σ v over packed block `vb` of column n, as stored (layouts with `block_sums`).
    pub fn block_sum_at(&self, n: usize, vb: usize) -> Option<i32> {
        let nr = self.layout.nr;
        self.layout.block_sums.then(|| {
            let b = &self.rec(n / nr, vb)[self.record.sums + 4 * (n % nr)..];
            i32::from_le_bytes([b[0], b[1], b[2], b[3]])
        })
    }
}

/// The stored fields of one block's codes: code o of `blob` (packed like B, low bits first) XOR `flip` (the
/// signed-field offset, or 0), for o < `valid`; 0 (padding) after.
#[inline]
fn unpack_fields<const BITS: usize>(blob: &[u8], fields: &mut [u8], valid: usize, flip: u8) {
    let cpb = 8 / BITS;
    let mask = ((1u16 << BITS) - 1) as u8;
    for (out, &byte) in fields.chunks_exact_mut(cpb).zip(blob) {
        for (l, f) in out.iter_mut().enumerate() {
            *f = ((byte >> (l * BITS)) & mask) ^ flip;
        }
    }
    fields[valid..].fill(0);
}

/// A 32-code chunk of 4-bit codes (16 bytes of B, code 2j in the low nibble of byte j) as the layout stores it:
/// byte p holds field p in its low nibble and field 16 + p in its high one (two lanes), fields = codes XOR `flip`.
#[inline]
fn interleave_chunk4(src: &[u8; 16], flip: u8) -> [u8; 16] {
    // Nibble i of a u64 to byte i of a u128 (SWAR: halve the field width four times).
    fn spread(x: u64) -> u128 {
        let mut t = x as u128;
        t = (t | (t << 32)) & 0x0000_0000_ffff_ffff_0000_0000_ffff_ffff;
        t = (t | (t << 16)) & 0x0000_ffff_0000_ffff_0000_ffff_0000_ffff;
        t = (t | (t << 8)) & 0x00ff_00ff_00ff_00ff_00ff_00ff_00ff_00ff;
        (t | (t << 4)) & 0x0f0f_0f0f_0f0f_0f0f_0f0f_0f0f_0f0f_0f0f
    }
    let (lo, hi) = src.split_at(8);
    let flips = u128::from_le_bytes([flip; 16]);
    let low = spread(u64::from_le_bytes(lo.try_into().expect("8 bytes"))) ^ flips; // codes 0..16
    let high = spread(u64::from_le_bytes(hi.try_into().expect("8 bytes"))) ^ flips; // codes 16..32
    (low | (high << 4)).to_le_bytes()
}

/// Group g (KR bytes) of a chunk's interleaved bytes goes to column `col` of kr-row g: byte (g·nr + col)·KR.
#[inline]
fn scatter_groups<const KR: usize>(bytes: &[u8], dst: &mut [u8], nr: usize, col: usize) {
    for (g, group) in bytes.chunks_exact(KR).enumerate() {
        let group: &[u8; KR] = group.try_into().expect("chunks_exact");
        dst[(g * nr + col) * KR..][..KR].copy_from_slice(group);
    }
}

/// `false` only in the test that compares the fast packing path with the per-code one.
#[cfg(not(test))]
fn self_test_fast_path() -> bool {
    true
}
#[cfg(test)]
fn self_test_fast_path() -> bool {
    !tests::PER_CODE.with(|c| c.get())
}

/// Threads for packing `codes` codes in `panels` panels: one per 4M codes, up to the cores available.
fn pack_threads(codes: usize, panels: usize) -> usize {
    const CODES_PER_THREAD: usize = 1 << 22;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.min(codes / CODES_PER_THREAD).min(panels).max(1)
}

/// g_idx regrouping: for each group (source block) in order, its K rows in increasing order, padded to whole
/// blocks. Returns (source block of each packed block, source k of each packed position).
fn regroup(w: &Weights<'_>) -> (Vec<u32>, Vec<u32>) {
    let p = w.params;
    let g = w.g_idx.expect("regroup needs g_idx");
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); p.k_blocks()];
    for (k, &blk) in g.iter().enumerate() {
        members[blk as usize].push(k as u32);
    }
    let (mut block_src, mut k_map) = (Vec::new(), Vec::new());
    for (blk, ks) in members.iter().enumerate() {
        let n_blocks = ks.len().div_ceil(p.block_size);
        block_src.extend(std::iter::repeat_n(blk as u32, n_blocks));
        k_map.extend_from_slice(ks);
        k_map.resize(block_src.len() * p.block_size, NO_SOURCE);
    }
    (block_src, k_map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::layout::ScaleType;

    thread_local! {
        /// Set by `fast_path_equals_per_code_path` to pack through the per-code path.
        pub(super) static PER_CODE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// The fast path writes exactly the bytes of the per-code one: every registered layout, bits 2/4/8, blocks
    /// 16…256, K with a partial last block, N not a multiple of nr, every zero-point kind.
    #[test]
    fn fast_path_equals_per_code_path() {
        let cpu = crate::Cpu::get();
        let mut layouts: Vec<RhsLayout> = crate::registry::families().iter().map(|f| f.layout(cpu)).collect();
        layouts.extend([RhsLayout::plain(8, 4), RhsLayout::plain(4, 8), RhsLayout::plain(16, 4)]);
        layouts.push(RhsLayout {
            codes: Codes::Signed,
            scales: ScaleType::Bf16,
            zero_points: ZpStorage::Correction,
            block_sums: true,
            ..RhsLayout::plain(4, 8)
        });
        let mut checked = 0;
        for layout in layouts {
            for bits in [2u32, 4, 8] {
                for bl in [16usize, 32, 64, 256] {
                    if !layout.holds_blocks(bits, bl) {
                        continue;
                    }
                    let (k, n) = (3 * bl + 5, 2 * layout.nr + 3);
                    let p = Params::new(k as i64, n as i64, bits as i64, bl as i64).unwrap();
                    let b: Vec<u8> = (0..n * p.k_blocks() * p.blob_size()).map(|i| (i * 131 % 251) as u8).collect();
                    let scales: Vec<f32> = (0..n * p.k_blocks()).map(|i| i as f32 * 0.01 - 0.3).collect();
                    let zp: Vec<u8> = (0..n * p.zp_row_bytes()).map(|i| (i * 7 % 256) as u8).collect();
                    let zf: Vec<f32> = (0..n * p.k_blocks()).map(|i| (i % 9) as f32 + 0.5).collect();
                    for zps in [ZeroPoints::Default, ZeroPoints::Packed(&zp), ZeroPoints::Float(&zf)] {
                        let w = Weights::new(p, &b, &scales, zps, None).unwrap();
                        let Ok(fast) = PackedRhs::pack_with_threads(&w, layout, 1) else { continue };
                        PER_CODE.with(|c| c.set(true));
                        let slow = PackedRhs::pack_with_threads(&w, layout, 1).unwrap();
                        PER_CODE.with(|c| c.set(false));
                        assert_eq!(fast.bytes(), slow.bytes(), "{layout} bits={bits} bl={bl} {zps:?}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 50, "only {checked} combinations packed");
    }

    /// The row-at-a-time conversions equal the per-value ones they replace.
    #[test]
    fn row_conversions_equal_per_value_ones() {
        let src: Vec<f32> = (0..700).map(|i| (i as f32 - 350.0) * 0.0137 + 1e-6 * i as f32).collect();
        for st in [ScaleType::F32, ScaleType::F16, ScaleType::Bf16] {
            let (mut bytes, mut rounded) = (vec![0u8; src.len() * st.bytes()], vec![0f32; src.len()]);
            st.encode(&src, &mut bytes, &mut rounded);
            for (i, &s) in src.iter().enumerate() {
                let mut one = [0u8; 4];
                st.write(s, &mut one);
                assert_eq!(&bytes[i * st.bytes()..][..st.bytes()], &one[..st.bytes()], "{st:?} {i}");
                assert_eq!(rounded[i].to_bits(), st.round(s).to_bits(), "{st:?} {i}");
            }
        }
        for bits in [2u32, 4, 8] {
            let p = Params::new(37 * 16, 3, bits as i64, 16).unwrap();
            let zp: Vec<u8> = (0..3 * p.zp_row_bytes()).map(|i| (i * 73 % 256) as u8).collect();
            let zf: Vec<f32> = (0..3 * p.k_blocks()).map(|i| i as f32 * 0.5).collect();
            let (b, sc) = (vec![0u8; 3 * p.k_blocks() * p.blob_size()], vec![1f32; 3 * p.k_blocks()]);
            for zps in [ZeroPoints::Default, ZeroPoints::Packed(&zp), ZeroPoints::Float(&zf)] {
                let w = Weights::new(p, &b, &sc, zps, None).unwrap();
                let mut row = vec![0f32; p.k_blocks()];
                for n in 0..3 {
                    w.zero_point_row(n, &mut row);
                    for (blk, &z) in row.iter().enumerate() {
                        assert_eq!(z, w.zero_point(n, blk), "bits={bits} {zps:?} n={n} blk={blk}");
                    }
                }
            }
        }
    }

    /// A 4-bit K=1000 N=203 block-64 weight set with packed zero points (odd N, K not a multiple of the block):
    /// params, B, scales, zero points.
    fn odd_weights() -> (Params, Vec<u8>, Vec<f32>, Vec<u8>) {
        let p = Params::new(1000, 203, 4, 64).unwrap();
        let b: Vec<u8> = (0..203 * 16 * 32).map(|i| (i * 131 % 251) as u8).collect();
        let scales: Vec<f32> = (0..203 * 16).map(|i| i as f32 * 0.01 - 1.0).collect();
        let zp: Vec<u8> = (0..203 * 8).map(|i| (i * 7) as u8).collect();
        (p, b, scales, zp)
    }

    /// pack_into a caller's buffer makes pack's bytes; borrowed reads them in place; wrong sizes are refused.
    #[test]
    fn packs_into_a_callers_buffer_and_reads_it_in_place() {
        let (p, b, scales, zp) = odd_weights();
        let g: Vec<i32> = (0..1000).map(|k| (k * 7) % 1000 / 64).collect();
        for g_idx in [None, Some(&g[..])] {
            let w = Weights::new(p, &b, &scales, ZeroPoints::Packed(&zp), g_idx).unwrap();
            let layout = RhsLayout::plain(8, 4);
            let owned = PackedRhs::pack(&w, layout).unwrap();
            let len = PackedRhs::packed_len(&w, layout).unwrap();
            assert_eq!(len, owned.bytes().len());
            let mut buf = vec![0xa5u8; len]; // any contents: overwritten
            PackedRhs::pack_into(&w, layout, &mut buf).unwrap();
            assert_eq!(buf, owned.bytes());
            let buf = Arc::new(buf);
            let view = PackedRhs::borrowed(&w, layout, buf.clone()).unwrap();
            assert!(view.is_borrowed() && !owned.is_borrowed());
            assert_eq!(view.bytes().as_ptr(), buf.as_ptr(), "read in place, not copied");
            assert_eq!((view.code_at(202, 999), view.scale_at(7, 3)), (owned.code_at(202, 999), owned.scale_at(7, 3)));
            assert_eq!(view.k_map(), owned.k_map());

            let e = PackedRhs::pack_into(&w, layout, &mut vec![0u8; len - 1]).unwrap_err().0;
            assert!(e.contains(&format!("{}", len - 1)) && e.contains(&format!("{len}")), "{e}");
            let e = PackedRhs::borrowed(&w, layout, Arc::new(vec![0u8; len + 8])).unwrap_err().0;
            assert!(e.contains(&format!("{}", len + 8)), "{e}");
        }
    }

    #[test]
    fn parallel_packing_is_identical() {
        let (p, b, scales, zp) = odd_weights();
        let w = Weights::new(p, &b, &scales, ZeroPoints::Packed(&zp), None).unwrap();
        for layout in [
            RhsLayout::plain(8, 4),
            RhsLayout {
                codes: Codes::Signed,
                scales: ScaleType::Bf16,
                zero_points: ZpStorage::Correction,
                block_sums: true,
                ..RhsLayout::plain(4, 8)
            },
        ] {
            let one = PackedRhs::pack_with_threads(&w, layout, 1).unwrap();
            for threads in [2, 3, 7, 64] {
                let many = PackedRhs::pack_with_threads(&w, layout, threads).unwrap();
                assert_eq!(one.bytes(), many.bytes(), "{threads} threads");
            }
            assert_eq!(one.code_at(202, 999), w.code(202, 999));
        }
    }

    #[test]
    fn g_idx_regrouping_keeps_every_k_once() {
        let p = Params::new(40, 3, 4, 16).unwrap();
        let b: Vec<u8> = (0..3 * 3 * 8).map(|i| (i * 7 % 256) as u8).collect();
        let scales: Vec<f32> = (0..9).map(|i| i as f32 + 1.0).collect();
        // Uneven groups: 0 has 20 rows (2 packed blocks), 1 has 3, 2 has 17 (2 packed blocks).
        let g: Vec<i32> = (0..40)
            .map(|k| {
                if k % 2 == 0 {
                    0
                } else if k < 6 {
                    1
                } else {
                    2
                }
            })
            .collect();
        let w = Weights::new(p, &b, &scales, ZeroPoints::Default, Some(&g)).unwrap();
        let rhs = PackedRhs::pack(&w, RhsLayout::plain(8, 4)).unwrap();
        let km = rhs.k_map.as_ref().unwrap();
        let mut seen: Vec<u32> = km.iter().copied().filter(|&s| s != NO_SOURCE).collect();
        seen.sort();
        assert_eq!(seen, (0..40).collect::<Vec<_>>());
        for (kk, &src) in km.iter().enumerate() {
            if src != NO_SOURCE {
                for n in 0..3 {
                    assert_eq!(rhs.code_at(n, kk), w.code(n, src as usize));
                    assert_eq!(rhs.scale_at(n, kk / 16), w.scale(n, g[src as usize] as usize));
                }
            }
        }
    }

    #[test]
    fn refuses_what_the_layout_cannot_hold() {
        let p = Params::new(32, 2, 2, 16).unwrap();
        let (b, s, zp) = (vec![0u8; 2 * 2 * 4], vec![1f32; 4], vec![0u8; 2]);
        let w = Weights::new(p, &b, &s, ZeroPoints::Packed(&zp), None).unwrap();
        assert!(PackedRhs::pack(&w, RhsLayout::plain(8, 8)).unwrap_err().0.contains("cannot hold bits=2"));
        let none = RhsLayout { zero_points: ZpStorage::None, ..RhsLayout::plain(8, 4) };
        assert!(PackedRhs::pack(&w, none).unwrap_err().0.contains("zero points"));
    }
}
