//! Packing the activations (LHS), once per call, in the format of the kernel that runs for this M.
//!
//! A is gathered into rows of `k_packed = blocks·bl` values (zero beyond K, through the RHS's g_idx `k_map`).
//! The int8 formats quantize each (row, block) symmetrically, `scale = amax/127`,
//! `q = round_half_even(a/scale)` clamped to ±127, and keep Σq per (row, block) for the zero-point correction
//! `Σ a·w = s_a·Σ_b (s_b·Σ q·v + c_b·Σ q)`. The formats differ only in how the int8 values are laid out:
//!
//! ```text
//! F32          rows of k_packed f32                                    (fp32 path)
//! Qsi8Db       rows of k_packed i8, row-major                          (any int8 kernel)
//! Qsi8DbP      groups of mr rows; per group, for each run of kr K values, row 0's kr values, row 1's, …
//!              (SMMLA/SME-style operands: one load gives mr×kr; rows past M are zero)
//! Qsu8Db       rows of k_packed u8 = q + 128                           (u8×s8 VNNI/USDOT with signed codes:
//!              Σ (q+128)·v = Σ q·v + 128·Σ v, the layout's block sums take 128·Σ v back out)
//! ```
//! Scales (f32) and Σq (i32) are per (row, block): row-major in Qsi8Db and Qsu8Db; in Qsi8DbP group-major, per
//! group of mr rows and per block the group's mr values (rows past M: 0), so that one load gives them
//! ([`LhsFormat::scale_index`]). Either way a tile starting at row r0 (a group's first row) finds its scales at
//! offset r0·blocks.

use super::rhs::{NO_SOURCE, PackedRhs};
use half::f16;

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
    /// become 0. f16 rows convert with the CPU's conversion instructions (F16C, FCVT) where it has them.
    fn gather_row(&self, m: usize, k: usize, k_map: Option<&[u32]>, out: &mut [f32]) {
        if k_map.is_none() {
            match self {
                LhsSource::F32(a) => out[..k].copy_from_slice(&a[m * k..][..k]),
                LhsSource::F16(a) => {
                    use half::slice::HalfFloatSliceExt;
                    a[m * k..][..k].convert_to_f32_slice(&mut out[..k]);
                }
            }
            out[k..].fill(0.0);
            return;
        }
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

/// The activation formats kernels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LhsFormat {
    /// f32 rows (fp32 path).
    F32,
    /// int8 per block, row-major.
    Qsi8Db,
    /// int8 per block, rows in groups of `mr`, K interleaved in runs of `kr`.
    Qsi8DbP { mr: usize, kr: usize },
    /// int8 per block stored as u8 = q + 128, row-major.
    Qsu8Db,
}

impl LhsFormat {
    /// The name in kernel names: `f32`, `qsi8db`, `qsi8dbp<mr>x<kr>`, `qsu8db`.
    pub fn name(&self) -> String {
        match self {
            LhsFormat::F32 => "f32".into(),
            LhsFormat::Qsi8Db => "qsi8db".into(),
            LhsFormat::Qsi8DbP { mr, kr } => format!("qsi8dbp{mr}x{kr}"),
            LhsFormat::Qsu8Db => "qsu8db".into(),
        }
    }

    /// Rows per group: packed rows are padded to a multiple of it.
    pub fn mr(&self) -> usize {
        match self {
            LhsFormat::Qsi8DbP { mr, .. } => *mr,
            _ => 1,
        }
    }

    /// Where the scale and Σq of (row, block) are in the int8 formats' arrays (`blocks` per row): row-major, or in
    /// Qsi8DbP group-major (per group of mr rows, per block, the group's mr values).
    pub fn scale_index(&self, blocks: usize, row: usize, b: usize) -> usize {
        match self {
            LhsFormat::Qsi8DbP { mr, .. } => (row / mr) * mr * blocks + b * mr + row % mr,
            _ => row * blocks + b,
        }
    }

    /// Whether the format carries f32 values (else int8 with scales and sums).
    pub fn is_f32(&self) -> bool {
        matches!(self, LhsFormat::F32)
    }

    /// Whether the format can lay out rows of `k_packed` values (interleaving needs whole runs of kr).
    pub fn fits(&self, k_packed: usize) -> bool {
        match self {
            LhsFormat::Qsi8DbP { mr, kr } => *mr > 0 && *kr > 0 && k_packed.is_multiple_of(*kr),
            _ => true,
        }
    }
}

/// Activations packed for one call.
#[derive(Debug, Clone)]
pub struct PackedLhs {
    pub(crate) format: LhsFormat,
    /// Rows of A.
    pub(crate) m: usize,
    pub(crate) k_packed: usize,
    pub(crate) blocks: usize,
    /// F32: the values.
    pub(crate) f32s: Vec<f32>,
    /// int8 formats: the values (i8 or u8 bytes), `m` rows rounded up to `mr`.
    pub(crate) bytes: Vec<u8>,
    /// int8 formats: per (row, block) scale and Σq, `m` rows rounded up to `mr`, at
    /// [`LhsFormat::scale_index`].
    pub(crate) scale: Vec<f32>,
    pub(crate) sum: Vec<i32>,
}

/// Quantizes one block as [`quantize_block`] does, bit for bit (arch-specific versions are tested against it).
pub type QuantizeBlock = fn(&[f32], &mut [i8]) -> (f32, i32);

impl PackedLhs {
    /// Packs `m` rows of A (each K long) for `rhs`, in `format`.
    ///
    /// # Panics
    /// If `a` does not hold m·K values, or the format cannot lay out this K (see [`LhsFormat::fits`]).
    pub fn pack(a: LhsSource<'_>, m: usize, rhs: &PackedRhs, format: LhsFormat) -> Self {
        Self::pack_with(a, m, rhs, format, quantize_block)
    }

    /// [`PackedLhs::pack`] with a given block quantizer (the CPU's fastest; the same numbers).
    pub fn pack_with(a: LhsSource<'_>, m: usize, rhs: &PackedRhs, format: LhsFormat, quant: QuantizeBlock) -> Self {
        let k = rhs.params.k;
        assert_eq!(a.len(), m * k, "A has {} values, expected M*K = {}*{}", a.len(), m, k);
        let (kp, bl, blocks) = (rhs.k_packed(), rhs.params.block_size, rhs.blocks);
        assert!(format.fits(kp), "LHS format {} cannot lay out rows of {kp} values", format.name());
        let k_map = rhs.k_map.as_deref();
        let mut out = PackedLhs {
            format,
            m,
            k_packed: kp,
            blocks,
            f32s: Vec::new(),
            bytes: Vec::new(),
            scale: Vec::new(),
            sum: Vec::new(),
        };
        if format.is_f32() {
            out.f32s = vec![0f32; m * kp];
            for (i, row) in out.f32s.chunks_exact_mut(kp.max(1)).enumerate().take(m) {
                a.gather_row(i, k, k_map, row);
            }
            return out;
        }
        let rows = m.next_multiple_of(format.mr());
        out.bytes = vec![0u8; rows * kp];
        out.scale = vec![0f32; rows * blocks];
        out.sum = vec![0i32; rows * blocks];
        let (mut row, mut q) = (vec![0f32; kp], vec![0i8; kp]);
        for i in 0..m {
            a.gather_row(i, k, k_map, &mut row);
            for b in 0..blocks {
                let (s, t) = quant(&row[b * bl..][..bl], &mut q[b * bl..][..bl]);
                let at = format.scale_index(blocks, i, b);
                out.scale[at] = s;
                out.sum[at] = t;
            }
            match format {
                LhsFormat::Qsi8Db => {
                    for (d, &v) in out.bytes[i * kp..][..kp].iter_mut().zip(&q) {
                        *d = v as u8;
                    }
                }
                LhsFormat::Qsu8Db => {
                    for (d, &v) in out.bytes[i * kp..][..kp].iter_mut().zip(&q) {
                        *d = (v as i32 + 128) as u8;
                    }
                }
                LhsFormat::Qsi8DbP { mr, kr } => {
                    let (group, r) = (i / mr, i % mr);
                    let base = group * mr * kp;
                    for (run, vals) in q.chunks_exact(kr).enumerate() {
                        let dst = &mut out.bytes[base + (run * mr + r) * kr..][..kr];
                        for (d, &v) in dst.iter_mut().zip(vals) {
                            *d = v as u8;
                        }
                    }
                }
                LhsFormat::F32 => unreachable!("handled above"),
            }
        }
        out
    }

    pub fn format(&self) -> LhsFormat {
        self.format
    }

    pub fn rows(&self) -> usize {
        self.m
    }

    /// The int8 value q of (row, packed k), read back from any int8 format (tests).
    pub fn q_at(&self, row: usize, kk: usize) -> i8 {
        let kp = self.k_packed;
        match self.format {
            LhsFormat::F32 => panic!("q_at on f32 activations"),
            LhsFormat::Qsi8Db => self.bytes[row * kp + kk] as i8,
            LhsFormat::Qsu8Db => (self.bytes[row * kp + kk] as i32 - 128) as i8,
            LhsFormat::Qsi8DbP { mr, kr } => {
                self.bytes[(row / mr) * mr * kp + ((kk / kr) * mr + row % mr) * kr + kk % kr] as i8
            }
        }
    }

    /// Scale and Σq of (row, block) (int8 formats).
    pub fn block_at(&self, row: usize, b: usize) -> (f32, i32) {
        let at = self.format.scale_index(self.blocks, row, b);
        (self.scale[at], self.sum[at])
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

/// Test helper: `f` gives [`quantize_block`]'s results bit for bit (codes, scale bits, Σq) on random blocks of
/// 16 … 4096 values, zero blocks, NaN and ±infinity, tiny values and exact ties.
#[cfg(test)]
pub(crate) fn assert_quantizer_matches_scalar(f: QuantizeBlock) {
    let mut seed = 0x1234_5678_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for len in [16usize, 32, 64, 128, 4096] {
        for trial in 0..200 {
            let mut a: Vec<f32> = (0..len).map(|_| (next() % 20001) as f32 / 1000.0 - 10.0).collect();
            match trial % 10 {
                0 => a.fill(0.0),
                1 => a[len / 2] = f32::NAN,
                2 => a[3] = f32::INFINITY,
                3 => a[len - 1] = f32::NEG_INFINITY,
                4 => a.iter_mut().for_each(|x| *x *= 1e-30),
                5 => a.iter_mut().enumerate().for_each(|(i, x)| *x = (i as f32 - 8.0) * 0.5), // ties
                _ => {}
            }
            let (mut q1, mut q2) = (vec![0i8; len], vec![0i8; len]);
            let r1 = quantize_block(&a, &mut q1);
            let r2 = f(&a, &mut q2);
            assert_eq!(q1, q2, "len {len} trial {trial}");
            assert_eq!((r1.0.to_bits(), r1.1), (r2.0.to_bits(), r2.1), "len {len} trial {trial}: {r1:?} {r2:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
