//! What one node asks of a kernel family: the compute path, the weights' bit width, block size, zero points
//! and scales. Selection matches families against it; packing refuses weights a layout cannot hold.

use crate::format::{Weights, ZeroPoints};
use half::{bf16, f16};

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
        let (mut exact, mut fit16, mut exactb, mut fitb) = (true, true, true, true);
        for &s in w.scales {
            let (h, b) = (f16::from_f32(s), bf16::from_f32(s));
            exact &= h.to_f32() == s;
            fit16 &= h.is_finite() && (h.is_normal() || s == 0.0);
            exactb &= b.to_f32() == s;
            fitb &= b.is_finite();
        }
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
