//! int8-activation GEMM, AVX2 (`vpmaddubsw`, i16 sums per chunk, `vpmaddwd`): 3 rows × 16 columns per register tile, 16-column units kept in L2 while the row blocks walk them (the family's kernel for M > 1). Features: avx2, fma.
//!
//! LHS: `qsi8db`. RHS: `qunbp64x4_sf32_zpc` (see `qunbp64x4_avx2` for the inner loop), bits 2/4/8, any block
//! size 16 … 65536. No over-reads; padding columns of the last panel are computed, never stored.

use super::qunbp64x4_avx2::unit_avx2;
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has the kernel's features (its `UKernel::requires`); `args` satisfies the `RunArgs` contract with a
/// `qsi8db` LHS and a `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    run_units!(gemm, int8, args, unit_avx2, g = 2, mr = [3, 2, 1], unit_cols = 16);
}
