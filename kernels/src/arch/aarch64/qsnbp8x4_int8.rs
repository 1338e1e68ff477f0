//! The body shared by the aarch64 int8 kernels on `qsnbp8x4_sf16_zpc` weights (signed n-bit codes, panels
//! of 8 columns × 4 K, zero points as a per-block correction c = s·(m − z)), with row-major `qsi8db` activations.
//!
//! Per (panel, block) record, one chunk (C = min(bl, 32) K values) is `C/4/cpb` groups of 32 bytes: two 16-byte
//! vectors, columns 0..3 and 4..7, each column's 32-bit lane holding 4 consecutive K of each of the `cpb = 8/bits`
//! fields (field l at K offset l·C/cpb). [`super::ops::field`] turns a vector into the int8 operand of one field
//! (value × 2^(8−bits)), which meets 4 activations broadcast from one 32-bit element:
//! - [`SDOT`] (dotprod): `sdot acc.4s, w.16b, a.4b[e]`: 16 multiply-adds per instruction, one accumulator per 4
//!   columns;
//! - [`SMULL`] (any NEON, Cortex-A72 class): the element duplicated (`dup .4s`), `smull`/`smull2` to int16
//!   (|2^(8−bits)·v·q| ≤ 16256 fits) and `sadalp` into int32 pairs, two accumulators per 4 columns, folded with
//!   `addp` once per block.
//!
//! Per (row, column, block): `y += sa·(s·Σ q·v + c·Σ q)` (no correction without zero points: the signed field is
//! exactly q − m). int32 sums stay exact: 2^(8−bits)·127·2^(bits−1)·65536 < 2^31 at the largest block.

// Register tiles are indexed [row][column quad]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use super::ops::{accumulate_block, field, sdot_elem, store_rows, walk_chunks};
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

/// Columns per panel and K values per column group of the layout.
pub(crate) const NR: usize = 8;
pub(crate) const KR: usize = 4;

/// How 4 int8 activations (element `e` of a 16-byte vector) meet a vector of 4 columns × 4 K, chosen by the
/// body's `OP` constant.
pub(crate) const SDOT: u8 = 0;
/// SMULL/SMULL2 + SADALP (base NEON); see the module doc.
pub(crate) const SMULL: u8 = 1;

/// One step of `OP` into the (one or two) int32 accumulators of 4 columns.
#[target_feature(enable = "neon")]
#[inline]
fn step<const OP: u8>(acc: &mut [int32x4_t; 2], w: int8x16_t, a: int8x16_t, e: usize) {
    if OP == SDOT {
        acc[0] = sdot_elem(acc[0], w, a, e);
    } else {
        let a32 = vreinterpretq_s32_s8(a);
        let d = vreinterpretq_s8_s32(match e {
            0 => vdupq_laneq_s32::<0>(a32),
            1 => vdupq_laneq_s32::<1>(a32),
            2 => vdupq_laneq_s32::<2>(a32),
            _ => vdupq_laneq_s32::<3>(a32),
        });
        acc[0] = vpadalq_s16(acc[0], vmull_s8(vget_low_s8(w), vget_low_s8(d)));
        acc[1] = vpadalq_s16(acc[1], vmull_high_s8(w, d));
    }
}

/// The accumulators of `OP` folded to one int32 per column.
#[target_feature(enable = "neon")]
#[inline]
fn fold<const OP: u8>(acc: [int32x4_t; 2]) -> int32x4_t {
    if OP == SDOT { acc[0] } else { vpaddq_s32(acc[0], acc[1]) }
}

/// Computes rows `0..R` of the tile × the 8·P columns of panels `panel..panel + P`, over all K, for `BITS`-bit
/// codes (P = 2 only for one row: the activation loads and the per-block work are shared by 16 columns). The rows
/// of the int8 LHS start at `lhs` (row stride `args.lhs_stride`), their scales and sums at `lhs_scale`/`lhs_sum`
/// (stride `args.blocks`), output rows at `dst` (the tile's column 0). Columns past `args.cols` are computed from
/// the panel's zero padding and never stored.
///
/// # Safety
/// The CPU has what `OP` needs (dotprod for SDOT). `args` satisfies the `RunArgs` contract for a `qsi8db` LHS
/// and a `qsnbp8x4_sf16_zpc` RHS of `BITS` bits; the pointers are at a row of the tile that has at least `R`
/// rows from there; panels `panel..panel + P` are the tile's.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn unit<const OP: u8, const R: usize, const P: usize, const BITS: usize>(
    args: &RunArgs,
    panel: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    // SAFETY: forwarded.
    unsafe {
        // Blocks of one chunk (16 or 32 K) get a loop without chunk bookkeeping.
        crate::arch::dispatch!(unit_c::<OP, R, P, BITS>(args, panel, lhs, lhs_scale, lhs_sum, dst);
                  chunk_one(args.bl) zp(args.has_zp != 0) row(args.row != 0))
    }
}

/// [`unit`] with the chunk length (16 or 32), whether a block is one chunk (`ONE`) and the presence of zero
/// points as constants, so that every loop inside a chunk unrolls and the block epilogue has no branch. The shared
/// walk ([`walk_chunks`]) goes over all chunks of K, the epilogue after each block's last chunk.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn unit_c<
    const OP: u8,
    const R: usize,
    const P: usize,
    const BITS: usize,
    const CHUNK: usize,
    const ONE: bool,
    const ZP: bool,
    const ROW: bool,
>(
    a: &RunArgs,
    panel: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    let chunk_bytes = CHUNK * NR * BITS / 8;
    let chunks = if ONE { 1 } else { a.bl / CHUNK };
    debug_assert!(!ONE || a.bl == CHUNK);
    debug_assert!(a.bl.min(32) == CHUNK && R <= 4 && (P == 1 || R == 1) && panel + P <= a.cols.div_ceil(NR));
    debug_assert_eq!(ZP, a.has_zp != 0);
    // SAFETY: panels panel..panel + P are the tile's, inside the packed weights (RunArgs contract).
    let mut rec: [*const u8; P] = core::array::from_fn(|p| unsafe { a.rhs.add((panel + p) * a.rhs_panel_stride) });
    let mut codes = rec;
    let mut act = lhs;
    let zero = vdupq_n_s32(0);
    let mut y = [[[vdupq_n_f32(0.0); 2]; R]; P];
    let mut acc = [[[[zero; 2]; 2]; R]; P];
    walk_chunks::<ONE>(a.blocks, chunks, |b, last| {
        // Row r's activations of this chunk (block b, K from `act`): CHUNK/16 vectors.
        let av: [[int8x16_t; 2]; R] = core::array::from_fn(|r| {
            core::array::from_fn(|j| {
                if 16 * j < CHUNK {
                    // SAFETY: row r < R of the tile, the current chunk: 16 values inside the block.
                    unsafe { vld1q_s8(act.add(r * a.lhs_stride + 16 * j)) }
                } else {
                    vdupq_n_s8(0)
                }
            })
        });
        // SAFETY: the current chunk of each panel's record (groups past the chunk's are no-ops).
        unsafe {
            group::<OP, R, P, BITS, CHUNK, 0>(&mut acc, &av, &codes);
            group::<OP, R, P, BITS, CHUNK, 1>(&mut acc, &av, &codes);
            group::<OP, R, P, BITS, CHUNK, 2>(&mut acc, &av, &codes);
            group::<OP, R, P, BITS, CHUNK, 3>(&mut acc, &av, &codes);
            group::<OP, R, P, BITS, CHUNK, 4>(&mut acc, &av, &codes);
            group::<OP, R, P, BITS, CHUNK, 5>(&mut acc, &av, &codes);
            group::<OP, R, P, BITS, CHUNK, 6>(&mut acc, &av, &codes);
            group::<OP, R, P, BITS, CHUNK, 7>(&mut acc, &av, &codes);
        }
        // The next chunk of the row and of each record (past the last block: never read).
        act = act.wrapping_add(CHUNK);
        for p in 0..P {
            codes[p] = codes[p].wrapping_add(chunk_bytes);
        }
        if last {
            for p in 0..P {
                let folded: [[int32x4_t; 2]; R] =
                    core::array::from_fn(|r| [fold::<OP>(acc[p][r][0]), fold::<OP>(acc[p][r][1])]);
                // SAFETY: block b's record of panel p; rows 0..R of the tile's scales and sums.
                unsafe { accumulate_block::<R, BITS, ZP, ROW>(&mut y[p], &folded, a, rec[p], lhs_scale, lhs_sum, b) };
                rec[p] = rec[p].wrapping_add(a.rhs_record);
                codes[p] = rec[p];
            }
            acc = [[[[zero; 2]; 2]; R]; P];
        }
    });
    for p in 0..P {
        // SAFETY: rows 0..R of the tile's output.
        unsafe { store_rows(y[p], a, panel + p, dst) };
    }
}

/// Group `GRP` (32 bytes per panel: 4 K of every field for the 8 columns) of the current chunk into the
/// accumulators, a no-op past the chunk's `CHUNK / (8 / BITS) / 4` groups. One function per group, so that the
/// activation element each step reads is a constant (LLVM does not fully unroll the group loop of the larger
/// tiles, and a run-time element index becomes a branch per step).
///
/// # Safety
/// `codes[p]` is the current chunk of panel p's record.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn group<
    const OP: u8,
    const R: usize,
    const P: usize,
    const BITS: usize,
    const CHUNK: usize,
    const GRP: usize,
>(
    acc: &mut [[[[int32x4_t; 2]; 2]; R]; P],
    av: &[[int8x16_t; 2]; R],
    codes: &[*const u8; P],
) {
    let cpb = 8 / BITS;
    let lane_len = CHUNK / cpb;
    if GRP >= lane_len / KR {
        return;
    }
    for p in 0..P {
        // SAFETY: group GRP of the chunk: 32 bytes inside it.
        let w = unsafe { [vld1q_s8(codes[p].add(32 * GRP).cast()), vld1q_s8(codes[p].add(32 * GRP + 16).cast())] };
        for l in 0..cpb {
            let x = [field::<BITS>(w[0], l), field::<BITS>(w[1], l)];
            let off = l * lane_len + KR * GRP;
            for r in 0..R {
                for q in 0..2 {
                    step::<OP>(&mut acc[p][r][q], x[q], av[r][off / 16], (off % 16) / 4);
                }
            }
        }
    }
}
