//! int8-activation GEMV for decode on the i8mm family's weights (`qsnbp8x8`), SVE at 256 bits: one row × 32
//! columns (4 panels) per pass. One 32-byte load holds two column pairs (4 columns × 8 K); SVE SDOT against 8
//! activations replicated into every 64-bit lane (`ld1rd`) gives (column, K half) int32 lanes, twice the NEON
//! vector SDOT's work per instruction. The whole block loop is one `asm!` block (no SVE intrinsics on stable
//! Rust): int32 accumulators z0–z7 ([panel][column half]), f32 sums z8–z15 in the same (column, K half) lanes
//! (the two halves are added once, after the last block), codes z16/z17, one field z18/z19, the chunk's
//! activations z20–z23, the field mask z24, the epilogue's vectors z25–z31.
//!
//! The kernel uses the first 256 bits of the vector (predicates `vl8` / `vl4`), so it runs at any SVE vector
//! length of at least 256 bits (`min_sve_vl` = 32) and is selected only there; the length is read again on every
//! call (per thread, changeable): shorter than 256 bits, the NEON GEMV runs.
//!
//! Instruction budget per 32 K × 8 columns (one panel, one block of 32), 4-bit codes, symmetric (per SVE SDOT: /
//! 8): 8 SDOT; 4 code loads; 8 field extractions; the chunk's 4 activation loads shared by 4 panels (1); the block
//! epilogue: 2 scale loads, 2 FCVT, 2 ZIP1 (each column's scale into its two K-half lanes), 2 FMUL (× sa),
//! 2 SCVTF, 2 FMLA, the zeroing (2 NEON LD1 of zeros per 4 panels: 0.5; 2 DUP per panel before) and 2 address ADD (16; zero points add 2 loads, 2 ZIP1, 2 FMLA, 1 ADD); loop
//! ~1.5. Total ~38.5 per panel and block, ~4.8 per SVE SDOT = ~2.4 per NEON-SDOT-equivalent (the NEON GEMV of
//! this layout measures 3.53 per SDOT). The block's activation scale sa and Σq are read straight from the packed
//! activations (`ld1rw`, one of each per block and pass; Σq only with zero points, as 16·sa·Σq); the fields' 2^4
//! is taken out of the pass's sums once, when they are stored (× 1/16: exact, so the sums are those of
//! sa/16 per block bit for bit). Nothing is laid out per call or per task: a decode call is cut into up to 32
//! tasks (`plan::TilePlan::TARGET_TILES`), and a table of the row's block factors, allocated and filled by every
//! task, cost ~1.3 k instructions per task (~5% of a 2048² Run).
//!
//! LHS: `qsi8db`; RHS: `qsnbp8x8_sf16_zpc`. The asm runs one row, 4-bit codes in blocks of whole 32-K chunks,
//! four panels at a time; the last 1–3 panels, other bit widths, blocks of 16 and tiles of more rows run the NEON
//! GEMV of the same layout (`super::qsnbp8x8_int8::gemv_unit`). Features: neon, dotprod, sve. No over-reads.

use super::matmul_f32_qsi8db_qsnbp8x8_sf16_zpc_1x8_neon_dotprod as neon;
use super::ops::{store4, sve_vl_bytes};
use super::qsnbp8x8_int8::{NR, gemv_unit};
use super::sve_asm::{chunk_loop, store_sums, sve_asm, zero_acc, zero_all};
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

/// Panels per asm pass.
const PANELS: usize = 4;

/// # Safety
/// The CPU has neon, dotprod and SVE with a vector length of at least 32 bytes; `args` satisfies the `RunArgs`
/// contract with a `qsi8db` LHS and a `qsnbp8x8` RHS (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,dotprod,sve")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    // The asm needs 256-bit vectors: this thread's may have been shortened since selection (see `sve_vl_bytes`).
    if a.rows != 1 || a.bits != 4 || !a.bl.is_multiple_of(32) || sve_vl_bytes() < 32 {
        // SAFETY: the same contract; the CPU has neon and dotprod.
        return unsafe { neon::run(a) };
    }
    let panels = a.cols.div_ceil(NR);
    let quads = panels / PANELS;
    let lhs = a.lhs.cast::<i8>();
    for q in 0..quads {
        let mut out = [0f32; 64];
        // SAFETY: panels 4q .. 4q + 4 are the tile's; row 0 is the tile's; the CPU has SVE at ≥ 256 bits.
        unsafe { pass(a, PANELS * q, &mut out) };
        for p in 0..PANELS {
            for j in 0..2 {
                let col = (PANELS * q + p) * NR + 4 * j;
                if col >= a.cols {
                    break;
                }
                // SAFETY: the 8 lanes of [panel p][column half j] inside `out`; row 0's columns below cols are
                // inside dst and bias.
                unsafe {
                    let at = out.as_ptr().add((2 * p + j) * 8);
                    // The fields' 2^4 (the sums were taken with sa, not sa/16): exact.
                    let v = vmulq_n_f32(vpaddq_f32(vld1q_f32(at), vld1q_f32(at.add(4))), 1.0 / 16.0);
                    store4(a.dst, a.bias, col, a.cols, v);
                }
            }
        }
    }
    let mut panel = PANELS * quads;
    while panel < panels {
        let pp = if panel + 2 <= panels { 2 } else { 1 };
        // SAFETY: row 0 and panels panel .. panel + pp are the tile's; the CPU has dotprod.
        unsafe {
            if pp == 2 {
                gemv_unit::<1, 2, 4>(a, panel, lhs, a.lhs_scale, a.lhs_sum, a.dst)
            } else {
                gemv_unit::<1, 1, 4>(a, panel, lhs, a.lhs_scale, a.lhs_sum, a.dst)
            }
        }
        panel += pp;
    }
}

/// Row 0 × the 32 columns of panels `panel .. panel + 4`, over all K, into `out`, times 16 (the fields' 2^4 is
/// left in): [panel p][column half j] 8 f32 each, lanes (column, K half): c0 lo, c0 hi, c1 lo, c1 hi, … (adding
/// each pair gives the 4 columns).
///
/// # Safety
/// The CPU has SVE with a vector length of at least 32 bytes; `a` satisfies the `RunArgs` contract for a `qsi8db`
/// LHS and a 4-bit `qsnbp8x8` RHS with blocks of whole 32-K chunks; panels `panel .. panel + 4` are the tile's.
#[target_feature(enable = "neon,sve")]
unsafe fn pass(a: &RunArgs, panel: usize, out: &mut [f32; 64]) {
    debug_assert!(a.bits == 4 && a.bl.is_multiple_of(32) && a.blocks > 0);
    // Blocks of one 32-K chunk (`one`) have no chunk loop and leave the panels' pointers at their records; longer
    // ones step them past each chunk's codes (`many`).
    let one = a.bl == 32;
    let codes_bytes = if one { 0 } else { a.bl / 32 * 128 };
    let rec: [*const u8; PANELS] = core::array::from_fn(|p| a.rhs.wrapping_add((panel + p) * a.rhs_panel_stride));
    // After a block's chunks each panel's pointer is at its record's end of codes (at its start in `one`): the
    // scales, corrections and next record are at these distances from there.
    let (to_scales, to_zp, to_next) =
        (a.rhs_scales - codes_bytes, a.rhs_zp.wrapping_sub(codes_bytes), a.rhs_record - codes_bytes);
    // The pass in one mode of the chunk loop (`one` | `many`, `sve_asm::chunk_loop!`).
    macro_rules! pass_asm {
        ($ch:ident) => {
            sve_asm!(
                ".arch_extension sve",
                "ptrue p1.s, vl8",
                "ptrue p2.s, vl4",
                "ptrue p3.d, vl4",
                "dup z24.b, #-16",
                "dup z29.s, #0",
                zero_all!(),
                // Block loop.
                "2:",
                // Chunk loop: 32 K; group g's field l covers chunk K 16l + 8g .. + 8.
                chunk_loop!(head $ch),
                "ld1rd {{z20.d}}, p3/z, [{xa}]",
                "ld1rd {{z21.d}}, p3/z, [{xa}, #16]",
                "ld1rd {{z22.d}}, p3/z, [{xa}, #8]",
                "ld1rd {{z23.d}}, p3/z, [{xa}, #24]",
                "add {xa}, {xa}, #32",
                // Panel 0.
                "ld1w {{z16.s}}, p1/z, [{c0}]",
                "ld1w {{z17.s}}, p1/z, [{c0}, {e8}, lsl #2]",
                "lsl z18.b, z16.b, #4", "lsl z19.b, z17.b, #4",
                "sdot z0.s, z18.b, z20.b", "sdot z1.s, z19.b, z20.b",
                "and z18.d, z16.d, z24.d", "and z19.d, z17.d, z24.d",
                "sdot z0.s, z18.b, z21.b", "sdot z1.s, z19.b, z21.b",
                "ld1w {{z16.s}}, p1/z, [{c0}, {e16}, lsl #2]",
                "ld1w {{z17.s}}, p1/z, [{c0}, {e24}, lsl #2]",
                "lsl z18.b, z16.b, #4", "lsl z19.b, z17.b, #4",
                "sdot z0.s, z18.b, z22.b", "sdot z1.s, z19.b, z22.b",
                "and z18.d, z16.d, z24.d", "and z19.d, z17.d, z24.d",
                "sdot z0.s, z18.b, z23.b", "sdot z1.s, z19.b, z23.b",
                step!($ch, "add {c0}, {c0}, #128"),
                // Panel 1.
                "ld1w {{z16.s}}, p1/z, [{c1}]",
                "ld1w {{z17.s}}, p1/z, [{c1}, {e8}, lsl #2]",
                "lsl z18.b, z16.b, #4", "lsl z19.b, z17.b, #4",
                "sdot z2.s, z18.b, z20.b", "sdot z3.s, z19.b, z20.b",
                "and z18.d, z16.d, z24.d", "and z19.d, z17.d, z24.d",
                "sdot z2.s, z18.b, z21.b", "sdot z3.s, z19.b, z21.b",
                "ld1w {{z16.s}}, p1/z, [{c1}, {e16}, lsl #2]",
                "ld1w {{z17.s}}, p1/z, [{c1}, {e24}, lsl #2]",
                "lsl z18.b, z16.b, #4", "lsl z19.b, z17.b, #4",
                "sdot z2.s, z18.b, z22.b", "sdot z3.s, z19.b, z22.b",
                "and z18.d, z16.d, z24.d", "and z19.d, z17.d, z24.d",
                "sdot z2.s, z18.b, z23.b", "sdot z3.s, z19.b, z23.b",
                step!($ch, "add {c1}, {c1}, #128"),
                // Panel 2.
                "ld1w {{z16.s}}, p1/z, [{c2}]",
                "ld1w {{z17.s}}, p1/z, [{c2}, {e8}, lsl #2]",
                "lsl z18.b, z16.b, #4", "lsl z19.b, z17.b, #4",
                "sdot z4.s, z18.b, z20.b", "sdot z5.s, z19.b, z20.b",
                "and z18.d, z16.d, z24.d", "and z19.d, z17.d, z24.d",
                "sdot z4.s, z18.b, z21.b", "sdot z5.s, z19.b, z21.b",
                "ld1w {{z16.s}}, p1/z, [{c2}, {e16}, lsl #2]",
                "ld1w {{z17.s}}, p1/z, [{c2}, {e24}, lsl #2]",
                "lsl z18.b, z16.b, #4", "lsl z19.b, z17.b, #4",
                "sdot z4.s, z18.b, z22.b", "sdot z5.s, z19.b, z22.b",
                "and z18.d, z16.d, z24.d", "and z19.d, z17.d, z24.d",
                "sdot z4.s, z18.b, z23.b", "sdot z5.s, z19.b, z23.b",
                step!($ch, "add {c2}, {c2}, #128"),
                // Panel 3.
                "ld1w {{z16.s}}, p1/z, [{c3}]",
                "ld1w {{z17.s}}, p1/z, [{c3}, {e8}, lsl #2]",
                "lsl z18.b, z16.b, #4", "lsl z19.b, z17.b, #4",
                "sdot z6.s, z18.b, z20.b", "sdot z7.s, z19.b, z20.b",
                "and z18.d, z16.d, z24.d", "and z19.d, z17.d, z24.d",
                "sdot z6.s, z18.b, z21.b", "sdot z7.s, z19.b, z21.b",
                "ld1w {{z16.s}}, p1/z, [{c3}, {e16}, lsl #2]",
                "ld1w {{z17.s}}, p1/z, [{c3}, {e24}, lsl #2]",
                "lsl z18.b, z16.b, #4", "lsl z19.b, z17.b, #4",
                "sdot z6.s, z18.b, z22.b", "sdot z7.s, z19.b, z22.b",
                "and z18.d, z16.d, z24.d", "and z19.d, z17.d, z24.d",
                "sdot z6.s, z18.b, z23.b", "sdot z7.s, z19.b, z23.b",
                step!($ch, "add {c3}, {c3}, #128"),
                chunk_loop!(tail $ch),
                // Block epilogue: 16·y += f32(acc)·(s·sa) [+ (c, 0)·16·sa·Σq]; each column's scale in both its
                // K-half lanes, its correction in the low one only.
                "ld1rw {{z27.s}}, p1/z, [{xs}]",
                "add {xs}, {xs}, #4",
                "scvtf z0.s, p1/m, z0.s", "scvtf z1.s, p1/m, z1.s",
                "scvtf z2.s, p1/m, z2.s", "scvtf z3.s, p1/m, z3.s",
                "scvtf z4.s, p1/m, z4.s", "scvtf z5.s, p1/m, z5.s",
                "scvtf z6.s, p1/m, z6.s", "scvtf z7.s, p1/m, z7.s",
                "add {xt}, {c0}, {to_scales}",
                "ld1h {{z25.s}}, p2/z, [{xt}]",
                "ld1h {{z26.s}}, p2/z, [{xt}, {e4}, lsl #1]",
                "fcvt z25.s, p2/m, z25.h", "fcvt z26.s, p2/m, z26.h",
                "zip1 z25.s, z25.s, z25.s", "zip1 z26.s, z26.s, z26.s",
                "fmul z25.s, z25.s, z27.s", "fmul z26.s, z26.s, z27.s",
                "fmla z8.s, p1/m, z0.s, z25.s", "fmla z9.s, p1/m, z1.s, z26.s",
                "add {xt}, {c1}, {to_scales}",
                "ld1h {{z25.s}}, p2/z, [{xt}]",
                "ld1h {{z26.s}}, p2/z, [{xt}, {e4}, lsl #1]",
                "fcvt z25.s, p2/m, z25.h", "fcvt z26.s, p2/m, z26.h",
                "zip1 z25.s, z25.s, z25.s", "zip1 z26.s, z26.s, z26.s",
                "fmul z25.s, z25.s, z27.s", "fmul z26.s, z26.s, z27.s",
                "fmla z10.s, p1/m, z2.s, z25.s", "fmla z11.s, p1/m, z3.s, z26.s",
                "add {xt}, {c2}, {to_scales}",
                "ld1h {{z25.s}}, p2/z, [{xt}]",
                "ld1h {{z26.s}}, p2/z, [{xt}, {e4}, lsl #1]",
                "fcvt z25.s, p2/m, z25.h", "fcvt z26.s, p2/m, z26.h",
                "zip1 z25.s, z25.s, z25.s", "zip1 z26.s, z26.s, z26.s",
                "fmul z25.s, z25.s, z27.s", "fmul z26.s, z26.s, z27.s",
                "fmla z12.s, p1/m, z4.s, z25.s", "fmla z13.s, p1/m, z5.s, z26.s",
                "add {xt}, {c3}, {to_scales}",
                "ld1h {{z25.s}}, p2/z, [{xt}]",
                "ld1h {{z26.s}}, p2/z, [{xt}, {e4}, lsl #1]",
                "fcvt z25.s, p2/m, z25.h", "fcvt z26.s, p2/m, z26.h",
                "zip1 z25.s, z25.s, z25.s", "zip1 z26.s, z26.s, z26.s",
                "fmul z25.s, z25.s, z27.s", "fmul z26.s, z26.s, z27.s",
                "fmla z14.s, p1/m, z6.s, z25.s", "fmla z15.s, p1/m, z7.s, z26.s",
                "cbz {zp}, 4f",
                "ld1rw {{z28.s}}, p1/z, [{xq}]",
                "add {xq}, {xq}, #4",
                "lsl z28.s, z28.s, #4",
                "scvtf z28.s, p1/m, z28.s",
                "fmul z28.s, z28.s, z27.s",
                "add {xt}, {c0}, {to_zp}",
                "ld1w {{z30.s}}, p2/z, [{xt}]",
                "ld1w {{z31.s}}, p2/z, [{xt}, {e4}, lsl #2]",
                "zip1 z30.s, z30.s, z29.s", "zip1 z31.s, z31.s, z29.s",
                "fmla z8.s, p1/m, z30.s, z28.s", "fmla z9.s, p1/m, z31.s, z28.s",
                "add {xt}, {c1}, {to_zp}",
                "ld1w {{z30.s}}, p2/z, [{xt}]",
                "ld1w {{z31.s}}, p2/z, [{xt}, {e4}, lsl #2]",
                "zip1 z30.s, z30.s, z29.s", "zip1 z31.s, z31.s, z29.s",
                "fmla z10.s, p1/m, z30.s, z28.s", "fmla z11.s, p1/m, z31.s, z28.s",
                "add {xt}, {c2}, {to_zp}",
                "ld1w {{z30.s}}, p2/z, [{xt}]",
                "ld1w {{z31.s}}, p2/z, [{xt}, {e4}, lsl #2]",
                "zip1 z30.s, z30.s, z29.s", "zip1 z31.s, z31.s, z29.s",
                "fmla z12.s, p1/m, z30.s, z28.s", "fmla z13.s, p1/m, z31.s, z28.s",
                "add {xt}, {c3}, {to_zp}",
                "ld1w {{z30.s}}, p2/z, [{xt}]",
                "ld1w {{z31.s}}, p2/z, [{xt}, {e4}, lsl #2]",
                "zip1 z30.s, z30.s, z29.s", "zip1 z31.s, z31.s, z29.s",
                "fmla z14.s, p1/m, z30.s, z28.s", "fmla z15.s, p1/m, z31.s, z28.s",
                "4:",
                zero_acc!(),
                "add {c0}, {c0}, {to_next}",
                "add {c1}, {c1}, {to_next}",
                "add {c2}, {c2}, {to_next}",
                "add {c3}, {c3}, {to_next}",
                "subs {nb}, {nb}, #1",
                "b.ne 2b",
                // The sums, [panel][column half].
                store_sums!(),
                c0 = inout(reg) rec[0] => _,
                c1 = inout(reg) rec[1] => _,
                c2 = inout(reg) rec[2] => _,
                c3 = inout(reg) rec[3] => _,
                xa = inout(reg) a.lhs => _,
                xs = inout(reg) a.lhs_scale => _,
                xq = inout(reg) a.lhs_sum => _,
                nb = inout(reg) a.blocks => _,
                out = inout(reg) out.as_mut_ptr() => _,
                chunks = in(reg) a.bl / 32,
                to_scales = in(reg) to_scales,
                to_zp = in(reg) to_zp,
                to_next = in(reg) to_next,
                zp = in(reg) a.has_zp,
                e4 = in(reg) 4usize,
                e8 = in(reg) 8usize,
                e16 = in(reg) 16usize,
                e24 = in(reg) 24usize,
                cc = out(reg) _,
                zeros = in(reg) super::sve_asm::ZEROS.0.as_ptr(),
                xt = out(reg) _,
            )
        };
    }
    // The step of a panel's pointer past a chunk, only between chunks (`many`).
    macro_rules! step {
        (one, $s:literal) => {
            ""
        };
        (many, $s:literal) => {
            $s
        };
    }
    // SAFETY: reads per block: each panel's record (its codes, 8 f16 scales and, with zero points, 8 f32
    // corrections), the row's bl activation bytes, its scale and (with zero points) its Σq, for a.blocks blocks,
    // all inside the tile's buffers (the caller's guarantee); writes: the 64 f32 of `out`. Every vector, predicate and scratch register
    // the block touches is declared; d8–d15 (callee-saved) are clobbered and saved by the compiler; the flags are
    // clobbered.
    // The accumulators restart from the 64 bytes of `sve_asm::ZEROS` (a static).
    unsafe { if one { pass_asm!(one) } else { pass_asm!(many) } }
}
