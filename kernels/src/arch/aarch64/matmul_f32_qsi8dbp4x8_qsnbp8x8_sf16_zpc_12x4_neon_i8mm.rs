//! int8-activation GEMM for prefill, i8mm: 12 rows (three `qsi8dbp4x8` row groups: six SMMLA row pairs) × 4
//! columns (two column pairs of a `qsnbp8x8` panel) per register tile, and 8 rows × 4 columns for a last pair
//! of groups; the whole block loop of a tile is one `asm!` block, so nothing leaves the registers: 12 int32 2 × 2
//! tiles for the block (v0–v11), 12 f32 2 × 2 sums (v12–v23), one 64-byte group of the chunk's codes (v24, v25),
//! one field at a time (v26, v27), a row-pair pair of activations (v28, v29), the field mask (v30). A panel is
//! two such tiles (column halves); a tile's activations are read once per half. A last single row group (M ≤ 7,
//! and the last group of a tile of 3k + 1 groups) runs the one-group asm tile `tile_4x8`: 4 rows × the whole
//! 8-column panel, each run's activations shared by all 4 column pairs (8 + 8 accumulators). 2- and 8-bit codes
//! and blocks of 16 run the intrinsic 4 × 8 body of the same layout (`super::qsnbp8x8_int8::gemm_pairs`).
//!
//! Why 12 × 4: per 32 K the codes of 4 columns (2 loads, 8 field extractions) serve 6 row pairs, and the
//! per-block bookkeeping (loops, scale loads, branches) is shared by 48 SMMLA. 12 + 12 accumulators are what
//! fits beside the operands (16 × 4 or 8 × 8 need 32 accumulators); as intrinsics LLVM spilled at 12 × 8 rows,
//! in asm nothing spills.
//!
//! Instruction budget per 32 K (one block of 32) × 4 columns × 12 rows, 4-bit codes, symmetric, per-block
//! numerics, from the text (per SMMLA: / 48): 48 SMMLA; 2 + 12 LDP (codes, activations, post-indexed: no
//! pointer arithmetic in the chunk; 0.29); 8 field extractions (SHL / AND, 0.17); per block 12 SCVTF, 12 FMUL
//! (column × row scales: the per-block activation scale's cost), 12 FMLA, 3 LD1 of 64 zero bytes (zeroing: 4
//! accumulators per load, from `sve_asm::ZEROS`; 12 MOVI took a vector-pipe slot each), 3 LDP (row scales), the
//! half's column scales by LD2R (the pairs (s0 s1), (s2 s3), each in both halves of a register) + 2 FCVTL (0.88;
//! the row numerics 0.52, below; zero points add one LD2R of the corrections, 3 LDP and 12 FMLA); 3 pointer
//! steps, SUBS + B.NE (0.10). Total 117 = 2.44 per SMMLA (the 8 × 4 tile: 83 = 2.59; with MOVI
//! zeroing 126 and 89). The numerics, the zero points and
//! blocks of one chunk are compile-time modes of the text (eight asm blocks per tile), so the loop has no
//! branches on them. Measured (`scripts/aarch64/icount-kernel.sh`, 2048 × 2048, qemu -cpu max,sve=off, the
//! whole kernel: storing the sums included): 2.79 per SMMLA at M = 32 and at M = 128 (2.95 and 2.83 while each
//! tile laid out its own row scales, before the row pairs moved to the LHS packing), 2.94 at M = 64 on SmolLM2's
//! 576 × 192 (18 blocks); earlier, before that move: 3.42 with zero points (M = 32), the row numerics 2.54 and
//! 2.68. The intrinsic 4 × 8 tile it replaces: 3.37 (block, M = 32).
//!
//! The row numerics (`rowsum` mode) keep running int32 sums over all blocks and weigh them by the differences of
//! the column scales (`ops::for_each_block_weight`: Σ s_b·dot_b summed by parts, laid out per panel in the lanes'
//! order by `ColumnScales`), so their block epilogue is 12 SCVTF (into v26–v29: the sums go on), 12 FMLA and one
//! LDP of the half's weights: 25 per 48 SMMLA (0.52; restarting the sums, it was 12 SCVTF, 12 FMLA, 12 MOVI and
//! the record's scales LDR + FCVTL + 2 DUP: 0.83). Total 100 = 2.08 per SMMLA. Measured per call (2048 × 2048,
//! max,sve=off, the first call, which also computes the weights' column sums once: a GEMV over ones): M = 32
//! 12034083 → 11127011 instructions (−7.5%), M = 64 22414627 → 20597475 (−8.1%), with zero points (M = 32)
//! 13885475 → 13109731 (−5.6%); M = 4 (one group per panel: the one-group tile reads the records and restarts, as
//! a per-panel layout costs more than one group saves by it) unchanged.
//!
//! The one-group tile per 32 K × 8 columns × 4 rows: 32 SMMLA; 2 LD1 of 64 code bytes and 4 LDP of activations,
//! post-indexed (0.19); 16 field extractions (0.5: each field serves one row pair less than in the 12-row tile);
//! per block 8 SCVTF, 8 FMUL, 8 FMLA, 2 LD1 of zeros (8 MOVI before), the 8 column scales LD4R (the 4 pairs, each in both halves of a
//! register) + 4 FCVTL, the row pairs' LDP, 4 for pointers and loop (1.09). Total 90 = 2.81 per SMMLA (96 with MOVI) (with zero
//! points + 10: one LD4R of the corrections as pairs, an LDP, 8 FMLA); measured at M = 4 (2048 × 2048,
//! max,sve=off, the whole kernel): 3.09 per SMMLA (3.15 with LDR + FCVTL + FCVTL2 + 4 DUP, and with zero points
//! 15 instructions more per block), against 3.54 for the intrinsic body it replaces there. Whole call at M = 4
//! (`kernel_icount`): 1693844 → 1661050 instructions, with zero points 1939620 → 1824890; at M = 32 11918362 →
//! 11818756 and 13524074 → 13227776.
//!
//! The rows' activation scales and sa·Σq are laid out once per call in the tiles' lane order by the LHS packing
//! (`PackedLhs::pairs`, read through `RunArgs::lhs_pairs`, as for the SVE 8 × 8 kernel); the column scales (f16) and corrections
//! are read from each block's record (LDR + FCVTL + 2 DUP per half-tile and block: cheaper than laying them out
//! per panel once M is below ~100 rows, about even at M = 128). The epilogue is `y += f32(acc)·(s·sa) [+ c·sq]`
//! (row numerics: `y += f32(S)·w [+ c·sq]` over the running sums S, above), `ops::block_epilogue`'s formula, with f32(acc) converted with 4
//! fraction bits (the fields' factor 16, exact). The sums leave by rows (ZIP1 / ZIP2 of the 2 × 2 tiles).
//!
//! LHS: `qsi8dbp4x8`; RHS: `qsnbp8x8_sf16_zpc`. Features: neon, i8mm. No over-reads (a tile's groups are always
//! groups of the call's tile).

use super::ops::Dest;
use super::qsnbp8x8_int8::MR;
use super::qsnbp8x8_tiles::{ColumnScales, row_pairs, run_tiles};
use super::sve_asm::{ZEROS, asm_modes, chunk_loop, ld1_zero, movi_zero, vector_asm};
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon and i8mm; `args` satisfies the `RunArgs` contract with a `qsi8dbp4x8` LHS (the tile starts
/// at a row group) and a `qsnbp8x8` RHS (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,i8mm")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    let asm = a.bits == 4 && a.bl.is_multiple_of(32);
    // SAFETY: the caller's guarantee; the asm tiles need only neon and i8mm.
    // The row numerics' tiles read the laid-out Abel weights (`ColumnScales`); the per-block ones the records.
    unsafe { run_tiles(a, asm, a.row != 0, tile_4x8, tile_8x8, Some(tile_12x8), false) }
}

/// The asm text of one tile of G row groups (`$g`: the group's activation operand `{a$g}`, its 4 int32
/// accumulators `$c*` = [row pair 0: column pair 0, 1; row pair 1: 0, 1], its 4 f32 sums `$s*` in the same
/// order, the offsets of its row scales `$ro` and sa·Σq `$qo` from the tile's first group's record of a block in the
/// row pairs (64 bytes per group)) × 4 columns (two column pairs), over all blocks, for one mode: `$act` `block` (y +=
/// f32(acc)·(s·sa)) or `row` (y += f32(acc)·s), `$zp` `zp` (+ c·sq) or `nozp`, `$chunks` `one` (blocks of 32 K:
/// no chunk loop) or `many`. Registers: codes v24, v25 (one 64-byte group of the chunk at a time: column pairs
/// 2·half, 2·half + 1), fields v26, v27, a row-pair pair of activations v28, v29, the field mask v30; in the
/// epilogue v24, v25 hold the column scales (then corrections), v26, v27 a group's row vectors and v28, v29 the
/// products. Pointers advance by post-indexed loads: `{rec}` by 128 per chunk (then `{rskip}` to the next
/// record), each `{a$g}` by 128 per chunk at its first load (the other runs at negative offsets).
#[rustfmt::skip]
macro_rules! tile_text {
    ($act:ident $zp:ident $chunks:ident;
     $($g:literal [$c0:literal $c1:literal $c2:literal $c3:literal] [$s0:literal $s1:literal $s2:literal $s3:literal]
       $ro:literal $qo:literal);+) => {
        concat!(
            ".arch_extension i8mm\n",
            "// {zeros}\n",
            "movi v30.16b, #0xf0\n",
            $("movi v", $c0, ".4s, #0\n", "movi v", $c1, ".4s, #0\n", "movi v", $c2, ".4s, #0\n",
              "movi v", $c3, ".4s, #0\n", "movi v", $s0, ".4s, #0\n", "movi v", $s1, ".4s, #0\n",
              "movi v", $s2, ".4s, #0\n", "movi v", $s3, ".4s, #0\n",)+
            // Block loop.
            "2:\n",
            chunk_loop!(head $chunks),
            // 32 K in two 64-byte groups of 8 columns × 8 K × 2 fields; field l of group h is run 2l + h of the
            // chunk (activations at 32·run bytes in each row group): the low field (`shl #4`) and the high one
            // (`and #0xf0`), both 16 × the signed code.
            "ldp q24, q25, [{rec}], #128\n",
            "shl v26.16b, v24.16b, #4\n", "shl v27.16b, v25.16b, #4\n",
            $(tile_text!(@run $g "], #128" $c0 $c1 $c2 $c3),)+
            "and v26.16b, v24.16b, v30.16b\n", "and v27.16b, v25.16b, v30.16b\n",
            $(tile_text!(@run $g ", #-64]" $c0 $c1 $c2 $c3),)+
            "ldp q24, q25, [{rec}, #-64]\n",
            "shl v26.16b, v24.16b, #4\n", "shl v27.16b, v25.16b, #4\n",
            $(tile_text!(@run $g ", #-96]" $c0 $c1 $c2 $c3),)+
            "and v26.16b, v24.16b, v30.16b\n", "and v27.16b, v25.16b, v30.16b\n",
            $(tile_text!(@run $g ", #-32]" $c0 $c1 $c2 $c3),)+
            chunk_loop!(tail $chunks),
            // Block epilogue: y += f32(acc)·(s·sa) [+ c·sq] (the row numerics: y += f32(S)·w [+ c·sq] over the
            // running sums S, see `ColumnScales`). The half's 4 column scales as [s0 s1 s0 s1], [s2 s3 s2 s3].
            tile_text!(@cols $act),
            $(tile_text!(@scale $act $c0 $c1 $c2 $c3 $s0 $s1 $s2 $s3 $ro),)+
            tile_text!(@zp_head $zp),
            $(tile_text!(@zp $zp $s0 $s1 $s2 $s3 $qo),)+
            $(tile_text!(@restart $act $c0 $c1 $c2 $c3),)+
            "add {rec}, {rec}, {rskip}\n",
            tile_text!(@rowstep $act $zp),
            "subs {nb}, {nb}, #1\n",
            "b.ne 2b\n",
            // The sums by rows: row r's 4 columns (row pair r / 2's half r % 2 of both column pairs: ZIP1 / ZIP2
            // of the two 2 × 2 tiles' 64-bit halves) plus the half's 4 bias values, `{dstride}` bytes apart from
            // `{dst}` (its half's columns).
            "ldr q30, [{bias}]\n",
            $("zip1 v26.2d, v", $s0, ".2d, v", $s1, ".2d\n", "zip2 v27.2d, v", $s0, ".2d, v", $s1, ".2d\n",
              "zip1 v28.2d, v", $s2, ".2d, v", $s3, ".2d\n", "zip2 v29.2d, v", $s2, ".2d, v", $s3, ".2d\n",
              "fadd v26.4s, v26.4s, v30.4s\n", "fadd v27.4s, v27.4s, v30.4s\n",
              "fadd v28.4s, v28.4s, v30.4s\n", "fadd v29.4s, v29.4s, v30.4s\n",
              "st1 {{v26.4s}}, [{dst}], {dstride}\n", "st1 {{v27.4s}}, [{dst}], {dstride}\n",
              "st1 {{v28.4s}}, [{dst}], {dstride}\n", "st1 {{v29.4s}}, [{dst}], {dstride}\n",)+
        )
    };
    // One run of 8 K of one group (`$at`: how its activations are addressed after `[{a$g}`): its two row pairs
    // × the two fields.
    (@run $g:literal $at:literal $c0:literal $c1:literal $c2:literal $c3:literal) => {
        concat!(
            "ldp q28, q29, [{a", $g, "}", $at, "\n",
            "smmla v", $c0, ".4s, v28.16b, v26.16b\n", "smmla v", $c1, ".4s, v28.16b, v27.16b\n",
            "smmla v", $c2, ".4s, v29.16b, v26.16b\n", "smmla v", $c3, ".4s, v29.16b, v27.16b\n",
        )
    };
    // The per-block numerics read the half's column scales from the record (f16, from `{sp}`, which steps by a
    // record per block: one LD2R puts the pairs (s0 s1), (s2 s3) in both halves of a register each) and convert the int32 sums (16 × the products: the fields' factor) with 4 fraction bits (exact); the row numerics
    // read the laid-out Abel weights (`{cs}`, times 2^−4 already: 128 bytes per block).
    (@cols block) => {
        concat!("ld2r {{v24.2s, v25.2s}}, [{sp}], {rrec}\n", "fcvtl v24.4s, v24.4h\n", "fcvtl v25.4s, v25.4h\n",
                "// {cs}\n")
    };
    (@cols rowsum) => { concat!("ldp q24, q25, [{cs}], #128\n", "// {sp} {rrec}\n") };
    // The row pairs' step to the next block: the row numerics read them only for the zero points' sa·Σq.
    (@rowstep block $zp:ident) => { "add {rowp}, {rowp}, {rbytes}\n" };
    (@rowstep $act:ident zp) => { "add {rowp}, {rowp}, {rbytes}\n" };
    (@rowstep $act:ident nozp) => { "// {rowp} {rbytes}\n" };
    // The per-block numerics restart the block's int32 sums; the row numerics keep them running.
    (@restart block $c0:literal $c1:literal $c2:literal $c3:literal) => { ld1_zero!([$c0 $c1 $c2 $c3]) };
    (@restart rowsum $c0:literal $c1:literal $c2:literal $c3:literal) => { "" };
    // The block's int32 sums converted in place (they restart after the block).
    (@scale block $c0:literal $c1:literal $c2:literal $c3:literal $s0:literal $s1:literal $s2:literal $s3:literal
     $ro:literal) => {
        concat!(
            "scvtf v", $c0, ".4s, v", $c0, ".4s, #4\n", "scvtf v", $c1, ".4s, v", $c1, ".4s, #4\n",
            "scvtf v", $c2, ".4s, v", $c2, ".4s, #4\n", "scvtf v", $c3, ".4s, v", $c3, ".4s, #4\n",
            "ldp q26, q27, [{rowp}, #", $ro, "]\n",
            "fmul v28.4s, v24.4s, v26.4s\n", "fmul v29.4s, v25.4s, v26.4s\n",
            "fmla v", $s0, ".4s, v", $c0, ".4s, v28.4s\n", "fmla v", $s1, ".4s, v", $c1, ".4s, v29.4s\n",
            "fmul v28.4s, v24.4s, v27.4s\n", "fmul v29.4s, v25.4s, v27.4s\n",
            "fmla v", $s2, ".4s, v", $c2, ".4s, v28.4s\n", "fmla v", $s3, ".4s, v", $c3, ".4s, v29.4s\n",
        )
    };
    (@scale rowsum $c0:literal $c1:literal $c2:literal $c3:literal $s0:literal $s1:literal $s2:literal $s3:literal
     $ro:literal) => {
        // The running sums converted into v26–v29 (they go on after the block).
        concat!(
            "scvtf v26.4s, v", $c0, ".4s\n", "scvtf v27.4s, v", $c1, ".4s\n",
            "scvtf v28.4s, v", $c2, ".4s\n", "scvtf v29.4s, v", $c3, ".4s\n",
            "fmla v", $s0, ".4s, v26.4s, v24.4s\n", "fmla v", $s1, ".4s, v27.4s, v25.4s\n",
            "fmla v", $s2, ".4s, v28.4s, v24.4s\n", "fmla v", $s3, ".4s, v29.4s, v25.4s\n",
        )
    };
    // The half's 4 corrections (f32, from `{zc}`, a record per block) as [c0 c1 c0 c1], [c2 c3 c2 c3]: one LD2R.
    (@zp_head zp) => { "ld2r {{v24.2d, v25.2d}}, [{zc}], {rrec}\n" };
    (@zp_head nozp) => { "// {zc}\n" };
    (@zp zp $s0:literal $s1:literal $s2:literal $s3:literal $qo:literal) => {
        concat!(
            "ldp q26, q27, [{rowp}, #", $qo, "]\n",
            "fmla v", $s0, ".4s, v24.4s, v26.4s\n", "fmla v", $s1, ".4s, v25.4s, v26.4s\n",
            "fmla v", $s2, ".4s, v24.4s, v27.4s\n", "fmla v", $s3, ".4s, v25.4s, v27.4s\n",
        )
    };
    (@zp nozp $s0:literal $s1:literal $s2:literal $s3:literal $qo:literal) => { "" };
}

/// The asm tile of G row groups from `g` (`$groups`: `tile_text!`'s per-group operands; `$ga = $gi`: the groups'
/// activation operands and indices) × the 8 columns of `panel`, as two halves of 4 columns, in one of
/// `tile_text!`'s eight modes chosen per call.
macro_rules! tile_fn {
    ($(#[$doc:meta])* $name:ident, $gn:literal, [$($ga:ident = $gi:literal),+], $($groups:tt)+) => {
        $(#[$doc])*
        /// # Safety
        /// The CPU has neon and i8mm; `a` satisfies the `RunArgs` contract for a `qsi8dbp4x8` LHS and a 4-bit
        /// `qsnbp8x8` RHS with blocks of whole 32-K chunks; the tile's groups from `g` and `panel` are the
        /// tile's (and so are their row pairs, `a.lhs_pairs`).
        #[target_feature(enable = "neon,i8mm")]
        unsafe fn $name(a: &RunArgs, panel: usize, g: usize, cols: &ColumnScales, dest: Dest) {
            debug_assert!(a.bits == 4 && a.bl.is_multiple_of(32) && a.blocks > 0);
            debug_assert!((a.row == 0 || cols.holds(a.blocks)) && !a.lhs_pairs.is_null());
            let chunks = a.bl / 32;
            for half in 0..2 {
                let rec = a.rhs.wrapping_add(panel * a.rhs_panel_stride + 32 * half);
                // One mode's asm block: the operands are the same in all eight.
                macro_rules! tile_asm {
                    ($act:ident $zp:ident $chunks:ident) => {
                        // SAFETY: reads: per block, the record's codes of column pairs 2·half, 2·half + 1 (32
                        // bytes of each of a chunk's 64-byte groups, inside the record), each group's 128 bytes
                        // per chunk (4 runs of 8 K × 4 rows) and the buffers' scales per block, for a.blocks
                        // blocks: all inside the tile's buffers (the caller's guarantee); the pointers step past
                        // the last block without reading there; the half's 4 f32 of `dest.bias`. Writes: the
                        // tile's rows × the half's 4 columns of `dest` (the caller's guarantee). Every vector register the block touches is declared; d8–d15 (callee-saved) are
                        // clobbered and saved by the compiler; the flags are clobbered (no preserves_flags); no
                        // stack use.
                        // The accumulators restart from the 64 bytes of `sve_asm::ZEROS` (a static).
                        unsafe {
                            vector_asm!(
                                [] tile_text!($act $zp $chunks; $($groups)+),
                                rec = inout(reg) rec => _,
                                rskip = in(reg) a.rhs_record - 128 * chunks,
                                chunks = in(reg) chunks,
                                nb = inout(reg) a.blocks => _,
                                $($ga = inout(reg) a.lhs.wrapping_add((g + $gi) * MR * a.lhs_stride) => _,)+
                                sp = inout(reg) rec.wrapping_add(a.rhs_scales - 24 * half) => _,
                                zc = inout(reg) rec.wrapping_add(a.rhs_zp - 16 * half) => _,
                                rrec = in(reg) a.rhs_record,
                                rowp = inout(reg) row_pairs(a, g) => _,
                                rbytes = in(reg) a.lhs_pairs_stride,
                                dst = inout(reg) dest.ptr.wrapping_add(4 * half) => _,
                                dstride = in(reg) dest.stride,
                                bias = in(reg) dest.bias.wrapping_add(4 * half),
                                cs = inout(reg) cols.as_ptr().wrapping_add(8 * half) => _,
                                cc = out(reg) _,
                                zeros = in(reg) ZEROS.0.as_ptr(),
                            )
                        }
                    };
                }
                asm_modes!(tile_asm; rowsum; a.row != 0, a.has_zp != 0, chunks == 1)
            }
        }
    };
}

tile_fn!(
    /// Row groups `g`, `g + 1`: 8 int32 accumulators (v0–v7), 8 f32 sums (v12–v19), 32 SMMLA per 32 K.
    tile_8x8, 2, [a0 = 0, a1 = 1],
    0 [0 1 2 3] [12 13 14 15] 0 32;
    1 [4 5 6 7] [16 17 18 19] 64 96
);

tile_fn!(
    /// Row groups `g` .. `g + 3`: 12 int32 accumulators (v0–v11), 12 f32 sums (v12–v23), 48 SMMLA per 32 K.
    tile_12x8, 3, [a0 = 0, a1 = 1, a2 = 2],
    0 [0 1 2 3] [12 13 14 15] 0 32;
    1 [4 5 6 7] [16 17 18 19] 64 96;
    2 [8 9 10 11] [20 21 22 23] 128 160
);

/// The asm text of the one-group tile (`tile_4x8`): one row group (two row pairs) × the whole 8-column panel (four
/// column pairs) over all blocks, for one mode (`$act`, `$zp`, `$chunks` as in `tile_text!`). Registers: int32
/// accumulators v0–v7 (row pair p, column pair c: v[4p + c]), f32 sums v8–v15 (the same order), one 64-byte group
/// of the chunk's codes v16–v19 (column pairs 0..3), one field of it v20–v23, a run's two row pairs v24, v25, the
/// field mask v26. The activations of a run serve all 8 columns (the two-group tiles read them once per half).
/// In the epilogue v20–v23 hold the column pairs' scales (then corrections), v16–v19 products, v24, v25 the row
/// pairs' factors.
#[rustfmt::skip]
macro_rules! tile1_text {
    ($act:ident $zp:ident $chunks:ident) => {
        concat!(
            ".arch_extension i8mm\n",
            "// {zeros}\n",
            "movi v26.16b, #0xf0\n",
            movi_zero!("0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "14" "15"),
            // Block loop.
            "2:\n",
            chunk_loop!(head $chunks),
            // Group h of the chunk (64 bytes: 8 columns × 8 K × 2 fields), field l: run 2l + h (activations at
            // 32·run bytes of the group's chunk).
            "ld1 {{v16.16b, v17.16b, v18.16b, v19.16b}}, [{rec}], #64\n",
            "shl v20.16b, v16.16b, #4\n", "shl v21.16b, v17.16b, #4\n",
            "shl v22.16b, v18.16b, #4\n", "shl v23.16b, v19.16b, #4\n",
            tile1_text!(@run "], #128"),
            "and v20.16b, v16.16b, v26.16b\n", "and v21.16b, v17.16b, v26.16b\n",
            "and v22.16b, v18.16b, v26.16b\n", "and v23.16b, v19.16b, v26.16b\n",
            tile1_text!(@run ", #-64]"),
            "ld1 {{v16.16b, v17.16b, v18.16b, v19.16b}}, [{rec}], #64\n",
            "shl v20.16b, v16.16b, #4\n", "shl v21.16b, v17.16b, #4\n",
            "shl v22.16b, v18.16b, #4\n", "shl v23.16b, v19.16b, #4\n",
            tile1_text!(@run ", #-96]"),
            "and v20.16b, v16.16b, v26.16b\n", "and v21.16b, v17.16b, v26.16b\n",
            "and v22.16b, v18.16b, v26.16b\n", "and v23.16b, v19.16b, v26.16b\n",
            tile1_text!(@run ", #-32]"),
            chunk_loop!(tail $chunks),
            // Block epilogue (as `tile_text!`'s): the 8 column scales (f16, from `{sp}`: one LD4R and 4 FCVTL) as
            // [s0 s1 s0 s1], [s2 s3 s2 s3], [s4 s5 s4 s5], [s6 s7 s6 s7]; the int32 sums converted with 4 fraction bits.
            tile1_text!(@cols $act),
            tile1_text!(@scale $act),
            tile1_text!(@zp $zp),
            tile1_text!(@restart $act),
            "add {rec}, {rec}, {rskip}\n",
            tile_text!(@rowstep $act $zp),
            "subs {nb}, {nb}, #1\n",
            "b.ne 2b\n",
            // The sums by rows: row 2p + i's 8 columns are half i of the four 2 × 2 tiles of row pair p; plus the
            // 8 bias values, `{dstride}` bytes apart from `{dst}`.
            "ldp q24, q25, [{bias}]\n",
            "zip1 v16.2d, v8.2d, v9.2d\n", "zip1 v17.2d, v10.2d, v11.2d\n",
            "zip2 v18.2d, v8.2d, v9.2d\n", "zip2 v19.2d, v10.2d, v11.2d\n",
            "zip1 v20.2d, v12.2d, v13.2d\n", "zip1 v21.2d, v14.2d, v15.2d\n",
            "zip2 v22.2d, v12.2d, v13.2d\n", "zip2 v23.2d, v14.2d, v15.2d\n",
            "fadd v16.4s, v16.4s, v24.4s\n", "fadd v17.4s, v17.4s, v25.4s\n",
            "fadd v18.4s, v18.4s, v24.4s\n", "fadd v19.4s, v19.4s, v25.4s\n",
            "fadd v20.4s, v20.4s, v24.4s\n", "fadd v21.4s, v21.4s, v25.4s\n",
            "fadd v22.4s, v22.4s, v24.4s\n", "fadd v23.4s, v23.4s, v25.4s\n",
            "st1 {{v16.4s, v17.4s}}, [{dst}], {dstride}\n", "st1 {{v18.4s, v19.4s}}, [{dst}], {dstride}\n",
            "st1 {{v20.4s, v21.4s}}, [{dst}], {dstride}\n", "st1 {{v22.4s, v23.4s}}, [{dst}], {dstride}\n",
        )
    };
    // One run of 8 K (`$at`: how its activations are addressed after `[{a0}`): both row pairs × the 4 column pairs.
    (@run $at:literal) => {
        concat!(
            "ldp q24, q25, [{a0}", $at, "\n",
            "smmla v0.4s, v24.16b, v20.16b\n", "smmla v1.4s, v24.16b, v21.16b\n",
            "smmla v2.4s, v24.16b, v22.16b\n", "smmla v3.4s, v24.16b, v23.16b\n",
            "smmla v4.4s, v25.16b, v20.16b\n", "smmla v5.4s, v25.16b, v21.16b\n",
            "smmla v6.4s, v25.16b, v22.16b\n", "smmla v7.4s, v25.16b, v23.16b\n",
        )
    };
    // The column scales from the record (f16, from `{sp}`, a record per block), the int32 sums converted with 4
    // fraction bits; the row numerics: the laid-out Abel weights (`{cs}`, × 2^−4 already) over the running sums.
    (@cols block) => {
        concat!(
            "ld4r {{v16.2s, v17.2s, v18.2s, v19.2s}}, [{sp}], {rrec}\n",
            "fcvtl v20.4s, v16.4h\n", "fcvtl v21.4s, v17.4h\n", "fcvtl v22.4s, v18.4h\n", "fcvtl v23.4s, v19.4h\n",
            "scvtf v0.4s, v0.4s, #4\n", "scvtf v1.4s, v1.4s, #4\n", "scvtf v2.4s, v2.4s, #4\n", "scvtf v3.4s, v3.4s, #4\n",
            "scvtf v4.4s, v4.4s, #4\n", "scvtf v5.4s, v5.4s, #4\n", "scvtf v6.4s, v6.4s, #4\n", "scvtf v7.4s, v7.4s, #4\n",
            "// {cs}\n",
        )
    };
    (@cols row) => { tile1_text!(@cols block) };
    (@cols rowsum) => {
        concat!(
            "ldp q22, q23, [{cs}, #32]\n", "ldp q20, q21, [{cs}], #128\n",
            "// {sp} {rrec}\n",
        )
    };
    (@restart block) => { ld1_zero!(["0" "1" "2" "3"] ["4" "5" "6" "7"]) };
    (@restart row) => { tile1_text!(@restart block) };
    (@restart rowsum) => { "" };
    // y += f32(acc)·(s·sa): the row pairs' scales [sa0 sa0 sa1 sa1], [sa2 sa2 sa3 sa3] times the column pairs'.
    (@scale block) => {
        concat!(
            "ldp q24, q25, [{rowp}]\n",
            "fmul v16.4s, v20.4s, v24.4s\n", "fmul v17.4s, v21.4s, v24.4s\n",
            "fmul v18.4s, v22.4s, v24.4s\n", "fmul v19.4s, v23.4s, v24.4s\n",
            "fmla v8.4s, v0.4s, v16.4s\n", "fmla v9.4s, v1.4s, v17.4s\n",
            "fmla v10.4s, v2.4s, v18.4s\n", "fmla v11.4s, v3.4s, v19.4s\n",
            "fmul v16.4s, v20.4s, v25.4s\n", "fmul v17.4s, v21.4s, v25.4s\n",
            "fmul v18.4s, v22.4s, v25.4s\n", "fmul v19.4s, v23.4s, v25.4s\n",
            "fmla v12.4s, v4.4s, v16.4s\n", "fmla v13.4s, v5.4s, v17.4s\n",
            "fmla v14.4s, v6.4s, v18.4s\n", "fmla v15.4s, v7.4s, v19.4s\n",
        )
    };
    // y += f32(acc)·s (the rows' scale applies after the sums; the sums converted in place by `@cols`).
    (@scale row) => {
        concat!(
            "fmla v8.4s, v0.4s, v20.4s\n", "fmla v9.4s, v1.4s, v21.4s\n",
            "fmla v10.4s, v2.4s, v22.4s\n", "fmla v11.4s, v3.4s, v23.4s\n",
            "fmla v12.4s, v4.4s, v20.4s\n", "fmla v13.4s, v5.4s, v21.4s\n",
            "fmla v14.4s, v6.4s, v22.4s\n", "fmla v15.4s, v7.4s, v23.4s\n",
        )
    };
    // y += f32(S)·w over the running sums (the Abel weights laid out per panel, see `ColumnScales`), converted into
    // v16–v19 (they go on after the block).
    (@scale rowsum) => {
        concat!(
            "scvtf v16.4s, v0.4s\n", "scvtf v17.4s, v1.4s\n", "scvtf v18.4s, v2.4s\n", "scvtf v19.4s, v3.4s\n",
            "fmla v8.4s, v16.4s, v20.4s\n", "fmla v9.4s, v17.4s, v21.4s\n",
            "fmla v10.4s, v18.4s, v22.4s\n", "fmla v11.4s, v19.4s, v23.4s\n",
            "scvtf v16.4s, v4.4s\n", "scvtf v17.4s, v5.4s\n", "scvtf v18.4s, v6.4s\n", "scvtf v19.4s, v7.4s\n",
            "fmla v12.4s, v16.4s, v20.4s\n", "fmla v13.4s, v17.4s, v21.4s\n",
            "fmla v14.4s, v18.4s, v22.4s\n", "fmla v15.4s, v19.4s, v23.4s\n",
        )
    };
    // + c·sq: the 8 corrections (f32, from `{zc}`, which steps by a record per block) as column pairs [c0 c1 c0
    // c1] … by one LD4R, the row pairs' sa·Σq at 32 bytes.
    (@zp zp) => {
        concat!(
            "ld4r {{v20.2d, v21.2d, v22.2d, v23.2d}}, [{zc}], {rrec}\n",
            "ldp q24, q25, [{rowp}, #32]\n",
            "fmla v8.4s, v20.4s, v24.4s\n", "fmla v9.4s, v21.4s, v24.4s\n",
            "fmla v10.4s, v22.4s, v24.4s\n", "fmla v11.4s, v23.4s, v24.4s\n",
            "fmla v12.4s, v20.4s, v25.4s\n", "fmla v13.4s, v21.4s, v25.4s\n",
            "fmla v14.4s, v22.4s, v25.4s\n", "fmla v15.4s, v23.4s, v25.4s\n",
        )
    };
    (@zp nozp) => { "// {zc}\n" };
}

/// Row group `g` × the 8 columns of `panel` in one pass (`tile1_text!`): 8 int32 accumulators (v0–v7), 8 f32 sums
/// (v8–v15), 32 SMMLA per 32 K; the one-group tile (M = 4 … 7 and a tile's last group), whose activations serve
/// the whole panel. Usable by any kernel on this layout (the SVE i8mm GEMM's last group too).
///
/// # Safety
/// The CPU has neon and i8mm; `a` satisfies the `RunArgs` contract for a `qsi8dbp4x8` LHS and a 4-bit `qsnbp8x8`
/// RHS with blocks of whole 32-K chunks; group `g` and `panel` are the tile's (and so are its row pairs,
/// `a.lhs_pairs`).
#[target_feature(enable = "neon,i8mm")]
pub(crate) unsafe fn tile_4x8(a: &RunArgs, panel: usize, g: usize, cols: &ColumnScales, dest: Dest) {
    debug_assert!(a.bits == 4 && a.bl.is_multiple_of(32) && a.blocks > 0 && !a.lhs_pairs.is_null());
    let chunks = a.bl / 32;
    let rec = a.rhs.wrapping_add(panel * a.rhs_panel_stride);
    macro_rules! tile_asm {
        ($act:ident $zp:ident $chunks:ident) => {
            // SAFETY: reads: per block, the record's codes (128 bytes per chunk), scales and corrections, the group's
            // 128 bytes per chunk (4 runs of 8 K × 4 rows) and its row pairs per block, for a.blocks blocks: all
            // inside the tile's buffers (the caller's guarantee); the pointers step past the last block without
            // reading there; 8 f32 of `dest.bias`. Writes: the group's 4 rows × 8 columns of `dest` (the caller's
            // guarantee). Every vector register the block
            // touches is declared; d8–d15 (callee-saved) are clobbered and saved by the compiler; the flags are
            // clobbered; no stack use.
            // The accumulators restart from the 64 bytes of `sve_asm::ZEROS` (a static).
            unsafe {
                vector_asm!(
                    [] tile1_text!($act $zp $chunks),
                    rec = inout(reg) rec => _,
                    rskip = in(reg) a.rhs_record - 128 * chunks,
                    chunks = in(reg) chunks,
                    nb = inout(reg) a.blocks => _,
                    a0 = inout(reg) a.lhs.wrapping_add(g * MR * a.lhs_stride) => _,
                    sp = inout(reg) rec.wrapping_add(a.rhs_scales) => _,
                    zc = inout(reg) rec.wrapping_add(a.rhs_zp) => _,
                    rrec = in(reg) a.rhs_record,
                    rowp = inout(reg) row_pairs(a, g) => _,
                    rbytes = in(reg) a.lhs_pairs_stride,
                    dst = inout(reg) dest.ptr => _,
                    dstride = in(reg) dest.stride,
                    bias = in(reg) dest.bias,
                    cs = inout(reg) cols.as_ptr() => _,
                    cc = out(reg) _,
                    zeros = in(reg) ZEROS.0.as_ptr(),
                )
            }
        };
    }
    if cols.holds(a.blocks) && a.row != 0 {
        asm_modes!(tile_asm; rowsum; true, a.has_zp != 0, chunks == 1)
    } else {
        asm_modes!(tile_asm; a.row != 0, a.has_zp != 0, chunks == 1)
    }
}
