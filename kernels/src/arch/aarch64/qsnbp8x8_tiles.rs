//! What the whole-loop `asm!` GEMMs over `qsi8dbp4x8` × `qsnbp8x8` share (the NEON i8mm and the SVE i8mm
//! kernels): the walk of a tile in asm tiles of three, two or one row groups with the NEON i8mm body for what
//! the asm does not take ([`run_tiles`]), the per-block column scales laid out per panel in the lane order of SMMLA's
//! 2 × 2 tiles ([`ColumnScales`]; the rows' are laid out once per call by the LHS packing, `PackedLhs::pairs`,
//! read through `RunArgs::lhs_pairs`); a whole tile's sums leave the asm straight into the output rows with the
//! bias (`super::ops::Dest`), another's through `super::ops::Sums` and `super::ops::store_groups`.
//!
//! Lane order of a 2 × 2 SMMLA tile: (r0 c0, r0 c1, r1 c0, r1 c1). A tile's sums leave the asm by rows: row r's
//! 8 columns at `Dest::ptr` + r·`Dest::stride` bytes.

use super::ops::{Dest, dest, for_each_block_weight, running_sums_fit, store_groups};
use super::qsnbp8x8_int8::{MR, NR, dup_pair, gemm_pairs};
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

/// f32 per block in [`ColumnScales`] (128 bytes: the asm's stride).
pub(crate) const PER_BLOCK: usize = 32;

/// An asm tile: the tile's row groups from `g` × `panel` over all K into a `Dest`, from the laid-out column
/// scales and the call's row pairs (`RunArgs::lhs_pairs`: group g's at [`row_pairs`]).
pub(crate) type Tile = unsafe fn(&RunArgs, usize, usize, &ColumnScales, Dest);

/// Block 0's record of the tile's row group `g` in the call's row pairs (`PackedLhs::pairs`: per block, per
/// group, 16 f32: [sa0 sa0 sa1 sa1 sa2 sa2 sa3 sa3] at 0 and sa·Σq the same way at 32 bytes; the next block's
/// `a.lhs_pairs_stride` bytes on).
pub(crate) fn row_pairs(a: &RunArgs, g: usize) -> *const f32 {
    a.lhs_pairs.wrapping_add(g * crate::pack::PAIR_ROW_F32)
}

/// Runs a tile of `a`: with `asm` (4-bit codes in blocks of whole 32-K chunks, and whatever the caller's asm
/// needs), the row groups in threes through `tile3` (when there is one; with `no_single` never leaving a last
/// group alone after them), what is left in twos through `tile2` and a last single group through `tile1`, with the panel's [`ColumnScales`] laid out for the tiles when
/// `col_scales` (else they read the records' scales themselves and get an empty one); without, every group
/// through the NEON i8mm body (2- and 8-bit codes, blocks of 16).
///
/// # Safety
/// The CPU has neon and i8mm, and whatever the tiles need when `asm` is set; `a` satisfies the `RunArgs`
/// contract with a `qsi8dbp4x8` LHS (the tile starts at a row group) and a `qsnbp8x8` RHS (f16 scales) of
/// `a.bits` ∈ {2, 4, 8}; with `asm`, `a.bits` = 4 and `a.bl` is a multiple of 32.
#[target_feature(enable = "neon,i8mm")]
pub(crate) unsafe fn run_tiles(
    a: &RunArgs,
    asm: bool,
    col_scales: bool,
    tile1: Tile,
    tile2: Tile,
    tile3: Option<Tile>,
    no_single: bool,
) {
    debug_assert!(!asm || (a.bits == 4 && a.bl.is_multiple_of(32)));
    // The row numerics' asm keeps running int32 sums over all K (see `ColumnScales`): only where they cannot
    // overflow.
    let asm = asm && (a.row == 0 || running_sums_fit(a));
    let groups = a.rows.div_ceil(MR);
    // The asm tiles: threes (with `tile3`), then twos; groups from `single` on run `tile1` (with asm) or the
    // NEON body (without). With `no_single`, a remainder of one group after threes takes one three back as two
    // twos (the SVE kernel, whose one-group tile is NEON's: 2048², M = 16, 3 + 1 groups 4.35 M instructions per Run,
    // 2 + 2 3.85 M; the NEON kernel's own 12-row tile is worth more than that: 5.69 M against 5.89 M).
    let (threes, twos) = match (asm, tile3) {
        (false, _) => (0, 0),
        (true, Some(_)) if no_single && groups % 3 == 1 && groups > 3 => (groups / 3 - 1, 2),
        (true, Some(_)) => (groups / 3, groups % 3 / 2),
        (true, None) => (0, groups / 2),
    };
    let single = 3 * threes + 2 * twos;
    assert!(!asm || !a.lhs_pairs.is_null(), "the asm tiles read the row pairs of a qsi8dbp4x8 pack");
    // Laid out per panel only for the asm tiles of several groups (none: the NEON body reads the records itself;
    // the one-group tile reads the records, or in the row numerics the Abel weights when they are laid out: per
    // panel they cost more than one group saves by them).
    let fill = col_scales && single > 0;
    let mut cols = ColumnScales::new(if fill { a.blocks } else { 0 });
    // One buffer for every asm tile: each writes its groups' rows before `store_groups` reads them.
    let mut out = [0f32; 96];
    for panel in 0..a.cols.div_ceil(NR) {
        if fill {
            // SAFETY: panel is one of the tile's (RunArgs contract).
            unsafe { cols.fill(a, panel) };
        }
        let units = (0..threes).map(|u| (3 * u, 3)).chain((0..twos).map(|u| (3 * threes + 2 * u, 2)));
        for (g, n) in units {
            let tile = if n == 3 { tile3.unwrap_or(tile2) } else { tile2 };
            let (dest, whole) = dest(a, panel, g, n, &mut out);
            // SAFETY: groups g..g + n are the tile's, panel is the tile's, the buffers hold every block (the row
            // pairs: the call's, RunArgs contract); the CPU runs `tile` (the caller's guarantee), which writes
            // the sums of its n groups' rows to `dest`: the tile's real output rows and columns, or `out`.
            unsafe { tile(a, panel, g, &cols, dest) };
            if !whole {
                // SAFETY: the tile's output rows and columns (store_groups stores only real rows and columns, of
                // the n groups the tile just wrote).
                unsafe { store_groups(a, panel, g, n, &out) };
            }
        }
        for g in single..groups {
            if asm {
                let (dest, whole) = dest(a, panel, g, 1, &mut out);
                // SAFETY: as for the tiles above, for group g alone.
                unsafe { tile1(a, panel, g, &cols, dest) };
                if !whole {
                    // SAFETY: the group's output rows and columns, which the tile just wrote.
                    unsafe { store_groups(a, panel, g, 1, &out) };
                }
                continue;
            }
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
/// In the row numerics the scales are the Abel weights of `super::ops::for_each_block_weight`, for tiles that keep
/// running sums (the asm's `rowsum` mode).
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
        let mut o = self.0.as_mut_ptr();
        let store = |rec: *const u8, [s0, s1]: [float32x4_t; 2]| {
            // SAFETY: the block's record: 8 f32 corrections with zero points; `o` is the block's 32 f32 of the buffer
            // (blocks × 32, one call per block); the corrections' half stays 0 without zero points.
            unsafe {
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
        };
        // SAFETY: the panel is the tile's (the caller's guarantee).
        unsafe { for_each_block_weight(a, panel, store) }
    }
}
