//! int8-activation GEMV for decode on the i8mm family's weights (`qsnbp8x8`, the SMMLA operand shape): up to 2
//! rows × 8 columns per pass over a panel, vector SDOT of each column pair against 8 activations duplicated in
//! both 64-bit halves, 4 int32 accumulators per row folded with `addp` once per block.
//!
//! One row with 4-bit codes in blocks of whole 32-K chunks (decode's common case) runs the asm body
//! [`gemv_1x16`]: two panels (16 columns) per pass over all blocks in one asm block, every accumulator in a
//! register, the chunk's activations by one LD4R (four 8-K runs, each in both halves), each panel's 64-byte groups
//! by one 4-register LD1. Budget per 32-K block of the 16 columns (32 SDOT): 32 field extractions (one per SDOT:
//! the layout pairs K with K + 16 in a byte), 4 LD1 + 1 LD4R, and the block epilogue: 4 ADDP, 4 SCVTF, 2 LDR + 4
//! FCVTL (scales), 1 LD1R + 4 FMUL (the block's activation scale; not in the row numerics), 4 FMLA, 2 LD1 of zeros
//! (the accumulators' restart, 4 per load: `sve_asm::ld1_zero`; 8 MOVI before), 4 for pointers and loop: 98, 3.06
//! per SDOT (zero points add 10). Measured (`scripts/aarch64/icount-kernel.sh`, M = 1,
//! 2048 × 2048, qemu 7.2 `-cpu max,sve=off`, the whole kernel): 3.15 per SDOT (3.33 with MOVI zeroing), against 3.62 for the intrinsic body
//! (`super::qsnbp8x8_int8::gemv_unit`) it replaces there. The epilogue is a third of it: per 4 columns and block,
//! 8 SDOT against ~7.5 instructions of ADDP, conversion, scales and zeroing, so at blocks of 32 this body stays
//! above the ~2.7 per SDOT that 0.6× ORT's GEMV would need. Two rows, a last odd panel, 2- and 8-bit codes and
//! blocks of 16 run `gemv_unit`.
//!
//! LHS: `qsi8db` (int8 per block, row-major, scale and Σq per block). RHS: `qsnbp8x8_sf16_zpc`, bits 2/4/8,
//! block sizes 16 … 65536 whose fields hold whole 8-K runs (not 2-bit at bl 16: the layout refuses it). Columns:
//! whole 8-column panels from the tile's start (the last one's padding computed, never stored). Features: neon,
//! dotprod. No over-reads.

use super::ops::store_row;
use super::qsnbp8x8_int8::{NR, gemv_unit};
use super::sve_asm::{ZEROS, asm_modes, chunk_loop, ld1_zero, movi_zero, vector_asm};
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon and dotprod; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and a `qsnbp8x8`
/// RHS (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    let panels = a.cols.div_ceil(NR);
    let asm = a.bits == 4 && a.bl.is_multiple_of(32);
    let mut r0 = 0;
    while r0 < a.rows {
        let rows = (a.rows - r0).min(2);
        // SAFETY: rows r0..r0 + rows are inside the tile, so are their LHS rows, scales, sums and output rows
        // (RunArgs contract); the panels walked are the tile's; the CPU has dotprod.
        unsafe {
            let lhs = a.lhs.cast::<i8>().add(r0 * a.lhs_stride);
            let (sc, sm) = (a.lhs_scale.add(r0 * a.blocks), a.lhs_sum.add(r0 * a.blocks));
            let dst = a.dst.add(r0 * a.dst_stride);
            let mut panel = 0;
            while panel < panels {
                // One row: two panels per pass while two remain; two rows: one.
                let p = if rows == 1 && panel + 2 <= panels { 2 } else { 1 };
                match (rows, p, a.bits) {
                    (1, 2, 4) if asm => gemv_1x16(a, panel, lhs, sc, sm, dst),
                    (1, 2, 2) => gemv_unit::<1, 2, 2>(a, panel, lhs, sc, sm, dst),
                    (1, 2, 4) => gemv_unit::<1, 2, 4>(a, panel, lhs, sc, sm, dst),
                    (1, 2, _) => gemv_unit::<1, 2, 8>(a, panel, lhs, sc, sm, dst),
                    (1, _, 2) => gemv_unit::<1, 1, 2>(a, panel, lhs, sc, sm, dst),
                    (1, _, 4) => gemv_unit::<1, 1, 4>(a, panel, lhs, sc, sm, dst),
                    (1, _, _) => gemv_unit::<1, 1, 8>(a, panel, lhs, sc, sm, dst),
                    (_, _, 2) => gemv_unit::<2, 1, 2>(a, panel, lhs, sc, sm, dst),
                    (_, _, 4) => gemv_unit::<2, 1, 4>(a, panel, lhs, sc, sm, dst),
                    (_, _, _) => gemv_unit::<2, 1, 8>(a, panel, lhs, sc, sm, dst),
                }
                panel += p;
            }
        }
        r0 += rows;
    }
}

/// The asm text of the two-panel GEMV ([`gemv_1x16`]): one row × the 16 columns of two panels over all blocks, for
/// one mode (`$act` `block` | `row`, `$zp` `zp` | `nozp`, `$chunks` `one` | `many`, as the GEMMs' `tile_text!`).
/// Registers: int32 accumulators v0–v7 (panel p, column pair j: v[4p + j]; lanes (column, K half)), f32 sums
/// v8–v11 (panel p's columns 0–3, 4–7: v[8 + 2p], v[9 + 2p]), the field mask v12, the row's scale v13 and sa·Σq
/// v14, one 64-byte group of each panel's codes v16–v19 / v20–v23, one field v24–v27, the chunk's four 8-K runs
/// of activations each in both 64-bit halves v28–v31 (one LD4R). In the epilogue v24–v27 hold the column scales
/// (then corrections).
#[rustfmt::skip]
macro_rules! gemv_text {
    ($act:ident $zp:ident $chunks:ident) => {
        concat!(
            ".arch_extension dotprod\n",
            "movi v12.16b, #0xf0\n",
            "// {zeros}\n",
            movi_zero!("0" "1" "2" "3" "4" "5" "6" "7"),
            movi_zero!("8" "9" "10" "11"),
            // Block loop.
            "2:\n",
            chunk_loop!(head $chunks),
            // The chunk's 32 activations as four 8-K runs, each in both halves: K 0–7, 8–15, 16–23, 24–31.
            "ld4r {{v28.2d, v29.2d, v30.2d, v31.2d}}, [{act}], #32\n",
            // Group h (64 bytes per panel: 8 columns × 8 K × 2 fields): the low field is K 8h…, the high one
            // K 16 + 8h….
            gemv_text!(@group "v28" "v30"),
            gemv_text!(@group "v29" "v31"),
            chunk_loop!(tail $chunks),
            // Block epilogue, `ops::block_epilogue`: y += f32(acc)·(s·sa) [+ c·sq] (row numerics: y += f32(acc)·s
            // [+ c·sq]). Column pairs folded to columns (ADDP), converted with 4 fraction bits (the fields'
            // factor 16, exact); each panel's 8 scales (f16, at `{soff}` from its pointer here).
            "addp v0.4s, v0.4s, v1.4s\n", "addp v1.4s, v2.4s, v3.4s\n",
            "addp v2.4s, v4.4s, v5.4s\n", "addp v3.4s, v6.4s, v7.4s\n",
            "scvtf v0.4s, v0.4s, #4\n", "scvtf v1.4s, v1.4s, #4\n",
            "scvtf v2.4s, v2.4s, #4\n", "scvtf v3.4s, v3.4s, #4\n",
            "ldr q24, [{r0}, {soff}]\n", "ldr q27, [{r1}, {soff}]\n",
            "fcvtl v25.4s, v24.4h\n", "fcvtl2 v26.4s, v24.8h\n",
            "fcvtl v24.4s, v27.4h\n", "fcvtl2 v27.4s, v27.8h\n",
            gemv_text!(@scale $act),
            "fmla v8.4s, v0.4s, v25.4s\n", "fmla v9.4s, v1.4s, v26.4s\n",
            "fmla v10.4s, v2.4s, v24.4s\n", "fmla v11.4s, v3.4s, v27.4s\n",
            gemv_text!(@zp $act $zp),
            ld1_zero!(["0" "1" "2" "3"] ["4" "5" "6" "7"]),
            "add {r0}, {r0}, {rskip}\n", "add {r1}, {r1}, {rskip}\n",
            "subs {nb}, {nb}, #1\n",
            "b.ne 2b\n",
            "stp q8, q9, [{out}]\n", "stp q10, q11, [{out}, #32]\n",
        )
    };
    // One 64-byte group of both panels: the low fields (`shl #4`) against `$lo`, the high ones (`and #0xf0`, in
    // place) against `$hi`; 16 SDOT.
    (@group $lo:literal $hi:literal) => {
        concat!(
            "ld1 {{v16.16b, v17.16b, v18.16b, v19.16b}}, [{r0}], #64\n",
            "ld1 {{v20.16b, v21.16b, v22.16b, v23.16b}}, [{r1}], #64\n",
            gemv_text!(@panel $lo $hi "16" "17" "18" "19" "0" "1" "2" "3"),
            gemv_text!(@panel $lo $hi "20" "21" "22" "23" "4" "5" "6" "7"),
        )
    };
    (@panel $lo:literal $hi:literal $w0:literal $w1:literal $w2:literal $w3:literal
     $c0:literal $c1:literal $c2:literal $c3:literal) => {
        concat!(
            "shl v24.16b, v", $w0, ".16b, #4\n", "shl v25.16b, v", $w1, ".16b, #4\n",
            "shl v26.16b, v", $w2, ".16b, #4\n", "shl v27.16b, v", $w3, ".16b, #4\n",
            "sdot v", $c0, ".4s, v24.16b, ", $lo, ".16b\n", "sdot v", $c1, ".4s, v25.16b, ", $lo, ".16b\n",
            "sdot v", $c2, ".4s, v26.16b, ", $lo, ".16b\n", "sdot v", $c3, ".4s, v27.16b, ", $lo, ".16b\n",
            "and v", $w0, ".16b, v", $w0, ".16b, v12.16b\n", "and v", $w1, ".16b, v", $w1, ".16b, v12.16b\n",
            "and v", $w2, ".16b, v", $w2, ".16b, v12.16b\n", "and v", $w3, ".16b, v", $w3, ".16b, v12.16b\n",
            "sdot v", $c0, ".4s, v", $w0, ".16b, ", $hi, ".16b\n", "sdot v", $c1, ".4s, v", $w1, ".16b, ", $hi, ".16b\n",
            "sdot v", $c2, ".4s, v", $w2, ".16b, ", $hi, ".16b\n", "sdot v", $c3, ".4s, v", $w3, ".16b, ", $hi, ".16b\n",
        )
    };
    // The block's activation scale sa (row 0's, one per block) times the column scales.
    (@scale block) => {
        concat!(
            "ld1r {{v13.4s}}, [{sa}], #4\n",
            "fmul v25.4s, v25.4s, v13.4s\n", "fmul v26.4s, v26.4s, v13.4s\n",
            "fmul v24.4s, v24.4s, v13.4s\n", "fmul v27.4s, v27.4s, v13.4s\n",
        )
    };
    (@scale row) => { "// {sa}\n" };
    // + c·sq: sq = sa·Σq (row numerics: Σq), the corrections (f32, at `{zoff}` from each panel's pointer).
    (@zp $act:ident zp) => {
        concat!(
            "ld1r {{v14.4s}}, [{sq}], #4\n",
            "scvtf v14.4s, v14.4s\n",
            gemv_text!(@sq $act),
            "add {t}, {r0}, {zoff}\n", "ldp q24, q25, [{t}]\n",
            "add {t}, {r1}, {zoff}\n", "ldp q26, q27, [{t}]\n",
            "fmla v8.4s, v24.4s, v14.4s\n", "fmla v9.4s, v25.4s, v14.4s\n",
            "fmla v10.4s, v26.4s, v14.4s\n", "fmla v11.4s, v27.4s, v14.4s\n",
        )
    };
    (@zp $act:ident nozp) => { "// {sq} {zoff} {t}\n" };
    (@sq block) => { "fmul v14.4s, v13.4s, v14.4s\n" };
    (@sq row) => { "" };
}

/// One row × the 16 columns of panels `panel`, `panel + 1` in one asm block ([`gemv_text!`]): 4-bit codes in blocks
/// of whole 32-K chunks, every accumulator in a register; the mode (numerics, zero points, one chunk per block)
/// chosen per call. Per 32-K block: 64 SDOT, 64 field extractions, 4 code loads and one LD4R of activations, and
/// an epilogue of 4 ADDP, 4 SCVTF, 2 LDR + 4 FCVTL (scales), 1 LD1R + 4 FMUL (block numerics), 4 FMLA, 8 MOVI and 4
/// for pointers and loop: 168 (2.6 per SDOT); zero points add 10.
///
/// # Safety
/// The CPU has neon and dotprod; `a` satisfies the `RunArgs` contract for a `qsi8db` LHS and a 4-bit `qsnbp8x8`
/// RHS with blocks of whole 32-K chunks; `lhs`, `sa`, `sq` and `dst` are a row of the tile's (its activations, block
/// scales, Σq and output); panels `panel`, `panel + 1` are the tile's.
#[target_feature(enable = "neon,dotprod")]
unsafe fn gemv_1x16(a: &RunArgs, panel: usize, lhs: *const i8, sa: *const f32, sq: *const i32, dst: *mut f32) {
    debug_assert!(a.bits == 4 && a.bl.is_multiple_of(32) && a.blocks > 0);
    let chunks = a.bl / 32;
    let codes = 128 * chunks;
    let r0 = a.rhs.wrapping_add(panel * a.rhs_panel_stride);
    let mut out = [0f32; 2 * NR];
    macro_rules! gemv_asm {
        ($act:ident $zp:ident $chunks:ident) => {
            // SAFETY: reads: per block, each panel's record (its codes, 128 bytes per chunk, then its scales and
            // corrections), the row's bl activations and its scale and Σq, for a.blocks blocks: all inside the
            // tile's buffers (the caller's guarantee); the pointers step past the last block without reading
            // there. Writes: `out`'s 16 f32. Every vector register the block touches is declared; d8–d15
            // (callee-saved) are clobbered and saved by the compiler; the flags are clobbered; no stack use.
            // The accumulators restart from the 64 bytes of `sve_asm::ZEROS` (a static).
            unsafe {
                vector_asm!(
                    [] gemv_text!($act $zp $chunks),
                    r0 = inout(reg) r0 => _,
                    r1 = inout(reg) r0.wrapping_add(a.rhs_panel_stride) => _,
                    rskip = in(reg) a.rhs_record - codes,
                    chunks = in(reg) chunks,
                    nb = inout(reg) a.blocks => _,
                    act = inout(reg) lhs => _,
                    sa = inout(reg) sa => _,
                    sq = inout(reg) sq => _,
                    soff = in(reg) a.rhs_scales as isize - codes as isize,
                    zoff = in(reg) a.rhs_zp as isize - codes as isize,
                    out = in(reg) out.as_mut_ptr(),
                    cc = out(reg) _,
                    zeros = in(reg) ZEROS.0.as_ptr(),
                    t = out(reg) _,
                )
            }
        };
    }
    asm_modes!(gemv_asm; a.row != 0, a.has_zp != 0, chunks == 1);
    // SAFETY: `dst` is the tile's row (the caller's guarantee), columns from panel·8.
    unsafe { store_row(a, dst, panel * NR, &out) };
}
