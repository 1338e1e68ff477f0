//! fp32-accurate GEMV, AVX2 + FMA: codes become f32 in registers, 1 row × 32 columns per register tile (the family's kernel for M ≤ 6: see `FP32_GEMV_AVX2` in `mod.rs`). Features: avx2, fma.
//!
//! LHS: `f32`. RHS: `qunbp64x4_sf32_zpc` (see `qunbp64x4_avx2` for the inner loop), bits 2/4/8, any block
//! size 16 … 65536. No over-reads; padding columns of the last panel are computed, never stored.

use super::qunbp64x4_avx2::unit_fma;
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has the kernel's features (its `UKernel::requires`); `args` satisfies the `RunArgs` contract with a
/// `f32` LHS and a `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    run_units!(gemv, f32, args, unit_fma, g = 4, units = 2, unit_cols = 32);
}
