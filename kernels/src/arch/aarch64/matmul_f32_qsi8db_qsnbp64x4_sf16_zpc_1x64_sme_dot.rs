//! int8-activation GEMV for decode on the SME2 family's weights (`qsnbp64x4`): one row × one 64-column panel per
//! pass, SME2's multi-vector SDOT (indexed) accumulating int32 into ZA, the per-block epilogue's f32 sums kept in
//! ZA too (multi-vector FMLA into ZA), so that nothing but the codes, the activations and the scales moves per
//! block. The whole tile (every whole panel of it) is one streaming `asm!` block from `smstart` to `smstop`.
//!
//! Layout (see the SMOPA GEMM of the family): a 32-K chunk of a panel is 4 groups of 64 columns × 4 bytes, the
//! low nibbles K 4g … 4g + 3, the high ones 16 + 4g …; any run of V/4 columns of a group is one vector (V = the
//! streaming vector length in bytes). A stripe is V columns: 4 consecutive vectors of a group, one multi-vector
//! load; a panel is 64 / V stripes (2 at SVL 256, 1 at SVL 512). Per group the high fields are `and` with 0xf0
//! (16·hi, one instruction per vector) and the low ones `srshl` by 4 in place (16·lo, one multi-vector
//! instruction for the 4 vectors), and each field's 4 vectors take one `sdot za.s[w8, 0, vgx4], {..}, z.b[g]`
//! against the chunk's 16 activations of that field (`ld1rqb`: every 128-bit segment holds them; element g is
//! K 4g … 4g + 3 of the field). The int32 sums of the stripe are ZA array vectors {0, V/4, V/2, 3V/4} (all in
//! tile za0.d, zeroed per block by `zero {za0.d}`), the f32 sums the next group {1, …} (za1.d).
//!
//! Per block: the int32 sums out by one multi-vector MOVA, one multi-vector SCVTF, × (column scale · sa/16: four
//! LD1H of the f16 scales into 32-bit lanes, four FCVT, four FMUL), added into the f32 sums by one multi-vector
//! FMLA into ZA (fused, as the NEON kernels' FMLA: `ops::block_epilogue`'s formula and order of roundings, the
//! fields' 16 folded into sa/16, exact); with zero points + c · sa·Σq (one multi-vector load of the f32
//! corrections, one multi-vector FMLA by the broadcast sa·Σq). The row factors sa/16 and sa·Σq are laid out once
//! per call (`RowBlocks`, shared with the SVE GEMV).
//!
//! Instruction budget per stripe × block of 32 (V = 32: 32 columns × 32 K = 1024 multiply-adds in 8
//! multi-vector SDOT), 4-bit codes, symmetric: 2 activation loads; per group 1 code load, 4 AND, 1 SRSHL, 2 SDOT
//! (32); 2 pointer steps; the epilogue 1 MOVA, 1 SCVTF, 1 LD1RW, 1 ADD, 4 LD1H, 4 FCVT, 4 FMUL, 1 FMLA, 1 ZERO, and
//! the block loop 4 (18): 54, 0.053 per multi-add (ORT 1.31.1's KleidiAI SME2 GEMV, `…_1x4vl_sme2_dot`: 316635
//! instructions per 2048 × 2048 Run, 0.075). Zero points add 4 (LD1RW, ADD, a multi-vector load, FMLA). At V = 64
//! the same text covers 64 columns: half of it per multiply-add. Measured: see `bench/results/aarch64-icount-sme2.md`.
//!
//! Streaming mode: as the SMOPA GEMM (`sve_asm::enter_streaming!`, `streaming_asm!`): ZA's lazy save honoured, every
//! vector and predicate register declared clobbered, only instructions legal in streaming mode (no NEON).
//!
//! LHS: `qsi8db` (one row); RHS: `qsnbp64x4_sf16_zpc`. The asm takes 4-bit codes in blocks of whole 32-K chunks,
//! whole panels, at SVL 256 or 512; the last partial panel runs the asm into a buffer (its padding columns are
//! zero codes), and other bit widths, block sizes, streaming vector lengths and tiles of more rows run the
//! portable GEMV on the same layout. Features: sme, sme2. No over-reads.

use super::matmul_f32_qsi8db_qsnbp8x8_sf16_zpc_1x32_sve::RowBlocks;
use super::matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::{NR, svl_bytes};
use super::sve_asm::{enter_streaming, streaming_asm};
use crate::ukernel::RunArgs;

/// The text of one asm variant: `$imm1..3` the groups' vector offsets (256 bytes in vectors), `$zp` `zp` |
/// `nozp`, `$ch` `one` | `many` chunks per block.
macro_rules! gemv_asm {
    // One 4-K group `$g` of a chunk: codes at `[{xc}, #$imm, mul vl]` into `$c0..3`, high fields into `$h0..3`
    // (AND 0xf0, z10), low fields in place (SRSHL by 4, z11), one SDOT per field against element `$g` of the
    // low (z8) and high (z9) activations.
    (@group $c0:literal $c1:literal $c2:literal $c3:literal, $h0:literal $h1:literal $h2:literal $h3:literal, $imm:literal, $g:literal) => {
        concat!(
            "ld1b {{z", $c0, ".b-z", $c3, ".b}}, pn8/z, [{xc}, #", $imm, ", mul vl]\n",
            "and z", $h0, ".d, z", $c0, ".d, z10.d\n",
            "and z", $h1, ".d, z", $c1, ".d, z10.d\n",
            "and z", $h2, ".d, z", $c2, ".d, z10.d\n",
            "and z", $h3, ".d, z", $c3, ".d, z10.d\n",
            "srshl {{z", $c0, ".b-z", $c3, ".b}}, {{z", $c0, ".b-z", $c3, ".b}}, z11.b\n",
            "sdot za.s[w8, 0, vgx4], {{z", $c0, ".b-z", $c3, ".b}}, z8.b[", $g, "]\n",
            "sdot za.s[w8, 0, vgx4], {{z", $h0, ".b-z", $h3, ".b}}, z9.b[", $g, "]\n",
        )
    };
    (@chunk $i1:literal $i2:literal $i3:literal) => {
        concat!(
            "ld1rqb {{z8.b}}, p0/z, [{xa}]\n",
            "ld1rqb {{z9.b}}, p0/z, [{xa}, #16]\n",
            gemv_asm!(@group "0" "1" "2" "3", "4" "5" "6" "7", "0", "0"),
            gemv_asm!(@group "16" "17" "18" "19", "20" "21" "22" "23", $i1, "1"),
            gemv_asm!(@group "0" "1" "2" "3", "4" "5" "6" "7", $i2, "2"),
            gemv_asm!(@group "16" "17" "18" "19", "20" "21" "22" "23", $i3, "3"),
            "add {xc}, {xc}, #1024\n",
            "add {xa}, {xa}, #32\n",
        )
    };
    (@chunks one $i1:literal $i2:literal $i3:literal) => {
        concat!("// {nch} {chunks}\n", gemv_asm!(@chunk $i1 $i2 $i3))
    };
    (@chunks many $i1:literal $i2:literal $i3:literal) => {
        concat!(
            "mov {nch}, {chunks}\n",
            "3:\n",
            gemv_asm!(@chunk $i1 $i2 $i3),
            "subs {nch}, {nch}, #1\n",
            "b.ne 3b\n",
        )
    };
    (@zp nozp) => {
        "// {zo}\n"
    };
    (@zp zp) => {
        concat!(
            "ld1rw {{z13.s}}, p1/z, [{xr}, #4]\n",
            "add {xt}, {xrec}, {zo}\n",
            "ld1w {{z24.s-z27.s}}, pn8/z, [{xt}]\n",
            "fmla za.s[w8, 1, vgx4], {{z24.s-z27.s}}, z13.s\n",
        )
    };
    ($zp:ident $ch:ident $i1:literal $i2:literal $i3:literal) => {
        concat!(
            ".arch_extension sme2\n",
            ".arch_extension sve\n",
            enter_streaming!(),
            "ptrue p0.b\n",
            "ptrue p1.s\n",
            "ptrue pn8.b\n",
            "dup z10.b, #-16\n",
            "dup z11.b, #4\n",
            "mov w8, #0\n",
            // Panel loop.
            "1:\n",
            "mov {xrec}, {xp}\n",
            "mov {xr}, {rowtab}\n",
            "mov {xa}, {lhs}\n",
            "mov {nb}, {blocks}\n",
            // Block loop.
            "2:\n",
            "mov {xc}, {xrec}\n",
            gemv_asm!(@chunks $ch $i1 $i2 $i3),
            // Block epilogue: f32 sums += f32(int32 sums) · (s · sa/16) [+ c · sa·Σq].
            "mova {{z16.d-z19.d}}, za.d[w8, 0, vgx4]\n",
            "scvtf {{z16.s-z19.s}}, {{z16.s-z19.s}}\n",
            "ld1rw {{z12.s}}, p1/z, [{xr}]\n",
            "add {xt}, {xrec}, {sc}\n",
            "ld1h {{z20.s}}, p1/z, [{xt}]\n",
            "ld1h {{z21.s}}, p1/z, [{xt}, #1, mul vl]\n",
            "ld1h {{z22.s}}, p1/z, [{xt}, #2, mul vl]\n",
            "ld1h {{z23.s}}, p1/z, [{xt}, #3, mul vl]\n",
            "fcvt z20.s, p1/m, z20.h\n",
            "fcvt z21.s, p1/m, z21.h\n",
            "fcvt z22.s, p1/m, z22.h\n",
            "fcvt z23.s, p1/m, z23.h\n",
            "fmul z20.s, z20.s, z12.s\n",
            "fmul z21.s, z21.s, z12.s\n",
            "fmul z22.s, z22.s, z12.s\n",
            "fmul z23.s, z23.s, z12.s\n",
            "fmla za.s[w8, 1, vgx4], {{z16.s-z19.s}}, {{z20.s-z23.s}}\n",
            gemv_asm!(@zp $zp),
            "zero {{za0.d}}\n",
            "add {xrec}, {xrec}, {rec}\n",
            "add {xr}, {xr}, #8\n",
            "subs {nb}, {nb}, #1\n",
            "b.ne 2b\n",
            // The stripe's f32 sums out; the next panel.
            "mova {{z16.d-z19.d}}, za.d[w8, 1, vgx4]\n",
            "st1w {{z16.s-z19.s}}, pn8, [{xo}]\n",
            "zero {{za}}\n",
            "add {xo}, {xo}, #256\n",
            "add {xp}, {xp}, {pstride}\n",
            "subs {np}, {np}, #1\n",
            "b.ne 1b\n",
            "smstop\n",
        )
    };
}

/// The stripe's asm over `panels` panels (mode constants: zero points, chunks per block, group offsets).
macro_rules! stripe_call {
    ($zp:ident $ch:ident $i1:literal $i2:literal $i3:literal; $s:ident) => {
        streaming_asm!(
            gemv_asm!($zp $ch $i1 $i2 $i3),
            xp = inout(reg) $s.rec => _,
            np = inout(reg) $s.panels => _,
            xo = inout(reg) $s.out => _,
            rowtab = in(reg) $s.rows,
            lhs = in(reg) $s.lhs,
            blocks = in(reg) $s.blocks,
            chunks = in(reg) $s.chunks,
            rec = in(reg) $s.record,
            pstride = in(reg) $s.panel_stride,
            sc = in(reg) $s.to_scales,
            zo = in(reg) $s.to_zp,
            xrec = out(reg) _,
            xr = out(reg) _,
            xa = out(reg) _,
            nb = out(reg) _,
            xc = out(reg) _,
            nch = out(reg) _,
            xt = out(reg) _,
            out("x8") _,
        )
    };
}

/// What one asm call walks: `panels` whole panels from the record pointer `rec` (offset to the stripe's columns),
/// writing the stripe's V f32 per panel at `out` (256 bytes apart).
struct Stripe {
    rec: *const u8,
    panels: usize,
    out: *mut f32,
    rows: *const f32,
    lhs: *const u8,
    blocks: usize,
    chunks: usize,
    record: usize,
    panel_stride: usize,
    /// From the stripe's codes in a record to its f16 scales and its f32 corrections.
    to_scales: usize,
    to_zp: usize,
}

/// # Safety
/// The CPU has SME2; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and a `qsnbp64x4_sf16_zpc` RHS
/// of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    // SAFETY: the CPU has SME (the caller's guarantee).
    let v = unsafe { svl_bytes() };
    if a.rows != 1 || a.bits != 4 || !a.bl.is_multiple_of(32) || a.blocks == 0 || !(v == 32 || v == 64) {
        // SAFETY: the same contract, for the portable GEMV (any layout, any rows).
        return unsafe { (crate::arch::portable::INT8.run)(a) };
    }
    let rows = RowBlocks::new(a);
    let whole = a.cols / NR;
    let mut last = [0f32; NR];
    let zp = a.has_zp != 0;
    let one = a.bl == 32;
    for s in 0..NR / v {
        // The stripe's bytes in a group (4 per column), its scales (2 per column) and corrections (4 per column).
        let code = 4 * v * s;
        let mut st = Stripe {
            rec: a.rhs.wrapping_add(code),
            panels: whole,
            out: a.dst.wrapping_add(v * s),
            rows: rows.0.as_ptr(),
            lhs: a.lhs,
            blocks: a.blocks,
            chunks: a.bl / 32,
            record: a.rhs_record,
            panel_stride: a.rhs_panel_stride,
            to_scales: (a.rhs_scales + 2 * v * s).wrapping_sub(code),
            // The corrections are 4 bytes per column, as the codes per group: the same offset.
            to_zp: a.rhs_zp,
        };
        for part in 0..2 {
            if part == 1 {
                // The last partial panel into `last`.
                if whole * NR == a.cols {
                    break;
                }
                st.rec = a.rhs.wrapping_add(whole * a.rhs_panel_stride + code);
                st.panels = 1;
                st.out = last.as_mut_ptr().wrapping_add(v * s);
            }
            if st.panels == 0 {
                continue;
            }
            // SAFETY: the CPU has SME2 at this SVL (read above: the group offsets are in vectors of V bytes);
            // reads per panel and block: the stripe's chunks × 4 groups × 4 vectors of codes, V f16 scales and
            // (zero points) V f32 corrections inside the record (RunArgs contract: `panels` panels of the tile),
            // the row's bl activation bytes and 2 f32 of `rows`; writes V f32 per panel at `out`: row 0's columns
            // of whole panels (inside dst) or `last`. Every vector and predicate register, ffr, x8, x12 and
            // x14–x17 are declared clobbered; ZA is left off (SMSTOP), TPIDR2_EL0 0 or untouched.
            unsafe {
                match (zp, one, v) {
                    (false, true, 32) => stripe_call!(nozp one "8" "16" "24"; st),
                    (false, false, 32) => stripe_call!(nozp many "8" "16" "24"; st),
                    (true, true, 32) => stripe_call!(zp one "8" "16" "24"; st),
                    (true, false, 32) => stripe_call!(zp many "8" "16" "24"; st),
                    (false, true, _) => stripe_call!(nozp one "4" "8" "12"; st),
                    (false, false, _) => stripe_call!(nozp many "4" "8" "12"; st),
                    (true, true, _) => stripe_call!(zp one "4" "8" "12"; st),
                    (true, false, _) => stripe_call!(zp many "4" "8" "12"; st),
                }
            }
        }
    }
    let tail = a.cols - whole * NR;
    // SAFETY: row 0's columns whole·64 .. cols are inside dst (RunArgs contract).
    let d = unsafe { core::slice::from_raw_parts_mut(a.dst, a.cols) };
    d[whole * NR..].copy_from_slice(&last[..tail]);
    if !a.bias.is_null() {
        // SAFETY: bias holds `cols` values (RunArgs contract).
        let bias = unsafe { core::slice::from_raw_parts(a.bias, a.cols) };
        for (y, b) in d.iter_mut().zip(bias) {
            *y += b;
        }
    }
}
