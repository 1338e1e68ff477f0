//! fp32-path GEMV for decode (M = 1..3): up to 3 rows share each code vector's widening; 4 columns per unit.
//!
//! LHS: `f32` rows. RHS: `qsnbp8x4_sf32_zpc`, bits 2/4/8, any block size 16 … 65536. Columns: whole 8-column
//! panels from the tile's start, in quads (a quad wholly past the last column is skipped, the last one's
//! padding computed, never stored). Features: neon. The body is `super::qsnbp8x4_fp32`. No over-reads.

use super::qsnbp8x4_fp32::{NR, unit};
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon; `args` satisfies the `RunArgs` contract with an `f32` LHS and a `qsnbp8x4_sf32_zpc` RHS
/// of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn run(args: &RunArgs) {
    super::walk_quads!(args, unit, nr = NR, rows = [3, 2, 1]);
}
