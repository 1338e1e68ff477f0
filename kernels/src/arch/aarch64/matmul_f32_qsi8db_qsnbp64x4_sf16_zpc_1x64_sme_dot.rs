//! int8-activation GEMV for decode on the SME2 family's weights (`qsnbp64x4`): one row × one 64-column panel per
//! pass, SME2's multi-vector SDOT (indexed) accumulating int32 into ZA, the per-block epilogue's f32 sums kept in
//! ZA too (multi-vector FMLA into ZA), so that nothing but the codes, the activations and the scales moves per
//! block. The whole tile (every whole panel of it) is one streaming `asm!` block from `smstart` to `smstop`.
//!
//! Layout (see the SMOPA GEMM of the family): a 32-K chunk of a panel is 4 groups of 64 columns × 4 bytes, the
//! low nibbles K 4g … 4g + 3, the high ones 16 + 4g …; any run of V/4 columns of a group is one vector (V = the
//! streaming vector length in bytes). A stripe is V columns: 4 consecutive vectors of a group, one multi-vector
//! load; a panel is 64 / V stripes (2 at SVL 256, 1 at SVL 512). Per group the 4 code vectors are loaded twice
//! and decoded by multi-vector instructions only (SME2 has no multi-vector AND): the low fields by `srshl` by 4
//! (16·lo), the high ones by `sqdmulh` by 8 (⌊16·b / 256⌋ = ⌊b / 16⌋ = hi, exact: the low field is the byte's
//! low 4 bits, and no product saturates) then `srshl` by 4 (16·hi), and each field's 4 vectors take one
//! `sdot za.s[w8, 0, vgx4], {..}, z.b[g]`
//! against the chunk's 16 activations of that field (`ld1rqb`: every 128-bit segment holds them; element g is
//! K 4g … 4g + 3 of the field). The int32 sums of the stripe are ZA array vectors {0, V/4, V/2, 3V/4} (all in
//! tile za0.d, zeroed per block by `zero {za0.d}`), the f32 sums the next group {1, …} (za1.d).
//!
//! Per block: the int32 sums out by one multi-vector MOVA, one multi-vector SCVTF, × (column scale · sa/16: four
//! LD1H of the f16 scales into 32-bit lanes, four FCVT, four FMUL), added into the f32 sums by one multi-vector
//! FMLA into ZA (fused, as the NEON kernels' FMLA: `ops::block_epilogue`'s formula and order of roundings, the
//! fields' 16 folded into sa/16, exact); with zero points + c · sa·Σq (one multi-vector load of the f32
//! corrections, one multi-vector FMLA by the broadcast sa·Σq). The row factors sa/16 and sa·Σq are laid out once
//! per task into a per-thread buffer (`with_row_blocks`: no allocation per task; a decode call is up to 32 tasks).
//!
//! Instruction budget per panel × block of 32 at SVL 256 (`pair`: both stripes, 64 columns × 32 K = 2048
//! multiply-adds in 16 multi-vector SDOT), 4-bit codes, symmetric: 2 activation loads; per group and stripe 2 code
//! loads, 1 SQDMULH, 2 SRSHL, 2 SDOT (56; with 4 single-vector AND for the high fields, as before, 64); 1 pointer
//! step (the activations; a block of several chunks also steps the codes, from a copy of the record pointer);
//! the epilogue per stripe 1 MOVA, 1 SCVTF, 4 LD1H, 4 FCVT, 4 FMUL, 1 FMLA (30), once 1 LD1RW, 1 ADD, 1 ZERO,
//! and the block loop 4 (36): 95 (103 with the AND; 98 while the codes were stepped in blocks of one chunk too,
//! SVL 512 2048² blocks of 32: 145.4 k instructions per Run then, 142.4 k now), 0.046 per multiply-add (ORT
//! 1.31.1's KleidiAI SME2 GEMV, `…_1x4vl_sme2_dot`: 316945 instructions per 2048 × 2048 Run, ~28 k of them the
//! Run's fixed cost, 0.069 per multiply-add). Zero points add 6 (LD1RW, ADD, per stripe a multi-vector load and an
//! FMLA). At SVL 512 (`pair64`: two panels of one stripe) the same text covers twice the columns, plus 3 pointer
//! steps. A pass per stripe (before the pairs) took 0.93x ORT at 2048²; tasks of one panel (before
//! `min_task_cols`) 1.05x.
//!
//! The row numerics (sa = 1) run a variant without the per-block FMUL of the scales by sa/16: their sums are 16 times
//! the block variant's (exact; the corrections' row factor 16·Σq likewise), multiplied by 1/16 when stored.
//!
//! Measured (qemu 11 `-cpu max`, the whole Run, 1 thread, `bench/results/aarch64-icount-sme2.md`), blocks of 32,
//! 2048² / 4096²: SVL 256 0.76 / 0.74x ORT's instructions, SVL 512 0.79 / 0.76x (blocks of 32–128, zero points and
//! the row numerics at 2048²: 0.71–0.79x). Before the straight-line blocks of one and two chunks: SVL 256
//! 0.77x ORT's instructions at 2048², 0.75x at 4096²; SVL 512 0.81x / 0.78x (with the AND decode: 0.83 / 0.81 /
//! 0.86 / 0.85; before the per-thread row-factor buffer, which took a heap allocation per task out: 0.85 / 0.83 /
//! 0.91).
//!
//! Streaming mode: as the SMOPA GEMM (`sve_asm::enter_streaming!`, `streaming_asm!`): ZA's lazy save honoured, every
//! vector and predicate register declared clobbered, only instructions legal in streaming mode (no NEON).
//!
//! LHS: `qsi8db` (one row); RHS: `qsnbp64x4_sf16_zpc`. The asm takes 4-bit codes in blocks of whole 32-K chunks,
//! whole panels, at SVL 256 or 512; the last partial panel runs the asm into a buffer (its padding columns are
//! zero codes), and other bit widths, block sizes and streaming vector lengths run the portable GEMV on the same
//! layout. The family gives it one row (from M = 2 its GEMM's few-row SDOT kernel shares each code vector's decode
//! among 4 rows); a tile of more rows (the kernel run alone) runs row by row. Features: sme, sme2. No over-reads.

use super::matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::{NR, asm_takes, svl_bytes};
use super::sve_asm::{enter_streaming, streaming_asm};
use crate::ukernel::RunArgs;

/// The text of one asm variant: `$lay` `single` (SVL 512: one panel per pass, its groups' vector offsets
/// `$i1..3`: 256 bytes in vectors) | `pair` (SVL 256: both stripes of a panel per pass, sharing the activation
/// loads, the row factors and the loops) | `pair64` (SVL 512: two panels per pass, likewise), `$zp` `zp` | `nozp`, `$ch` `one` | `two` | `many` chunks per block.
macro_rules! gemv_asm {
    // One 4-K group `$g` of a chunk for the stripe whose int32 sums are ZA vector group `$o`: codes at
    // `[{xc}, #$imm, mul vl]` into register set A (z0–z3, high fields z4–z7) or B (z16–z19, z20–z23), high fields
    // loaded again and decoded in place (SQDMULH by 8, z10: hi; SRSHL by 4, z11: 16·hi), low fields in place (SRSHL
    // by 4: 16·lo), one SDOT per field against element `$g` of the low (z8) and high (z9) activations.
    (@group A $b:literal, $o:literal, $imm:literal, $g:literal) => {
        gemv_asm!(@group "0" "1" "2" "3", "4" "5" "6" "7", $o, $b, $imm, $g)
    };
    (@group B $b:literal, $o:literal, $imm:literal, $g:literal) => {
        gemv_asm!(@group "16" "17" "18" "19", "20" "21" "22" "23", $o, $b, $imm, $g)
    };
    // The second panel of a `pair64` pass (codes at {xc2}).
    (@group B2 $b:literal, $o:literal, $imm:literal, $g:literal) => {
        gemv_asm!(@group "16" "17" "18" "19", "20" "21" "22" "23", $o, "{xc2}", $imm, $g)
    };
    (@group $c0:literal $c1:literal $c2:literal $c3:literal, $h0:literal $h1:literal $h2:literal $h3:literal, $o:literal, $base:literal, $imm:literal, $g:literal) => {
        concat!(
            "ld1b {{z", $c0, ".b-z", $c3, ".b}}, pn8/z, [", $base, ", #", $imm, ", mul vl]\n",
            "ld1b {{z", $h0, ".b-z", $h3, ".b}}, pn8/z, [", $base, ", #", $imm, ", mul vl]\n",
            "sqdmulh {{z", $h0, ".b-z", $h3, ".b}}, {{z", $h0, ".b-z", $h3, ".b}}, z10.b\n",
            "srshl {{z", $c0, ".b-z", $c3, ".b}}, {{z", $c0, ".b-z", $c3, ".b}}, z11.b\n",
            "srshl {{z", $h0, ".b-z", $h3, ".b}}, {{z", $h0, ".b-z", $h3, ".b}}, z11.b\n",
            "sdot za.s[w8, ", $o, ", vgx4], {{z", $c0, ".b-z", $c3, ".b}}, z8.b[", $g, "]\n",
            "sdot za.s[w8, ", $o, ", vgx4], {{z", $h0, ".b-z", $h3, ".b}}, z9.b[", $g, "]\n",
        )
    };
    (@groups single $b:literal $i1:literal $i2:literal $i3:literal) => {
        concat!(
            gemv_asm!(@group A $b, "0", "0", "0"),
            gemv_asm!(@group B $b, "0", $i1, "1"),
            gemv_asm!(@group A $b, "0", $i2, "2"),
            gemv_asm!(@group B $b, "0", $i3, "3"),
        )
    };
    // SVL 256: a group is 8 vectors, stripe 0's 4 then stripe 1's (int32 sums: vector group 2).
    (@groups pair $b:literal $i1:literal $i2:literal $i3:literal) => {
        concat!(
            gemv_asm!(@group A $b, "0", "0", "0"),
            gemv_asm!(@group B $b, "2", "4", "0"),
            gemv_asm!(@group A $b, "0", "8", "1"),
            gemv_asm!(@group B $b, "2", "12", "1"),
            gemv_asm!(@group A $b, "0", "16", "2"),
            gemv_asm!(@group B $b, "2", "20", "2"),
            gemv_asm!(@group A $b, "0", "24", "3"),
            gemv_asm!(@group B $b, "2", "28", "3"),
        )
    };
    // SVL 512: two panels per pass, one stripe each (the second's int32 sums: vector group 2).
    (@groups pair64 $b:literal $i1:literal $i2:literal $i3:literal) => {
        concat!(
            gemv_asm!(@group A $b, "0", "0", "0"),
            gemv_asm!(@group B2 $b, "2", "0", "0"),
            gemv_asm!(@group A $b, "0", "4", "1"),
            gemv_asm!(@group B2 $b, "2", "4", "1"),
            gemv_asm!(@group A $b, "0", "8", "2"),
            gemv_asm!(@group B2 $b, "2", "8", "2"),
            gemv_asm!(@group A $b, "0", "12", "3"),
            gemv_asm!(@group B2 $b, "2", "12", "3"),
        )
    };
    // The code pointers to the next chunk: only between the chunks of a block (`many`); a block of one chunk
    // (`one`) starts its codes again from {xrec}, so stepping them would be lost work (2 of ~101 instructions per
    // pass and block of 32 at SVL 512).
    (@step many pair64) => {
        concat!("add {xc}, {xc}, #1024\n", "add {xc2}, {xc2}, #1024\n")
    };
    (@step many $lay:ident) => {
        "add {xc}, {xc}, #1024\n"
    };
    (@step one $lay:ident) => {
        ""
    };
    // One chunk, its first panel's codes from `$b`: {xrec} itself in a block of one chunk, else {xc}.
    (@chunk $ch:ident $b:literal $lay:ident $i1:literal $i2:literal $i3:literal) => {
        concat!(
            "ld1rqb {{z8.b}}, p0/z, [{xa}]\n",
            "ld1rqb {{z9.b}}, p0/z, [{xa}, #16]\n",
            gemv_asm!(@groups $lay $b $i1 $i2 $i3),
            gemv_asm!(@step $ch $lay),
            "add {xa}, {xa}, #32\n",
        )
    };
    (@chunks one $lay:ident $i1:literal $i2:literal $i3:literal) => {
        concat!("// {nch} {chunks} {xc}\n", gemv_asm!(@chunk one "{xrec}" $lay $i1 $i2 $i3))
    };
    // A block of two chunks (blocks of 64) straight-line: the first steps the code pointers, the second reads from
    // there (no chunk loop: 7 instructions fewer per pass and block of 64 at SVL 512, ~4%).
    (@chunks two $lay:ident $i1:literal $i2:literal $i3:literal) => {
        concat!(
            "// {nch} {chunks}\n",
            "mov {xc}, {xrec}\n",
            gemv_asm!(@chunk many "{xc}" $lay $i1 $i2 $i3),
            gemv_asm!(@chunk one "{xc}" $lay $i1 $i2 $i3),
        )
    };
    (@chunks many $lay:ident $i1:literal $i2:literal $i3:literal) => {
        concat!(
            "mov {xc}, {xrec}\n",
            "mov {nch}, {chunks}\n",
            "3:\n",
            gemv_asm!(@chunk many "{xc}" $lay $i1 $i2 $i3),
            "subs {nch}, {nch}, #1\n",
            "b.ne 3b\n",
        )
    };
    // One stripe's block epilogue: its int32 sums (vector group `$oi`) out, converted, × (column scale · sa/16:
    // the f16 scales at `[{xt}, #$s0..3, mul vl]`, sa/16 in z12), into its f32 sums (vector group `$of`).
    // `$num` `block`: as said; `row` (the row numerics, sa = 1): the scales themselves, the pass's sums 16 times the
    // block numerics' (exact), taken back by × 1/16 when they are stored (`@store`): 4 FMUL fewer per stripe and block.
    (@epi $num:ident $oi:literal $of:literal $s0:literal $s1:literal $s2:literal $s3:literal) => {
        gemv_asm!(@epi $num $oi $of "{xt}" $s0 $s1 $s2 $s3)
    };
    (@epi $num:ident $oi:literal $of:literal $base:literal $s0:literal $s1:literal $s2:literal $s3:literal) => {
        concat!(
            "mova {{z16.d-z19.d}}, za.d[w8, ", $oi, ", vgx4]\n",
            "scvtf {{z16.s-z19.s}}, {{z16.s-z19.s}}\n",
            "ld1h {{z20.s}}, p1/z, [", $base, ", #", $s0, ", mul vl]\n",
            "ld1h {{z21.s}}, p1/z, [", $base, ", #", $s1, ", mul vl]\n",
            "ld1h {{z22.s}}, p1/z, [", $base, ", #", $s2, ", mul vl]\n",
            "ld1h {{z23.s}}, p1/z, [", $base, ", #", $s3, ", mul vl]\n",
            "fcvt z20.s, p1/m, z20.h\n",
            "fcvt z21.s, p1/m, z21.h\n",
            "fcvt z22.s, p1/m, z22.h\n",
            "fcvt z23.s, p1/m, z23.h\n",
            gemv_asm!(@rowscale $num),
            "fmla za.s[w8, ", $of, ", vgx4], {{z16.s-z19.s}}, {{z20.s-z23.s}}\n",
        )
    };
    // The column scales × sa/16 (block numerics only).
    (@rowscale block) => {
        concat!(
            "fmul z20.s, z20.s, z12.s\n",
            "fmul z21.s, z21.s, z12.s\n",
            "fmul z22.s, z22.s, z12.s\n",
            "fmul z23.s, z23.s, z12.s\n",
        )
    };
    (@rowscale row) => {
        ""
    };
    // + c · sa·Σq (the f32 corrections at `[{xt}, #$c, mul vl]`, sa·Σq in z13) into f32 sums `$of`.
    (@corr $of:literal $c:literal) => {
        gemv_asm!(@corr $of "{xt}" $c)
    };
    (@corr $of:literal $base:literal $c:literal) => {
        concat!(
            "ld1w {{z24.s-z27.s}}, pn8/z, [", $base, ", #", $c, ", mul vl]\n",
            "fmla za.s[w8, ", $of, ", vgx4], {{z24.s-z27.s}}, z13.s\n",
        )
    };
    (@epilogue $num:ident single) => {
        gemv_asm!(@epi $num "0" "1" "0" "1" "2" "3")
    };
    // Stripe 1's scales are 2·32 bytes after stripe 0's (16-byte load units).
    (@epilogue $num:ident pair) => {
        concat!(gemv_asm!(@epi $num "0" "1" "0" "1" "2" "3"), gemv_asm!(@epi $num "2" "3" "4" "5" "6" "7"))
    };
    // The second panel's scales one panel further ({xc2}, free after the chunks).
    (@epilogue $num:ident pair64) => {
        concat!(
            gemv_asm!(@epi $num "0" "1" "0" "1" "2" "3"),
            "add {xc2}, {xt}, {pstride}\n",
            gemv_asm!(@epi $num "2" "3" "{xc2}" "0" "1" "2" "3"),
        )
    };
    // The corrections `{zd}` words from each panel's scales ({xt}, and {xc2} from the epilogue): no address adds.
    (@zp zp pair64) => {
        concat!(
            "// {zo}\n",
            "ld1rw {{z13.s}}, p1/z, [{xr}, #4]\n",
            gemv_asm!(@corrd "1" "{xt}"),
            gemv_asm!(@corrd "3" "{xc2}"),
        )
    };
    (@corrd $of:literal $base:literal) => {
        concat!(
            "ld1w {{z24.s-z27.s}}, pn8/z, [", $base, ", {zd}, lsl #2]\n",
            "fmla za.s[w8, ", $of, ", vgx4], {{z24.s-z27.s}}, z13.s\n",
        )
    };
    (@zp nozp $lay:ident) => {
        "// {zo} {zd}\n"
    };
    (@zp zp single) => {
        concat!("// {zo}\n", "ld1rw {{z13.s}}, p1/z, [{xr}, #4]\n", gemv_asm!(@corrd "1" "{xt}"))
    };
    (@zp zp pair) => {
        concat!(
            "// {zd}\n",
            "ld1rw {{z13.s}}, p1/z, [{xr}, #4]\n",
            "add {xt}, {xrec}, {zo}\n",
            gemv_asm!(@corr "1" "0"),
            gemv_asm!(@corr "3" "4"),
        )
    };
    (@zero single) => {
        "zero {{za0.d}}\n"
    };
    (@zero $lay:ident) => {
        "zero {{za0.d, za2.d}}\n"
    };
    // A stripe's f32 sums (vector group `$of`) out to `[{xo}, #$st, mul vl]`; in the row numerics × 1/16 (z12).
    (@st block $of:literal $st:literal) => {
        concat!("mova {{z16.d-z19.d}}, za.d[w8, ", $of, ", vgx4]\n", "st1w {{z16.s-z19.s}}, pn8, [{xo}, #", $st, ", mul vl]\n")
    };
    (@st row $of:literal $st:literal) => {
        concat!(
            "mova {{z16.d-z19.d}}, za.d[w8, ", $of, ", vgx4]\n",
            "fmul z16.s, z16.s, z12.s\n",
            "fmul z17.s, z17.s, z12.s\n",
            "fmul z18.s, z18.s, z12.s\n",
            "fmul z19.s, z19.s, z12.s\n",
            "st1w {{z16.s-z19.s}}, pn8, [{xo}, #", $st, ", mul vl]\n",
        )
    };
    (@store $num:ident single) => {
        gemv_asm!(@st $num "1" "0")
    };
    (@store $num:ident $lay:ident) => {
        concat!(gemv_asm!(@st $num "1" "0"), gemv_asm!(@st $num "3" "4"))
    };
    // The block's sa/16 into z12 (block numerics); the row numerics' 1/16 (every block's) once, for `@st`.
    (@factor block) => {
        "ld1rw {{z12.s}}, p1/z, [{xr}]\n"
    };
    (@factor row) => {
        ""
    };
    (@prologue block) => {
        ""
    };
    (@prologue row) => {
        "ld1rw {{z12.s}}, p1/z, [{rowtab}]\n"
    };
    (@start pair64) => {
        "add {xc2}, {xrec}, {pstride}\n"
    };
    (@start $lay:ident) => {
        "// {xc2}\n"
    };
    (@next pair64) => {
        concat!("add {xo}, {xo}, #512\n", "add {xp}, {xp}, {pstride}\n", "add {xp}, {xp}, {pstride}\n")
    };
    (@next $lay:ident) => {
        concat!("add {xo}, {xo}, #256\n", "add {xp}, {xp}, {pstride}\n")
    };
    ($lay:ident $zp:ident $ch:ident $num:ident $i1:literal $i2:literal $i3:literal) => {
        concat!(
            ".arch_extension sme2\n",
            ".arch_extension sve\n",
            enter_streaming!(),
            "ptrue p0.b\n",
            "ptrue p1.s\n",
            "ptrue pn8.b\n",
            "dup z10.b, #8\n",
            "dup z11.b, #4\n",
            "mov w8, #0\n",
            gemv_asm!(@prologue $num),
            // Panel loop.
            "1:\n",
            "mov {xrec}, {xp}\n",
            "mov {xr}, {rowtab}\n",
            "mov {xa}, {lhs}\n",
            "mov {nb}, {blocks}\n",
            // Block loop.
            "2:\n",
            gemv_asm!(@start $lay),
            gemv_asm!(@chunks $ch $lay $i1 $i2 $i3),
            // Block epilogue: f32 sums += f32(int32 sums) · (s · sa/16) [+ c · sa·Σq].
            gemv_asm!(@factor $num),
            "add {xt}, {xrec}, {sc}\n",
            gemv_asm!(@epilogue $num $lay),
            gemv_asm!(@zp $zp $lay),
            gemv_asm!(@zero $lay),
            "add {xrec}, {xrec}, {rec}\n",
            "add {xr}, {xr}, #8\n",
            "subs {nb}, {nb}, #1\n",
            "b.ne 2b\n",
            // The pass's f32 sums out; the next panel.
            gemv_asm!(@store $num $lay),
            "zero {{za}}\n",
            gemv_asm!(@next $lay),
            "subs {np}, {np}, #1\n",
            "b.ne 1b\n",
            "smstop\n",
        )
    };
}

/// The stripe's asm over `panels` panels (mode constants: zero points, chunks per block, group offsets).
macro_rules! stripe_call {
    ($lay:ident $zp:ident $ch:ident $num:ident $i1:literal $i2:literal $i3:literal; $s:ident) => {
        streaming_asm!(
            gemv_asm!($lay $zp $ch $num $i1 $i2 $i3),
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
            zd = in(reg) $s.zp_words,
            xrec = out(reg) _,
            xr = out(reg) _,
            xa = out(reg) _,
            nb = out(reg) _,
            xc = out(reg) _,
            nch = out(reg) _,
            xt = out(reg) _,
            xc2 = out(reg) _,
            out("x8") _,
        )
    };
}

/// The asm's pass layouts (see `gemv_asm!`).
#[derive(Clone, Copy)]
enum Lay {
    Single,
    Pair,
    Pair64,
}

/// What one asm call walks: `panels` passes from the record pointer `rec`, writing 64 f32 per panel at `out`.
#[derive(Clone, Copy)]
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
    /// From a record to its f16 scales and its f32 corrections.
    to_scales: usize,
    to_zp: usize,
    /// f32 words from a record's scales to its corrections (may be negative: two's complement).
    zp_words: isize,
}

/// Runs `f` on the row's per-block factors [sa / 16, sa·Σq] (the row numerics: sa = 1, Σq), the two values the
/// asm's `ld1rw` broadcasts, laid out in this thread's buffer (kept for its next call: a fresh allocation per
/// task cost ~1.3 k instructions per task of a decode Run, measured on the SVE GEMV).
fn with_row_blocks<T>(a: &RunArgs, f: impl FnOnce(*const f32) -> T) -> T {
    thread_local! {
        static ROWS: core::cell::RefCell<Vec<f32>> = const { core::cell::RefCell::new(Vec::new()) };
    }
    ROWS.with_borrow_mut(|v| {
        v.clear();
        v.extend((0..a.blocks).flat_map(|b| {
            // SAFETY: row 0's scale (1 in the row numerics) and Σq of block b (RunArgs contract).
            let (sa, q) = unsafe { (*a.lhs_scale.add(b), *a.lhs_sum.add(b) as f32) };
            // The row numerics' pass keeps its sums 16 times the block numerics' (`gemv_asm!`'s `row`): 16·sa·Σq, exact.
            [
                sa / 16.0,
                if a.has_zp == 0 {
                    0.0
                } else if a.row != 0 {
                    16.0 * sa * q
                } else {
                    sa * q
                },
            ]
        }));
        f(v.as_ptr())
    })
}

/// # Safety
/// The CPU has SME2; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and a `qsnbp64x4_sf16_zpc` RHS
/// of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    // SAFETY: the CPU has SME (the caller's guarantee).
    let v = unsafe { svl_bytes() };
    if a.rows == 0 || !asm_takes(a.bits, a.bl) || a.blocks == 0 || !(v == 32 || v == 64) {
        // SAFETY: the same contract, for the portable GEMV (any layout, any rows).
        return unsafe { (crate::arch::portable::INT8.run)(a) };
    }
    if a.rows > 1 {
        // Rows in turn (the family takes M ≥ 2 to its GEMM, whose few-row tiles run the 4-row SDOT kernel).
        for r in 0..a.rows {
            let row = RunArgs {
                rows: 1,
                lhs: a.lhs.wrapping_add(r * a.lhs_stride),
                lhs_scale: a.lhs_scale.wrapping_add(r * a.blocks),
                lhs_sum: a.lhs_sum.wrapping_add(r * a.blocks),
                dst: a.dst.wrapping_add(r * a.dst_stride),
                ..*a
            };
            // SAFETY: row r of the tile (r < rows): its activations, scales and Σq (row-major, `blocks` per row) and
            // its output row, the same contract for one row.
            unsafe { run(&row) };
        }
        return;
    }
    with_row_blocks(a, |rows| {
        // SAFETY: as this function's; `rows` holds the row's 2 · blocks factors.
        unsafe { run_with(a, v, rows) }
    })
}

/// `run` at a streaming vector length of `v` bytes (32 or 64) on the asm's shapes, with the row's factors at `rows`.
///
/// # Safety
/// As `run`'s, and the asm's conditions checked there; `rows` holds `2 · a.blocks` f32.
unsafe fn run_with(a: &RunArgs, v: usize, rows: *const f32) {
    let whole = a.cols / NR;
    let zp = a.has_zp != 0;
    // The asm addresses a record's corrections from its scales in f32 words (`{zd}`).
    assert!(
        !zp || (a.rhs_zp as isize - a.rhs_scales as isize) % 4 == 0,
        "qsnbp64x4 record: corrections at byte {} are not whole f32 words from the scales at {}",
        a.rhs_zp,
        a.rhs_scales
    );
    // Chunks per block: 1, 2 (each straight-line) or more (a loop).
    let ch = (a.bl / 32).min(3);
    let st = Stripe {
        rec: a.rhs,
        panels: 0,
        out: a.dst,
        rows,
        lhs: a.lhs,
        blocks: a.blocks,
        chunks: a.bl / 32,
        record: a.rhs_record,
        panel_stride: a.rhs_panel_stride,
        to_scales: a.rhs_scales,
        to_zp: a.rhs_zp,
        zp_words: (a.rhs_zp as isize - a.rhs_scales as isize) / 4,
    };
    let at = |panel: usize, panels: usize, out: *mut f32| Stripe {
        rec: a.rhs.wrapping_add(panel * a.rhs_panel_stride),
        panels,
        out,
        ..st
    };
    let row = a.row != 0;
    // The numerics' variant of a pass's asm.
    macro_rules! by_num {
        ($lay:ident $zp:ident $ch:ident $i1:literal $i2:literal $i3:literal; $s:ident) => {
            if row {
                stripe_call!($lay $zp $ch row $i1 $i2 $i3; $s)
            } else {
                stripe_call!($lay $zp $ch block $i1 $i2 $i3; $s)
            }
        };
    }
    let pass = |lay: Lay, st: Stripe| {
        if st.panels == 0 {
            return;
        }
        // SAFETY: the CPU has SME2 at this SVL (read by `run`; `Pair` is SVL 256, the others SVL 512: the group and
        // store offsets are in vectors of V bytes); reads per panel and block: chunks × 4 groups × 64 columns × 4
        // bytes of codes, 64 f16 scales and (zero points) 64 f32 corrections inside the record (RunArgs
        // contract: the pass's panels are the tile's), the row's bl activation bytes and 2 f32 of `rows`;
        // writes 64 f32 per panel at `out`: row 0's columns of whole panels (inside dst) or `last`. Every vector
        // and predicate register, ffr, x8, x12 and x14–x17 are declared clobbered; ZA is left off (SMSTOP),
        // TPIDR2_EL0 0 or untouched.
        unsafe {
            match (lay, zp, ch) {
                (Lay::Pair, false, 1) => by_num!(pair nozp one "0" "0" "0"; st),
                (Lay::Pair, false, 2) => by_num!(pair nozp two "0" "0" "0"; st),
                (Lay::Pair, false, _) => by_num!(pair nozp many "0" "0" "0"; st),
                (Lay::Pair, true, 1) => by_num!(pair zp one "0" "0" "0"; st),
                (Lay::Pair, true, 2) => by_num!(pair zp two "0" "0" "0"; st),
                (Lay::Pair, true, _) => by_num!(pair zp many "0" "0" "0"; st),
                (Lay::Pair64, false, 1) => by_num!(pair64 nozp one "0" "0" "0"; st),
                (Lay::Pair64, false, 2) => by_num!(pair64 nozp two "0" "0" "0"; st),
                (Lay::Pair64, false, _) => by_num!(pair64 nozp many "0" "0" "0"; st),
                (Lay::Pair64, true, 1) => by_num!(pair64 zp one "0" "0" "0"; st),
                (Lay::Pair64, true, 2) => by_num!(pair64 zp two "0" "0" "0"; st),
                (Lay::Pair64, true, _) => by_num!(pair64 zp many "0" "0" "0"; st),
                (Lay::Single, false, 1) => by_num!(single nozp one "4" "8" "12"; st),
                (Lay::Single, false, 2) => by_num!(single nozp two "4" "8" "12"; st),
                (Lay::Single, false, _) => by_num!(single nozp many "4" "8" "12"; st),
                (Lay::Single, true, 1) => by_num!(single zp one "4" "8" "12"; st),
                (Lay::Single, true, 2) => by_num!(single zp two "4" "8" "12"; st),
                (Lay::Single, true, _) => by_num!(single zp many "4" "8" "12"; st),
            }
        }
    };
    // At SVL 256 a pass is a panel's two stripes (`Pair`); at SVL 512 two panels of one stripe (`Pair64`), an odd
    // last whole panel alone (`Single`). Whole panels go straight into dst, the last partial one into `last`.
    if v == 32 {
        pass(Lay::Pair, at(0, whole, a.dst));
    } else {
        pass(Lay::Pair64, at(0, whole / 2, a.dst));
        if whole % 2 == 1 {
            pass(Lay::Single, at(whole - 1, 1, a.dst.wrapping_add((whole - 1) * NR)));
        }
    }
    let mut last;
    let partial = if whole * NR < a.cols {
        last = [0f32; NR];
        pass(if v == 32 { Lay::Pair } else { Lay::Single }, at(whole, 1, last.as_mut_ptr()));
        Some((&last[..], NR))
    } else {
        None
    };
    // SAFETY: dst is the tile's one row of `cols` values, bias null or `cols` values (RunArgs contract).
    unsafe { super::ops::finish_rows(a, a.dst, 1, whole * NR, partial) }
}
