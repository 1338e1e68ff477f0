//! int8-activation path, portable, on 4×8-interleaved activations: the operand shape of Arm SMMLA (a 2×8 by
//! 8×2 int8 matrix multiply) and of SME outer products. A is quantized per block to int8 (`qsi8dbp4x8`: rows in
//! groups of 4, K in runs of 8 values per row: row 0's k0..7, row 1's k0..7, …, row 3's, then k8..15, …).
//! Per block: `y += sa · (s · Σ q·v − zo · s · Σ q)` (or `+ c · Σ q`).
//!
//! Tile: m_step 4 (whole row groups; the last group's padding rows are zero and not stored) × any columns
//! (whole panels); the family GEMM for M ≥ 4. LHS: `qsi8dbp4x8` (`pack::LhsFormat::Qsi8DbP`). RHS: any layout.
//! No over-reads, no writes outside the tile.

use super::{Tile, dot_i32, int8_walk};
use crate::pack::LhsFormat;
use crate::ukernel::RunArgs;

const MR: usize = 4;
const KR: usize = 8;

/// # Safety
/// `args` satisfies the `RunArgs` contract with `qsi8dbp4x8` LHS groups (the tile starts at a group), and
/// non-null scale/sum pointers.
pub(crate) unsafe fn run(args: &RunArgs) {
    // SAFETY: forwarded from the caller.
    unsafe { run_p::<MR, KR>(args) }
}

/// The same body on `qsi8dbp<M>x<K>` activations (any group and run size; K divides the block size): what
/// fixed-layout kernels on other interleavings run for the cases their asm does not take.
///
/// # Safety
/// `args` satisfies the `RunArgs` contract with `qsi8dbp<M>x<K>` LHS groups (the tile starts at a group), and
/// non-null scale/sum pointers.
pub(crate) unsafe fn run_p<const M: usize, const K: usize>(args: &RunArgs) {
    // SAFETY: forwarded from the caller.
    let t = unsafe { Tile::new(args, LhsFormat::Qsi8DbP { mr: M, kr: K }) };
    let (bl, kp) = (args.bl, args.lhs_stride);
    let group = |r: usize| &t.lhs_bytes[(r / M) * M * kp..][..M * kp];
    int8_walk(&t, |r, b, v, _, _| {
        let g = group(r);
        // Row r % M of runs b·bl/K .. (b+1)·bl/K of its group.
        let q =
            (b * bl / K..(b + 1) * bl / K).flat_map(|run| &g[(run * M + r % M) * K..][..K]).map(|&q| q as i8 as i32);
        dot_i32(q, v)
    });
}
