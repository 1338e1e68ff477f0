//! The body of the aarch64 fp32-path kernels (accuracy_level 1–3) on `qsnbp8x4_sf32_zpc` weights: f32
//! activations, codes dequantized in registers, no dequantized copy of B.
//!
//! A 16-byte code vector holds 4 columns × 4 consecutive K (per field, see `super::qsnbp8x4_int8`). Each field
//! becomes int8 × 2^(8−bits) ([`super::ops::field`]), is widened to int32 (`sxtl`, `sxtl2`) and converted
//! (`scvtf`): one f32 vector per column holding its 4 K. Each row multiplies it with its 4 activations
//! (`fmla`, one accumulator per column: 4 lanes of partial sums), and once per block the lanes are added
//! (`faddp` ×3 per 4 columns) and scaled: `y += s·2^−(8−bits)·Σ a·v + c·Σ a` (the correction only with zero points;
//! Σ a per row and block is summed alongside). A unit is one column quad of a panel, so that the register tile
//! (4 accumulators per row) fits beside the widened codes.

// Register tiles are indexed [row][column]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use super::ops::{field, store4};
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

use super::qsnbp8x4_int8::KR;
pub(crate) use super::qsnbp8x4_int8::NR;

/// One field of a quad's 16 code bytes (4 columns × 4 consecutive K, as int8 × 2^(8−bits)) as f32: column j's 4 K
/// values in vector j (SXTL / SXTL2 to int16 and int32, SCVTF).
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn columns_f32(x: int8x16_t) -> [float32x4_t; 4] {
    let (lo, hi) = (vmovl_s8(vget_low_s8(x)), vmovl_high_s8(x));
    [
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))),
        vcvtq_f32_s32(vmovl_high_s16(lo)),
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))),
        vcvtq_f32_s32(vmovl_high_s16(hi)),
    ]
}

/// Rows `0..R` of the tile × column quad `quad` (0 or 1) of `panel`, over all K, for `BITS`-bit codes. The f32
/// LHS rows start at `lhs` (stride `args.lhs_stride`), the output rows at `dst` (the tile's column 0).
///
/// # Safety
/// `args` satisfies the `RunArgs` contract for an `f32` LHS and a `qsnbp8x4_sf32_zpc` RHS of `BITS` bits; `lhs`
/// and `dst` are at a row of the tile with at least `R` rows from there; `panel` is one of the tile's panels and
/// its quad `quad` starts below `args.cols`.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn unit<const R: usize, const BITS: usize>(
    a: &RunArgs,
    panel: usize,
    quad: usize,
    lhs: *const f32,
    dst: *mut f32,
) {
    // SAFETY: forwarded.
    unsafe {
        if a.bl >= 32 {
            unit_c::<R, BITS, 32>(a, panel, quad, lhs, dst)
        } else {
            unit_c::<R, BITS, 16>(a, panel, quad, lhs, dst)
        }
    }
}

#[target_feature(enable = "neon")]
#[inline]
unsafe fn unit_c<const R: usize, const BITS: usize, const CHUNK: usize>(
    a: &RunArgs,
    panel: usize,
    quad: usize,
    lhs: *const f32,
    dst: *mut f32,
) {
    let cpb = 8 / BITS;
    let lane_len = CHUNK / cpb;
    let groups = lane_len / KR;
    let chunk_bytes = CHUNK * NR * BITS / 8;
    let has_zp = a.has_zp != 0;
    let unscale = 1.0 / (1u32 << (8 - BITS)) as f32;
    debug_assert!(a.bl.min(32) == CHUNK && R <= 4 && quad < 2 && panel * NR + 4 * quad < a.cols);
    // SAFETY: panel is one of the tile's, inside the packed weights (RunArgs contract).
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    let zero = vdupq_n_f32(0.0);
    let mut y = [zero; R];
    for b in 0..a.blocks {
        // SAFETY: block b's record of this panel.
        let rec = unsafe { prec.add(b * a.rhs_record) };
        let mut acc = [[zero; 4]; R];
        let mut asum = [zero; R];
        for c in 0..a.bl / CHUNK {
            // SAFETY: chunk c of the record's codes.
            let codes = unsafe { rec.add(c * chunk_bytes) };
            for grp in 0..groups {
                // SAFETY: group grp: 32 bytes inside the chunk; this quad's 16.
                let w = unsafe { vld1q_s8(codes.add(32 * grp + 16 * quad).cast()) };
                for l in 0..cpb {
                    let v = columns_f32(field::<BITS>(w, l));
                    let k = b * a.bl + c * CHUNK + l * lane_len + KR * grp;
                    for r in 0..R {
                        // SAFETY: row r < R of the tile: 4 values at k + 3 < k_packed.
                        let x = unsafe { vld1q_f32(lhs.add(r * a.lhs_stride + k)) };
                        for j in 0..4 {
                            acc[r][j] = vfmaq_f32(acc[r][j], v[j], x);
                        }
                        if has_zp {
                            asum[r] = vaddq_f32(asum[r], x);
                        }
                    }
                }
            }
        }
        // SAFETY: this quad's 4 f32 scales (and corrections, with zero points) of the record.
        let s = vmulq_n_f32(unsafe { vld1q_f32(rec.add(a.rhs_scales + 16 * quad).cast()) }, unscale);
        let z = if has_zp {
            // SAFETY: as above.
            unsafe { vld1q_f32(rec.add(a.rhs_zp + 16 * quad).cast()) }
        } else {
            zero
        };
        for r in 0..R {
            let dot = vpaddq_f32(vpaddq_f32(acc[r][0], acc[r][1]), vpaddq_f32(acc[r][2], acc[r][3]));
            y[r] = vfmaq_f32(y[r], dot, s);
            if has_zp {
                y[r] = vfmaq_n_f32(y[r], z, vaddvq_f32(asum[r]));
            }
        }
    }
    for r in 0..R {
        // SAFETY: row r of the tile; the quad's columns below cols are inside dst and bias.
        unsafe { store4(dst.add(r * a.dst_stride), a.bias, panel * NR + 4 * quad, a.cols, y[r]) };
    }
}
