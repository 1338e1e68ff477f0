//! int8-activation GEMM for prefill, i8mm: 8 rows (two groups of 4) × 8 columns per register tile, 64 SMMLA per
//! 32 K of 4-bit codes into 16 int32 2×2 tiles, each code vector unpacked once for the 8 rows (see
//! `super::qsnbp8x8_int8`); a last block of up to 4 rows runs the 4 × 8 variant.
//!
//! LHS: `qsi8dbp4x8` (int8 per block, rows in groups of 4, K in runs of 8; scale and Σq per row and block, group-major: one load per group and block). RHS:
//! `qsnbp8x8_sf16_zpc`, bits 2/4/8, block sizes 16 … 65536 whose fields hold whole 8-K runs. Rows: whole groups
//! of 4 from the tile's start, two at a time (the last group's padding rows computed, never stored); columns: whole 8-column
//! panels (the last one's padding computed, never stored). Features: neon, i8mm. No over-reads.

use super::qsnbp8x8_int8::{MR, NR, gemm_unit};
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon and i8mm; `args` satisfies the `RunArgs` contract with a `qsi8dbp4x8` LHS (the tile starts
/// at a row group) and a `qsnbp8x8` RHS (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,i8mm")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    for panel in 0..a.cols.div_ceil(NR) {
        for g in (0..a.rows.div_ceil(MR)).step_by(2) {
            let (r0, rows) = (g * MR, (a.rows - g * MR).min(2 * MR));
            // SAFETY: groups g and g + 1 (if rows > 4) of the tile: their 4·lhs_stride bytes, scales and sums each
            // (whole groups, padding rows zero) and the output rows of their `rows` real rows are inside the
            // buffers (RunArgs contract); the CPU has i8mm.
            unsafe {
                let lhs = a.lhs.cast::<i8>().add(r0 * a.lhs_stride);
                let (sc, sm, dst) =
                    (a.lhs_scale.add(r0 * a.blocks), a.lhs_sum.add(r0 * a.blocks), a.dst.add(r0 * a.dst_stride));
                match (rows > MR, a.bits) {
                    (true, 2) => gemm_unit::<2, 2>(a, panel, rows, lhs, sc, sm, dst),
                    (true, 4) => gemm_unit::<2, 4>(a, panel, rows, lhs, sc, sm, dst),
                    (true, _) => gemm_unit::<2, 8>(a, panel, rows, lhs, sc, sm, dst),
                    (false, 2) => gemm_unit::<1, 2>(a, panel, rows, lhs, sc, sm, dst),
                    (false, 4) => gemm_unit::<1, 4>(a, panel, rows, lhs, sc, sm, dst),
                    (false, _) => gemm_unit::<1, 8>(a, panel, rows, lhs, sc, sm, dst),
                }
            }
        }
    }
}
