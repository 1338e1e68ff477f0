//! int8-activation GEMM for prefill, SVE i8mm at 256 bits: 8 rows (two `qsi8dbp4x8` row groups: four SMMLA row
//! pairs) × 8 columns per register tile. One SVE SMMLA works on two 128-bit segments at once: the row pair's
//! 2 × 8 activations replicated into both (`ld1rqb`) against two column pairs of the `qsnbp8x8` record (a
//! 32-byte load), so each instruction does the work of two NEON SMMLA. The whole block loop of a tile is one
//! `asm!` block (stable Rust has no SVE intrinsics or register types; SVE state cannot live across Rust code):
//! 8 int32 accumulators (z0–z7, [row pair][column half]), 8 f32 sums (z8–z15), codes z16/z17, one field at a
//! time z18/z19, activations z20–z23, the field mask z24, the block epilogue's vectors z25–z31.
//!
//! The kernel uses the first 256 bits of the vector (predicates `vl32` / `vl8`), so it runs at any SVE vector
//! length of at least 256 bits (`min_sve_vl` = 32; Graviton3's Neoverse V1 has exactly 256) and is selected only
//! there: at 128 bits NEON i8mm is as wide. The vector length is read again on every call (it is per thread and
//! can change): shorter than 256 bits, every group runs the NEON body.
//!
//! Instruction budget per 32 K (one block of 32) × 8 columns × 8 rows, 4-bit codes, symmetric, per-block
//! numerics (per SVE SMMLA: / 32): 32 SMMLA; 4 code loads + 16 activation loads (0.63); 8 field extractions
//! (0.25); per block 2 NEON LD1 of zeros (zeroing 4 accumulators each, their bits above 128 included; 8 DUP
//! before), 8 SCVTF, 8 FMUL (row × column scales), 8 FMLA, 2 + 4 scale loads (0.88; the
//! row numerics keep running sums over all blocks (the Abel weights of `ops::for_each_block_weight`, as the NEON
//! i8mm tiles): no DUP, no FMUL, 2 loads: 0.56; zero points add 4 loads and 8 FMLA); loop ~9 (0.28; ~5 for blocks
//! of one chunk, which run without the chunk loop: 0.16). Total ~3.1 per SVE SMMLA = ~1.55 per
//! NEON-SMMLA-equivalent (the NEON 4×8 tile measures 3.37). The column scales
//! (× 2^−4, the field's factor, exact), their zero-point corrections and the rows' activation scales and
//! sa·Σq are laid out in the lane order of the 2 × 2 tiles (`ColumnScales` per panel, the LHS packing's
//! `PackedLhs::pairs` once per call), so the
//! asm epilogue is loads and vector arithmetic only.
//!
//! Tiles of three row groups (12 rows, [`tile_12x8`]: accumulators z0–z11, sums z12–z23) share the code loads, the
//! field extractions, the column scales and the block loop among 6 row pairs: ~140 instructions per block of 32 for
//! 48 SMMLA (2.9 per SMMLA against 3.25); a tile's row groups run in threes, then twos (a remainder of one group
//! after threes takes one three back as two twos). The numerics, zero points and chunk loop are compile-time
//! variants of the text (`asm_modes!`), so the block loop has no branch on them.
//!
//! LHS: `qsi8dbp4x8`; RHS: `qsnbp8x8_sf16_zpc`. The asm runs 4-bit codes in blocks of whole 32-K chunks over
//! threes and pairs of row groups, a last single row group the NEON i8mm kernel's one-group asm tile (`tile_4x8`: 4 rows ×
//! 8 columns, M = 4 … 7 included); everything else (2- and 8-bit codes, blocks of 16) runs the NEON i8mm body of
//! the same layout (`super::qsnbp8x8_int8::gemm_pairs`). Features: neon, i8mm, sve (SVE i8mm). No over-reads (a pair's second group is always a group of the tile).

use super::ops::Dest;
use super::ops::sve_vl_bytes;
use super::qsnbp8x8_int8::MR;
use super::qsnbp8x8_tiles::{ColumnScales, row_pairs, run_tiles};
use super::sve_asm::{asm_modes, ld1_zero, sve_asm, zero_acc, zero_all};
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon, i8mm, sve and SVE i8mm with a vector length of at least 32 bytes; `args` satisfies the
/// `RunArgs` contract with a `qsi8dbp4x8` LHS (the tile starts at a row group) and a `qsnbp8x8` RHS (f16 scales)
/// of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,i8mm,sve")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    // The asm needs 256-bit vectors: this thread's may have been shortened since selection (see `sve_vl_bytes`).
    let asm = a.bits == 4 && a.bl.is_multiple_of(32) && sve_vl_bytes() >= 32;
    // SAFETY: the CPU has SVE i8mm at ≥ 256 bits when `asm` is set (checked just now); the rest is the caller's.
    unsafe {
        run_tiles(
            a,
            asm,
            true,
            super::matmul_f32_qsi8dbp4x8_qsnbp8x8_sf16_zpc_12x4_neon_i8mm::tile_4x8,
            tile_8x8,
            Some(tile_12x8),
            true,
        )
    }
}

/// Row pair p's sums (column halves `$j0`, `$j1`: z registers) as its two rows of 8 f32 plus the bias (v30, v31),
/// `{dstride}` bytes apart from `{dst}` (the first 256 bits of each half: segment 0 column pair 2j, segment 1
/// column pair 2j + 1).
macro_rules! store_rows {
    ($j0:literal, $j1:literal) => {
        concat!(
            "uzp1 z26.d, z",
            $j0,
            ".d, z",
            $j0,
            ".d\n",
            "uzp1 z27.d, z",
            $j1,
            ".d, z",
            $j1,
            ".d\n",
            "uzp2 z28.d, z",
            $j0,
            ".d, z",
            $j0,
            ".d\n",
            "uzp2 z29.d, z",
            $j1,
            ".d, z",
            $j1,
            ".d\n",
            "fadd v26.4s, v26.4s, v30.4s\n",
            "fadd v27.4s, v27.4s, v31.4s\n",
            "fadd v28.4s, v28.4s, v30.4s\n",
            "fadd v29.4s, v29.4s, v31.4s\n",
            "st1 {{v26.4s, v27.4s}}, [{dst}], {dstride}\n",
            "st1 {{v28.4s, v29.4s}}, [{dst}], {dstride}\n",
        )
    };
}

/// One run of 8 K for the whole tile: 4 row pairs (z20–z23) × 2 column halves (the field z18/z19) into z0–z7.
macro_rules! smmla_8x8 {
    () => {
        concat!(
            "smmla z0.s, z20.b, z18.b\n",
            "smmla z1.s, z20.b, z19.b\n",
            "smmla z2.s, z21.b, z18.b\n",
            "smmla z3.s, z21.b, z19.b\n",
            "smmla z4.s, z22.b, z18.b\n",
            "smmla z5.s, z22.b, z19.b\n",
            "smmla z6.s, z23.b, z18.b\n",
            "smmla z7.s, z23.b, z19.b\n",
        )
    };
}

/// The chunk loop of the SVE tiles' block loop per `asm_modes!` chunk mode: blocks of one 32-K chunk straight-line
/// (`{cc}`, `{chunks}` named in a comment only), longer ones counting `{chunks}` down with the codes' pointer stepped.
macro_rules! sve_chunks {
    (head one) => {
        "// {cc} {chunks}\n"
    };
    (tail one) => {
        ""
    };
    (head many) => {
        "mov {cc}, {chunks}\n3:\n"
    };
    (tail many) => {
        "add {xc}, {xc}, #128\nsubs {cc}, {cc}, #1\nb.ne 3b\n"
    };
}

/// Runs an SVE tile's asm (`$text!(head, tail, numerics, zero points)`: its text for one mode) in the call's mode
/// (`asm_modes!`: numerics, zero points, chunk loop), with the operands every tile has (the record, block and chunk
/// counts, column scales, row-pair stride, destination, bias, the K-row offsets, scratch, `ZEROS`) after the tile's
/// own `$own` (its activation and row-pair pointers).
macro_rules! sve_tile {
    ($a:ident, $text:ident, $rec:ident, $cols:ident, $dest:ident; $($own:tt)*) => {{
        macro_rules! call {
            ($num:ident $zp:ident $one:ident) => {
                sve_asm!(
                    $text!(sve_chunks!(head $one), sve_chunks!(tail $one), $num, $zp),
                    $($own)*
                    rec = inout(reg) $rec => _,
                    rstride = in(reg) $a.rhs_record,
                    chunks = in(reg) $a.bl / 32,
                    nb = inout(reg) $a.blocks => _,
                    col = inout(reg) $cols.as_ptr() => _,
                    rbytes = in(reg) $a.lhs_pairs_stride,
                    dst = inout(reg) $dest.ptr => _,
                    dstride = in(reg) $dest.stride,
                    bias = in(reg) $dest.bias,
                    e8 = in(reg) 8usize,
                    e16 = in(reg) 16usize,
                    e24 = in(reg) 24usize,
                    xc = out(reg) _,
                    cc = out(reg) _,
                    zeros = in(reg) super::sve_asm::ZEROS.0.as_ptr(),
                )
            };
        }
        asm_modes!(call; $a.row != 0, $a.has_zp != 0, $a.bl == 32)
    }};
}

/// [`tile_8x8`]'s block epilogue for the call's numerics (`block` | `row`: y += f32(acc)·(s·sa), or y += f32(S)·w
/// over the running sums, converted into z27–z30 as they go on), zero points (`zp` | `nozp`: + c·sa·Σq) and the
/// accumulators' restart (`block` only): compile-time variants of one text, so the block loop has no branch on them.
#[rustfmt::skip]
macro_rules! ep8 {
    (block) => {
        concat!(
            "scvtf z0.s, p1/m, z0.s\n",
            "scvtf z1.s, p1/m, z1.s\n",
            "scvtf z2.s, p1/m, z2.s\n",
            "scvtf z3.s, p1/m, z3.s\n",
            "scvtf z4.s, p1/m, z4.s\n",
            "scvtf z5.s, p1/m, z5.s\n",
            "scvtf z6.s, p1/m, z6.s\n",
            "scvtf z7.s, p1/m, z7.s\n",
            "ld1rqw {{z27.s}}, p1/z, [{rowp}]\n",
            "fmul z28.s, z25.s, z27.s\n",
            "fmul z29.s, z26.s, z27.s\n",
            "fmla z8.s, p1/m, z0.s, z28.s\n",
            "fmla z9.s, p1/m, z1.s, z29.s\n",
            "ld1rqw {{z27.s}}, p1/z, [{rowp}, #16]\n",
            "fmul z28.s, z25.s, z27.s\n",
            "fmul z29.s, z26.s, z27.s\n",
            "fmla z10.s, p1/m, z2.s, z28.s\n",
            "fmla z11.s, p1/m, z3.s, z29.s\n",
            "ld1rqw {{z27.s}}, p1/z, [{rowp}, #64]\n",
            "fmul z28.s, z25.s, z27.s\n",
            "fmul z29.s, z26.s, z27.s\n",
            "fmla z12.s, p1/m, z4.s, z28.s\n",
            "fmla z13.s, p1/m, z5.s, z29.s\n",
            "ld1rqw {{z27.s}}, p1/z, [{rowp}, #80]\n",
            "fmul z28.s, z25.s, z27.s\n",
            "fmul z29.s, z26.s, z27.s\n",
            "fmla z14.s, p1/m, z6.s, z28.s\n",
            "fmla z15.s, p1/m, z7.s, z29.s\n",
        )
    };
    (row) => {
        concat!(
            "scvtf z27.s, p1/m, z0.s\n",
            "scvtf z28.s, p1/m, z1.s\n",
            "scvtf z29.s, p1/m, z2.s\n",
            "scvtf z30.s, p1/m, z3.s\n",
            "fmla z8.s, p1/m, z27.s, z25.s\n",
            "fmla z9.s, p1/m, z28.s, z26.s\n",
            "fmla z10.s, p1/m, z29.s, z25.s\n",
            "fmla z11.s, p1/m, z30.s, z26.s\n",
            "scvtf z27.s, p1/m, z4.s\n",
            "scvtf z28.s, p1/m, z5.s\n",
            "scvtf z29.s, p1/m, z6.s\n",
            "scvtf z30.s, p1/m, z7.s\n",
            "fmla z12.s, p1/m, z27.s, z25.s\n",
            "fmla z13.s, p1/m, z28.s, z26.s\n",
            "fmla z14.s, p1/m, z29.s, z25.s\n",
            "fmla z15.s, p1/m, z30.s, z26.s\n",
        )
    };
    (zp zp) => {
        concat!(
            "ld1w {{z30.s}}, p1/z, [{col}, {e16}, lsl #2]\n",
            "ld1w {{z31.s}}, p1/z, [{col}, {e24}, lsl #2]\n",
            "ld1rqw {{z27.s}}, p1/z, [{rowp}, #32]\n",
            "fmla z8.s, p1/m, z30.s, z27.s\n",
            "fmla z9.s, p1/m, z31.s, z27.s\n",
            "ld1rqw {{z27.s}}, p1/z, [{rowp}, #48]\n",
            "fmla z10.s, p1/m, z30.s, z27.s\n",
            "fmla z11.s, p1/m, z31.s, z27.s\n",
            "ld1rqw {{z27.s}}, p1/z, [{rowp}, #96]\n",
            "fmla z12.s, p1/m, z30.s, z27.s\n",
            "fmla z13.s, p1/m, z31.s, z27.s\n",
            "ld1rqw {{z27.s}}, p1/z, [{rowp}, #112]\n",
            "fmla z14.s, p1/m, z30.s, z27.s\n",
            "fmla z15.s, p1/m, z31.s, z27.s\n",
        )
    };
    (zp nozp) => { "" };
    (restart block) => { zero_acc!() };
    (restart row) => { "" };
}

/// [`tile_12x8`]'s block epilogue per mode, as [`ep8!`]'s.
#[rustfmt::skip]
macro_rules! ep12 {
    (block) => {
        concat!(
            "scvtf z0.s, p1/m, z0.s\n", "scvtf z1.s, p1/m, z1.s\n", "scvtf z2.s, p1/m, z2.s\n",
            "scvtf z3.s, p1/m, z3.s\n", "scvtf z4.s, p1/m, z4.s\n", "scvtf z5.s, p1/m, z5.s\n",
            "scvtf z6.s, p1/m, z6.s\n", "scvtf z7.s, p1/m, z7.s\n", "scvtf z8.s, p1/m, z8.s\n",
            "scvtf z9.s, p1/m, z9.s\n", "scvtf z10.s, p1/m, z10.s\n", "scvtf z11.s, p1/m, z11.s\n",
            block_12x8!(["0" "1" "12" "13" "{rowp}" "0"] ["2" "3" "14" "15" "{rowp}" "16"]
                ["4" "5" "16" "17" "{rowp}" "64"] ["6" "7" "18" "19" "{rowp}" "80"]
                ["8" "9" "20" "21" "{rowq}" "0"] ["10" "11" "22" "23" "{rowq}" "16"]),
        )
    };
    (row) => {
        row_12x8!(["0" "1" "2" "3" "12" "13" "14" "15"] ["4" "5" "6" "7" "16" "17" "18" "19"]
            ["8" "9" "10" "11" "20" "21" "22" "23"])
    };
    (zp zp) => {
        concat!(
            "ld1w {{z26.s}}, p1/z, [{col}, {e16}, lsl #2]\n",
            "ld1w {{z27.s}}, p1/z, [{col}, {e24}, lsl #2]\n",
            zp_12x8!(["12" "13" "{rowp}" "32"] ["14" "15" "{rowp}" "48"] ["16" "17" "{rowp}" "96"]
                ["18" "19" "{rowp}" "112"] ["20" "21" "{rowq}" "32"] ["22" "23" "{rowq}" "48"]),
        )
    };
    (zp nozp) => { "" };
    (restart block) => { ld1_zero!(["0" "1" "2" "3"] ["4" "5" "6" "7"] ["8" "9" "10" "11"]) };
    (restart row) => { "" };
}

/// Row groups `g`, `g + 1` × the 8 columns of `panel`, over all K, into `dest` by rows (the accumulators' lanes
/// per 128-bit segment: r0 c0, r0 c1, r1 c0, r1 c1; segment 0 columns 4j, 4j + 1, segment 1 the next two).
///
/// # Safety
/// The CPU has SVE and SVE i8mm with a vector length of at least 32 bytes; `a` satisfies the `RunArgs` contract
/// for a `qsi8dbp4x8` LHS and a 4-bit `qsnbp8x8` RHS with blocks of whole 32-K chunks; groups `g`, `g + 1` and
/// `panel` are the tile's (and so are their row pairs, `a.lhs_pairs`); `cols` is filled for `panel`.
#[target_feature(enable = "neon,i8mm,sve")]
unsafe fn tile_8x8(a: &RunArgs, panel: usize, g: usize, cols: &ColumnScales, dest: Dest) {
    debug_assert!(a.bits == 4 && a.bl.is_multiple_of(32) && a.blocks > 0);
    debug_assert!(cols.holds(a.blocks) && !a.lhs_pairs.is_null());
    let rec = a.rhs.wrapping_add(panel * a.rhs_panel_stride);
    let act0 = a.lhs.wrapping_add(g * MR * a.lhs_stride);
    let act1 = a.lhs.wrapping_add((g + 1) * MR * a.lhs_stride);
    // `$head` / `$tail`: the chunk loop's head and tail, or (blocks of one chunk: 4 instructions fewer per block)
    // straight-line code.
    macro_rules! text {
        ($head:expr, $tail:expr, $num:ident, $zp:ident) => {
            concat!(
                ".arch_extension sve\n",
                ".arch_extension i8mm\n",
                "ptrue p0.b, vl32\n",
                "ptrue p1.s, vl8\n",
                "dup z24.b, #-16\n",
                zero_all!(),
                // Block loop.
                "2:\n",
                "mov {xc}, {rec}\n",
                "add {rec}, {rec}, {rstride}\n",
                // Chunk loop: 32 K, two 64-byte groups of 8 columns × 8 K × 2 fields; field l of group g is run
                // 2l + g of the chunk (32 bytes apart in each row group).
                $head,
                "ld1w {{z16.s}}, p1/z, [{xc}]\n",
                "ld1w {{z17.s}}, p1/z, [{xc}, {e8}, lsl #2]\n",
                "lsl z18.b, z16.b, #4\n",
                "lsl z19.b, z17.b, #4\n",
                "ld1rqb {{z20.b}}, p0/z, [{a0}]\n",
                "ld1rqb {{z21.b}}, p0/z, [{a0}, #16]\n",
                "ld1rqb {{z22.b}}, p0/z, [{a1}]\n",
                "ld1rqb {{z23.b}}, p0/z, [{a1}, #16]\n",
                smmla_8x8!(),
                "and z18.d, z16.d, z24.d\n",
                "and z19.d, z17.d, z24.d\n",
                "ld1rqb {{z20.b}}, p0/z, [{a0}, #64]\n",
                "ld1rqb {{z21.b}}, p0/z, [{a0}, #80]\n",
                "ld1rqb {{z22.b}}, p0/z, [{a1}, #64]\n",
                "ld1rqb {{z23.b}}, p0/z, [{a1}, #80]\n",
                smmla_8x8!(),
                "ld1w {{z16.s}}, p1/z, [{xc}, {e16}, lsl #2]\n",
                "ld1w {{z17.s}}, p1/z, [{xc}, {e24}, lsl #2]\n",
                "lsl z18.b, z16.b, #4\n",
                "lsl z19.b, z17.b, #4\n",
                "ld1rqb {{z20.b}}, p0/z, [{a0}, #32]\n",
                "ld1rqb {{z21.b}}, p0/z, [{a0}, #48]\n",
                "ld1rqb {{z22.b}}, p0/z, [{a1}, #32]\n",
                "ld1rqb {{z23.b}}, p0/z, [{a1}, #48]\n",
                smmla_8x8!(),
                "and z18.d, z16.d, z24.d\n",
                "and z19.d, z17.d, z24.d\n",
                "ld1rqb {{z20.b}}, p0/z, [{a0}, #96]\n",
                "ld1rqb {{z21.b}}, p0/z, [{a0}, #112]\n",
                "ld1rqb {{z22.b}}, p0/z, [{a1}, #96]\n",
                "ld1rqb {{z23.b}}, p0/z, [{a1}, #112]\n",
                smmla_8x8!(),
                "add {a0}, {a0}, #128\n",
                "add {a1}, {a1}, #128\n",
                $tail,
                // Block epilogue: y += f32(acc)·(s·sa) [+ c·sq] (the row numerics: y += f32(S)·w [+ c·sq]).
                "ld1w {{z25.s}}, p1/z, [{col}]\n",
                "ld1w {{z26.s}}, p1/z, [{col}, {e8}, lsl #2]\n",
                ep8!($num),
                ep8!(zp $zp),
                // The row numerics keep running sums (the Abel weights of `ColumnScales`).
                ep8!(restart $num),
                "add {col}, {col}, #128\n",
                "add {rowp}, {rowp}, {rbytes}\n",
                "subs {nb}, {nb}, #1\n",
                "b.ne 2b\n",
                // The sums by rows: row 2p + h's 8 columns (its 64-bit halves of the four 2 × 2 tiles of row pair p:
                // UZP1 / UZP2 of each column half's 64-bit elements) plus the bias, into `dest` by rows.
                "ldp q30, q31, [{bias}]\n",
                store_rows!(8, 9),
                store_rows!(10, 11),
                store_rows!(12, 13),
                store_rows!(14, 15),
            )
        };
    }
    // SAFETY: reads: per block, the record's codes (chunks × 128 bytes from the record's start), each group's
    // 128 bytes per chunk (4 runs of 8 K × 4 rows), 128 bytes of the column scales and the two groups' 128 bytes of
    // row pairs, for a.blocks blocks: all inside
    // the tile's buffers (the caller's guarantee); 8 f32 of `dest.bias`. Writes: 8 rows × 8 columns of `dest` (the
    // caller's guarantee). Every vector, predicate and
    // scratch register the block touches is declared; d8–d15 (callee-saved) are clobbered and saved by the
    // compiler; the flags are clobbered (no preserves_flags).
    // The accumulators restart from the 64 bytes of `sve_asm::ZEROS` (a static).
    unsafe {
        sve_tile!(a, text, rec, cols, dest;
            a0 = inout(reg) act0 => _,
            a1 = inout(reg) act1 => _,
            rowp = inout(reg) row_pairs(a, g) => _,
        )
    }
}

/// One run of 8 K of [`tile_12x8`] at LHS offsets `$o0`, `$o1` (the run's two row pairs in each group): per group
/// (`{a0}`, `{a1}`, `{a2}`) its row pairs into z28 / z29 and 4 SMMLA against the field's column halves z26 / z27, into
/// row pair p's accumulators z(2p), z(2p + 1).
#[rustfmt::skip]
macro_rules! smmla_12x8 {
    ($o0:literal, $o1:literal) => {
        concat!(
            smmla_12x8!(@group "{a0}" $o0 $o1 "0" "1" "2" "3"),
            smmla_12x8!(@group "{a1}" $o0 $o1 "4" "5" "6" "7"),
            smmla_12x8!(@group "{a2}" $o0 $o1 "8" "9" "10" "11"),
        )
    };
    (@group $a:literal $o0:literal $o1:literal $c0:literal $c1:literal $c2:literal $c3:literal) => {
        concat!(
            "ld1rqb {{z28.b}}, p0/z, [", $a, ", #", $o0, "]\n",
            "ld1rqb {{z29.b}}, p0/z, [", $a, ", #", $o1, "]\n",
            "smmla z", $c0, ".s, z28.b, z26.b\n",
            "smmla z", $c1, ".s, z28.b, z27.b\n",
            "smmla z", $c2, ".s, z29.b, z26.b\n",
            "smmla z", $c3, ".s, z29.b, z27.b\n",
        )
    };
}

/// [`tile_12x8`]'s block epilogue for row pair p (accumulators z`$c0`, z`$c1`, sums z`$y0`, z`$y1`; its record of
/// row factors at `[$rp, #$off]`): the per-block numerics y += f32(acc)·(s·sa) (the column scales z24 / z25).
#[rustfmt::skip]
macro_rules! block_12x8 {
    ($([$c0:literal $c1:literal $y0:literal $y1:literal $rp:literal $off:literal])+) => {
        concat!($(
            "ld1rqw {{z28.s}}, p1/z, [", $rp, ", #", $off, "]\n",
            "fmul z26.s, z24.s, z28.s\n",
            "fmul z27.s, z25.s, z28.s\n",
            "fmla z", $y0, ".s, p1/m, z", $c0, ".s, z26.s\n",
            "fmla z", $y1, ".s, p1/m, z", $c1, ".s, z27.s\n",
        )+)
    };
}

/// The row numerics' epilogue of [`tile_12x8`] for two row pairs (`[acc acc sums sums]` each): their running sums
/// converted into z26–z29 (the accumulators go on) and added with the weights z24 / z25.
#[rustfmt::skip]
macro_rules! row_12x8 {
    ($([$a0:literal $a1:literal $b0:literal $b1:literal $y0:literal $y1:literal $z0:literal $z1:literal])+) => {
        concat!($(
            "scvtf z26.s, p1/m, z", $a0, ".s\n", "scvtf z27.s, p1/m, z", $a1, ".s\n",
            "scvtf z28.s, p1/m, z", $b0, ".s\n", "scvtf z29.s, p1/m, z", $b1, ".s\n",
            "fmla z", $y0, ".s, p1/m, z26.s, z24.s\n", "fmla z", $y1, ".s, p1/m, z27.s, z25.s\n",
            "fmla z", $z0, ".s, p1/m, z28.s, z24.s\n", "fmla z", $z1, ".s, p1/m, z29.s, z25.s\n",
        )+)
    };
}

/// The zero points' term of [`tile_12x8`] for row pair p (sums z`$y0`, z`$y1`; sa·Σq at `[$rp, #$off]`): + c·sa·Σq
/// (the corrections z26 / z27).
#[rustfmt::skip]
macro_rules! zp_12x8 {
    ($([$y0:literal $y1:literal $rp:literal $off:literal])+) => {
        concat!($(
            "ld1rqw {{z28.s}}, p1/z, [", $rp, ", #", $off, "]\n",
            "fmla z", $y0, ".s, p1/m, z26.s, z28.s\n",
            "fmla z", $y1, ".s, p1/m, z27.s, z28.s\n",
        )+)
    };
}

/// [`tile_8x8`] for three row groups `g .. g + 3` (12 rows): the code loads, field extractions, column scales and
/// the block loop shared by 6 row pairs instead of 4 (per 32-K block ~140 instructions for 48 SMMLA against 8 × 8's
/// ~104 for 32: 2.9 per SMMLA against 3.25). Registers: the accumulators z0–z11 ([row pair][column half]), the
/// sums z12–z23, codes z24 / z25, the field z26 / z27, row pairs z28 / z29, the field mask z30; the epilogue reuses
/// z24–z29 (column scales, products, row factors).
///
/// # Safety
/// As [`tile_8x8`], for groups `g`, `g + 1` and `g + 2` (all the tile's).
#[target_feature(enable = "neon,i8mm,sve")]
unsafe fn tile_12x8(a: &RunArgs, panel: usize, g: usize, cols: &ColumnScales, dest: Dest) {
    debug_assert!(a.bits == 4 && a.bl.is_multiple_of(32) && a.blocks > 0);
    debug_assert!(cols.holds(a.blocks) && !a.lhs_pairs.is_null());
    let rec = a.rhs.wrapping_add(panel * a.rhs_panel_stride);
    let act = |i: usize| a.lhs.wrapping_add((g + i) * MR * a.lhs_stride);
    let rowp = row_pairs(a, g);
    macro_rules! text {
        ($head:expr, $tail:expr, $num:ident, $zp:ident) => {
            concat!(
                ".arch_extension sve\n",
                ".arch_extension i8mm\n",
                "ptrue p0.b, vl32\n",
                "ptrue p1.s, vl8\n",
                "dup z30.b, #-16\n",
                ld1_zero!(["0" "1" "2" "3"] ["4" "5" "6" "7"] ["8" "9" "10" "11"] ["12" "13" "14" "15"]
                    ["16" "17" "18" "19"] ["20" "21" "22" "23"]),
                // Block loop.
                "2:\n",
                "mov {xc}, {rec}\n",
                "add {rec}, {rec}, {rstride}\n",
                // Chunk loop (as tile_8x8's: field l of code group h is run 2l + h of the chunk).
                $head,
                "ld1w {{z24.s}}, p1/z, [{xc}]\n",
                "ld1w {{z25.s}}, p1/z, [{xc}, {e8}, lsl #2]\n",
                "lsl z26.b, z24.b, #4\n",
                "lsl z27.b, z25.b, #4\n",
                smmla_12x8!("0", "16"),
                "and z26.d, z24.d, z30.d\n",
                "and z27.d, z25.d, z30.d\n",
                smmla_12x8!("64", "80"),
                "ld1w {{z24.s}}, p1/z, [{xc}, {e16}, lsl #2]\n",
                "ld1w {{z25.s}}, p1/z, [{xc}, {e24}, lsl #2]\n",
                "lsl z26.b, z24.b, #4\n",
                "lsl z27.b, z25.b, #4\n",
                smmla_12x8!("32", "48"),
                "and z26.d, z24.d, z30.d\n",
                "and z27.d, z25.d, z30.d\n",
                smmla_12x8!("96", "112"),
                "add {a0}, {a0}, #128\n",
                "add {a1}, {a1}, #128\n",
                "add {a2}, {a2}, #128\n",
                $tail,
                // Block epilogue, as tile_8x8's; group g + 2's row factors through {rowq} (128 bytes on: beyond
                // LD1RQW's immediate).
                "ld1w {{z24.s}}, p1/z, [{col}]\n",
                "ld1w {{z25.s}}, p1/z, [{col}, {e8}, lsl #2]\n",
                ep12!($num),
                ep12!(zp $zp),
                ep12!(restart $num),
                "add {col}, {col}, #128\n",
                "add {rowp}, {rowp}, {rbytes}\n",
                "add {rowq}, {rowq}, {rbytes}\n",
                "subs {nb}, {nb}, #1\n",
                "b.ne 2b\n",
                "ldp q30, q31, [{bias}]\n",
                store_rows!(12, 13),
                store_rows!(14, 15),
                store_rows!(16, 17),
                store_rows!(18, 19),
                store_rows!(20, 21),
                store_rows!(22, 23),
            )
        };
    }
    // SAFETY: as tile_8x8's, for three row groups: reads per block the record's codes, each group's 128 bytes per
    // chunk, 128 bytes of the column scales and the three groups' row-pair records (group g + 2's at rowp + 128
    // bytes), for a.blocks blocks: all inside the tile's buffers (the caller's guarantee); 8 f32 of `dest.bias`.
    // Writes: 12 rows × 8 columns of `dest` (the caller's guarantee). Every vector, predicate and scratch register
    // the block touches is declared; d8–d15 (callee-saved) are clobbered and saved by the compiler; the flags are
    // clobbered.
    unsafe {
        sve_tile!(a, text, rec, cols, dest;
            a0 = inout(reg) act(0) => _,
            a1 = inout(reg) act(1) => _,
            a2 = inout(reg) act(2) => _,
            rowp = inout(reg) rowp => _,
            rowq = inout(reg) rowp.wrapping_byte_add(128) => _,
        )
    }
}

// PR_SVE_SET_VL is Linux's (Android's too).
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use crate::arch::aarch64::{
        INT8_GEMM_I8MM, INT8_GEMM_SVE_I8MM, INT8_GEMV_DOTPROD_P8X8, INT8_GEMV_SVE_P8X8, QSNBP8X8_SF16_ZPC,
    };
    use crate::format::{Params, Weights, ZeroPoints};
    use crate::pack::LhsSource;
    use crate::{ComputePath, Cpu, Problem, Selected, UKernel, matmul_serial};

    /// A thread whose SVE vector has been shortened to 128 bits after selection (prctl PR_SVE_SET_VL) gets the
    /// NEON i8mm bodies from both SVE kernels, bit for bit what the NEON family's kernels compute, not the asm
    /// written for 256 bits.
    #[test]
    fn sve_kernels_run_the_neon_bodies_when_the_threads_vector_shrinks() {
        if !INT8_GEMM_SVE_I8MM.runs_on(Cpu::get()) || !INT8_GEMV_SVE_P8X8.runs_on(Cpu::get()) {
            return;
        }
        let (k, n, bl) = (256usize, 72usize, 32usize);
        let mut x = 0x9E37_79B9u32;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let b: Vec<u8> = (0..n * k / 2).map(|_| next() as u8).collect();
        let scales: Vec<f32> = (0..n * k / bl).map(|_| 0.01 + (next() % 100) as f32 * 1e-3).collect();
        let zp: Vec<u8> = (0..n * (k / bl).div_ceil(2)).map(|_| next() as u8).collect();
        let params = Params::new(k as i64, n as i64, 4, bl as i64).unwrap();
        let w = Weights::new(params, &b, &scales, ZeroPoints::Packed(&zp), None).unwrap();
        let p = Problem::of(ComputePath::Int8, &w);
        let a: Vec<f32> = (0..16 * k).map(|_| (next() % 2001) as f32 / 1000.0 - 1.0).collect();
        let run = |uk: &'static UKernel, m: usize| {
            let sel = Selected::single(uk, QSNBP8X8_SF16_ZPC, &p).unwrap();
            let rhs = sel.pack_rhs(&w).unwrap();
            let mut y = vec![0f32; m * n];
            matmul_serial(&sel, &rhs, LhsSource::F32(&a[..m * k]), m, None, &mut y);
            y.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
        };
        for (sve, neon, m) in
            [(&INT8_GEMM_SVE_I8MM, &INT8_GEMM_I8MM, 16), (&INT8_GEMV_SVE_P8X8, &INT8_GEMV_DOTPROD_P8X8, 1)]
        {
            let want = run(neon, m);
            let got = crate::arch::aarch64::ops::with_sve_vl(16, || run(sve, m));
            assert!(got == want, "{}: at 128 bits it must run the NEON body", sve.name());
        }
    }
}
