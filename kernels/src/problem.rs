//! What one node asks of a kernel family: the compute path, the weights' bit width, block size, zero points
//! and scales. Selection matches families against it; packing refuses weights a layout cannot hold.

use crate::format::{Weights, ZeroPoints};
use half::f16;

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

/// One node's matmul, as far as the choice of kernels and packed layout is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Problem {
    pub path: ComputePath,
    pub bits: u32,
    pub block_size: usize,
    /// The weights carry zero points (uint8 or float); without, every block uses 2^(bits−1).
    pub zero_points: bool,
    /// Every scale is exactly an f16 (e.g. the model stores f16 scales): f16 scales lose nothing.
    pub scales_exact_f16: bool,
    /// Every scale rounds to a finite, normal (or zero) f16: f16 scales cost at most 2^-11 relative.
    pub scales_fit_f16: bool,
    /// Every scale is exactly a bf16.
    pub scales_exact_bf16: bool,
    /// Every scale rounds to a finite bf16.
    pub scales_fit_bf16: bool,
}

impl Problem {
    /// The problem of multiplying with `w` on `path`.
    pub fn of(path: ComputePath, w: &Weights<'_>) -> Problem {
        let ScaleFit { exact_f16: exact, fit_f16: fit16, exact_bf16: exactb, fit_bf16: fitb } = ScaleFit::of(w.scales);
        Problem {
            path,
            bits: w.params.bits,
            block_size: w.params.block_size,
            zero_points: !matches!(w.zero_points, ZeroPoints::Default),
            scales_exact_f16: exact,
            scales_fit_f16: fit16,
            scales_exact_bf16: exactb,
            scales_fit_bf16: fitb,
        }
    }

    /// A problem with f32 scales of ordinary magnitude (tests, benchmarks).
    pub fn new(path: ComputePath, bits: u32, block_size: usize, zero_points: bool) -> Problem {
        Problem {
            path,
            bits,
            block_size,
            zero_points,
            scales_exact_f16: false,
            scales_fit_f16: true,
            scales_exact_bf16: false,
            scales_fit_bf16: true,
        }
    }
}

/// How a node's scales fit the narrow scale types. Runs over every scale at session creation (twice per node:
/// selection and packing), so f16 goes through `half`'s slice conversion (F16C where the CPU has it) and bf16
/// through bit tests, not one conversion call per scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ScaleFit {
    exact_f16: bool,
    fit_f16: bool,
    exact_bf16: bool,
    fit_bf16: bool,
}

impl ScaleFit {
    fn of(scales: &[f32]) -> ScaleFit {
        use half::slice::HalfFloatSliceExt;
        const CHUNK: usize = 256;
        let mut fit = ScaleFit { exact_f16: true, fit_f16: true, exact_bf16: true, fit_bf16: true };
        let (mut h, mut back) = ([f16::ZERO; CHUNK], [0f32; CHUNK]);
        for src in scales.chunks(CHUNK) {
            let (h, back) = (&mut h[..src.len()], &mut back[..src.len()]);
            h.convert_from_f32_slice(src);
            h.convert_to_f32_slice(back);
            for ((&s, &hs), &r) in src.iter().zip(h.iter()).zip(back.iter()) {
                fit.exact_f16 &= r == s;
                fit.fit_f16 &= hs.is_finite() && (hs.is_normal() || s == 0.0);
                let abs = s.to_bits() & 0x7fff_ffff;
                // bf16 keeps the top 16 bits: exact when the low 16 are 0 (and not NaN); rounding to nearest
                // even stays finite below 0x7f7f_8000 (halfway to infinity from bf16::MAX, whose last bit is odd).
                fit.exact_bf16 &= s.to_bits() & 0xffff == 0 && abs <= 0x7f80_0000;
                fit.fit_bf16 &= abs < 0x7f7f_8000;
            }
        }
        fit
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} path, bits={} block_size={}, {}",
            self.path.name(),
            self.bits,
            self.block_size,
            if self.zero_points { "zero points" } else { "no zero points" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    /// One conversion per scale: the definition `ScaleFit::of` must agree with.
    fn scale_fit_by_definition(scales: &[f32]) -> ScaleFit {
        let mut fit = ScaleFit { exact_f16: true, fit_f16: true, exact_bf16: true, fit_bf16: true };
        for &s in scales {
            let (h, b) = (f16::from_f32(s), bf16::from_f32(s));
            fit.exact_f16 &= h.to_f32() == s;
            fit.fit_f16 &= h.is_finite() && (h.is_normal() || s == 0.0);
            fit.exact_bf16 &= b.to_f32() == s;
            fit.fit_bf16 &= b.is_finite();
        }
        fit
    }

    #[test]
    fn scale_fit_agrees_with_the_definition() {
        let edges = [
            0.0f32,
            -0.0,
            1.0,
            0.1,
            -3.5,
            65504.0,
            65520.0,
            65519.99,
            6.1035156e-5,
            6.1e-5,
            5.96e-8,
            1e-9,
            f32::MAX,
            f32::MIN_POSITIVE,
            f32::from_bits(0x7f7f_7fff),
            f32::from_bits(0x7f7f_8000),
            f32::from_bits(0x7f7f_0000),
            f32::from_bits(0x3f80_8000),
            f32::from_bits(0x3f81_8000),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0x7fc1_0000),
        ];
        for &e in &edges {
            for base in [&[][..], &[0.5f32, 0.25][..], &[0.1f32][..]] {
                let v: Vec<f32> = base.iter().copied().chain([e]).collect();
                assert_eq!(ScaleFit::of(&v), scale_fit_by_definition(&v), "{e:e} ({:#x}) after {base:?}", e.to_bits());
            }
        }
        // Several chunks of f16-exact values, then one inexact value at chunk boundaries.
        let mut x = 0x1234_5678u32;
        let mut v: Vec<f32> = (0..1000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                f16::from_bits((x & 0x3bff) as u16).to_f32()
            })
            .collect();
        assert_eq!(ScaleFit::of(&v), scale_fit_by_definition(&v));
        assert!(ScaleFit::of(&v).exact_f16);
        for at in [0, 255, 256, 999] {
            let keep = v[at];
            v[at] = 0.1;
            assert_eq!(ScaleFit::of(&v), scale_fit_by_definition(&v), "at {at}");
            v[at] = keep;
        }
        // Random bit patterns, three at a time.
        let mut rng = 0x9e37_79b9u32;
        let random: Vec<f32> = (0..6000)
            .map(|_| {
                rng = rng.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                f32::from_bits(rng)
            })
            .collect();
        for w in random.chunks(3) {
            assert_eq!(ScaleFit::of(w), scale_fit_by_definition(w), "{w:?}");
        }
    }
}
