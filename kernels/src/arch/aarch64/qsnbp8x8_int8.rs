//! The bodies of the i8mm family's kernels on `qsnbp8x8_s{f16,f32}_zpc` weights (signed n-bit codes, panels of
//! 8 columns × 8 K, zero points as a per-block correction c = s·(m − z)).
//!
//! Per (panel, block) record, one chunk (C = min(bl, 32) K values) is `C/8/cpb` groups of 64 bytes: four
//! 16-byte vectors, column pairs (0,1) … (6,7), each column's 64-bit half holding 8 consecutive K of each of the
//! `cpb = 8/bits` fields (field l at K offset l·C/cpb). [`super::ops::field`] turns a vector into the int8
//! operand of one field (value × 2^(8−bits)): a 2 × 8 matrix of two columns.
//! - GEMM ([`gemm_unit`]): `qsi8dbp4x8` activations (rows in groups of 4, each run of 8 K as row 0..3's 8
//!   bytes), so one 16-byte load is a 2 × 8 matrix of two rows: `smmla` makes the 2 × 2 (rows × columns) int32
//!   tile, 8 of them for 4 rows × 8 columns; the per-block scales are applied in that interleaved order and the
//!   rows separated once, at the store.
//! - GEMV ([`gemv_unit`]): row-major `qsi8db` activations, 8 of them duplicated into both 64-bit halves
//!   (`dup .2d`): vector `sdot` against a column pair gives (column, K half) int32 lanes, folded with `addp` once
//!   per block.
//!
//! int32 sums stay exact: 2^(8−bits)·127·2^(bits−1)·65536 < 2^31 at the largest block.

// Register tiles are indexed [row pair][column pair]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use super::ops::{accumulate_block, field, scales8, sdot, smmla, store_rows, store4, to_f32_scaled};
use crate::pack::ScaleType;
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

/// Columns per panel and K values per column group of the layout; rows per LHS group of the GEMM.
pub(crate) const NR: usize = 8;
pub(crate) const KR: usize = 8;
pub(crate) const MR: usize = 4;

/// Rows `0..R` (R ≤ 2) of a row-major `qsi8db` tile × the 8 columns of `panel`, over all K (see the module doc).
///
/// # Safety
/// The CPU has dotprod. `args` satisfies the `RunArgs` contract for a `qsi8db` LHS and a `qsnbp8x8` RHS of
/// `BITS` bits; the pointers are at a row of the tile with at least `R` rows from there; `panel` is one of the
/// tile's panels.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn gemv_unit<const R: usize, const BITS: usize>(
    a: &RunArgs,
    panel: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    // SAFETY: forwarded.
    unsafe {
        if a.bl >= 32 {
            gemv_c::<R, BITS, 32>(a, panel, lhs, lhs_scale, lhs_sum, dst)
        } else {
            gemv_c::<R, BITS, 16>(a, panel, lhs, lhs_scale, lhs_sum, dst)
        }
    }
}

#[target_feature(enable = "neon")]
#[inline]
unsafe fn gemv_c<const R: usize, const BITS: usize, const CHUNK: usize>(
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
    debug_assert!(a.bl.min(32) == CHUNK && R <= 2 && groups >= 1 && panel < a.cols.div_ceil(NR));
    // SAFETY: panel is one of the tile's, inside the packed weights (RunArgs contract).
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    let zero = vdupq_n_s32(0);
    let mut y = [[vdupq_n_f32(0.0); 2]; R];
    for b in 0..a.blocks {
        // SAFETY: block b's record of this panel.
        let rec = unsafe { prec.add(b * a.rhs_record) };
        let mut acc = [[zero; 4]; R];
        for c in 0..a.bl / CHUNK {
            let av: [[int64x2_t; 2]; R] = core::array::from_fn(|r| {
                core::array::from_fn(|j| {
                    if 16 * j < CHUNK {
                        // SAFETY: row r < R of the tile, block b, chunk c: 16 values inside the block.
                        vreinterpretq_s64_s8(unsafe {
                            vld1q_s8(lhs.add(r * a.lhs_stride + b * a.bl + c * CHUNK + 16 * j))
                        })
                    } else {
                        vdupq_n_s64(0)
                    }
                })
            });
            // SAFETY: chunk c of the record's codes.
            let codes = unsafe { rec.add(c * chunk_bytes) };
            for grp in 0..groups {
                // SAFETY: group grp: 64 bytes inside the chunk.
                let w: [int8x16_t; 4] =
                    core::array::from_fn(|j| unsafe { vld1q_s8(codes.add(64 * grp + 16 * j).cast()) });
                for l in 0..cpb {
                    let off = l * lane_len + KR * grp;
                    for r in 0..R {
                        let v = av[r][off / 16];
                        let d = vreinterpretq_s8_s64(if off.is_multiple_of(16) {
                            vdupq_laneq_s64::<0>(v)
                        } else {
                            vdupq_laneq_s64::<1>(v)
                        });
                        for j in 0..4 {
                            acc[r][j] = sdot(acc[r][j], field::<BITS>(w[j], l), d);
                        }
                    }
                }
            }
        }
        let folded: [[int32x4_t; 2]; R] =
            core::array::from_fn(|r| [vpaddq_s32(acc[r][0], acc[r][1]), vpaddq_s32(acc[r][2], acc[r][3])]);
        // SAFETY: block b's record; rows 0..R of the tile's scales and sums.
        unsafe { accumulate_block::<R, BITS>(&mut y, &folded, a, rec, lhs_scale, lhs_sum, b) };
    }
    // SAFETY: rows 0..R of the tile's output.
    unsafe { store_rows(&y, a, panel, dst) };
}

/// One group of 4 rows of a `qsi8dbp4x8` tile (the first `rows` of them real, the rest zero padding) × the 8
/// columns of `panel`, over all K (see the module doc).
///
/// # Safety
/// The CPU has i8mm. `args` satisfies the `RunArgs` contract for a `qsi8dbp4x8` LHS and a `qsnbp8x8` RHS of
/// `BITS` bits; `lhs` is the start of one of the tile's row groups, `lhs_scale`/`lhs_sum`/`dst` its first row,
/// with `rows` (1..=4) rows of the tile from there; `panel` is one of the tile's panels.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn gemm_unit<const BITS: usize>(
    a: &RunArgs,
    panel: usize,
    rows: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    // SAFETY: forwarded.
    unsafe {
        if a.bl >= 32 {
            gemm_c::<BITS, 32>(a, panel, rows, lhs, lhs_scale, lhs_sum, dst)
        } else {
            gemm_c::<BITS, 16>(a, panel, rows, lhs, lhs_scale, lhs_sum, dst)
        }
    }
}

/// `[x[2h], x[2h+1], x[2h], x[2h+1]]` for h = 0 (low half) or 1 (high half).
#[target_feature(enable = "neon")]
#[inline]
fn pair(x: float32x4_t, h: usize) -> float32x4_t {
    let d = if h == 0 { vget_low_f32(x) } else { vget_high_f32(x) };
    vcombine_f32(d, d)
}

#[target_feature(enable = "neon")]
#[inline]
unsafe fn gemm_c<const BITS: usize, const CHUNK: usize>(
    a: &RunArgs,
    panel: usize,
    rows: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    let cpb = 8 / BITS;
    let lane_len = CHUNK / cpb;
    let groups = lane_len / KR;
    let chunk_bytes = CHUNK * NR * BITS / 8;
    let has_zp = a.has_zp != 0;
    let f16 = a.layout.scales == ScaleType::F16;
    debug_assert!(a.bl.min(32) == CHUNK && (1..=MR).contains(&rows) && groups >= 1);
    // SAFETY: panel is one of the tile's, inside the packed weights (RunArgs contract).
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    let zero = vdupq_n_s32(0);
    // [row pair][column pair]: lanes (r0 c0, r0 c1, r1 c0, r1 c1).
    let mut y = [[vdupq_n_f32(0.0); 4]; 2];
    for b in 0..a.blocks {
        // SAFETY: block b's record of this panel.
        let rec = unsafe { prec.add(b * a.rhs_record) };
        let mut acc = [[zero; 4]; 2];
        for c in 0..a.bl / CHUNK {
            // SAFETY: chunk c of the record's codes.
            let codes = unsafe { rec.add(c * chunk_bytes) };
            for grp in 0..groups {
                // SAFETY: group grp: 64 bytes inside the chunk.
                let w: [int8x16_t; 4] =
                    core::array::from_fn(|j| unsafe { vld1q_s8(codes.add(64 * grp + 16 * j).cast()) });
                for l in 0..cpb {
                    // The run of 8 K this field covers: 4 rows × 8 bytes inside the group's block.
                    let run = (b * a.bl + c * CHUNK + l * lane_len + KR * grp) / KR;
                    // SAFETY: run < k_packed / 8, inside the group's 4 · k_packed bytes.
                    let (a01, a23) = unsafe { (vld1q_s8(lhs.add(run * 32)), vld1q_s8(lhs.add(run * 32 + 16))) };
                    for j in 0..4 {
                        let x = field::<BITS>(w[j], l);
                        acc[0][j] = smmla(acc[0][j], a01, x);
                        acc[1][j] = smmla(acc[1][j], a23, x);
                    }
                }
            }
        }
        // SAFETY: the record's 8 scales and (with zero points) 8 f32 corrections.
        let s = unsafe { scales8(rec.add(a.rhs_scales), f16) };
        let z = if has_zp {
            // SAFETY: as above.
            unsafe { [vld1q_f32(rec.add(a.rhs_zp).cast()), vld1q_f32(rec.add(a.rhs_zp + 16).cast())] }
        } else {
            [vdupq_n_f32(0.0); 2]
        };
        // Row scales and sums in the tile's order (r0, r0, r1, r1); padding rows contribute nothing.
        let row = |r: usize| -> (f32, f32) {
            if r < rows {
                // SAFETY: row r < rows of the tile: its block b scale and Σq.
                unsafe { (*lhs_scale.add(r * a.blocks + b), *lhs_sum.add(r * a.blocks + b) as f32) }
            } else {
                (0.0, 0.0)
            }
        };
        for p in 0..2 {
            let ((s0, q0), (s1, q1)) = (row(2 * p), row(2 * p + 1));
            let sa = vcombine_f32(vdup_n_f32(s0), vdup_n_f32(s1));
            let sq = vcombine_f32(vdup_n_f32(s0 * q0), vdup_n_f32(s1 * q1));
            for j in 0..4 {
                let v = to_f32_scaled::<BITS>(acc[p][j]);
                y[p][j] = vfmaq_f32(y[p][j], v, vmulq_f32(pair(s[j / 2], j % 2), sa));
                if has_zp {
                    y[p][j] = vfmaq_f32(y[p][j], pair(z[j / 2], j % 2), sq);
                }
            }
        }
    }
    // Separate the rows: row 2p + i, columns 4q..4q+3 = halves i of column pairs 2q, 2q + 1.
    for r in 0..rows {
        let (p, i) = (r / 2, r % 2);
        for q in 0..2 {
            let col = panel * NR + 4 * q;
            if col >= a.cols {
                break;
            }
            let half = |x: float32x4_t| if i == 0 { vget_low_f32(x) } else { vget_high_f32(x) };
            let v = vcombine_f32(half(y[p][2 * q]), half(y[p][2 * q + 1]));
            // SAFETY: row r < rows of the tile; columns below cols are inside dst and bias.
            unsafe { store4(dst.add(r * a.dst_stride), a.bias, col, a.cols, v) };
        }
    }
}
