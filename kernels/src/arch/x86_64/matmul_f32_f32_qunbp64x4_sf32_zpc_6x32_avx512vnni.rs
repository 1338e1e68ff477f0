//! fp32-accurate GEMM, AVX-512: Y = A·dequant(B)ᵀ with f32 A and f32 accumulation (accuracy_level 1–3; the
//! family's kernel for M > 1).
//!
//! Tile: 6 rows × 32 columns per register tile (12 f32 block accumulators + 12 f32 outputs); rows in blocks of
//! 6, columns in 32-column units whose weights stay in L2 while the row blocks walk them. Codes become f32 in
//! registers once per K value and serve all 6 rows. LHS: `f32` rows. RHS: `qunbp64x4_sf32_zpc`, bits 2/4/8, any
//! block size 16 … 65536. Features: avx512f (the avx512vnni rung's floor). No over-reads; padding columns
//! computed, never stored.

use super::qunbp64x4_fma::unit;
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has avx512f; `args` satisfies the `RunArgs` contract with an `f32` LHS and a `qunbp64x4_sf32_zpc` RHS
/// of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    run_units!(gemm, f32, args, unit, g = 2, mr = [6, 5, 4, 3, 2, 1], unit_cols = 32);
}
