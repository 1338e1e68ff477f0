//! Packed layouts: the weights (RHS, packed once at session creation) and the activations (LHS, packed once
//! per call).
//!
//! # RHS: `qnb` panels (`RhsLayout { nr, kr }`)
//!
//! Columns (output features n) are grouped in panels of `nr`; the last panel is padded with zero columns.
//! Panels follow each other; inside a panel, one record per K-block, in K order, so a kernel walking one panel
//! reads one sequential stream:
//!
//! ```text
//! record(panel, block) = codes[bl·nr·bits/8] | scales: nr × f32 | zero points: nr × f32 (only if has_zp)
//! ```
//!
//! Codes stay unsigned (0..2^bits−1, as in the model). A block is cut into chunks of `C = min(bl, 32)` K
//! values; a chunk is `cpb = 8/bits` lanes of `L = C/cpb` values, and lane `l` lives in bits `l·bits..`
//! of the bytes. Chunk offset `o` → lane `o / L`, position `p = o % L`, byte
//! `(p / kr)·nr·kr + col·kr + p % kr`. So for 4-bit a byte holds k and k+16 (k and k+8 when bl = 16), and
//! each column's `kr` consecutive K values are adjacent: one 32-bit lane of a `vpdpbusd`/`sdot` operand
//! (kr = 4) or one 64-bit `smmla` row (kr = 8) per column, the low nibbles masked with `& 0x0F` and the high
//! ones with `& 0xF0` (= 16·code) without any shuffle.
//!
//! Zero points are stored as f32 (uint8 zero points convert exactly; float zero points may be fractional).
//! Without zero points every block uses 2^(bits−1), which the kernels apply as a constant.
//!
//! g_idx: when g_idx reorders K (act-order GPTQ), the packer regroups K so that each group's rows are
//! contiguous, padded to whole blocks; `k_map` records, for each packed K position, the source column of A
//! (or none: a zero). The LHS packer gathers A through it, and from then on the kernels see plain blocks.
//!
//! # LHS
//!
//! A is copied once per call into rows of `k_packed = blocks·bl` values (zero beyond K, gathered through
//! `k_map`), either as f32 (fp32-accurate path) or quantized per block to int8 (int8 path): symmetric,
//! `scale = amax/127`, `q = round_half_even(a/scale)`, with the per-block sum of q kept for the zero-point
//! correction `Σ a·(q_w − zp) = Σ a·q_w − zp·Σ a`.

use crate::format::{Params, Weights};
use half::f16;

/// Panel geometry of a packed RHS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RhsLayout {
    /// Columns per panel.
    pub nr: usize,
    /// Consecutive K values per column inside a chunk.
    pub kr: usize,
}

impl RhsLayout {
    /// K values per chunk for a block size.
    pub fn chunk(bl: usize) -> usize {
        bl.min(32)
    }

    /// Whether this layout can hold blocks of `bl` codes of `bits` bits (each lane of a chunk must be a
    /// whole number of kr-groups).
    pub fn supports(&self, bits: u32, bl: usize) -> bool {
        let lane = Self::chunk(bl) / (8 / bits as usize);
        self.nr > 0 && self.kr > 0 && lane.is_multiple_of(self.kr)
    }
}

/// Which numerics a kernel implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComputePath {
    /// Dequantize B on the fly, multiply with f32 A, accumulate in f32 (accuracy_level 1, 2, 3).
    Fp32,
    /// Quantize A to int8 per block, integer dot products, scale per block (accuracy_level 4).
    Int8,
}

impl ComputePath {
    pub fn name(self) -> &'static str {
        match self {
            ComputePath::Fp32 => "fp32",
            ComputePath::Int8 => "int8",
        }
    }
}

/// Weights packed for one kernel family. Immutable after packing; shared by all threads.
#[derive(Debug, Clone)]
pub struct PackedRhs {
    pub(crate) params: Params,
    pub(crate) layout: RhsLayout,
    /// Packed blocks per panel: k_blocks, or more when g_idx regrouping pads groups.
    pub(crate) blocks: usize,
    /// Whether records carry zero points (else 2^(bits−1) for every block).
    pub(crate) has_zp: bool,
    /// For each packed K position, the source column of A, or `NO_SOURCE` (a zero). None = identity.
    pub(crate) k_map: Option<Vec<u32>>,
    pub(crate) data: Vec<u8>,
}

/// `k_map` entry for a packed position that reads no column of A.
pub const NO_SOURCE: u32 = u32::MAX;

impl PackedRhs {
    /// Packs validated weights into `layout`.
    ///
    /// # Panics
    /// If the layout cannot hold the block size (callers select a layout with [`RhsLayout::supports`]).
    pub fn pack(w: &Weights<'_>, layout: RhsLayout) -> Self {
        let p = w.params;
        Self::pack_with_threads(w, layout, pack_threads(p.n * p.k_padded(), p.n.div_ceil(layout.nr)))
    }

    /// [`PackedRhs::pack`] on exactly `threads` threads (panels are split between them).
    pub fn pack_with_threads(w: &Weights<'_>, layout: RhsLayout, threads: usize) -> Self {
        let p = w.params;
        assert!(
            layout.supports(p.bits, p.block_size),
            "layout {layout:?} cannot hold bits={} bl={}",
            p.bits,
            p.block_size
        );
        let bl = p.block_size;
        // Packed block → (source block whose scale/zp it uses), and packed K → source k.
        let (block_src, k_map) = if w.has_reordering_g_idx() {
            let (bs, km) = regroup(w);
            (bs, Some(km))
        } else {
            ((0..p.k_blocks() as u32).collect(), None)
        };
        let blocks = block_src.len();
        let has_zp = !matches!(w.zero_points, crate::format::ZeroPoints::Default);
        let mut rhs = PackedRhs { params: p, layout, blocks, has_zp, k_map, data: Vec::new() };
        let (record, panels) = (rhs.record_bytes(), rhs.panels());
        rhs.data = vec![0u8; panels * blocks * record];
        let code_bytes = rhs.code_bytes();
        // Where each block offset lands for column 0 (a column adds col·kr bytes): computed once, not per code.
        let dest: Vec<(usize, u32)> = (0..bl).map(|o| code_position(layout, p.bits, bl, 0, o)).collect();
        // With g_idx regrouping, the source k of each packed position (None: padding, code stays 0 since its
        // A value is always 0). Without, packed k = source k and positions past K are padding.
        let source_k: Vec<Option<usize>> = match &rhs.k_map {
            Some(m) => m.iter().map(|&s| (s != NO_SOURCE).then_some(s as usize)).collect(),
            None => Vec::new(),
        };
        let k_map = rhs.k_map.as_deref();
        let pack_panel = |panel: usize, out: &mut [u8]| {
            for (vb, &src_blk) in block_src.iter().enumerate() {
                let rec = &mut out[vb * record..][..record];
                let (codes, tail) = rec.split_at_mut(code_bytes);
                for col in 0..layout.nr {
                    let n = panel * layout.nr + col;
                    if n >= p.n {
                        break; // padding columns: zero codes, zero scale
                    }
                    let dest_col = |o: usize| (dest[o].0 + col * layout.kr, dest[o].1);
                    if k_map.is_none() {
                        // Fast path: block vb of row n is one contiguous blob of B, codes in K order.
                        let blob = &w.b[(n * p.k_blocks() + vb) * p.blob_size()..][..p.blob_size()];
                        let (bits, cpb_log2) = (p.bits as usize, (8 / p.bits).trailing_zeros());
                        for o in 0..bl.min(p.k - vb * bl) {
                            let code = (blob[o >> cpb_log2] >> ((o & ((1 << cpb_log2) - 1)) * bits)) & p.max_code();
                            let (byte, shift) = dest_col(o);
                            codes[byte] |= code << shift;
                        }
                    } else {
                        for (o, k) in source_k[vb * bl..(vb + 1) * bl].iter().enumerate() {
                            if let Some(k) = *k {
                                let (byte, shift) = dest_col(o);
                                codes[byte] |= w.code(n, k) << shift;
                            }
                        }
                    }
                    let s = w.scale(n, src_blk as usize);
                    tail[4 * col..4 * col + 4].copy_from_slice(&s.to_le_bytes());
                    if has_zp {
                        let z = w.zero_point(n, src_blk as usize);
                        let off = 4 * (layout.nr + col);
                        tail[off..off + 4].copy_from_slice(&z.to_le_bytes());
                    }
                }
            }
        };
        // Panels are independent: large weights are packed on all cores (session creation time matters for
        // multi-GB models; ORT gives custom ops no thread pool at kernel creation).
        let mut data = std::mem::take(&mut rhs.data);
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
        rhs
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

    pub fn has_zero_points(&self) -> bool {
        self.has_zp
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

    /// Bytes of codes in one record.
    pub fn code_bytes(&self) -> usize {
        self.params.block_size * self.layout.nr * self.params.bits as usize / 8
    }

    /// Bytes of one (panel, block) record.
    pub fn record_bytes(&self) -> usize {
        self.code_bytes() + 4 * self.layout.nr * (1 + self.has_zp as usize)
    }

    /// The packed bytes (records of all panels).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Code of packed position (column n, packed k), read back from the layout (for tests and debugging).
    pub fn code_at(&self, n: usize, kk: usize) -> u8 {
        let (bl, nr) = (self.params.block_size, self.layout.nr);
        let rec = self.record(n / nr, kk / bl);
        let (byte, shift) = code_position(self.layout, self.params.bits, bl, n % nr, kk % bl);
        (rec[byte] >> shift) & self.params.max_code()
    }

    /// Scale of packed block `vb` of column n.
    pub fn scale_at(&self, n: usize, vb: usize) -> f32 {
        let nr = self.layout.nr;
        let rec = self.record(n / nr, vb);
        read_f32(&rec[self.code_bytes() + 4 * (n % nr)..])
    }

    /// Zero point of packed block `vb` of column n.
    pub fn zero_point_at(&self, n: usize, vb: usize) -> f32 {
        if !self.has_zp {
            return self.params.default_zero_point() as f32;
        }
        let nr = self.layout.nr;
        let rec = self.record(n / nr, vb);
        read_f32(&rec[self.code_bytes() + 4 * (nr + n % nr)..])
    }

    fn record(&self, panel: usize, vb: usize) -> &[u8] {
        let r = self.record_bytes();
        &self.data[(panel * self.blocks + vb) * r..][..r]
    }
}

/// Threads for packing `codes` codes in `panels` panels: one per 4M codes, up to the cores available.
fn pack_threads(codes: usize, panels: usize) -> usize {
    const CODES_PER_THREAD: usize = 1 << 22;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.min(codes / CODES_PER_THREAD).min(panels).max(1)
}

/// Byte index inside a record's codes and bit shift of the code at block offset `o` of panel column `col`.
#[inline]
pub fn code_position(layout: RhsLayout, bits: u32, bl: usize, col: usize, o: usize) -> (usize, u32) {
    let chunk = RhsLayout::chunk(bl);
    let lane_len = chunk / (8 / bits as usize);
    let (c, oc) = (o / chunk, o % chunk);
    let (lane, pos) = (oc / lane_len, oc % lane_len);
    let chunk_bytes = chunk * layout.nr * bits as usize / 8;
    let byte = c * chunk_bytes + (pos / layout.kr) * layout.nr * layout.kr + col * layout.kr + pos % layout.kr;
    (byte, lane as u32 * bits)
}

#[inline]
pub(crate) fn read_f32(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
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

/// Where A comes from: the provider's input tensor, row-major [M, K].
#[derive(Debug, Clone, Copy)]
pub enum LhsSource<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl LhsSource<'_> {
    pub fn len(&self) -> usize {
        match self {
            LhsSource::F32(a) => a.len(),
            LhsSource::F16(a) => a.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies row `m` (K values) into `out` through the packing's K map, as f32; positions without a source
    /// become 0.
    fn gather_row(&self, m: usize, k: usize, k_map: Option<&[u32]>, out: &mut [f32]) {
        let get = |i: usize| -> f32 {
            match self {
                LhsSource::F32(a) => a[m * k + i],
                LhsSource::F16(a) => a[m * k + i].to_f32(),
            }
        };
        match k_map {
            None => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = if i < k { get(i) } else { 0.0 };
                }
            }
            Some(map) => {
                for (o, &src) in out.iter_mut().zip(map) {
                    *o = if src == NO_SOURCE { 0.0 } else { get(src as usize) };
                }
            }
        }
    }
}

/// Activations packed for one call.
#[derive(Debug, Clone)]
pub enum PackedLhs {
    /// f32 rows of `k_packed` values.
    F32 { m: usize, k_packed: usize, data: Vec<f32> },
    /// int8 rows of `k_packed` values, with one scale and one code sum per (row, block).
    Int8 { m: usize, k_packed: usize, blocks: usize, q: Vec<i8>, scale: Vec<f32>, sum: Vec<i32> },
}

impl PackedLhs {
    /// Packs `m` rows of A (each K long) for `rhs`.
    ///
    /// # Panics
    /// If `a` does not hold m·K values.
    pub fn pack(a: LhsSource<'_>, m: usize, rhs: &PackedRhs, path: ComputePath) -> Self {
        let k = rhs.params.k;
        assert_eq!(a.len(), m * k, "A has {} values, expected M*K = {}*{}", a.len(), m, k);
        let (kp, bl, blocks) = (rhs.k_packed(), rhs.params.block_size, rhs.blocks);
        let k_map = rhs.k_map.as_deref();
        let mut row = vec![0f32; kp];
        match path {
            ComputePath::Fp32 => {
                let mut data = vec![0f32; m * kp];
                for (i, out) in data.chunks_exact_mut(kp.max(1)).enumerate().take(m) {
                    a.gather_row(i, k, k_map, out);
                }
                PackedLhs::F32 { m, k_packed: kp, data }
            }
            ComputePath::Int8 => {
                let mut q = vec![0i8; m * kp];
                let mut scale = vec![0f32; m * blocks];
                let mut sum = vec![0i32; m * blocks];
                for i in 0..m {
                    a.gather_row(i, k, k_map, &mut row);
                    for b in 0..blocks {
                        let (s, t) = quantize_block(&row[b * bl..][..bl], &mut q[i * kp + b * bl..][..bl]);
                        scale[i * blocks + b] = s;
                        sum[i * blocks + b] = t;
                    }
                }
                PackedLhs::Int8 { m, k_packed: kp, blocks, q, scale, sum }
            }
        }
    }

    pub fn rows(&self) -> usize {
        match self {
            PackedLhs::F32 { m, .. } | PackedLhs::Int8 { m, .. } => *m,
        }
    }

    pub fn path(&self) -> ComputePath {
        match self {
            PackedLhs::F32 { .. } => ComputePath::Fp32,
            PackedLhs::Int8 { .. } => ComputePath::Int8,
        }
    }
}

/// Symmetric int8 quantization of one block: returns (scale, Σq). scale = amax/127. A block holding a NaN gets a
/// NaN scale (and an infinite value an infinite one), so non-finite activations reach the output as they would in
/// f32 arithmetic instead of vanishing in the rounding.
pub fn quantize_block(a: &[f32], q: &mut [i8]) -> (f32, i32) {
    let amax = a.iter().fold(0f32, |m, &x| if x.is_nan() || m.is_nan() { f32::NAN } else { m.max(x.abs()) });
    let scale = amax / 127.0;
    let inv = if amax > 0.0 && amax.is_finite() { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (qi, &x) in q.iter_mut().zip(a) {
        let v = (x * inv).round_ties_even().clamp(-127.0, 127.0) as i8;
        *qi = v;
        sum += v as i32;
    }
    (scale, sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::ZeroPoints;

    #[test]
    fn layout_positions_are_a_bijection() {
        for bits in [2u32, 4, 8] {
            for bl in [16usize, 32, 64, 128] {
                for layout in [RhsLayout { nr: 8, kr: 4 }, RhsLayout { nr: 4, kr: 4 }, RhsLayout { nr: 16, kr: 4 }] {
                    if !layout.supports(bits, bl) {
                        continue;
                    }
                    let total_bits = bl * layout.nr * bits as usize;
                    let mut seen = vec![false; total_bits];
                    for col in 0..layout.nr {
                        for o in 0..bl {
                            let (byte, shift) = code_position(layout, bits, bl, col, o);
                            for bit in 0..bits as usize {
                                let idx = byte * 8 + shift as usize + bit;
                                assert!(!seen[idx], "bits={bits} bl={bl} {layout:?} col={col} o={o}");
                                seen[idx] = true;
                            }
                        }
                    }
                    assert!(seen.iter().all(|&s| s));
                }
            }
        }
    }

    #[test]
    fn four_bit_pairs_k_with_k_plus_16() {
        let l = RhsLayout { nr: 4, kr: 4 };
        assert_eq!(code_position(l, 4, 32, 0, 0), (0, 0));
        assert_eq!(code_position(l, 4, 32, 0, 16), (0, 4));
        assert_eq!(code_position(l, 4, 32, 1, 3), (7, 0));
        assert_eq!(code_position(l, 4, 32, 0, 4), (16, 0));
        assert_eq!(code_position(l, 4, 64, 0, 32), (64, 0));
        assert_eq!(code_position(l, 4, 16, 0, 8), (0, 4));
    }

    #[test]
    fn quantize_block_round_trips_within_half_a_step() {
        let a: Vec<f32> = (0..64).map(|i| ((i * 37 % 29) as f32 - 14.0) / 7.0).collect();
        let mut q = vec![0i8; 64];
        let (s, sum) = quantize_block(&a, &mut q);
        assert_eq!(sum, q.iter().map(|&v| v as i32).sum::<i32>());
        for (&x, &v) in a.iter().zip(&q) {
            assert!((x - v as f32 * s).abs() <= s * 0.5 + 1e-6);
        }
        let (s0, sum0) = quantize_block(&[0.0; 16], &mut q[..16]);
        assert_eq!((s0, sum0), (0.0, 0));
        let mut nan_block = [0.5f32; 16];
        nan_block[3] = f32::NAN;
        assert!(quantize_block(&nan_block, &mut q[..16]).0.is_nan());
        nan_block[3] = f32::NEG_INFINITY;
        assert!(quantize_block(&nan_block, &mut q[..16]).0.is_infinite());
    }

    #[test]
    fn parallel_packing_is_identical() {
        let p = Params::new(1000, 203, 4, 64).unwrap();
        let b: Vec<u8> = (0..203 * 16 * 32).map(|i| (i * 131 % 251) as u8).collect();
        let scales: Vec<f32> = (0..203 * 16).map(|i| i as f32 * 0.01 - 1.0).collect();
        let zp: Vec<u8> = (0..203 * 8).map(|i| (i * 7) as u8).collect();
        let w = Weights::new(p, &b, &scales, ZeroPoints::Packed(&zp), None).unwrap();
        let layout = RhsLayout { nr: 8, kr: 4 };
        let one = PackedRhs::pack_with_threads(&w, layout, 1);
        for threads in [2, 3, 7, 64] {
            assert_eq!(one.bytes(), PackedRhs::pack_with_threads(&w, layout, threads).bytes(), "{threads} threads");
        }
        assert_eq!(one.code_at(202, 999), w.code(202, 999));
    }

    #[test]
    fn g_idx_regrouping_keeps_every_k_once() {
        let p = Params::new(40, 3, 4, 16).unwrap();
        let b: Vec<u8> = (0..3 * 3 * 8).map(|i| (i * 7 % 256) as u8).collect();
        let scales: Vec<f32> = (0..9).map(|i| i as f32 + 1.0).collect();
        // Uneven groups: 0 has 20 rows (2 packed blocks), 1 has 3, 2 has 17 (2 packed blocks).
        let g: Vec<i32> = (0..40)
            .map(|k| {
                if k % 2 == 0 && k < 40 {
                    0
                } else if k < 6 {
                    1
                } else {
                    2
                }
            })
            .collect();
        let w = Weights::new(p, &b, &scales, ZeroPoints::Default, Some(&g)).unwrap();
        let rhs = PackedRhs::pack(&w, RhsLayout { nr: 8, kr: 4 });
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
}
