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

/// Adapts [`gemv_unit`] to the walk's `body::<OP, R, BITS>` shape (OP unused: one instruction here).
///
/// # Safety
/// As [`gemv_unit`].
#[target_feature(enable = "neon")]
#[inline]
unsafe fn unit<const OP: u8, const R: usize, const BITS: usize>(
    a: &RunArgs,
    panel: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    // SAFETY: forwarded.
    unsafe { gemv_unit::<R, BITS>(a, panel, lhs, lhs_scale, lhs_sum, dst) }
}

/// # Safety
/// The CPU has neon and dotprod; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and a `qsnbp8x8`
/// RHS (f16 or f32 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn run(args: &RunArgs) {
    super::walk_panels!(args, unit, 0, nr = NR, rows = [2, 1]);
}
