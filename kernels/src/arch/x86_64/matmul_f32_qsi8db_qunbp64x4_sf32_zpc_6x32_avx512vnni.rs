//! int8-activation GEMM, AVX-512 VNNI: Y = A·dequant(B)ᵀ for prefill (the family's kernel for M > 1).
//!
//! Tile: 6 rows × 32 columns per register tile (12 int32 accumulators reset per block, 12 f32 accumulators for
//! all of K); the tile's rows in blocks of 6 (the rest as one smaller block), columns in 32-column units, each
//! unit's weights (K·16 bytes at 4 bits) kept in L2 while the row blocks walk it. Codes are shifted down to plain
//! u8 values once per 64 bytes and shared by the 6 rows. LHS: `qsi8db`. RHS: `qunbp64x4_sf32_zpc`, bits 2/4/8,
//! any block size 16 … 65536. Features: avx512f, avx512bw, avx512vnni. No over-reads; padding columns of the last
//! panel are computed, never stored.

use super::qunbp64x4_vnni::{FoldState, unit, unit_folded, with_fold_table};
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has avx512f, avx512bw and avx512vnni; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and
/// a `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    if args.has_zp != 0 && args.bits < 8 && args.rows > 1 {
        with_fold_table(2 * args.blocks, |table| {
            run_units!(
                gemm,
                int8,
                args,
                unit_folded,
                g = 2,
                mr = [6, 5, 4, 3, 2, 1],
                unit_cols = 32,
                per_unit = |_panel, _half| FoldState { table, folds: None }
            );
        })
    } else {
        run_units!(gemm, int8, args, unit, g = 2, mr = [6, 5, 4, 3, 2, 1], unit_cols = 32);
    }
}
