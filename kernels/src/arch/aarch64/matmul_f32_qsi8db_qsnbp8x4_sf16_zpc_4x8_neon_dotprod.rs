//! int8-activation GEMM for prefill: 4 rows × 8 columns per register tile (8 int32 and 8 f32 accumulators), codes unpacked once for 4 rows.
//!
//! LHS: `qsi8db` (int8 per block, row-major, scale and Σq per block). RHS: `qsnbp8x4_sf16_zpc`, bits 2/4/8, any
//! block size 16 … 65536. Columns: whole 8-column panels from the tile's start (the last one's padding computed,
//! never stored). Features: neon,dotprod. The body is `super::qsnbp8x4_int8`. No over-reads: every load is inside a
//! record or an LHS block.

use super::qsnbp8x4_int8::{NR, SDOT, unit};
use super::walk_panels;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon,dotprod; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and a `qsnbp8x4` RHS
/// (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn run(args: &RunArgs) {
    walk_panels!(args, unit, SDOT, nr = NR, rows = [4, 3, 2, 1]);
}
