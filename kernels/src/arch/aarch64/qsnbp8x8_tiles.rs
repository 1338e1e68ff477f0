//! What the whole-loop `asm!` GEMMs over `qsi8dbp4x8` × `qsnbp8x8` share (the NEON i8mm 8×4 and the SVE i8mm
//! 8×8 kernels): the walk of a tile in pairs of row groups with the NEON i8mm body for what the asm does not
//! take ([`run_pairs`]), the per-block scales laid out once per call in the lane order of SMMLA's 2 × 2 tiles
//! ([`ColumnScales`], [`RowScales`]), and the store of a pair's 8 × 8 sums ([`store_8x8`]).
//!
//! Lane order of a 2 × 2 SMMLA tile: (r0 c0, r0 c1, r1 c0, r1 c1). A tile's sums leave the asm as 8 × 8 f32
//! `[row pair p][column half j]`, 8 each: column pair 2j in lanes 0..4, column pair 2j + 1 in lanes 4..8.

use super::ops::{scales8, store4};
use super::qsnbp8x8_int8::{MR, NR, dup_pair, gemm_pairs};
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

/// f32 per block in [`ColumnScales`] and in each row-group pair's [`RowScales`] (128 bytes: the asm's strides).
pub(crate) const PER_BLOCK: usize = 32;

/// The 8 × 8 sums of one pair of row groups × one panel (see the module doc for the order).
pub(crate) type Sums = [f32; 64];

/// An asm tile: row groups `g`, `g + 1` × `panel` over all K into the sums, from the call's laid-out scales.
pub(crate) type Tile = unsafe fn(&RunArgs, usize, usize, &ColumnScales, &[f32], &mut Sums);

/// Runs a tile of `a`: with `asm` (4-bit codes in blocks of whole 32-K chunks, and whatever the caller's asm
/// needs), every pair of row groups through `tile` and a last single group through the NEON i8mm body; without,
/// every group through the NEON i8mm body (2- and 8-bit codes, blocks of 16).
///
/// # Safety
/// The CPU has neon and i8mm, and whatever `tile` needs when `asm` is set; `a` satisfies the `RunArgs` contract
/// with a `qsi8dbp4x8` LHS (the tile starts at a row group) and a `qsnbp8x8` RHS (f16 scales) of `a.bits` ∈
/// {2, 4, 8}; with `asm`, `a.bits` = 4 and `a.bl` is a multiple of 32.
#[target_feature(enable = "neon,i8mm")]
pub(crate) unsafe fn run_pairs(a: &RunArgs, asm: bool, tile: Tile) {
    debug_assert!(!asm || (a.bits == 4 && a.bl.is_multiple_of(32)));
    let groups = a.rows.div_ceil(MR);
    let pairs = if asm { groups / 2 } else { 0 };
    let rows = RowScales::new(a, pairs);
    // Laid out per panel only for the asm tiles (none: the NEON body reads the records itself).
    let mut cols = ColumnScales::new(if pairs > 0 { a.blocks } else { 0 });
    for panel in 0..a.cols.div_ceil(NR) {
        if pairs > 0 {
            // SAFETY: panel is one of the tile's (RunArgs contract).
            unsafe { cols.fill(a, panel) };
        }
        for gp in 0..pairs {
            let mut out = [0f32; 64];
            // SAFETY: groups 2gp, 2gp + 1 are the tile's, panel is the tile's, the buffers hold every block; the
            // CPU runs `tile` (the caller's guarantee).
            unsafe { tile(a, panel, 2 * gp, &cols, rows.pair(gp), &mut out) };
            // SAFETY: the tile's output rows and columns (store_8x8 stores only real rows and columns).
            unsafe { store_8x8(a, panel, 2 * gp, &out) };
        }
        for g in 2 * pairs..groups {
            let real = (a.rows - g * MR).min(MR);
            // SAFETY: row group g is the tile's (whole, padding rows zero), so are its scales, sums and the output
            // rows of its `real` rows (RunArgs contract); panel is the tile's; the CPU has i8mm.
            unsafe {
                if real > 2 {
                    crate::arch::dispatch!(gemm_pairs::<2>(a, panel, 2 * g, real); bits(a.bits))
                } else {
                    crate::arch::dispatch!(gemm_pairs::<1>(a, panel, 2 * g, real); bits(a.bits))
                }
            }
        }
    }
}

/// One panel's column scales per block in the lanes of the 2 × 2 tiles: [s0 s1 s0 s1], [s2 s3 s2 s3], [s4 s5 s4
/// s5], [s6 s7 s6 s7] (times 2^−4: the 4-bit field's factor, exact, so the asm converts its int32 sums without
/// a fixed-point shift), then the zero-point corrections c in the same order (when the weights have them).
pub(crate) struct ColumnScales(Vec<f32>);

impl ColumnScales {
    fn new(blocks: usize) -> ColumnScales {
        ColumnScales(vec![0f32; blocks * PER_BLOCK])
    }

    /// Block 0's scales; block b's are `PER_BLOCK` f32 further.
    pub(crate) fn as_ptr(&self) -> *const f32 {
        self.0.as_ptr()
    }

    /// Holds every block of a call with `blocks` blocks.
    pub(crate) fn holds(&self, blocks: usize) -> bool {
        self.0.len() == blocks * PER_BLOCK
    }

    /// # Safety
    /// `panel` is one of the tile's panels in `a`'s `qsnbp8x8` layout (f16 scales).
    #[target_feature(enable = "neon")]
    unsafe fn fill(&mut self, a: &RunArgs, panel: usize) {
        // SAFETY: the panel's records (RunArgs contract).
        let mut rec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
        let mut o = self.0.as_mut_ptr();
        for _ in 0..a.blocks {
            // SAFETY: the block's record: 8 f16 scales, and 8 f32 corrections with zero points; `o` is the block's
            // 32 f32 of the buffer (blocks × 32); the corrections' half stays 0 without zero points.
            unsafe {
                let s = scales8(rec.add(a.rhs_scales));
                let (s0, s1) = (vmulq_n_f32(s[0], 1.0 / 16.0), vmulq_n_f32(s[1], 1.0 / 16.0));
                vst1q_f32(o, dup_pair::<0>(s0));
                vst1q_f32(o.add(4), dup_pair::<1>(s0));
                vst1q_f32(o.add(8), dup_pair::<0>(s1));
                vst1q_f32(o.add(12), dup_pair::<1>(s1));
                if a.has_zp != 0 {
                    let (c0, c1) = (vld1q_f32(rec.add(a.rhs_zp).cast()), vld1q_f32(rec.add(a.rhs_zp + 16).cast()));
                    vst1q_f32(o.add(16), dup_pair::<0>(c0));
                    vst1q_f32(o.add(20), dup_pair::<1>(c0));
                    vst1q_f32(o.add(24), dup_pair::<0>(c1));
                    vst1q_f32(o.add(28), dup_pair::<1>(c1));
                }
                o = o.add(PER_BLOCK);
            }
            rec = rec.wrapping_add(a.rhs_record);
        }
    }
}

/// Per pair of row groups and block: for its 4 row pairs (r0, r1) [sa0 sa0 sa1 sa1] (activation scales; 1 in
/// the row numerics), then for the same 4 [q0 q0 q1 q1] (sa·Σq, the zero-point correction's row factor): 16-byte
/// quadwords at 16·p and 64 + 16·p bytes.
pub(crate) struct RowScales {
    v: Vec<f32>,
    blocks: usize,
}

impl RowScales {
    fn new(a: &RunArgs, pairs: usize) -> RowScales {
        let mut v = vec![0f32; pairs * a.blocks * PER_BLOCK];
        for (i, out) in v.chunks_exact_mut(PER_BLOCK).enumerate() {
            let (gp, b) = (i / a.blocks, i % a.blocks);
            for p in 0..4 {
                let g = 2 * gp + p / 2;
                let at = g * MR * a.blocks + b * MR + 2 * (p % 2);
                let rs: [f32; 2] = core::array::from_fn(|h| {
                    // SAFETY: row 2·(p % 2) + h of group g of the tile, block b (group-major scales; padding rows
                    // hold 0); the row numerics' scales are 1 and not read.
                    if a.row != 0 { 1.0 } else { unsafe { *a.lhs_scale.add(at + h) } }
                });
                let q: [f32; 2] = core::array::from_fn(|h| {
                    if a.has_zp == 0 {
                        return 0.0;
                    }
                    // SAFETY: as above (Σq is laid out as the scales).
                    let s = unsafe { *a.lhs_sum.add(at + h) } as f32;
                    if a.row != 0 { s } else { rs[h] * s }
                });
                out[4 * p..4 * p + 4].copy_from_slice(&[rs[0], rs[0], rs[1], rs[1]]);
                out[16 + 4 * p..16 + 4 * p + 4].copy_from_slice(&[q[0], q[0], q[1], q[1]]);
            }
        }
        RowScales { v, blocks: a.blocks }
    }

    /// Row-group pair `gp`'s blocks.
    fn pair(&self, gp: usize) -> &[f32] {
        &self.v[gp * self.blocks * PER_BLOCK..(gp + 1) * self.blocks * PER_BLOCK]
    }
}

/// Stores a tile's sums of row groups `g`, `g + 1` × `panel` (plus bias), only the tile's real rows and the
/// columns below `a.cols`.
///
/// # Safety
/// `a` satisfies the `RunArgs` contract; groups `g`, `g + 1` and `panel` are the tile's.
#[target_feature(enable = "neon")]
unsafe fn store_8x8(a: &RunArgs, panel: usize, g: usize, out: &Sums) {
    for p in 0..4 {
        for h in 0..2 {
            let r = g * MR + 2 * p + h;
            if r >= a.rows {
                return;
            }
            for j in 0..2 {
                let col = panel * NR + 4 * j;
                if col >= a.cols {
                    break;
                }
                // SAFETY: the 8 lanes of [row pair p][column half j] inside `out`.
                let (s0, s1) = unsafe {
                    let at = out.as_ptr().add((2 * p + j) * 8);
                    (vld1q_f32(at), vld1q_f32(at.add(4)))
                };
                let v = if h == 0 {
                    vcombine_f32(vget_low_f32(s0), vget_low_f32(s1))
                } else {
                    vcombine_f32(vget_high_f32(s0), vget_high_f32(s1))
                };
                // SAFETY: row r < rows of the tile; columns below cols are inside dst and bias.
                unsafe { store4(a.dst.add(r * a.dst_stride), a.bias, col, a.cols, v) };
            }
        }
    }
}
