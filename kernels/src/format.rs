//! The `com.microsoft::MatMulNBits` weight format: attributes, tensor shapes and the bit layout of B and
//! the zero points, with validation that names the offending value.
//!
//! From the contrib-op spec (onnxruntime `docs/ContribOperators.md`, `contrib_defs.cc`):
//!
//! ```text
//! Y = A · dequant(B)ᵀ (+ bias),   dequant(q)[n, k] = (q[n, k] − zp[n, blk(k)]) · scale[n, blk(k)]
//! k_blocks  = ceil(K / block_size)            blk(k) = k / block_size, or g_idx[k] when g_idx is given
//! blob_size = block_size · bits / 8
//! B            uint8 [N, k_blocks, blob_size]   element (n, k) at byte n·k_blocks·blob_size + k·bits/8,
//!                                               bit offset (k % (8/bits))·bits: the earlier k in the low bits
//! scales       T     [N, k_blocks]   (legacy 1-D [N·k_blocks] accepted); may be negative
//! zero_points  uint8 [N, ceil(k_blocks·bits/8)] packed like B (legacy 1-D accepted), or T [N, k_blocks];
//!              absent → 2^(bits−1)
//! g_idx        int32 [K] (or [k_blocks·block_size]): the block whose scale/zero point row k uses
//! bias         T     [N]
//! ```
//! When K is not a multiple of block_size the last block is padded: B holds codes for the pad positions, and
//! those codes are don't-care. Nothing here or in the kernels lets them contribute.

use std::fmt;

/// A violation of the format, phrased for the user: it names the attribute or input and the bad value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError(pub String);

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormatError {}

macro_rules! bail {
    ($($arg:tt)*) => { return Err(FormatError(format!($($arg)*))) };
}

/// The largest block size accepted: 2^16, far beyond any model's (ORT's own CPU kernel stops at 256), and small
/// enough that a block's integer dot product (≤ 127·255·2^16 < 2^31) cannot overflow i32.
pub const MAX_BLOCK_SIZE: usize = 1 << 16;

/// The attributes that fix the weight layout, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub k: usize,
    pub n: usize,
    pub bits: u32,
    pub block_size: usize,
}

impl Params {
    /// Validates raw attribute values (as read from the node; i64 because that is what ONNX stores).
    pub fn new(k: i64, n: i64, bits: i64, block_size: i64) -> Result<Self, FormatError> {
        if k < 1 {
            bail!("attribute K={k} must be >= 1");
        }
        if n < 1 {
            bail!("attribute N={n} must be >= 1");
        }
        if !matches!(bits, 2 | 4 | 8) {
            bail!("attribute bits={bits} is not supported (must be 2, 4 or 8)");
        }
        if block_size < 16 || (block_size as u64).count_ones() != 1 {
            bail!("attribute block_size={block_size} must be a power of two >= 16");
        }
        // Keep every derived size comfortably inside usize/i64 arithmetic, and the int8 path's integer block
        // sums inside i32 (|Σ q_a·q_w| ≤ 127·255·block_size).
        const LIMIT: i64 = 1 << 31;
        if k >= LIMIT || n >= LIMIT {
            bail!("attributes K={k} and N={n} are too large (each must be < 2^31)");
        }
        if block_size > MAX_BLOCK_SIZE as i64 {
            bail!("attribute block_size={block_size} is larger than nibble supports ({MAX_BLOCK_SIZE})");
        }
        Ok(Self { k: k as usize, n: n as usize, bits: bits as u32, block_size: block_size as usize })
    }

    /// Number of quantization blocks along K: ceil(K / block_size).
    pub fn k_blocks(&self) -> usize {
        self.k.div_ceil(self.block_size)
    }

    /// K rounded up to whole blocks: the length of a row of B in codes.
    pub fn k_padded(&self) -> usize {
        self.k_blocks() * self.block_size
    }

    /// Bytes per block of one row of B.
    pub fn blob_size(&self) -> usize {
        self.block_size * self.bits as usize / 8
    }

    /// Bytes per row of packed uint8 zero points.
    pub fn zp_row_bytes(&self) -> usize {
        (self.k_blocks() * self.bits as usize).div_ceil(8)
    }

    /// Codes per byte.
    pub fn codes_per_byte(&self) -> usize {
        8 / self.bits as usize
    }

    /// The implied zero point when none is given: 2^(bits−1).
    pub fn default_zero_point(&self) -> u8 {
        1 << (self.bits - 1)
    }

    /// The largest code: 2^bits − 1.
    pub fn max_code(&self) -> u8 {
        ((1u32 << self.bits) - 1) as u8
    }

    /// Code of element (n, k) of B (k may address a pad position of the last block).
    #[inline]
    pub fn code(&self, b: &[u8], n: usize, k: usize) -> u8 {
        let bits = self.bits as usize;
        let byte = b[n * self.k_blocks() * self.blob_size() + k * bits / 8];
        (byte >> ((k % (8 / bits)) * bits)) & self.max_code()
    }

    /// Expected shape of B.
    pub fn b_shape(&self) -> [usize; 3] {
        [self.n, self.k_blocks(), self.blob_size()]
    }

    /// Checks the shape of B: exactly [N, k_blocks, blob_size].
    pub fn check_b_shape(&self, shape: &[i64]) -> Result<(), FormatError> {
        let want = self.b_shape();
        if !dims_eq(shape, &want) {
            bail!(
                "input B has shape {} but K={}, N={}, bits={}, block_size={} require [{}, {}, {}]",
                fmt_shape(shape),
                self.k,
                self.n,
                self.bits,
                self.block_size,
                want[0],
                want[1],
                want[2]
            );
        }
        Ok(())
    }

    /// Checks the shape of the scales: [N, k_blocks] or legacy [N·k_blocks].
    pub fn check_scales_shape(&self, shape: &[i64]) -> Result<(), FormatError> {
        let (n, kb) = (self.n, self.k_blocks());
        if !(dims_eq(shape, &[n, kb]) || dims_eq(shape, &[n * kb])) {
            bail!(
                "input scales has shape {} but N={}, k_blocks={} require [{n}, {kb}] (or legacy 1-D [{}])",
                fmt_shape(shape),
                n,
                kb,
                n * kb
            );
        }
        Ok(())
    }

    /// Checks the shape of the zero points: packed uint8 [N, zp_row_bytes] (or 1-D), or float [N, k_blocks]
    /// (or 1-D).
    pub fn check_zero_points_shape(&self, shape: &[i64], packed: bool) -> Result<(), FormatError> {
        let n = self.n;
        let (cols, what) = if packed { (self.zp_row_bytes(), "packed uint8") } else { (self.k_blocks(), "float") };
        if !(dims_eq(shape, &[n, cols]) || dims_eq(shape, &[n * cols])) {
            bail!(
                "input zero_points ({what}) has shape {} but N={}, k_blocks={}, bits={} require [{n}, {cols}] \
                 (or legacy 1-D [{}])",
                fmt_shape(shape),
                n,
                self.k_blocks(),
                self.bits,
                n * cols
            );
        }
        Ok(())
    }

    /// Checks the shape of g_idx: [K] or [k_blocks·block_size].
    pub fn check_g_idx_shape(&self, shape: &[i64]) -> Result<(), FormatError> {
        if !(dims_eq(shape, &[self.k]) || dims_eq(shape, &[self.k_padded()])) {
            bail!(
                "input g_idx has shape {} but K={} requires [{}] (or [k_blocks*block_size] = [{}])",
                fmt_shape(shape),
                self.k,
                self.k,
                self.k_padded()
            );
        }
        Ok(())
    }

    /// Checks the shape of the bias: [N].
    pub fn check_bias_shape(&self, shape: &[i64]) -> Result<(), FormatError> {
        if !dims_eq(shape, &[self.n]) {
            bail!("input bias has shape {} but N={} requires [{}]", fmt_shape(shape), self.n, self.n);
        }
        Ok(())
    }
}

/// Zero points as given by the model.
#[derive(Debug, Clone, Copy)]
pub enum ZeroPoints<'a> {
    /// Absent: every block uses 2^(bits−1).
    Default,
    /// Packed uint8, laid out like B (block b of row n at byte n·zp_row_bytes + b/(8/bits)).
    Packed(&'a [u8]),
    /// One float per block ([N, k_blocks] row-major), possibly fractional.
    Float(&'a [f32]),
}

/// A borrowed, validated MatMulNBits weight: everything needed to dequantize B.
#[derive(Debug, Clone, Copy)]
pub struct Weights<'a> {
    pub params: Params,
    pub b: &'a [u8],
    /// [N, k_blocks] row-major (legacy 1-D has the same order).
    pub scales: &'a [f32],
    pub zero_points: ZeroPoints<'a>,
    /// g_idx[k] for k < K (extra entries of a [k_blocks·block_size] g_idx are ignored).
    pub g_idx: Option<&'a [i32]>,
}

impl<'a> Weights<'a> {
    /// Validates element counts and the g_idx values.
    pub fn new(
        params: Params,
        b: &'a [u8],
        scales: &'a [f32],
        zero_points: ZeroPoints<'a>,
        g_idx: Option<&'a [i32]>,
    ) -> Result<Self, FormatError> {
        let (n, kb) = (params.n, params.k_blocks());
        let b_len = n * kb * params.blob_size();
        if b.len() != b_len {
            bail!("input B has {} elements but N*k_blocks*blob_size = {b_len}", b.len());
        }
        if scales.len() != n * kb {
            bail!("input scales has {} elements but N*k_blocks = {}", scales.len(), n * kb);
        }
        match zero_points {
            ZeroPoints::Default => {}
            ZeroPoints::Packed(zp) if zp.len() != n * params.zp_row_bytes() => {
                bail!(
                    "input zero_points (packed uint8) has {} elements but N*ceil(k_blocks*bits/8) = {}",
                    zp.len(),
                    n * params.zp_row_bytes()
                );
            }
            ZeroPoints::Float(zp) if zp.len() != n * kb => {
                bail!("input zero_points (float) has {} elements but N*k_blocks = {}", zp.len(), n * kb);
            }
            _ => {}
        }
        // A scale or float zero point that is NaN or infinite (or a subnormal scale, 2^-126 > |s| > 0: no weight
        // is quantized that finely, and kernels flush such values) cannot come from quantizing real weights: name it
        // instead of computing NaN or garbage from it.
        let bad = |v: f32, scale: bool| !v.is_finite() || (scale && v.is_subnormal());
        if let Some((i, &v)) = scales.iter().enumerate().find(|&(_, &v)| bad(v, true)) {
            let what = if v.is_finite() { "is subnormal (|s| < 2^-126)" } else { "is not finite" };
            bail!(
                "input scales[{}, {}] = {v:e} {what}: a weight scale must be a finite normal number or 0",
                i / kb,
                i % kb
            );
        }
        if let ZeroPoints::Float(zp) = zero_points
            && let Some((i, &v)) = zp.iter().enumerate().find(|&(_, &v)| bad(v, false))
        {
            bail!("input zero_points[{}, {}] = {v} is not finite", i / kb, i % kb);
        }
        if let Some(g) = g_idx {
            if g.len() != params.k && g.len() != params.k_padded() {
                bail!("input g_idx has {} elements but K = {}", g.len(), params.k);
            }
            if let Some((k, &v)) = g[..params.k].iter().enumerate().find(|&(_, &v)| v < 0 || v as usize >= kb) {
                bail!("input g_idx[{k}] = {v} is out of range: block indices must be in [0, {kb})");
            }
        }
        Ok(Self { params, b, scales, zero_points, g_idx: g_idx.map(|g| &g[..params.k]) })
    }

    /// True when g_idx is present and differs from the plain mapping k → k / block_size.
    pub fn has_reordering_g_idx(&self) -> bool {
        self.g_idx.is_some_and(|g| g.iter().enumerate().any(|(k, &v)| v as usize != k / self.params.block_size))
    }

    /// Code of element (n, k).
    #[inline]
    pub fn code(&self, n: usize, k: usize) -> u8 {
        self.params.code(self.b, n, k)
    }

    /// Scale of block `blk` of row n.
    #[inline]
    pub fn scale(&self, n: usize, blk: usize) -> f32 {
        self.scales[n * self.params.k_blocks() + blk]
    }

    /// Zero points of every block of row n, as floats ([`Weights::zero_point`] for a row at a time).
    pub fn zero_point_row(&self, n: usize, out: &mut [f32]) {
        let p = &self.params;
        let kb = p.k_blocks();
        match self.zero_points {
            ZeroPoints::Default => out[..kb].fill(p.default_zero_point() as f32),
            ZeroPoints::Float(zp) => out[..kb].copy_from_slice(&zp[n * kb..][..kb]),
            ZeroPoints::Packed(zp) => {
                let (bits, mask) = (p.bits as usize, p.max_code());
                let row = &zp[n * p.zp_row_bytes()..][..p.zp_row_bytes()];
                for (chunk, &byte) in out[..kb].chunks_mut(p.codes_per_byte()).zip(row) {
                    for (l, z) in chunk.iter_mut().enumerate() {
                        *z = ((byte >> (l * bits)) & mask) as f32;
                    }
                }
            }
        }
    }

    /// Zero point of block `blk` of row n, as a float.
    #[inline]
    pub fn zero_point(&self, n: usize, blk: usize) -> f32 {
        let p = &self.params;
        match self.zero_points {
            ZeroPoints::Default => p.default_zero_point() as f32,
            ZeroPoints::Float(zp) => zp[n * p.k_blocks() + blk],
            ZeroPoints::Packed(zp) => {
                let bits = p.bits as usize;
                let per_byte = 8 / bits;
                let byte = zp[n * p.zp_row_bytes() + blk / per_byte];
                ((byte >> ((blk % per_byte) * bits)) & p.max_code()) as f32
            }
        }
    }

    /// The block whose scale and zero point row k uses.
    #[inline]
    pub fn block_of(&self, k: usize) -> usize {
        match self.g_idx {
            Some(g) => g[k] as usize,
            None => k / self.params.block_size,
        }
    }
}

fn dims_eq(shape: &[i64], want: &[usize]) -> bool {
    shape.len() == want.len() && shape.iter().zip(want).all(|(&s, &w)| s >= 0 && s as usize == w)
}

/// Formats a shape like numpy: `[2, 3]`.
pub fn fmt_shape(shape: &[i64]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_reject_bad_attributes_naming_the_value() {
        let e = Params::new(64, 8, 3, 32).unwrap_err();
        assert!(e.0.contains("bits=3"), "{e}");
        let e = Params::new(64, 8, 4, 24).unwrap_err();
        assert!(e.0.contains("block_size=24"), "{e}");
        let e = Params::new(64, 8, 4, 8).unwrap_err();
        assert!(e.0.contains("block_size=8"), "{e}");
        let e = Params::new(-1, 8, 4, 32).unwrap_err();
        assert!(e.0.contains("K=-1"), "{e}");
        let e = Params::new(64, 0, 4, 32).unwrap_err();
        assert!(e.0.contains("N=0"), "{e}");
        for bs in [16, 32, 512, 1024, 2048, 4096, 1 << 16] {
            assert!(Params::new(64, 8, 4, bs).is_ok());
        }
        let e = Params::new(64, 8, 4, 1 << 17).unwrap_err();
        assert!(e.0.contains("block_size=131072"), "{e}");
    }

    #[test]
    fn derived_sizes() {
        let p = Params::new(93, 5, 4, 32).unwrap();
        assert_eq!((p.k_blocks(), p.blob_size(), p.zp_row_bytes(), p.k_padded()), (3, 16, 2, 96));
        let p = Params::new(93, 5, 2, 16).unwrap();
        assert_eq!((p.k_blocks(), p.blob_size(), p.zp_row_bytes()), (6, 4, 2));
        let p = Params::new(260, 5, 8, 32).unwrap();
        assert_eq!((p.k_blocks(), p.blob_size(), p.zp_row_bytes()), (9, 32, 9));
    }

    #[test]
    fn code_and_zero_point_bit_order() {
        // 4-bit: byte = q[2i] | q[2i+1] << 4.
        let p = Params::new(32, 1, 4, 32).unwrap();
        let mut b = vec![0u8; 16];
        b[0] = 0x21;
        b[15] = 0xF7;
        assert_eq!((p.code(&b, 0, 0), p.code(&b, 0, 1), p.code(&b, 0, 30), p.code(&b, 0, 31)), (1, 2, 7, 15));
        // 2-bit: q0 | q1<<2 | q2<<4 | q3<<6; zero points packed the same way.
        let p = Params::new(64, 1, 2, 16).unwrap();
        let scales = [1.0f32; 4];
        let b = vec![0b11_10_01_00u8; 16];
        let zp = [0b00_01_10_11u8];
        let w = Weights::new(p, &b, &scales, ZeroPoints::Packed(&zp), None).unwrap();
        assert_eq!((w.code(0, 0), w.code(0, 1), w.code(0, 2), w.code(0, 3)), (0, 1, 2, 3));
        assert_eq!((0..4).map(|blk| w.zero_point(0, blk)).collect::<Vec<_>>(), vec![3.0, 2.0, 1.0, 0.0]);
    }

    #[test]
    fn shape_checks_name_the_problem() {
        let p = Params::new(93, 5, 4, 32).unwrap();
        assert!(p.check_b_shape(&[5, 3, 16]).is_ok());
        let e = p.check_b_shape(&[5, 48]).unwrap_err();
        assert!(e.0.contains("[5, 48]") && e.0.contains("[5, 3, 16]"), "{e}");
        assert!(p.check_scales_shape(&[15]).is_ok());
        assert!(p.check_scales_shape(&[5, 4]).unwrap_err().0.contains("[5, 4]"));
        assert!(p.check_zero_points_shape(&[5, 2], true).is_ok());
        assert!(p.check_zero_points_shape(&[5, 3], false).is_ok());
        assert!(p.check_zero_points_shape(&[5, 3], true).is_err());
        assert!(p.check_g_idx_shape(&[96]).is_ok());
        assert!(p.check_bias_shape(&[4]).unwrap_err().0.contains("bias"));
    }

    #[test]
    fn g_idx_values_are_range_checked() {
        let p = Params::new(32, 1, 4, 16).unwrap();
        let b = vec![0u8; 16];
        let scales = [1.0f32; 2];
        let mut g = vec![0i32; 32];
        g[5] = 2;
        let e = Weights::new(p, &b, &scales, ZeroPoints::Default, Some(&g)).unwrap_err();
        assert!(e.0.contains("g_idx[5] = 2"), "{e}");
        g[5] = -1;
        assert!(Weights::new(p, &b, &scales, ZeroPoints::Default, Some(&g)).is_err());
        g[5] = 1;
        let w = Weights::new(p, &b, &scales, ZeroPoints::Default, Some(&g)).unwrap();
        assert!(w.has_reordering_g_idx());
    }

    #[test]
    fn scales_and_float_zero_points_must_be_finite() {
        let p = Params::new(32, 2, 4, 16).unwrap(); // 2 rows × 2 blocks
        let b = vec![0u8; 32];
        for (bad, words) in [
            (f32::NAN, "scales[1, 0] = NaN is not finite"),
            (f32::INFINITY, "scales[1, 0] = inf is not finite"),
            (f32::NEG_INFINITY, "scales[1, 0] = -inf is not finite"),
            (1e-40, "scales[1, 0] = 1e-40 is subnormal"),
        ] {
            let scales = [1.0, 0.5, bad, 2.0];
            let e = Weights::new(p, &b, &scales, ZeroPoints::Default, None).unwrap_err();
            assert!(e.0.contains(words), "{e}");
        }
        // Zero, negative and the smallest normal scales are fine.
        assert!(Weights::new(p, &b, &[0.0, -0.5, f32::MIN_POSITIVE, 1e30], ZeroPoints::Default, None).is_ok());
        let zp = [8.0, f32::NAN, 7.5, 8.0];
        let e = Weights::new(p, &b, &[1.0; 4], ZeroPoints::Float(&zp), None).unwrap_err();
        assert!(e.0.contains("zero_points[0, 1] = NaN is not finite"), "{e}");
        assert!(Weights::new(p, &b, &[1.0; 4], ZeroPoints::Float(&[8.0, -3.5, 1e-40, 0.0]), None).is_ok());
    }
}
