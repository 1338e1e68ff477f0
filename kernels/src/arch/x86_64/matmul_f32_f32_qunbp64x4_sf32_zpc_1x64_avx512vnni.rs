//! fp32-accurate GEMV, AVX-512: Y = A·dequant(B)ᵀ with f32 A and f32 accumulation (accuracy_level 1–3; the
//! family's kernel for M = 1).
//!
//! Tile: 1 row × 64 columns per step (4 zmm column groups); rows one at a time; columns whole panels from the
//! tile's start (padding columns computed, never stored). LHS: `f32` rows. RHS: `qunbp64x4_sf32_zpc`, bits 2/4/8,
//! any block size 16 … 65536: codes become f32 in registers (shift, mask, convert: no dequantized copy of B),
//! Σa·q accumulates per block, then `y += s·acc + c·Σa`. Features: avx512f (the avx512vnni rung's floor). No
//! over-reads.

use super::qunbp64x4_fma::unit;
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has avx512f; `args` satisfies the `RunArgs` contract with an `f32` LHS and a `qunbp64x4_sf32_zpc` RHS
/// of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    run_units!(gemv, f32, args, unit, g = 4, units = 1, unit_cols = 64);
}
