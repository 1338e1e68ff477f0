//! Packing the weights (RHS) into a [`RhsLayout`], once, at session creation; and reading packed weights back
//! (tests unpack every layout to the source weights through these accessors).
//!
//! g_idx: when g_idx reorders K (act-order GPTQ), the packer regroups K so that each group's rows are
//! contiguous, padded to whole blocks; `k_map` records, for each packed K position, the source column of A
//! (or none: a zero). The LHS packer gathers A through it, and from then on the kernels see plain blocks.

use super::layout::{Codes, RecordLayout, RhsLayout, ZpStorage, code_position};
use crate::format::{FormatError, Params, Weights, ZeroPoints};

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
    pub(crate) data: Vec<u8>,
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
        let mut rhs = PackedRhs { params: p, layout, blocks, record: rec, k_map, data: Vec::new() };
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
        let pack_panel = |panel: usize, out: &mut [u8]| {
            for (vb, &src_blk) in block_src.iter().enumerate() {
                let rec_bytes = &mut out[vb * record..][..record];
                for col in 0..layout.nr {
                    let n = panel * layout.nr + col;
                    if n >= p.n {
                        break; // padding columns: zero fields, zero scale, zero correction
                    }
                    let mut sum = 0i32;
                    let mut put = |o: usize, q: u8| {
                        let (byte, shift) = dest[o];
                        let f = field(q) & field_mask;
                        rec_bytes[byte + col * layout.kr] |= f << shift;
                        sum += value(f);
                    };
                    if k_map.is_none() {
                        // Fast path: block vb of row n is one contiguous blob of B, codes in K order.
                        let blob = &w.b[(n * p.k_blocks() + vb) * p.blob_size()..][..p.blob_size()];
                        let (bits, cpb_log2) = (p.bits as usize, (8 / p.bits).trailing_zeros());
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
                    let s = w.scale(n, src_blk as usize);
                    layout.scales.write(s, &mut rec_bytes[rec.scales + col * layout.scales.bytes()..]);
                    if rec.has_zp {
                        let z = w.zero_point(n, src_blk as usize);
                        let stored = match layout.zero_points {
                            ZpStorage::PerBlock => z,
                            // From the scale as stored, so that v·s + c is the stored weight.
                            ZpStorage::Correction => layout.scales.round(s) * (m_v as f32 - z),
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
        let mut data = vec![0u8; panels * blocks * record];
        let panel_bytes = blocks * record;
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
        rhs.data = data;
        Ok(rhs)
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
        &self.data
    }

    fn rec(&self, panel: usize, vb: usize) -> &[u8] {
        &self.data[(panel * self.blocks + vb) * self.record.bytes..][..self.record.bytes]
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

    #[test]
    fn parallel_packing_is_identical() {
        let p = Params::new(1000, 203, 4, 64).unwrap();
        let b: Vec<u8> = (0..203 * 16 * 32).map(|i| (i * 131 % 251) as u8).collect();
        let scales: Vec<f32> = (0..203 * 16).map(|i| i as f32 * 0.01 - 1.0).collect();
        let zp: Vec<u8> = (0..203 * 8).map(|i| (i * 7) as u8).collect();
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
