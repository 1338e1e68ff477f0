//! int8-activation GEMM, AVX2 (`vpmaddubsw`, i16 sums per chunk, `vpmaddwd`): 3 rows × 16 columns per register tile, 16-column units kept in L2 while the row blocks walk them (the family's kernel for M > 1). Features: avx2, fma.
//!
//! Codes of ≤ 4 bits are shifted down to plain u8 values once per unit, by its first row block, into a per-thread
//! buffer (K · 16 bytes) that every row block then loads from (`UnpackedCodes`): a 3-row block spent 2 of its 6
//! vector operations per 2 × 16 products re-shifting the codes. With the one-chunk blocks (16, 32) as a
//! constant (no spilled int32 sums), the tile alone went from 143 to 156–169 GFLOP/s at M = 128 on 1536×576 and
//! from ~101 to 105–124 on 4096×4096 (AMD EPYC Zen 3, 1 thread, `gemm_time`, bs32, best of 3).
//!
//! LHS: `qsi8db`. RHS: `qunbp64x4_sf32_zpc` (see `qunbp64x4_avx2` for the inner loop), bits 2/4/8, any block
//! size 16 … 65536. No over-reads; padding columns of the last panel are computed, never stored.

use super::qunbp64x4_avx2::{UnpackedCodes, unit_avx2_unpacked, with_unpacked_codes};
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has the kernel's features (its `UKernel::requires`); `args` satisfies the `RunArgs` contract with a
/// `qsi8db` LHS and a `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    with_unpacked_codes(args.blocks * args.bl / 4 * 2, |codes| {
        run_units!(
            gemm,
            int8,
            args,
            unit_avx2_unpacked,
            g = 2,
            mr = [3, 2, 1],
            unit_cols = 16,
            per_unit = |_panel, _unit| UnpackedCodes { codes, filled: false }
        );
    })
}
