//! The bodies of the aarch64 int8 kernels on `qsnbp8x4_sf16_zpc` weights (signed n-bit codes, panels of 8
//! columns × 4 K, zero points as a per-block correction c = s·(m − z)): [`unit`] on row-major `qsi8db`
//! activations (the GEMVs and the NEON GEMM; [`unit_q4`] its 4-bit codes), [`gemm_group`] on `qsi8dbp4x16` row groups (the dotprod GEMM's
//! last single group, 2- and 8-bit codes and blocks of 16; its asm 8 × 4 tiles take the rest).
//!
//! Per (panel, block) record, one chunk (C = min(bl, 32) K values) is `C/4/cpb` groups of 32 bytes: two 16-byte
//! vectors, columns 0..3 and 4..7, each column's 32-bit lane holding 4 consecutive K of each of the `cpb = 8/bits`
//! fields (field l at K offset l·C/cpb). [`super::ops::field`] turns a vector into the int8 operand of one field
//! (value × 2^(8−bits)), which meets 4 activations broadcast from one 32-bit element:
//! - [`SDOT`] (dotprod): `sdot acc.4s, w.16b, a.4b[e]`: 16 multiply-adds per instruction, one accumulator per 4
//!   columns;
//! - [`SMULL`] (any NEON, Cortex-A72 class): the element duplicated (`dup .4s`), `smull`/`smull2` to int16
//!   (|2^(8−bits)·v·q| ≤ 16256 fits), two fields' products summed in int16 (`smlal`/`smlal2`: ≤ 32512 fits)
//!   and `sadalp` into int32 pairs, two accumulators per 4 columns, folded with `addp` once per block; for 4-bit
//!   codes [`unit_q4`] instead (via [`unit_smull`]): fields as the codes themselves, activations broadcast by LD1R,
//!   a whole chunk's products summed in int16 (≤ 8 per lane), one ADDP + SADDLP per (row, column quad) per chunk.
//!
//! Per (row, column, block): `y += sa·(s·Σ q·v + c·Σ q)` (no correction without zero points: the signed field is
//! exactly q − m). int32 sums stay exact: 2^(8−bits)·127·2^(bits−1)·65536 < 2^31 at the largest block.

// Register tiles are indexed [row][column quad]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use super::ops::{block_epilogue, field, scales8, sdot_elem, store4, walk_chunks, walk_rows};
use crate::pack::ScaleType;
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

/// Columns per panel and K values per column group of the layout.
pub(crate) const NR: usize = 8;
pub(crate) const KR: usize = 4;
/// Rows per group and K values per run of the GEMM's packed activations (`qsi8dbp4x16`).
pub(crate) const MR: usize = 4;
pub(crate) const LHS_KR: usize = 16;

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
        let d = dup_elem(a, e);
        acc[0] = vpadalq_s16(acc[0], vmull_s8(vget_low_s8(w), vget_low_s8(d)));
        acc[1] = vpadalq_s16(acc[1], vmull_high_s8(w, d));
    }
}

/// Two [`SMULL`] steps (fields `w0`, `w1` against elements `e0` of `a0`, `e1` of `a1`) with one widening: SMULL,
/// SMLAL into int16 lanes, then SADALP (and the same for the high halves): 6 instructions per 32 multiply-adds
/// instead of 8. Exact for activations in −127..=127 (the per-block numerics): each product is at most
/// 2^(8−bits)·2^(bits−1)·127 = 16256 in magnitude, two of them at most 32512 < 2^15. Asymmetric per-row int8
/// activations reach −128 (two products of 16384 overflow int16): bodies pair only outside them (`ROW`).
#[target_feature(enable = "neon")]
#[inline]
fn step_pair(
    acc: &mut [int32x4_t; 2],
    w0: int8x16_t,
    a0: int8x16_t,
    e0: usize,
    w1: int8x16_t,
    a1: int8x16_t,
    e1: usize,
) {
    let (d0, d1) = (dup_elem(a0, e0), dup_elem(a1, e1));
    let lo = vmlal_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(d0)), vget_low_s8(w1), vget_low_s8(d1));
    let hi = vmlal_high_s8(vmull_high_s8(w0, d0), w1, d1);
    acc[0] = vpadalq_s16(acc[0], lo);
    acc[1] = vpadalq_s16(acc[1], hi);
}

/// 32-bit element `e` of `a` in every element (`dup .4s`).
#[target_feature(enable = "neon")]
#[inline]
fn dup_elem(a: int8x16_t, e: usize) -> int8x16_t {
    let a32 = vreinterpretq_s32_s8(a);
    vreinterpretq_s8_s32(match e {
        0 => vdupq_laneq_s32::<0>(a32),
        1 => vdupq_laneq_s32::<1>(a32),
        2 => vdupq_laneq_s32::<2>(a32),
        _ => vdupq_laneq_s32::<3>(a32),
    })
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
/// panel walk ([`walk_rows`]) goes over all chunks of K, the epilogue after each block's last chunk; this body gives
/// it the chunk step and the block fold.
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
    debug_assert!(R <= 4 && (P == 1 || R == 1) && panel + P <= a.cols.div_ceil(NR));
    let zero = vdupq_n_s32(0);
    let step = |acc: &mut [[[[int32x4_t; 2]; 2]; R]; P], act: *const i8, codes: &[*const u8; P]| {
        // Row r's activations of this chunk (K from `act`): CHUNK/16 vectors.
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
            group::<OP, R, P, BITS, CHUNK, ROW, 0>(acc, &av, codes);
            group::<OP, R, P, BITS, CHUNK, ROW, 1>(acc, &av, codes);
            group::<OP, R, P, BITS, CHUNK, ROW, 2>(acc, &av, codes);
            group::<OP, R, P, BITS, CHUNK, ROW, 3>(acc, &av, codes);
            group::<OP, R, P, BITS, CHUNK, ROW, 4>(acc, &av, codes);
            group::<OP, R, P, BITS, CHUNK, ROW, 5>(acc, &av, codes);
            group::<OP, R, P, BITS, CHUNK, ROW, 6>(acc, &av, codes);
            group::<OP, R, P, BITS, CHUNK, ROW, 7>(acc, &av, codes);
        }
    };
    let fold_block = |acc: &[[[[int32x4_t; 2]; 2]; R]; P]| {
        core::array::from_fn(|p| core::array::from_fn(|r| [fold::<OP>(acc[p][r][0]), fold::<OP>(acc[p][r][1])]))
    };
    // SAFETY: forwarded (this body's contract is the walk's); `step` reads the chunk it is given.
    unsafe {
        walk_rows::<R, P, BITS, CHUNK, ONE, ZP, ROW, _>(
            a,
            panel,
            lhs,
            lhs_scale,
            lhs_sum,
            dst,
            CHUNK * NR * BITS / 8,
            [[[[zero; 2]; 2]; R]; P],
            step,
            fold_block,
        )
    }
}

/// Row group `g` (4 rows, the first `rows` real) of a `qsi8dbp4x16` tile × the 8 columns of `panel`, over all K,
/// SDOT by element, every accumulator meant for a register: 8 int32 (row × column quad) for the current block
/// and 8 f32 for the sums; the rest of the 32 vector registers hold the rows' 8 activation vectors of the chunk
/// and the codes of one group, one field at a time.
///
/// A run of 16 K of the group is 64 bytes, rows 0..3's 16 values each: row r's activation vectors are 16 bytes
/// 64 apart, and the group's 4 scales and Σq per block are consecutive (group-major), one load each; each
/// (row, column quad) then takes its row's values by element in the shared epilogue.
///
/// # Safety
/// The CPU has dotprod. `a` satisfies the `RunArgs` contract for a `qsi8dbp4x16` LHS (the tile starts at a row
/// group) and a `qsnbp8x4_sf16_zpc` RHS of `BITS` bits; group `g` is the tile's, with `rows` (1..=4) real rows;
/// `panel` is one of the tile's panels.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn gemm_group<const BITS: usize>(a: &RunArgs, panel: usize, g: usize, rows: usize) {
    // SAFETY: forwarded.
    unsafe {
        // Blocks of one chunk (16 or 32 K) get a loop without chunk bookkeeping.
        crate::arch::dispatch!(gemm_group_c::<BITS>(a, panel, g, rows); chunk_one(a.bl) zp(a.has_zp != 0) row(a.row != 0))
    }
}

/// [`gemm_group`] with the chunk length, whether a block is one chunk (`ONE`), the presence of zero points and
/// the `Row` numerics (`ROW`: activation scales all 1, not read) as constants.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn gemm_group_c<const BITS: usize, const CHUNK: usize, const ONE: bool, const ZP: bool, const ROW: bool>(
    a: &RunArgs,
    panel: usize,
    g: usize,
    rows: usize,
) {
    const R: usize = MR;
    let chunk_bytes = CHUNK * NR * BITS / 8;
    let chunks = if ONE { 1 } else { a.bl / CHUNK };
    debug_assert_eq!(a.layout.scales, ScaleType::F16);
    debug_assert!(a.bl.min(32) == CHUNK && (1..=R).contains(&rows) && panel < a.cols.div_ceil(NR));
    debug_assert!(!ONE || a.bl == CHUNK);
    debug_assert_eq!(ZP, a.has_zp != 0);
    debug_assert_eq!(ROW, a.row != 0);
    // The panel's first record; the group's first run; the index of its 4 scales / Σq of block 0.
    let prec = a.rhs.wrapping_add(panel * a.rhs_panel_stride);
    let lhs = a.lhs.cast::<i8>().wrapping_add(g * MR * a.lhs_stride);
    let at = g * MR * a.blocks;
    let zero = vdupq_n_s32(0);
    let mut y = [[vdupq_n_f32(0.0); 2]; R];
    let mut acc = [[[[zero; 2]; 2]; R]; 1];
    // The current block's record, and the current chunk: its codes and its first activation run.
    let (mut rec, mut codes, mut act) = (prec, prec, lhs);
    walk_chunks::<ONE>(a.blocks, chunks, |b, last| {
        // Row r's activations of this chunk: CHUNK/16 vectors, one per run.
        let av: [[int8x16_t; 2]; R] = core::array::from_fn(|r| {
            core::array::from_fn(|j| {
                if 16 * j < CHUNK {
                    // SAFETY: run j of the chunk, row r of the group: 16 values inside the tile's groups.
                    unsafe { vld1q_s8(act.add(MR * LHS_KR * j + LHS_KR * r)) }
                } else {
                    vdupq_n_s8(0)
                }
            })
        });
        let cs = [codes];
        // SAFETY: the current chunk of the panel's record (groups past the chunk's are no-ops).
        unsafe {
            group::<SDOT, R, 1, BITS, CHUNK, ROW, 0>(&mut acc, &av, &cs);
            group::<SDOT, R, 1, BITS, CHUNK, ROW, 1>(&mut acc, &av, &cs);
            group::<SDOT, R, 1, BITS, CHUNK, ROW, 2>(&mut acc, &av, &cs);
            group::<SDOT, R, 1, BITS, CHUNK, ROW, 3>(&mut acc, &av, &cs);
            group::<SDOT, R, 1, BITS, CHUNK, ROW, 4>(&mut acc, &av, &cs);
            group::<SDOT, R, 1, BITS, CHUNK, ROW, 5>(&mut acc, &av, &cs);
            group::<SDOT, R, 1, BITS, CHUNK, ROW, 6>(&mut acc, &av, &cs);
            group::<SDOT, R, 1, BITS, CHUNK, ROW, 7>(&mut acc, &av, &cs);
        }
        // The next chunk (past the last block: never read).
        act = act.wrapping_add(MR * CHUNK);
        codes = codes.wrapping_add(chunk_bytes);
        if !last {
            return;
        }
        // SAFETY: the record's 8 scales.
        let s = unsafe { scales8(rec.add(a.rhs_scales)) };
        let c = if ZP {
            // SAFETY: the record's 8 f32 corrections (present with zero points).
            unsafe { [vld1q_f32(rec.add(a.rhs_zp).cast()), vld1q_f32(rec.add(a.rhs_zp + 16).cast())] }
        } else {
            [vdupq_n_f32(0.0); 2]
        };
        // SAFETY: the group's 4 scales (and Σq) of block b (group-major; padding rows hold 0). With ROW the
        // scales are 1 and not read.
        let sa4 = if ROW { vdupq_n_f32(1.0) } else { unsafe { vld1q_f32(a.lhs_scale.add(at + b * MR)) } };
        let sq4 = if ZP {
            // SAFETY: as above.
            let q4 = vcvtq_f32_s32(unsafe { vld1q_s32(a.lhs_sum.add(at + b * MR)) });
            if ROW { q4 } else { vmulq_f32(sa4, q4) }
        } else {
            vdupq_n_f32(0.0)
        };
        for r in 0..R {
            let (sa, sq) = (lane(sa4, r), lane(sq4, r));
            for q in 0..2 {
                y[r][q] = block_epilogue::<BITS, ZP, ROW>(y[r][q], fold::<SDOT>(acc[0][r][q]), s[q], sa, c[q], sq);
            }
        }
        acc = [[[[zero; 2]; 2]; R]; 1];
        rec = rec.wrapping_add(a.rhs_record);
        codes = rec;
    });
    for r in 0..rows {
        for q in 0..2 {
            let col = panel * NR + 4 * q;
            if col < a.cols {
                // SAFETY: row r < rows of the group is a real row of the tile; columns below cols are inside
                // dst and bias.
                unsafe { store4(a.dst.add((g * MR + r) * a.dst_stride), a.bias, col, a.cols, y[r][q]) };
            }
        }
    }
}

/// Lane `i` of `v` in every lane (`dup .4s, v.s[i]`; multiplied by, LLVM folds it into a by-element FMUL/FMLA).
#[target_feature(enable = "neon")]
#[inline]
fn lane(v: float32x4_t, i: usize) -> float32x4_t {
    match i {
        0 => vdupq_laneq_f32::<0>(v),
        1 => vdupq_laneq_f32::<1>(v),
        2 => vdupq_laneq_f32::<2>(v),
        _ => vdupq_laneq_f32::<3>(v),
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
    const ROW: bool,
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
        // Not in the Row numerics: their activations reach −128, and two products of 16384 overflow int16.
        if OP == SMULL && cpb >= 2 && !ROW {
            // Fields in pairs: the two int16 products of a lane summed before the widening (see `step_pair`).
            for l in (0..cpb).step_by(2) {
                let x0 = [field::<BITS>(w[0], l), field::<BITS>(w[1], l)];
                let x1 = [field::<BITS>(w[0], l + 1), field::<BITS>(w[1], l + 1)];
                let (o0, o1) = (l * lane_len + KR * GRP, (l + 1) * lane_len + KR * GRP);
                for r in 0..R {
                    for q in 0..2 {
                        let (a0, a1) = (av[r][o0 / 16], av[r][o1 / 16]);
                        step_pair(&mut acc[p][r][q], x0[q], a0, (o0 % 16) / 4, x1[q], a1, (o1 % 16) / 4);
                    }
                }
            }
            continue;
        }
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

/// [`unit`] for [`SMULL`] bodies: 4-bit codes take [`unit_q4`], other widths the paired body above.
///
/// # Safety
/// As [`unit`] with `OP` = [`SMULL`].
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn unit_smull<const OP: u8, const R: usize, const P: usize, const BITS: usize>(
    args: &RunArgs,
    panel: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    debug_assert_eq!(OP, SMULL);
    // SAFETY: forwarded.
    unsafe {
        if BITS == 4 {
            crate::arch::dispatch!(unit_q4::<R, P>(args, panel, lhs, lhs_scale, lhs_sum, dst);
                      chunk_one(args.bl) zp(args.has_zp != 0) row(args.row != 0))
        } else {
            unit::<SMULL, R, P, BITS>(args, panel, lhs, lhs_scale, lhs_sum, dst)
        }
    }
}

/// 4-bit codes without dotprod: rows `0..R` × the 8·P columns of panels `panel..panel + P` (P = 2 only for one
/// row), arguments as [`unit`]. Each field is taken as its code q (SSHR #4 for the high field, SHL #4 + SSHR #4
/// for the low one) and meets 4 activations loaded to every 32-bit lane at once (LD1R: no DUP); SMULL / SMLAL
/// and SMULL2 / SMLAL2 sum a chunk's products in int16 lanes (per lane CHUNK/4 products of |q·v| ≤ 8·128 =
/// 1024: ≤ 8192, and ≤ 16384 after the pairwise fold), which one ADDP per (row, column quad) folds to 4 columns
/// and SADDLP (one chunk per block) or SADALP (into the block's int32 sums) widens. So 2 instructions per 16
/// multiply-adds where the paired body takes 3 and a DUP, and no per-step widening; the sums are the codes' own
/// (factor 1: the epilogue's 8-bit convention), exactly the paired body's sums / 16.
///
/// # Safety
/// As [`unit`] with `OP` = [`SMULL`] and `BITS` = 4.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn unit_q4<
    const R: usize,
    const P: usize,
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
    debug_assert!(a.bits == 4 && R <= 4 && (P == 1 || R == 1) && panel + P <= a.cols.div_ceil(NR));
    let zero = vdupq_n_s32(0);
    // The block's int32 sums: a block of one chunk sets them, longer blocks add each chunk's (from zero: the walk
    // starts every block from `init`).
    let step = |blk: &mut [[[int32x4_t; 2]; R]; P], act: *const i8, codes: &[*const u8; P]| {
        let mut s = [[[[vdupq_n_s16(0); 2]; 2]; R]; P];
        if R == 4 && P == 1 && CHUNK == 32 {
            // SAFETY: the current chunk of panel 0's record and of rows 0..4.
            let c = unsafe { q4_chunk_4x8(act, a.lhs_stride, codes[0]) };
            s[0].copy_from_slice(&c[..R]);
        } else {
            // SAFETY: the current chunk of each panel's record and of rows 0..R (groups past the chunk's: no-ops).
            unsafe {
                q4_group::<R, P, CHUNK, 0>(&mut s, act, a.lhs_stride, codes);
                q4_group::<R, P, CHUNK, 1>(&mut s, act, a.lhs_stride, codes);
                q4_group::<R, P, CHUNK, 2>(&mut s, act, a.lhs_stride, codes);
                q4_group::<R, P, CHUNK, 3>(&mut s, act, a.lhs_stride, codes);
            }
        }
        for p in 0..P {
            for r in 0..R {
                for q in 0..2 {
                    let pairs = vpaddq_s16(s[p][r][q][0], s[p][r][q][1]);
                    blk[p][r][q] = if ONE { vpaddlq_s16(pairs) } else { vpadalq_s16(blk[p][r][q], pairs) };
                }
            }
        }
    };
    let fold_block = |blk: &[[[int32x4_t; 2]; R]; P]| *blk;
    // SAFETY: forwarded (this body's contract is the walk's); `step` reads the chunk it is given. The sums are
    // the codes' own: the 8-bit (factor 1) conversion.
    unsafe {
        walk_rows::<R, P, 8, CHUNK, ONE, ZP, ROW, _>(
            a,
            panel,
            lhs,
            lhs_scale,
            lhs_sum,
            dst,
            CHUNK * NR / 2,
            [[[zero; 2]; R]; P],
            step,
            fold_block,
        )
    }
}

/// Group `GRP` (32 bytes per panel: 4 K of both fields for the 8 columns) of the current chunk of 4-bit codes into
/// the int16 sums `s` [panel][row][column quad][columns 0, 1 | 2, 3], a no-op past the chunk's `CHUNK / 8`
/// groups; group 0's low field starts the sums (SMULL), the rest accumulate (SMLAL). One function per group, as
/// [`group`].
///
/// # Safety
/// `codes[p]` is the current chunk of panel p's record; `act` is the chunk's first value in row 0 of the tile,
/// whose rows 0..R are `stride` bytes apart.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q4_group<const R: usize, const P: usize, const CHUNK: usize, const GRP: usize>(
    s: &mut [[[[int16x8_t; 2]; 2]; R]; P],
    act: *const i8,
    stride: usize,
    codes: &[*const u8; P],
) {
    if GRP >= CHUNK / 8 {
        return;
    }
    // SAFETY: group GRP of each panel's chunk: 32 bytes inside it.
    let w: [[int8x16_t; 2]; P] = core::array::from_fn(|p| unsafe {
        [vld1q_s8(codes[p].add(32 * GRP).cast()), vld1q_s8(codes[p].add(32 * GRP + 16).cast())]
    });
    for l in 0..2 {
        // Field l as the codes themselves (two's-complement nibbles): high by SSHR, low by SHL then SSHR.
        let x: [[int8x16_t; 2]; P] = core::array::from_fn(|p| {
            core::array::from_fn(|q| {
                if l == 0 { vshrq_n_s8::<4>(vshlq_n_s8::<4>(w[p][q])) } else { vshrq_n_s8::<4>(w[p][q]) }
            })
        });
        // The field's 4 K in this group: K offset l·CHUNK/2 + 4·GRP of the chunk.
        let off = l * CHUNK / 2 + 4 * GRP;
        for r in 0..R {
            // SAFETY: 4 activations of row r inside the chunk (off + 4 ≤ CHUNK).
            let d = unsafe { ld1r4(act.add(r * stride + off)) };
            for p in 0..P {
                for q in 0..2 {
                    let t = &mut s[p][r][q];
                    if GRP == 0 && l == 0 {
                        *t = [vmull_s8(vget_low_s8(x[p][q]), vget_low_s8(d)), vmull_high_s8(x[p][q], d)];
                    } else {
                        *t = [vmlal_s8(t[0], vget_low_s8(x[p][q]), vget_low_s8(d)), vmlal_high_s8(t[1], x[p][q], d)];
                    }
                }
            }
        }
    }
}

/// The 4 bytes at `p` in every 32-bit lane (LD1R). In asm: as a splat LLVM would turn each SMULL2 / SMLAL2 on it
/// into an EXT of the other operand and a SMULL / SMLAL.
///
/// # Safety
/// `p..p + 4` is readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn ld1r4(p: *const i8) -> int8x16_t {
    let d: int8x16_t;
    // SAFETY: reads the 4 bytes at p (the caller's guarantee; LD1R has no alignment requirement); no stack use.
    unsafe {
        core::arch::asm!("ld1r {{{d:v}.4s}}, [{p}]", d = out(vreg) d, p = in(reg) p, options(pure, readonly, nostack, preserves_flags))
    };
    d
}

/// One 32-K chunk of 4-bit codes, 4 rows × 8 columns, in one asm block ([`q4_group`]'s sums for R = 4, P = 1:
/// LLVM hoisted that body's field extractions and spilled). The low field (K 0..15 of the chunk) first, then the
/// high one (K 16..31), so each row's activations are read in order, 4 at a time by a post-indexed LD1R; the codes
/// are loaded once per field (two 16-byte vectors per group). Per chunk: 128 SMULL(2) / SMLAL(2), 32 LD1R, 8 LDP,
/// 24 field extractions.
///
/// # Safety
/// The CPU has neon; `codes` is a 128-byte chunk of a `qsnbp8x4` record of 4-bit codes; `act` is the chunk's first
/// value in row 0, whose rows 0..4 are `stride` bytes apart and hold 32 values each from there.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q4_chunk_4x8(act: *const i8, stride: usize, codes: *const u8) -> [[[int16x8_t; 2]; 2]; 4] {
    let mut s = [[[vdupq_n_s16(0); 2]; 2]; 4];
    /// The 16 products of one field vector pair (v18: columns 0..3, v19: 4..7) with 4 activations of each row,
    /// `$lo` / `$hi` the low- and high-half instructions (SMULL or SMLAL).
    macro_rules! rows4 {
        ($lo:literal $hi:literal) => {
            concat!(
                "ld1r {{v20.4s}}, [{a0}], #4\n",
                $lo,
                " v0.8h, v18.8b, v20.8b\n",
                $hi,
                " v1.8h, v18.16b, v20.16b\n",
                $lo,
                " v2.8h, v19.8b, v20.8b\n",
                $hi,
                " v3.8h, v19.16b, v20.16b\n",
                "ld1r {{v20.4s}}, [{a1}], #4\n",
                $lo,
                " v4.8h, v18.8b, v20.8b\n",
                $hi,
                " v5.8h, v18.16b, v20.16b\n",
                $lo,
                " v6.8h, v19.8b, v20.8b\n",
                $hi,
                " v7.8h, v19.16b, v20.16b\n",
                "ld1r {{v20.4s}}, [{a2}], #4\n",
                $lo,
                " v8.8h, v18.8b, v20.8b\n",
                $hi,
                " v9.8h, v18.16b, v20.16b\n",
                $lo,
                " v10.8h, v19.8b, v20.8b\n",
                $hi,
                " v11.8h, v19.16b, v20.16b\n",
                "ld1r {{v20.4s}}, [{a3}], #4\n",
                $lo,
                " v12.8h, v18.8b, v20.8b\n",
                $hi,
                " v13.8h, v18.16b, v20.16b\n",
                $lo,
                " v14.8h, v19.8b, v20.8b\n",
                $hi,
                " v15.8h, v19.16b, v20.16b\n",
            )
        };
    }
    /// Group `$o` (byte offset) of the chunk, low field: each code's low nibble sign-extended (SHL, SSHR).
    macro_rules! low {
        ($o:literal $lo:literal $hi:literal) => {
            concat!(
                "ldp q16, q17, [{c}, #", $o, "]\n",
                "shl v18.16b, v16.16b, #4\n", "sshr v18.16b, v18.16b, #4\n",
                "shl v19.16b, v17.16b, #4\n", "sshr v19.16b, v19.16b, #4\n",
                rows4!($lo $hi),
            )
        };
    }
    /// The next group of the chunk (post-indexed), high field: each code's high nibble (SSHR).
    macro_rules! high {
        () => {
            concat!(
                "ldp q16, q17, [{c}], #32\n",
                "sshr v18.16b, v16.16b, #4\n", "sshr v19.16b, v17.16b, #4\n",
                rows4!("smlal" "smlal2"),
            )
        };
    }
    // SAFETY: reads the chunk's 128 code bytes and 32 activations of each of the 4 rows (the caller's guarantee);
    // writes only the declared registers; no stack use, flags untouched.
    unsafe {
        core::arch::asm!(
            low!("0" "smull" "smull2"), low!("32" "smlal" "smlal2"), low!("64" "smlal" "smlal2"),
            low!("96" "smlal" "smlal2"),
            high!(), high!(), high!(), high!(),
            c = inout(reg) codes => _,
            a0 = inout(reg) act => _,
            a1 = inout(reg) act.wrapping_add(stride) => _,
            a2 = inout(reg) act.wrapping_add(2 * stride) => _,
            a3 = inout(reg) act.wrapping_add(3 * stride) => _,
            out("v0") s[0][0][0], out("v1") s[0][0][1], out("v2") s[0][1][0], out("v3") s[0][1][1],
            out("v4") s[1][0][0], out("v5") s[1][0][1], out("v6") s[1][1][0], out("v7") s[1][1][1],
            out("v8") s[2][0][0], out("v9") s[2][0][1], out("v10") s[2][1][0], out("v11") s[2][1][1],
            out("v12") s[3][0][0], out("v13") s[3][0][1], out("v14") s[3][1][0], out("v15") s[3][1][1],
            out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
            options(pure, readonly, nostack, preserves_flags),
        )
    };
    s
}
