//! int8-activation GEMM for prefill, i8mm: 8 rows (two `qsi8dbp4x8` row groups: four SMMLA row pairs) × 4
//! columns (two column pairs of a `qsnbp8x8` panel) per register tile, the whole block loop one `asm!` block so
//! that nothing leaves the registers: 8 int32 2 × 2 tiles for the block (v0–v7, [row pair p][column pair k] =
//! v(2p + k)), 8 f32 2 × 2 sums (v8–v15, the same order), the chunk's codes (v16–v19: the two column pairs of
//! each of the chunk's two 64-byte groups), one field at a time (v20, v21), two runs' activations (v22–v29: the
//! four row pairs of a run of 8 K), the field mask (v30). A panel is two such tiles (column halves); a pair of
//! row groups reads its activations once per half.
//!
//! Why 8 × 4 and not 4 × 8 (the intrinsic tile this replaced): per 32 SMMLA both load 16 vectors, but 8 × 4
//! extracts 8 fields instead of 16 (the codes of 4 columns serve 4 row pairs); and in asm nothing spills. Why
//! not 8 × 8: 16 + 16 accumulators leave no register for the operands.
//!
//! Instruction budget per 32 K (one block of 32) × 4 columns × 8 rows, 4-bit codes, symmetric, per-block
//! numerics (per SMMLA: / 32): 32 SMMLA; 2 + 8 LDP (codes, activations; 0.31); 8 field extractions (SHL / AND,
//! 0.25); per block 8 SCVTF, 8 FMUL (column × row scales: the per-block activation scale's cost), 8 FMLA, 8 MOVI
//! (zeroing), 3 LDP (scales) (1.09; the row numerics drop the 8 FMUL and 2 LDP: 0.78; zero points add 2 LDP and
//! 8 FMLA); loops and branches ~10 (0.31). Total ~3.0 per SMMLA (row numerics ~2.7); the intrinsic 4 × 8 tile
//! measured 3.37 (`scripts/aarch64/icount-kernel.sh`).
//!
//! The column scales (× 2^−4, exact) and corrections, and the rows' activation scales and sa·Σq, are laid out
//! once per call in the tiles' lane order (`super::qsnbp8x8_tiles`), as for the SVE 8 × 8 kernel, so the asm
//! epilogue is loads and vector arithmetic: `y += f32(acc)·(s·sa) [+ c·sq]` (row numerics: `y += f32(acc)·s
//! [+ c·sq]`), `ops::block_epilogue`'s formula.
//!
//! LHS: `qsi8dbp4x8`; RHS: `qsnbp8x8_sf16_zpc`. The asm runs 4-bit codes in blocks of whole 32-K chunks over
//! pairs of row groups; everything else (2- and 8-bit codes, blocks of 16, a last single row group) runs the
//! intrinsic 4 × 8 body of the same layout (`super::qsnbp8x8_int8::gemm_pairs`). Features: neon, i8mm. No
//! over-reads (a pair's second group is always a group of the tile).

use super::qsnbp8x8_int8::MR;
use super::qsnbp8x8_tiles::{ColumnScales, PER_BLOCK, Sums, run_pairs};
use super::sve_asm::vector_asm;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon and i8mm; `args` satisfies the `RunArgs` contract with a `qsi8dbp4x8` LHS (the tile starts
/// at a row group) and a `qsnbp8x8` RHS (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,i8mm")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    // SAFETY: the caller's guarantee; the asm tile needs only neon and i8mm.
    unsafe { run_pairs(a, a.bits == 4 && a.bl.is_multiple_of(32), tile_8x8) }
}

/// One run of 8 K for the whole 8 × 4 tile: its activations (row pairs 0, 1 from `{a0}`, 2, 3 from `{a1}`,
/// both advanced to the next run) into `$x0`..`$x3`, the fields of the two column pairs (`$op` with operand
/// `$arg` applied to the code vectors `$c0`, `$c1`) into v20, v21, then 8 SMMLA into v0–v7 (v(2p + k): row pair
/// p, column pair k).
macro_rules! run_8x4 {
    ($op:literal, $arg:literal, $c0:literal, $c1:literal, $x0:literal, $x1:literal, $x2:literal, $x3:literal) => {
        concat!(
            "ldp q",
            $x0,
            ", q",
            $x1,
            ", [{a0}], #32\n",
            "ldp q",
            $x2,
            ", q",
            $x3,
            ", [{a1}], #32\n",
            $op,
            " v20.16b, v",
            $c0,
            ".16b, ",
            $arg,
            "\n",
            $op,
            " v21.16b, v",
            $c1,
            ".16b, ",
            $arg,
            "\n",
            "smmla v0.4s, v",
            $x0,
            ".16b, v20.16b\n",
            "smmla v1.4s, v",
            $x0,
            ".16b, v21.16b\n",
            "smmla v2.4s, v",
            $x1,
            ".16b, v20.16b\n",
            "smmla v3.4s, v",
            $x1,
            ".16b, v21.16b\n",
            "smmla v4.4s, v",
            $x2,
            ".16b, v20.16b\n",
            "smmla v5.4s, v",
            $x2,
            ".16b, v21.16b\n",
            "smmla v6.4s, v",
            $x3,
            ".16b, v20.16b\n",
            "smmla v7.4s, v",
            $x3,
            ".16b, v21.16b\n",
        )
    };
}

/// Row groups `g`, `g + 1` × the 8 columns of `panel` (two 8 × 4 asm tiles), over all K, into `out` ([row
/// pair p][column half j], see `super::qsnbp8x8_tiles`).
///
/// # Safety
/// The CPU has neon and i8mm; `a` satisfies the `RunArgs` contract for a `qsi8dbp4x8` LHS and a 4-bit
/// `qsnbp8x8` RHS with blocks of whole 32-K chunks; groups `g`, `g + 1` and `panel` are the tile's; `cols` is
/// filled for `panel` and `rows` is the pair's.
#[target_feature(enable = "neon,i8mm")]
unsafe fn tile_8x8(a: &RunArgs, panel: usize, g: usize, cols: &ColumnScales, rows: &[f32], out: &mut Sums) {
    debug_assert!(a.bits == 4 && a.bl.is_multiple_of(32) && a.blocks > 0);
    debug_assert!(cols.holds(a.blocks) && rows.len() == a.blocks * PER_BLOCK);
    for half in 0..2 {
        let rec = a.rhs.wrapping_add(panel * a.rhs_panel_stride + 32 * half);
        let act0 = a.lhs.wrapping_add(g * MR * a.lhs_stride);
        let act1 = a.lhs.wrapping_add((g + 1) * MR * a.lhs_stride);
        // SAFETY: reads: per block, the record's codes of column pairs 2·half, 2·half + 1 (32 of each chunk's
        // 64-byte groups, inside the record), each group's 128 bytes per chunk (4 runs of 8 K × 4 rows) and the
        // buffers' 32 f32 per block (columns from 8·half), for a.blocks blocks: all inside the tile's buffers
        // (the caller's guarantee). Writes: 32 of the 64 f32 of `out` (from 8·half). Every vector register the
        // block touches is declared; d8–d15 (callee-saved) are clobbered and saved by the compiler; the flags are
        // clobbered (no preserves_flags); no stack use.
        unsafe {
            vector_asm!(
                [] ".arch_extension i8mm",
                "movi v30.16b, #0xf0",
                "movi v0.4s, #0", "movi v1.4s, #0", "movi v2.4s, #0", "movi v3.4s, #0",
                "movi v4.4s, #0", "movi v5.4s, #0", "movi v6.4s, #0", "movi v7.4s, #0",
                "movi v8.4s, #0", "movi v9.4s, #0", "movi v10.4s, #0", "movi v11.4s, #0",
                "movi v12.4s, #0", "movi v13.4s, #0", "movi v14.4s, #0", "movi v15.4s, #0",
                // Block loop.
                "2:",
                "mov {xc}, {rec}",
                "add {rec}, {rec}, {rstride}",
                "mov {cc}, {chunks}",
                // Chunk loop: 32 K in two 64-byte groups of 8 columns × 8 K × 2 fields; field l of group g is run
                // 2l + g of the chunk, so the runs in order are: group 0 low, group 1 low, group 0 high, group 1
                // high (the low field: `shl #4`; the high one: `and #0xf0`; both 16 × the signed code).
                "3:",
                "ldp q16, q17, [{xc}], #64",
                "ldp q18, q19, [{xc}], #64",
                run_8x4!("shl", "#4", 16, 17, 22, 23, 24, 25),
                run_8x4!("shl", "#4", 18, 19, 26, 27, 28, 29),
                run_8x4!("and", "v30.16b", 16, 17, 22, 23, 24, 25),
                run_8x4!("and", "v30.16b", 18, 19, 26, 27, 28, 29),
                "subs {cc}, {cc}, #1",
                "b.ne 3b",
                // Block epilogue: y += f32(acc)·(s·sa) [+ c·sq] (the row numerics: y += f32(acc)·s [+ c·sq]).
                "ldp q16, q17, [{col}]",
                "scvtf v0.4s, v0.4s", "scvtf v1.4s, v1.4s", "scvtf v2.4s, v2.4s", "scvtf v3.4s, v3.4s",
                "scvtf v4.4s, v4.4s", "scvtf v5.4s, v5.4s", "scvtf v6.4s, v6.4s", "scvtf v7.4s, v7.4s",
                "cbnz {row}, 4f",
                "ldp q18, q19, [{rowp}]",
                "ldp q20, q21, [{rowp}, #32]",
                "fmul v22.4s, v16.4s, v18.4s", "fmul v23.4s, v17.4s, v18.4s",
                "fmul v24.4s, v16.4s, v19.4s", "fmul v25.4s, v17.4s, v19.4s",
                "fmul v26.4s, v16.4s, v20.4s", "fmul v27.4s, v17.4s, v20.4s",
                "fmul v28.4s, v16.4s, v21.4s", "fmul v29.4s, v17.4s, v21.4s",
                "fmla v8.4s, v0.4s, v22.4s", "fmla v9.4s, v1.4s, v23.4s",
                "fmla v10.4s, v2.4s, v24.4s", "fmla v11.4s, v3.4s, v25.4s",
                "fmla v12.4s, v4.4s, v26.4s", "fmla v13.4s, v5.4s, v27.4s",
                "fmla v14.4s, v6.4s, v28.4s", "fmla v15.4s, v7.4s, v29.4s",
                "b 5f",
                "4:",
                "fmla v8.4s, v0.4s, v16.4s", "fmla v9.4s, v1.4s, v17.4s",
                "fmla v10.4s, v2.4s, v16.4s", "fmla v11.4s, v3.4s, v17.4s",
                "fmla v12.4s, v4.4s, v16.4s", "fmla v13.4s, v5.4s, v17.4s",
                "fmla v14.4s, v6.4s, v16.4s", "fmla v15.4s, v7.4s, v17.4s",
                "5:",
                "cbz {zp}, 6f",
                "ldp q16, q17, [{col}, #64]",
                "ldp q18, q19, [{rowp}, #64]",
                "ldp q20, q21, [{rowp}, #96]",
                "fmla v8.4s, v16.4s, v18.4s", "fmla v9.4s, v17.4s, v18.4s",
                "fmla v10.4s, v16.4s, v19.4s", "fmla v11.4s, v17.4s, v19.4s",
                "fmla v12.4s, v16.4s, v20.4s", "fmla v13.4s, v17.4s, v20.4s",
                "fmla v14.4s, v16.4s, v21.4s", "fmla v15.4s, v17.4s, v21.4s",
                "6:",
                "movi v0.4s, #0", "movi v1.4s, #0", "movi v2.4s, #0", "movi v3.4s, #0",
                "movi v4.4s, #0", "movi v5.4s, #0", "movi v6.4s, #0", "movi v7.4s, #0",
                "add {col}, {col}, #128",
                "add {rowp}, {rowp}, #128",
                "subs {nb}, {nb}, #1",
                "b.ne 2b",
                // The sums: row pair p's column pairs 2·half, 2·half + 1 at (2p + half)·8 f32.
                "stp q8, q9, [{out}]",
                "stp q10, q11, [{out}, #64]",
                "stp q12, q13, [{out}, #128]",
                "stp q14, q15, [{out}, #192]",
                rec = inout(reg) rec => _,
                rstride = in(reg) a.rhs_record,
                chunks = in(reg) a.bl / 32,
                nb = inout(reg) a.blocks => _,
                a0 = inout(reg) act0 => _,
                a1 = inout(reg) act1 => _,
                col = inout(reg) cols.as_ptr().wrapping_add(8 * half) => _,
                rowp = inout(reg) rows.as_ptr() => _,
                out = in(reg) out.as_mut_ptr().wrapping_add(8 * half),
                row = in(reg) a.row,
                zp = in(reg) a.has_zp,
                xc = out(reg) _,
                cc = out(reg) _,
            );
        }
    }
}
