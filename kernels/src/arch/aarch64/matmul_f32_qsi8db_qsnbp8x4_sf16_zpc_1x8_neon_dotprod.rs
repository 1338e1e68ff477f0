//! int8-activation GEMV for decode (the dotprod family's kernel for M = 1..3): up to 3 rows share each panel's
//! code loads and unpacking; 8 columns per step (one row: four panels per pass while four remain, then two,
//! sharing the activation loads, the block's activation scale and the loop), one SDOT-by-element accumulator per
//! 4 columns and row.
//!
//! One row with 4-bit codes in blocks of whole 32-K chunks (decode's common case) runs the asm body
//! [`gemv_1x32`]: four panels (32 columns) per pass over all blocks in one asm block, every accumulator in a
//! register (8 int32, 8 f32 sums). Instruction budget per 32-K block of the 32 columns (64 SDOT): 64 field
//! extractions (`shl #4` / `and #0xF0`, one per SDOT: the layout pairs K with K + 16 in a byte, so each SDOT needs
//! its own operand), 8 four-register LD1 of codes and 1 of activations, and the block epilogue: 8 SCVTF, 4 LDR + 8
//! FCVTL (scales), 1 LD1R + 8 FMUL (the block's activation scale; not in the row numerics), 8 FMLA, 2 LD1 of zeros (the
//! accumulators' restart, 4 per load: `sve_asm::ld1_zero`), 6 for pointers and loop: 182, 2.84 per SDOT (zero
//! points add 19; 188 while 8 MOVI zeroed them). Measured (`scripts/aarch64/icount-kernel.sh`,
//! M = 1, 2048 × 2048, qemu -cpu neoverse-n1, the whole kernel): 2.92 per SDOT (3.01 with MOVI zeroing), against 3.15 for the intrinsic
//! body (`super::qsnbp8x4_int8::unit`, four panels per pass) it replaces there. The field extraction (1.0) and the
//! epilogue (0.8) keep this above the ~2.6–2.7 that 0.6× ORT's GEMV needs: with the two fields of a byte belonging
//! to two columns at the same K (a layout change), the raw byte and its `and #0x0F` would feed the two SDOTs and
//! one SUB per 4 columns and block would separate them. Two and three rows, 2- and 8-bit codes and blocks of 16 run
//! the intrinsic body; so do the last one to three panels.
//!
//! LHS: `qsi8db` (int8 per block, row-major, scale and Σq per block). RHS: `qsnbp8x4_sf16_zpc`, bits 2/4/8, any
//! block size 16 … 65536. Columns: whole 8-column panels from the tile's start (the last one's padding computed,
//! never stored). Features: neon,dotprod. The body is `super::qsnbp8x4_int8`. No over-reads: every load is inside a
//! record or an LHS block.

use super::ops::store_row;
use super::qsnbp8x4_int8::{NR, SDOT, unit};
use super::sve_asm::{ZEROS, asm_modes, chunk_loop, ld1_zero, movi_zero, vector_asm};
use super::walk_panels;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon,dotprod; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and a `qsnbp8x4` RHS
/// (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn run(args: &RunArgs) {
    walk_panels!(args, body, SDOT, nr = NR, rows = [3, 2, 1], panels = [4, 2]);
}

/// The walk's body: one row × four panels of 4-bit codes in whole 32-K chunks runs the asm ([`gemv_1x32`]), the
/// rest the intrinsic body (`unit`).
///
/// # Safety
/// As [`unit`]'s, and the CPU has dotprod.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn body<const OP: u8, const R: usize, const P: usize, const BITS: usize>(
    a: &RunArgs,
    panel: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    // SAFETY: forwarded (the same rows and panels); gemv_1x32 takes exactly this case.
    unsafe {
        if R == 1 && P == 4 && BITS == 4 && a.bl.is_multiple_of(32) {
            gemv_1x32(a, panel, lhs, lhs_scale, lhs_sum, dst)
        } else {
            unit::<OP, R, P, BITS>(a, panel, lhs, lhs_scale, lhs_sum, dst)
        }
    }
}

/// The asm text of the four-panel GEMV ([`gemv_1x32`]): one row × the 32 columns of four panels over all blocks, for
/// one mode (`$act` `block` | `row`, `$zp` `zp` | `nozp`, `$chunks` `one` | `many`, as the GEMMs' `tile_text!`).
/// Registers: int32 accumulators v0–v7 (panel p's columns 0–3, 4–7: v[2p], v[2p + 1]), f32 sums v8–v15 (the same
/// order), one panel's chunk of codes v16–v23 (group g's two column quads: v[16 + 2g], v[17 + 2g]), one field of a
/// group v24, v25, the field mask v26, the chunk's activations v28 (K 0–15), v29 (K 16–31). In the epilogue v16–v25
/// and v27 hold scales, products and corrections.
#[rustfmt::skip]
macro_rules! gemv_text {
    ($act:ident $zp:ident $chunks:ident) => {
        concat!(
            ".arch_extension dotprod\n",
            "movi v26.16b, #0xf0\n",
            "// {zeros}\n",
            movi_zero!("0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "14" "15"),
            // Block loop.
            "2:\n",
            chunk_loop!(head $chunks),
            "ld1 {{v28.16b, v29.16b}}, [{act}], #32\n",
            gemv_text!(@panel "{r0}" "0" "1"),
            gemv_text!(@panel "{r1}" "2" "3"),
            gemv_text!(@panel "{r2}" "4" "5"),
            gemv_text!(@panel "{r3}" "6" "7"),
            chunk_loop!(tail $chunks),
            // Block epilogue, `ops::block_epilogue`: y += f32(acc)·(s·sa) [+ c·sq] (row numerics: y += f32(acc)·s
            // [+ c·sq]); the int32 sums converted with 4 fraction bits (the fields' factor 16, exact); each
            // panel's 8 scales (f16, at `{soff}` from its pointer here).
            "scvtf v0.4s, v0.4s, #4\n", "scvtf v1.4s, v1.4s, #4\n", "scvtf v2.4s, v2.4s, #4\n", "scvtf v3.4s, v3.4s, #4\n",
            "scvtf v4.4s, v4.4s, #4\n", "scvtf v5.4s, v5.4s, #4\n", "scvtf v6.4s, v6.4s, #4\n", "scvtf v7.4s, v7.4s, #4\n",
            "ldr q16, [{r0}, {soff}]\n", "ldr q17, [{r1}, {soff}]\n",
            "ldr q18, [{r2}, {soff}]\n", "ldr q19, [{r3}, {soff}]\n",
            "fcvtl v20.4s, v16.4h\n", "fcvtl2 v21.4s, v16.8h\n", "fcvtl v22.4s, v17.4h\n", "fcvtl2 v23.4s, v17.8h\n",
            "fcvtl v16.4s, v18.4h\n", "fcvtl2 v17.4s, v18.8h\n", "fcvtl v18.4s, v19.4h\n", "fcvtl2 v19.4s, v19.8h\n",
            gemv_text!(@scale $act),
            "fmla v8.4s, v0.4s, v20.4s\n", "fmla v9.4s, v1.4s, v21.4s\n",
            "fmla v10.4s, v2.4s, v22.4s\n", "fmla v11.4s, v3.4s, v23.4s\n",
            "fmla v12.4s, v4.4s, v16.4s\n", "fmla v13.4s, v5.4s, v17.4s\n",
            "fmla v14.4s, v6.4s, v18.4s\n", "fmla v15.4s, v7.4s, v19.4s\n",
            gemv_text!(@zp $act $zp),
            ld1_zero!(["0" "1" "2" "3"] ["4" "5" "6" "7"]),
            "add {r0}, {r0}, {rskip}\n", "add {r1}, {r1}, {rskip}\n",
            "add {r2}, {r2}, {rskip}\n", "add {r3}, {r3}, {rskip}\n",
            "subs {nb}, {nb}, #1\n",
            "b.ne 2b\n",
            "stp q8, q9, [{out}]\n", "stp q10, q11, [{out}, #32]\n",
            "stp q12, q13, [{out}, #64]\n", "stp q14, q15, [{out}, #96]\n",
        )
    };
    // One panel's chunk (128 bytes at `$r`: 4 groups of 4 K × 8 columns × 2 fields) into accumulators `$c0`, `$c1`.
    (@panel $r:literal $c0:literal $c1:literal) => {
        concat!(
            "ld1 {{v16.16b, v17.16b, v18.16b, v19.16b}}, [", $r, "], #64\n",
            "ld1 {{v20.16b, v21.16b, v22.16b, v23.16b}}, [", $r, "], #64\n",
            gemv_text!(@group "16" "17" "0" $c0 $c1),
            gemv_text!(@group "18" "19" "1" $c0 $c1),
            gemv_text!(@group "20" "21" "2" $c0 $c1),
            gemv_text!(@group "22" "23" "3" $c0 $c1),
        )
    };
    // Group `$g` (K 4g…4g + 3 in the low fields, 16 + 4g… in the high ones) of column quads `$w0`, `$w1`: the low
    // fields (`shl #4`) against element g of v28, the high ones (`and #0xf0`, in place) against element g of v29.
    (@group $w0:literal $w1:literal $g:literal $c0:literal $c1:literal) => {
        concat!(
            "shl v24.16b, v", $w0, ".16b, #4\n", "shl v25.16b, v", $w1, ".16b, #4\n",
            "sdot v", $c0, ".4s, v24.16b, v28.4b[", $g, "]\n", "sdot v", $c1, ".4s, v25.16b, v28.4b[", $g, "]\n",
            "and v", $w0, ".16b, v", $w0, ".16b, v26.16b\n", "and v", $w1, ".16b, v", $w1, ".16b, v26.16b\n",
            "sdot v", $c0, ".4s, v", $w0, ".16b, v29.4b[", $g, "]\n", "sdot v", $c1, ".4s, v", $w1, ".16b, v29.4b[", $g, "]\n",
        )
    };
    // The block's activation scale sa (one per block) times the column scales.
    (@scale block) => {
        concat!(
            "ld1r {{v27.4s}}, [{sa}], #4\n",
            "fmul v20.4s, v20.4s, v27.4s\n", "fmul v21.4s, v21.4s, v27.4s\n",
            "fmul v22.4s, v22.4s, v27.4s\n", "fmul v23.4s, v23.4s, v27.4s\n",
            "fmul v16.4s, v16.4s, v27.4s\n", "fmul v17.4s, v17.4s, v27.4s\n",
            "fmul v18.4s, v18.4s, v27.4s\n", "fmul v19.4s, v19.4s, v27.4s\n",
        )
    };
    (@scale row) => { "// {sa}\n" };
    // + c·sq: sq = sa·Σq (row numerics: Σq), each panel's 8 corrections (f32, at `{zoff}` from its pointer).
    (@zp $act:ident zp) => {
        concat!(
            "ld1r {{v24.4s}}, [{sq}], #4\n",
            "scvtf v24.4s, v24.4s\n",
            gemv_text!(@sq $act),
            gemv_text!(@zp_panel "{r0}" "8" "9"),
            gemv_text!(@zp_panel "{r1}" "10" "11"),
            gemv_text!(@zp_panel "{r2}" "12" "13"),
            gemv_text!(@zp_panel "{r3}" "14" "15"),
        )
    };
    (@zp $act:ident nozp) => { "// {sq} {zoff} {t}\n" };
    (@sq block) => { "fmul v24.4s, v27.4s, v24.4s\n" };
    (@sq row) => { "" };
    (@zp_panel $r:literal $s0:literal $s1:literal) => {
        concat!(
            "add {t}, ", $r, ", {zoff}\n", "ldp q16, q17, [{t}]\n",
            "fmla v", $s0, ".4s, v16.4s, v24.4s\n", "fmla v", $s1, ".4s, v17.4s, v24.4s\n",
        )
    };
}

/// One row × the 32 columns of panels `panel` … `panel + 3` in one asm block ([`gemv_text!`]): 4-bit codes in blocks
/// of whole 32-K chunks, every accumulator in a register; the mode (numerics, zero points, one chunk per block)
/// chosen per call.
///
/// # Safety
/// The CPU has neon and dotprod; `a` satisfies the `RunArgs` contract for a `qsi8db` LHS and a 4-bit `qsnbp8x4`
/// RHS with blocks of whole 32-K chunks; `lhs`, `sa`, `sq` and `dst` are a row of the tile's (its activations, block
/// scales, Σq and output); panels `panel` … `panel + 3` are the tile's.
#[target_feature(enable = "neon,dotprod")]
// Not inlined into the walk: inlined, the code LLVM put around the asm block cost ~360 instructions per pass
// (3.07 against 3.01 per SDOT at 2048 × 2048, icount-kernel.sh).
#[inline(never)]
unsafe fn gemv_1x32(a: &RunArgs, panel: usize, lhs: *const i8, sa: *const f32, sq: *const i32, dst: *mut f32) {
    debug_assert!(a.bits == 4 && a.bl.is_multiple_of(32) && a.blocks > 0);
    let chunks = a.bl / 32;
    let codes = 128 * chunks;
    let rec = |p: usize| a.rhs.wrapping_add((panel + p) * a.rhs_panel_stride);
    let mut out = [0f32; 4 * NR];
    macro_rules! gemv_asm {
        ($act:ident $zp:ident $chunks:ident) => {
            // SAFETY: reads: per block, each panel's record (its codes, 128 bytes per chunk, then its scales and
            // corrections), the row's bl activations and its scale and Σq, for a.blocks blocks: all inside the
            // tile's buffers (the caller's guarantee); the pointers step past the last block without reading
            // there. Writes: `out`'s 32 f32. Every vector register the block touches is declared; d8–d15
            // (callee-saved) are clobbered and saved by the compiler; the flags are clobbered; no stack use.
            // The accumulators restart from the 64 bytes of `sve_asm::ZEROS` (a static).
            unsafe {
                vector_asm!(
                    [] gemv_text!($act $zp $chunks),
                    r0 = inout(reg) rec(0) => _,
                    r1 = inout(reg) rec(1) => _,
                    r2 = inout(reg) rec(2) => _,
                    r3 = inout(reg) rec(3) => _,
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
