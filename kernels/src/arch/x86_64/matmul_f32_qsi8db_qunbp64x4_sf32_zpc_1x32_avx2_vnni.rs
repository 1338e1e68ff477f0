//! int8-activation GEMV, AVX2 + AVX-VNNI (`vpdpbusd ymm`): 1 row × 32 columns per register tile (the family's kernel for M = 1). Features: avx2, fma, avxvnni.
//!
//! LHS: `qsi8db`. RHS: `qunbp64x4_sf32_zpc` (see `qunbp64x4_avx2` for the inner loop), bits 2/4/8, any block
//! size 16 … 65536. No over-reads; padding columns of the last panel are computed, never stored.

use super::qunbp64x4_avx2::unit_avxvnni;
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has the kernel's features (its `UKernel::requires`); `args` satisfies the `RunArgs` contract with a
/// `qsi8db` LHS and a `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    run_units!(gemv, int8, args, unit_avxvnni, g = 4, units = 2, unit_cols = 32);
}
