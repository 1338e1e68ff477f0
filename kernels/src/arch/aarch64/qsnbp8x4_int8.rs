//! The body shared by the aarch64 int8 kernels on `qsnbp8x4_s{f16,f32}_zpc` weights (signed n-bit codes, panels
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
use super::ops::{accumulate_block, field, sdot_elem, store_rows};
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

/// Computes rows `0..R` of the tile × the 8 columns of `panel`, over all K, for `BITS`-bit codes. The rows of
/// the int8 LHS start at `lhs` (row stride `args.lhs_stride`), their scales and sums at `lhs_scale`/`lhs_sum`
/// (stride `args.blocks`), output rows at `dst` (the tile's column 0). Columns past `args.cols` are computed from
/// the panel's zero padding and never stored.
///
/// # Safety
/// The CPU has what `OP` needs (dotprod for SDOT). `args` satisfies the `RunArgs`
/// contract for a `qsi8db` LHS and a `qsnbp8x4_s{f16,f32}_zpc` RHS of `BITS` bits; the pointers are at a row of
/// the tile that has at least `R` rows from there; `panel` is one of the tile's panels.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn unit<const OP: u8, const R: usize, const BITS: usize>(
    args: &RunArgs,
    panel: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    // SAFETY: forwarded.
    unsafe {
        if args.bl >= 32 {
            unit_c::<OP, R, BITS, 32>(args, panel, lhs, lhs_scale, lhs_sum, dst)
        } else {
            unit_c::<OP, R, BITS, 16>(args, panel, lhs, lhs_scale, lhs_sum, dst)
        }
    }
}

/// [`unit`] with the chunk length (16 or 32) as a constant, so that every loop inside a chunk unrolls.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn unit_c<const OP: u8, const R: usize, const BITS: usize, const CHUNK: usize>(
    a: &RunArgs,
    panel: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    let cpb = 8 / BITS;
    let lane_len = CHUNK / cpb;
    let groups = lane_len / KR;
    let chunk_bytes = CHUNK * NR * BITS / 8;
    debug_assert!(a.bl.min(32) == CHUNK && R <= 4 && panel < a.cols.div_ceil(NR));
    // SAFETY: panel is one of the tile's, inside the packed weights (RunArgs contract).
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    let zero = vdupq_n_s32(0);
    let mut y = [[vdupq_n_f32(0.0); 2]; R];
    for b in 0..a.blocks {
        // SAFETY: block b's record of this panel.
        let rec = unsafe { prec.add(b * a.rhs_record) };
        let mut acc = [[[zero; 2]; 2]; R];
        for c in 0..a.bl / CHUNK {
            // Row r's activations of this chunk: CHUNK/16 vectors.
            let av: [[int8x16_t; 2]; R] = core::array::from_fn(|r| {
                core::array::from_fn(|j| {
                    if 16 * j < CHUNK {
                        // SAFETY: row r < R of the tile, block b, chunk c: 16 values inside the block.
                        unsafe { vld1q_s8(lhs.add(r * a.lhs_stride + b * a.bl + c * CHUNK + 16 * j)) }
                    } else {
                        vdupq_n_s8(0)
                    }
                })
            });
            // SAFETY: chunk c of the record's codes.
            let codes = unsafe { rec.add(c * chunk_bytes) };
            for grp in 0..groups {
                // SAFETY: group grp: 32 bytes inside the chunk.
                let w = unsafe { [vld1q_s8(codes.add(32 * grp).cast()), vld1q_s8(codes.add(32 * grp + 16).cast())] };
                for l in 0..cpb {
                    let x = [field::<BITS>(w[0], l), field::<BITS>(w[1], l)];
                    let off = l * lane_len + KR * grp;
                    for r in 0..R {
                        for q in 0..2 {
                            step::<OP>(&mut acc[r][q], x[q], av[r][off / 16], (off % 16) / 4);
                        }
                    }
                }
            }
        }
        let folded: [[int32x4_t; 2]; R] = core::array::from_fn(|r| [fold::<OP>(acc[r][0]), fold::<OP>(acc[r][1])]);
        // SAFETY: block b's record; rows 0..R of the tile's scales and sums.
        if a.has_zp != 0 {
            // SAFETY: block b's record; rows 0..R of the tile's scales and sums.
            unsafe { accumulate_block::<R, BITS, true>(&mut y, &folded, a, rec, lhs_scale, lhs_sum, b) };
        } else {
            // SAFETY: as above.
            unsafe { accumulate_block::<R, BITS, false>(&mut y, &folded, a, rec, lhs_scale, lhs_sum, b) };
        }
    }
    // SAFETY: rows 0..R of the tile's output.
    unsafe { store_rows(&y, a, panel, dst) };
}
