//! int8-activation GEMV for CPUs without dotprod (Cortex-A72 class): up to 2 rows × 8 columns per pass (16
//! columns for one row); 4-bit codes as their own values against LD1R-broadcast activations, summed in int16
//! per chunk (`super::qsnbp8x4_int8::unit_q4`, 1.39 M instructions at M = 1 2048×2048 on cortex-a72, 1.43 M with
//! the paired body); 2- and 8-bit codes SMULL/SMULL2 into int16 and SADALP into int32 pairs.
//!
//! LHS: `qsi8db` (int8 per block, row-major, scale and Σq per block). RHS: `qsnbp8x4_sf16_zpc`, bits 2/4/8, any
//! block size 16 … 65536. Columns: whole 8-column panels from the tile's start (the last one's padding computed,
//! never stored). Features: neon. The body is `super::qsnbp8x4_int8`. No over-reads: every load is inside a
//! record or an LHS block.

use super::qsnbp8x4_int8::{NR, SMULL, unit_smull};
use super::walk_panels;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and a `qsnbp8x4` RHS
/// (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn run(args: &RunArgs) {
    walk_panels!(args, unit_smull, SMULL, nr = NR, rows = [2, 1], panels = [2]);
}
