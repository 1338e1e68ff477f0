//! The bodies of the i8mm family's kernels on `qsnbp8x8_sf16_zpc` weights (signed n-bit codes, panels of
//! 8 columns × 8 K, zero points as a per-block correction c = s·(m − z)).
//!
//! Per (panel, block) record, one chunk (C = min(bl, 32) K values) is `C/8/cpb` groups of 64 bytes: four
//! 16-byte vectors, column pairs (0,1) … (6,7), each column's 64-bit half holding 8 consecutive K of each of the
//! `cpb = 8/bits` fields (field l at K offset l·C/cpb). [`super::ops::field`] turns a vector into the int8
//! operand of one field (value × 2^(8−bits)): a 2 × 8 matrix of two columns.
//! - GEMM ([`gemm_pairs`]): `qsi8dbp4x8` activations (rows in groups of 4, each run of 8 K as row 0..3's 8
//!   bytes), so one 16-byte load is a 2 × 8 matrix of two rows (a row pair): `smmla` makes the 2 × 2 (rows ×
//!   columns) int32 tile, 4 of them per row pair × 8 columns; the per-block scales are applied in that
//!   interleaved order and the rows separated once, at the store.
//! - GEMV ([`gemv_unit`]): row-major `qsi8db` activations, 8 of them duplicated into both 64-bit halves
//!   (`dup .2d`): vector `sdot` against a column pair gives (column, K half) int32 lanes, folded with `addp` once
//!   per block; one row walks two panels per pass (activation loads and per-block work shared by 16 columns).
//!
//! int32 sums stay exact: 2^(8−bits)·127·2^(bits−1)·65536 < 2^31 at the largest block.

// Register tiles are indexed [row pair][column pair]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use super::ops::{block_epilogue, field, scales8, sdot, smmla, store4, walk_chunks, walk_rows};
use crate::pack::ScaleType;
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

/// Columns per panel and K values per column group of the layout; rows per LHS group of the GEMM.
pub(crate) const NR: usize = 8;
pub(crate) const KR: usize = 8;
pub(crate) const MR: usize = 4;

/// Rows `0..R` (R ≤ 2) of a row-major `qsi8db` tile × the 8·P columns of panels `panel..panel + P` (P ≤ 2:
/// a single row walks two panels at once, sharing the activation loads and the per-block work), over all K (see
/// the module doc).
///
/// # Safety
/// The CPU has dotprod. `args` satisfies the `RunArgs` contract for a `qsi8db` LHS and a `qsnbp8x8` RHS of
/// `BITS` bits; the pointers are at a row of the tile with at least `R` rows from there; panels `panel..panel +
/// P` are the tile's.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn gemv_unit<const R: usize, const P: usize, const BITS: usize>(
    a: &RunArgs,
    panel: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    // SAFETY: forwarded.
    unsafe {
        // Blocks of one chunk (16 or 32 K) get a loop without chunk bookkeeping.
        crate::arch::dispatch!(gemv_c::<R, P, BITS>(a, panel, lhs, lhs_scale, lhs_sum, dst);
                  chunk_one(a.bl) zp(a.has_zp != 0) row(a.row != 0))
    }
}

/// [`gemv_unit`] with the chunk length, whether a block is one chunk (`ONE`) and the presence of zero points as
/// constants; the shared panel walk (`ops::walk_rows`) goes over all chunks of K, running the epilogue after each
/// block's last chunk (with `ONE`: every iteration); this body gives it the chunk step and the block fold.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn gemv_c<
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
    let cpb = 8 / BITS;
    let lane_len = CHUNK / cpb;
    let groups = lane_len / KR;
    debug_assert!(R <= 2 && P <= 2 && groups >= 1 && panel + P <= a.cols.div_ceil(NR));
    let zero = vdupq_n_s32(0);
    let step = |acc: &mut [[[int32x4_t; 4]; R]; P], act: *const i8, codes: &[*const u8; P]| {
        let av: [[int64x2_t; 2]; R] = core::array::from_fn(|r| {
            core::array::from_fn(|j| {
                if 16 * j < CHUNK {
                    // SAFETY: row r < R of the tile, the current chunk: 16 values inside the block.
                    vreinterpretq_s64_s8(unsafe { vld1q_s8(act.add(r * a.lhs_stride + 16 * j)) })
                } else {
                    vdupq_n_s64(0)
                }
            })
        });
        for grp in 0..groups {
            // SAFETY: group grp of the current chunk of each panel's record: 64 bytes inside the chunk.
            let w: [[int8x16_t; 4]; P] = core::array::from_fn(|p| {
                // SAFETY: as above.
                core::array::from_fn(|j| unsafe { vld1q_s8(codes[p].add(64 * grp + 16 * j).cast()) })
            });
            for l in 0..cpb {
                let off = l * lane_len + KR * grp;
                for r in 0..R {
                    let v = av[r][off / 16];
                    let d = vreinterpretq_s8_s64(if off.is_multiple_of(16) {
                        vdupq_laneq_s64::<0>(v)
                    } else {
                        vdupq_laneq_s64::<1>(v)
                    });
                    for p in 0..P {
                        for j in 0..4 {
                            acc[p][r][j] = sdot(acc[p][r][j], field::<BITS>(w[p][j], l), d);
                        }
                    }
                }
            }
        }
    };
    let fold_block = |acc: &[[[int32x4_t; 4]; R]; P]| {
        core::array::from_fn(|p| {
            core::array::from_fn(|r| [vpaddq_s32(acc[p][r][0], acc[p][r][1]), vpaddq_s32(acc[p][r][2], acc[p][r][3])])
        })
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
            [[[zero; 4]; R]; P],
            step,
            fold_block,
        )
    }
}

/// Row pairs `p0..p0 + RP` (RP ≤ 3: rows 2·p0 .. 2·p0 + 2·RP of the tile, the first `rows` of them real) of a
/// `qsi8dbp4x8` tile × the 8 columns of `panel`, over all K, with every accumulator meant for a register: 4·RP
/// int32 2 × 2 tiles for the current block and 4·RP f32 2 × 2 tiles for the sums (the rest of the 32 vector
/// registers hold the 4 code vectors, one field at a time and the RP activation operands). RP = 2 (4 × 8) keeps
/// them there; at RP = 3 (12 + 12) LLVM spills around the epilogue.
///
/// Row pair P of a `qsi8dbp4x8` tile is half P % 2 of row group P / 2 (each 32-byte run of 8 K holds rows 0, 1
/// then 2, 3 of the group), so a 6-row unit can start at any even row; its scales and sums are 2 consecutive
/// values of the group's 4 per block.
///
/// # Safety
/// The CPU has i8mm. `a` satisfies the `RunArgs` contract for a `qsi8dbp4x8` LHS (the tile starts at a row
/// group) and a `qsnbp8x8` RHS of `BITS` bits; row pairs `p0..p0 + RP` hold rows of the tile (the last pair's
/// second row may be group padding: `rows` ≤ 2·RP says how many are real); `panel` is one of the tile's panels.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn gemm_pairs<const RP: usize, const BITS: usize>(a: &RunArgs, panel: usize, p0: usize, rows: usize) {
    // SAFETY: forwarded.
    unsafe {
        // Blocks of one chunk (16 or 32 K) get a block loop without a chunk loop inside.
        crate::arch::dispatch!(gemm_pairs_c::<RP, BITS>(a, panel, p0, rows); chunk_one(a.bl) zp(a.has_zp != 0) row(a.row != 0))
    }
}

#[target_feature(enable = "neon")]
#[inline]
unsafe fn gemm_pairs_c<
    const RP: usize,
    const BITS: usize,
    const CHUNK: usize,
    const ONE: bool,
    const ZP: bool,
    const ROW: bool,
>(
    a: &RunArgs,
    panel: usize,
    p0: usize,
    rows: usize,
) {
    let cpb = 8 / BITS;
    let lane_len = CHUNK / cpb;
    let groups = lane_len / KR;
    let chunk_bytes = CHUNK * NR * BITS / 8;
    let chunks = if ONE { 1 } else { a.bl / CHUNK };
    debug_assert_eq!(a.layout.scales, ScaleType::F16);
    debug_assert!(a.bl.min(32) == CHUNK && (1..=3).contains(&RP) && rows <= 2 * RP && rows > 2 * RP - 2);
    debug_assert!(!ONE || a.bl == CHUNK);
    debug_assert_eq!(ZP, a.has_zp != 0);
    // SAFETY: panel is one of the tile's, inside the packed weights (RunArgs contract).
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    // Row pair p0 + i: its half of its group's runs, and the index of its 2 scales / sums in block 0.
    let lhs: [*const i8; RP] = core::array::from_fn(|i| {
        let p = p0 + i;
        a.lhs.cast::<i8>().wrapping_add((p / 2) * MR * a.lhs_stride + 16 * (p % 2))
    });
    let at: [usize; RP] = core::array::from_fn(|i| ((p0 + i) / 2) * MR * a.blocks + 2 * ((p0 + i) % 2));
    let zero = vdupq_n_s32(0);
    // [row pair][column pair]: lanes (r0 c0, r0 c1, r1 c0, r1 c1).
    let mut y = [[vdupq_n_f32(0.0); 4]; RP];
    let mut acc = [[zero; 4]; RP];
    // The current block's record, and the current chunk: its codes and its first run of 8 K.
    let (mut rec, mut codes, mut run0) = (prec, prec, 0);
    walk_chunks::<ONE>(a.blocks, chunks, |b, last| {
        for grp in 0..groups {
            // SAFETY: group grp of the current chunk: 64 bytes inside the record.
            let w: [int8x16_t; 4] = core::array::from_fn(|j| unsafe { vld1q_s8(codes.add(64 * grp + 16 * j).cast()) });
            for l in 0..cpb {
                // The run of 8 K this field covers.
                let run = run0 + (l * lane_len + KR * grp) / KR;
                // SAFETY: run < k_packed / 8: 16 bytes of row pair p0 + i's group, inside the tile's groups.
                let x: [int8x16_t; RP] = core::array::from_fn(|i| unsafe { vld1q_s8(lhs[i].add(run * 32)) });
                for j in 0..4 {
                    let wj = field::<BITS>(w[j], l);
                    for i in 0..RP {
                        acc[i][j] = smmla(acc[i][j], x[i], wj);
                    }
                }
            }
        }
        // The next chunk (past the last block: never read).
        codes = codes.wrapping_add(chunk_bytes);
        run0 += CHUNK / KR;
        if !last {
            return;
        }
        // SAFETY: the record's 8 scales.
        let s = unsafe { scales8(rec.add(a.rhs_scales)) };
        // Column scales in the tiles' order (c0, c1, c0, c1) per column pair.
        let cols =
            |v: [float32x4_t; 2]| [dup_pair::<0>(v[0]), dup_pair::<1>(v[0]), dup_pair::<0>(v[1]), dup_pair::<1>(v[1])];
        let sp = cols(s);
        let z = if ZP {
            // SAFETY: the record's 8 f32 corrections (present with zero points).
            cols(unsafe { [vld1q_f32(rec.add(a.rhs_zp).cast()), vld1q_f32(rec.add(a.rhs_zp + 16).cast())] })
        } else {
            [vdupq_n_f32(0.0); 4]
        };
        for i in 0..RP {
            // SAFETY: row pair p0 + i's 2 scales (and Σq) of block b (group-major; padding rows hold 0). With ROW
            // the scales are 1 and not read.
            let sa2 = if ROW { vdup_n_f32(1.0) } else { unsafe { vld1_f32(a.lhs_scale.add(at[i] + b * MR)) } };
            // (r0, r0, r1, r1)
            let rows2 = |v: float32x2_t| vzip1q_f32(vcombine_f32(v, v), vcombine_f32(v, v));
            let sa = rows2(sa2);
            let sq = if ZP {
                // SAFETY: as above.
                let q2 = vcvt_f32_s32(unsafe { vld1_s32(a.lhs_sum.add(at[i] + b * MR)) });
                rows2(if ROW { q2 } else { vmul_f32(sa2, q2) })
            } else {
                vdupq_n_f32(0.0)
            };
            for j in 0..4 {
                y[i][j] = block_epilogue::<BITS, ZP, ROW>(y[i][j], acc[i][j], sp[j], sa, z[j], sq);
            }
        }
        acc = [[zero; 4]; RP];
        rec = rec.wrapping_add(a.rhs_record);
        codes = rec;
    });
    // Separate the rows: row 2i + h, columns 4q..4q+3 = halves h of column pairs 2q, 2q + 1.
    for r in 0..rows {
        let (i, h) = (r / 2, r % 2);
        for q in 0..2 {
            let col = panel * NR + 4 * q;
            if col >= a.cols {
                break;
            }
            let half = |x: float32x4_t| if h == 0 { vget_low_f32(x) } else { vget_high_f32(x) };
            let v = vcombine_f32(half(y[i][2 * q]), half(y[i][2 * q + 1]));
            // SAFETY: row 2·(p0 + i) + h of the tile is below its `rows` (real rows); columns below cols are
            // inside dst and bias.
            unsafe { store4(a.dst.add((2 * (p0 + i) + h) * a.dst_stride), a.bias, col, a.cols, v) };
        }
    }
}

/// `[x[2H], x[2H+1], x[2H], x[2H+1]]`: one 64-bit half duplicated (`dup .2d`).
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn dup_pair<const H: i32>(x: float32x4_t) -> float32x4_t {
    vreinterpretq_f32_f64(vdupq_laneq_f64::<H>(vreinterpretq_f64_f32(x)))
}
