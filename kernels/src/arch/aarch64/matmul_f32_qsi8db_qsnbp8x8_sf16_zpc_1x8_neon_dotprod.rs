//! int8-activation GEMV for decode on the i8mm family's weights (`qsnbp8x8`, the SMMLA operand shape): up to 2
//! rows × 8 columns per pass over a panel, vector SDOT of each column pair against 8 activations duplicated in
//! both 64-bit halves, 4 int32 accumulators per row folded with `addp` once per block.
//!
//! LHS: `qsi8db` (int8 per block, row-major, scale and Σq per block). RHS: `qsnbp8x8_sf16_zpc`, bits 2/4/8,
//! block sizes 16 … 65536 whose fields hold whole 8-K runs (not 2-bit at bl 16: the layout refuses it). Columns:
//! whole 8-column panels from the tile's start (the last one's padding computed, never stored). Features: neon,
//! dotprod. The body is `super::qsnbp8x8_int8::gemv_unit`. No over-reads.

use super::qsnbp8x8_int8::{NR, gemv_unit};
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon and dotprod; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and a `qsnbp8x8`
/// RHS (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    let panels = a.cols.div_ceil(NR);
    let mut r0 = 0;
    while r0 < a.rows {
        let rows = (a.rows - r0).min(2);
        // SAFETY: rows r0..r0 + rows are inside the tile, so are their LHS rows, scales, sums and output rows
        // (RunArgs contract); the panels walked are the tile's; the CPU has dotprod.
        unsafe {
            let lhs = a.lhs.cast::<i8>().add(r0 * a.lhs_stride);
            let (sc, sm) = (a.lhs_scale.add(r0 * a.blocks), a.lhs_sum.add(r0 * a.blocks));
            let dst = a.dst.add(r0 * a.dst_stride);
            let mut panel = 0;
            while panel < panels {
                // One row: two panels per pass while two remain; two rows: one.
                let p = if rows == 1 && panel + 2 <= panels { 2 } else { 1 };
                match (rows, p, a.bits) {
                    (1, 2, 2) => gemv_unit::<1, 2, 2>(a, panel, lhs, sc, sm, dst),
                    (1, 2, 4) => gemv_unit::<1, 2, 4>(a, panel, lhs, sc, sm, dst),
                    (1, 2, _) => gemv_unit::<1, 2, 8>(a, panel, lhs, sc, sm, dst),
                    (1, _, 2) => gemv_unit::<1, 1, 2>(a, panel, lhs, sc, sm, dst),
                    (1, _, 4) => gemv_unit::<1, 1, 4>(a, panel, lhs, sc, sm, dst),
                    (1, _, _) => gemv_unit::<1, 1, 8>(a, panel, lhs, sc, sm, dst),
                    (_, _, 2) => gemv_unit::<2, 1, 2>(a, panel, lhs, sc, sm, dst),
                    (_, _, 4) => gemv_unit::<2, 1, 4>(a, panel, lhs, sc, sm, dst),
                    (_, _, _) => gemv_unit::<2, 1, 8>(a, panel, lhs, sc, sm, dst),
                }
                panel += p;
            }
        }
        r0 += rows;
    }
}
