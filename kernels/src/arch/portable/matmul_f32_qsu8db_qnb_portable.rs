//! int8-activation path, portable, on u8 activations: the operand shape of u8×s8 dot products (x86 VNNI
//! `vpdpbusd`, Arm USDOT) with signed weights. A is quantized per block to int8 and stored as u = q + 128
//! (`qsu8db`); the kernel multiplies u by the stored values v and takes the shift back out with the layout's
//! block sums: `Σ q·v = Σ u·v − 128 · Σ v`. Then per block as every int8 kernel:
//! `y += sa · (s · Σ q·v − zo · s · Σ q)` (or `+ c · Σ q`).
//!
//! Tile: any rows × any columns (whole panels); m_step 1, n_step nr; the family GEMV for M ≤ 3. LHS: `qsu8db`
//! (`pack::LhsFormat::Qsu8Db`). RHS: any layout with block sums. No over-reads, no writes outside the tile.

use super::{Tile, dot_i32, int8_walk};
use crate::pack::LhsFormat;
use crate::ukernel::RunArgs;

/// # Safety
/// `args` satisfies the `RunArgs` contract with `qsu8db` LHS rows, non-null scale/sum pointers, and a layout
/// with block sums.
pub(crate) unsafe fn run(args: &RunArgs) {
    debug_assert!(args.layout.block_sums, "qsu8db needs the layout's block sums");
    // SAFETY: forwarded from the caller.
    let t = unsafe { Tile::new(args, LhsFormat::Qsu8Db) };
    let bl = args.bl;
    int8_walk(&t, |r, b, v, rec, j| {
        let shifted = dot_i32(t.row_bytes(r)[b * bl..][..bl].iter().map(|&u| u as i32), v);
        shifted - 128 * rec.block_sum(j) as i64
    });
}
