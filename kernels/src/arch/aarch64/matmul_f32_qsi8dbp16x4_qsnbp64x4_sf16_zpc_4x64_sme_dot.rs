//! int8-activation GEMM for few rows on the SME2 family (the SMOPA GEMM's last, partial row group: 1–15 rows, so
//! every M from 2 to 15): four rows × one stripe of V columns per pass (V = the streaming vector
//! length in bytes; at SVL 512 also passes of 5–10 rows, the ZA array's 16 vector groups), every code vector decoded
//! once and multiplied into the rows by SME2's multi-vector SDOT (indexed), the int32
//! sums and the per-block epilogue's f32 sums in ZA. Each pass over the tile's panels is one streaming `asm!` block
//! from `smstart` to `smstop`.
//!
//! Why: the SMOPA passes compute SVL/4 (or 16) rows whatever the tile's real rows, and the one-row SDOT GEMV run
//! row by row decodes every code vector again per row (per group and stripe 2 loads and 3 multi-vector shifts for 2
//! SDOT):
//! on 2048² at SVL 256 the GEMM cost 1.12 M instructions at M = 6 and the GEMV ~230 k per row, against ORT's SME2
//! GEMM at 0.96 M (~80 k per row more, most of it its per-row activation packing). Here the decode is shared by 4
//! rows and a row costs its 2 SDOT per group and its share of the epilogue.
//!
//! Activations: the GEMM's own `qsi8dbp16x4` (packed once per call): per 4-K run the group's 16 rows' 4 bytes each,
//! so the quadword of a run at byte 16j holds rows 4j … 4j + 3 of it, and `sdot za.s[…], {codes}, z.b[i]` with
//! that quadword replicated (`ld1rqb`) multiplies the codes of K 4g … 4g + 3 by row 4j + i: rows in the
//! quadword's lanes. A 32-K chunk is 8 runs (512 bytes): runs 0–3 the low field (K 0–15), 4–7 the high one; 8
//! `ld1rqb` per chunk serve the pass's rows. The rows' scales and Σq (group-major: per block the group's 16) come
//! by one `ld1rqw` each per block: sa × 2^−4 (the fields' 16, exact), and with zero points sa·Σq (SCVTF, FMUL: the
//! rounding of the one-row kernel's table).
//!
//! Weights (see the SMOPA GEMM of the family): a 32-K chunk of a panel is 4 groups of 64 columns × 4 bytes, the
//! low nibbles K 4g … 4g + 3, the high ones 16 + 4g …; a stripe is V columns, 4 consecutive vectors of each group.
//!
//! ZA at SVL 256 is 8 vector groups of 4 (`za.s[w8, o, vgx4]`, o = 0..7; at SVL 512 the first 8 of 16): row r's
//! int32 sums are group 2r (tile za(2r).d, zeroed per block by one `zero`), its f32 sums group 2r + 1. That is all
//! of ZA at SVL 256, so a pass of 3–4 rows is one stripe: at SVL 256 a panel's two stripes run one after the other
//! (the panel's codes read twice, the second time from cache); a pass of 1–2 rows takes both stripes at once (row
//! r, stripe s: groups 4r + 2s, 4r + 2s + 1). At SVL 512 a stripe is the whole panel, and ZA's 16 groups hold
//! passes of up to 8 rows (two quadwords), or 9–10 (three) with four rows' f32 sums in their output rows instead
//! (loaded and stored per block): 9 and 10 rows in blocks of 64 counted 1.04x ORT's instructions as 8 + 1 and
//! 8 + 2 passes, 0.94 and 0.96x in one (2048², qemu 11).
//!
//! Per chunk: 8 `ld1rqb`; per group the code vectors loaded twice (multi-vector), 1 SRSHL by 4 (16·lo, in place),
//! 1 SQDMULH by 8 and 1 SRSHL by 4 (16·hi: the one-row kernel's decode, no single-vector AND),
//! 2 SDOT per row; 3 pointer steps. Per block and stripe: the f16 column scales by 4 LD1H + 4 FCVT (shared by the
//! rows), then per row one multi-vector MOVA, one SCVTF, 4 indexed FMUL (column scale · the row's sa/16), one
//! multi-vector FMLA into the row's f32 sums: `ops::block_epilogue`'s formula and order of roundings, bit for bit
//! the one-row kernel's results; with zero points + c · sa·Σq (one multi-vector load of the corrections, per row
//! one indexed multi-vector FMLA). At SVL 256 a panel × block of 32 for 4 rows is about 2 × 110 instructions,
//! where the one-row kernel takes 4 × 106.
//!
//! Streaming mode: as the family's other kernels (`sve_asm::enter_streaming!`, `streaming_asm!`): ZA's lazy save
//! honoured, every vector and predicate register declared clobbered, only instructions legal in streaming mode.
//!
//! LHS: `qsi8dbp16x4` (one row group, 1–15 real rows); RHS: `qsnbp64x4_sf16_zpc`, 4-bit codes in blocks of whole
//! 32-K chunks, at SVL 256 or 512 (the SMOPA GEMM checks these). Whole panels go straight into dst, a last partial
//! panel into a buffer whose real columns are copied out; the bias is added after. Features: sme, sme2. No
//! over-reads.

use super::matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::{MR, NR};
use super::sve_asm::{enter_streaming, streaming_asm};
use crate::ukernel::RunArgs;

/// Rows per pass (one quadword of a `qsi8dbp16x4` run).
const ROWS: usize = 4;

/// Most rows of a pass (at SVL 512).
const MAX_PASS_ROWS: usize = 10;

/// K per chunk (the asm's unit; a block is whole chunks).
const CHUNK: usize = 32;

macro_rules! quad_asm {
    // A stripe's 4 code vectors of one group at `[{xc}, #$imm, mul vl]` into z16–z19 (low fields in place by SRSHL,
    // z1 = 4: 16·lo) and again into z20–z23 (high fields: SQDMULH by z0 = 8 gives hi, SRSHL by 4 16·hi).
    (@decode $imm:literal) => {
        concat!(
            "ld1b {{z16.b-z19.b}}, pn8/z, [{xc}, #", $imm, ", mul vl]\n",
            "ld1b {{z20.b-z23.b}}, pn8/z, [{xc}, #", $imm, ", mul vl]\n",
            "sqdmulh {{z20.b-z23.b}}, {{z20.b-z23.b}}, z0.b\n",
            "srshl {{z16.b-z19.b}}, {{z16.b-z19.b}}, z1.b\n",
            "srshl {{z20.b-z23.b}}, {{z20.b-z23.b}}, z1.b\n",
        )
    };
    // Group `$g` of a chunk for one stripe: its 4 code vectors at `[{xc}, #$imm, mul vl]` into z16–z19 (low fields
    // in place by SRSHL, z1 = 4) and z20–z23 (high fields by SQDMULH, z0 = 8, and SRSHL), then per row one SDOT per
    // field into the row's int32 sums for the stripe (vector group `$o`) against lane `$i` (the row in its quadword) of runs
    // `$lo` (z8 + g) and `$hi` (z12 + g).
    (@group $imm:literal, $lo:literal, $hi:literal, [$(($o:literal $i:literal))*]) => {
        concat!(
            quad_asm!(@decode $imm),
            $(
                "sdot za.s[w8, ", $o, ", vgx4], {{z16.b-z19.b}}, z", $lo, ".b[", $i, "]\n",
                "sdot za.s[w8, ", $o, ", vgx4], {{z20.b-z23.b}}, z", $hi, ".b[", $i, "]\n",
            )*
        )
    };
    // One chunk: its 8 runs' quadwords of the pass's rows (z8–z15; {xa} is 128 bytes into the chunk's runs, plus
    // 16 per quad of rows), then each stripe's 4 groups (code offsets `$i0..3` in vectors, the rows' SDOT
    // operands `$t`).
    (@chunk [$(($i0:literal $i1:literal $i2:literal $i3:literal; $t:tt))*]) => {
        concat!(
            "ld1rqb {{z8.b}}, p0/z, [{xa}, #-128]\n",
            "ld1rqb {{z9.b}}, p0/z, [{xa}, #-64]\n",
            "ld1rqb {{z10.b}}, p0/z, [{xa}]\n",
            "ld1rqb {{z11.b}}, p0/z, [{xa}, #64]\n",
            "add {xa}, {xa}, #256\n",
            "ld1rqb {{z12.b}}, p0/z, [{xa}, #-128]\n",
            "ld1rqb {{z13.b}}, p0/z, [{xa}, #-64]\n",
            "ld1rqb {{z14.b}}, p0/z, [{xa}]\n",
            "ld1rqb {{z15.b}}, p0/z, [{xa}, #64]\n",
            "add {xa}, {xa}, #256\n",
            $(
                quad_asm!(@group $i0, "8", "12", $t),
                quad_asm!(@group $i1, "9", "13", $t),
                quad_asm!(@group $i2, "10", "14", $t),
                quad_asm!(@group $i3, "11", "15", $t),
            )*
            "add {xc}, {xc}, #1024\n",
        )
    };
    (@chunks one $c:tt) => {
        concat!("// {nch} {chunks}\n", quad_asm!(@chunk $c))
    };
    (@chunks many $c:tt) => {
        concat!("mov {nch}, {chunks}\n", "3:\n", quad_asm!(@chunk $c), "subs {nch}, {nch}, #1\n", "b.ne 3b\n")
    };
    // One row's block epilogue (int32 sums: group `$oi`, f32 sums `$of`; lane `$r` of the row factors in z2): the
    // sums out and converted (register set A: z16–z19, B: z4–z7, alternating so that a row's MOVA need not wait
    // for the previous row's FMLA), × (column scale in z20–z23 · sa/16, into z24–z27), into the f32 sums.
    (@row ($oi:literal $of:literal $r:literal A)) => {
        quad_asm!(@row $oi $of $r, "16" "19")
    };
    (@row ($oi:literal $of:literal $r:literal B)) => {
        quad_asm!(@row $oi $of $r, "4" "7")
    };
    (@row $oi:literal $of:literal $r:literal, $s0:literal $s3:literal) => {
        concat!(
            "mova {{z", $s0, ".d-z", $s3, ".d}}, za.d[w8, ", $oi, ", vgx4]\n",
            "scvtf {{z", $s0, ".s-z", $s3, ".s}}, {{z", $s0, ".s-z", $s3, ".s}}\n",
            "fmul z24.s, z20.s, z2.s[", $r, "]\n",
            "fmul z25.s, z21.s, z2.s[", $r, "]\n",
            "fmul z26.s, z22.s, z2.s[", $r, "]\n",
            "fmul z27.s, z23.s, z2.s[", $r, "]\n",
            "fmla za.s[w8, ", $of, ", vgx4], {{z", $s0, ".s-z", $s3, ".s}}, {{z24.s-z27.s}}\n",
        )
    };
    // One stripe's block epilogue: its f16 column scales at `[{xt}, #$s0..3, mul vl]` (shared by the rows), the
    // rows `$row`; with zero points + c · sa·Σq (the stripe's corrections at `[{xt}, #$c, mul vl]` into z8–z11, the
    // rows' sa·Σq in z3: per row `($of $r)` one indexed multi-vector FMLA).
    (@epi $zp:ident, $s0:literal $s1:literal $s2:literal $s3:literal, $c:literal, [$($row:tt)*], [$(($zof:literal $zr:literal))*]) => {
        concat!(
            "add {xt}, {xrec}, {sc}\n",
            "ld1h {{z20.s}}, p1/z, [{xt}, #", $s0, ", mul vl]\n",
            "ld1h {{z21.s}}, p1/z, [{xt}, #", $s1, ", mul vl]\n",
            "ld1h {{z22.s}}, p1/z, [{xt}, #", $s2, ", mul vl]\n",
            "ld1h {{z23.s}}, p1/z, [{xt}, #", $s3, ", mul vl]\n",
            "fcvt z20.s, p1/m, z20.h\n",
            "fcvt z21.s, p1/m, z21.h\n",
            "fcvt z22.s, p1/m, z22.h\n",
            "fcvt z23.s, p1/m, z23.h\n",
            $(quad_asm!(@row $row),)*
            quad_asm!(@zp $zp $c, [$(($zof $zr))*]),
        )
    };
    (@zp zp $c:literal, [$(($of:literal $r:literal))*]) => {
        concat!(
            "add {xt}, {xrec}, {zo}\n",
            "ld1w {{z8.s-z11.s}}, pn8/z, [{xt}, #", $c, ", mul vl]\n",
            $("fmla za.s[w8, ", $of, ", vgx4], {{z8.s-z11.s}}, z3.s[", $r, "]\n",)*
        )
    };
    (@zp nozp $c:literal, [$($x:tt)*]) => {
        ""
    };
    // The block's row factors: z2 = the 4 rows' sa × 2^−4 (z28), z3 = sa·Σq (Σq {xqo} elements after the scales).
    (@factors zp) => {
        concat!(
            "ld1rqw {{z2.s}}, p1/z, [{xr}]\n",
            "ld1rqw {{z3.s}}, p1/z, [{xr}, {xqo}, lsl #2]\n",
            "scvtf z3.s, p1/m, z3.s\n",
            "fmul z3.s, z3.s, z2.s\n",
            "fmul z2.s, z2.s, z28.s\n",
        )
    };
    (@factors nozp) => {
        concat!("ld1rqw {{z2.s}}, p1/z, [{xr}]\n", "fmul z2.s, z2.s, z28.s\n", "// {zo} {xqo}\n")
    };
    // One stripe's f32 sums (groups `$of`, in row order) out to the rows of the output at `[{xt}, #$st, mul vl]`.
    (@store $st:literal, [$($of:literal)*]) => {
        concat!(
            "mov {xt}, {xo}\n",
            $(
                "mova {{z16.d-z19.d}}, za.d[w8, ", $of, ", vgx4]\n",
                "st1w {{z16.s-z19.s}}, pn8, [{xt}, #", $st, ", mul vl]\n",
                "add {xt}, {xt}, {ostride}\n",
            )*
        )
    };
    // One pass over all blocks of the panel at {xp}: the chunks (each stripe's code offsets and SDOT operands
    // `$chunk`), then per block each stripe's epilogue `$epi`; after the last block each stripe's sums out `$store`.
    (@pass $zp:ident $ch:ident, [$($chunk:tt)*], [$(($($epi:tt)*))*], [$(($($store:tt)*))*]) => {
        concat!(
            "mov {xrec}, {xp}\n",
            "mov {xr}, {rowtab}\n",
            "mov {xa}, {lhs}\n",
            "mov {nb}, {blocks}\n",
            "2:\n",
            "mov {xc}, {xrec}\n",
            quad_asm!(@chunks $ch [$($chunk)*]),
            quad_asm!(@factors $zp),
            $(quad_asm!(@epi $zp, $($epi)*),)*
            "zero {{za0.d, za2.d, za4.d, za6.d}}\n",
            "add {xrec}, {xrec}, {rec}\n",
            "add {xr}, {xr}, #64\n",
            "subs {nb}, {nb}, #1\n",
            "b.ne 2b\n",
            $(quad_asm!(@store $($store)*),)*
            "zero {{za}}\n",
        )
    };
    // A pass of one stripe: codes at `$i0..3`, scales `$s0..3`, corrections and outputs at `$c`; `$sd` the rows'
    // (int32 group, lane), `$rows` their epilogues, `$zps` (f32 group, lane), `$st` their f32 groups.
    (@one $zp:ident $ch:ident, $i0:literal $i1:literal $i2:literal $i3:literal, $s0:literal $s1:literal $s2:literal $s3:literal, $c:literal, $sd:tt, $rows:tt, $zps:tt, $st:tt) => {
        quad_asm!(@pass $zp $ch, [($i0 $i1 $i2 $i3; $sd)], [($s0 $s1 $s2 $s3, $c, $rows, $zps)], [($c, $st)])
    };
    // A panel's passes per (SVL, rows). 3–4 rows: row r's int32 sums group 2r, one stripe per pass (at SVL 256 two
    // passes, stripe 1 4 vectors further in each group, its scales 4 LD1H units, its corrections and outputs 4
    // vectors). 1–2 rows at SVL 256: both stripes in one pass, row r's stripe s in group 4r + 2s.
    (@panel $v:ident r4 $zp:ident $ch:ident) => {
        quad_asm!(@stripes $v $zp $ch, [("0" "0") ("2" "1") ("4" "2") ("6" "3")],
            [("0" "1" "0" A) ("2" "3" "1" B) ("4" "5" "2" A) ("6" "7" "3" B)], [("1" "0") ("3" "1") ("5" "2") ("7" "3")],
            ["1" "3" "5" "7"])
    };
    (@panel $v:ident r3 $zp:ident $ch:ident) => {
        quad_asm!(@stripes $v $zp $ch, [("0" "0") ("2" "1") ("4" "2")],
            [("0" "1" "0" A) ("2" "3" "1" B) ("4" "5" "2" A)], [("1" "0") ("3" "1") ("5" "2")], ["1" "3" "5"])
    };
    (@panel v64 r2 $zp:ident $ch:ident) => {
        quad_asm!(@stripes v64 $zp $ch, [("0" "0") ("2" "1")], [("0" "1" "0" A) ("2" "3" "1" B)], [("1" "0") ("3" "1")],
            ["1" "3"])
    };
    (@panel v64 r1 $zp:ident $ch:ident) => {
        quad_asm!(@stripes v64 $zp $ch, [("0" "0")], [("0" "1" "0" A)], [("1" "0")], ["1"])
    };
    (@panel v32 r2 $zp:ident $ch:ident) => {
        quad_asm!(@pass $zp $ch,
            [("0" "8" "16" "24"; [("0" "0") ("4" "1")]) ("4" "12" "20" "28"; [("2" "0") ("6" "1")])],
            [("0" "1" "2" "3", "0", [("0" "1" "0" A) ("4" "5" "1" B)], [("1" "0") ("5" "1")])
             ("4" "5" "6" "7", "4", [("2" "3" "0" A) ("6" "7" "1" B)], [("3" "0") ("7" "1")])],
            [("0", ["1" "5"]) ("4", ["3" "7"])])
    };
    (@panel v32 r1 $zp:ident $ch:ident) => {
        quad_asm!(@pass $zp $ch,
            [("0" "8" "16" "24"; [("0" "0")]) ("4" "12" "20" "28"; [("2" "0")])],
            [("0" "1" "2" "3", "0", [("0" "1" "0" A)], [("1" "0")]) ("4" "5" "6" "7", "4", [("2" "3" "0" B)], [("3" "0")])],
            [("0", ["1"]) ("4", ["3"])])
    };
    // SVL 512, 5–8 rows (two quadwords: rows 0–3 and 4 … R − 1): ZA's 16 vector groups, row r < 4's int32 sums
    // group 2r (`za.s[w8, 2r, vgx4]`), row 4 + r's group 8 + 2r (`za.s[w9, 2r, vgx4]`, w9 = 8), f32 sums the next.
    // Per group of a chunk its 4 quadwords (low and high run × rows 0–3 and 4–7) just before its SDOTs, so that 4
    // registers (z8–z11) serve 8 rows. Only the R real rows are computed: the second quadword's rows are listed.
    (@panel v64 r5 $zp:ident $ch:ident) => {
        quad_asm!(@octo $zp $ch, [("0" "0")], [("0" "1" "0" "16" "19")], [("1" "0")])
    };
    (@panel v64 r6 $zp:ident $ch:ident) => {
        quad_asm!(@octo $zp $ch, [("0" "0") ("2" "1")], [("0" "1" "0" "16" "19") ("2" "3" "1" "12" "15")],
            [("1" "0") ("3" "1")])
    };
    (@panel v64 r7 $zp:ident $ch:ident) => {
        quad_asm!(@octo $zp $ch, [("0" "0") ("2" "1") ("4" "2")],
            [("0" "1" "0" "16" "19") ("2" "3" "1" "12" "15") ("4" "5" "2" "16" "19")], [("1" "0") ("3" "1") ("5" "2")])
    };
    (@panel v64 r8 $zp:ident $ch:ident) => {
        quad_asm!(@octo $zp $ch, [("0" "0") ("2" "1") ("4" "2") ("6" "3")],
            [("0" "1" "0" "16" "19") ("2" "3" "1" "12" "15") ("4" "5" "2" "16" "19") ("6" "7" "3" "12" "15")],
            [("1" "0") ("3" "1") ("5" "2") ("7" "3")])
    };
    // SVL 512, 9–10 rows (three quadwords) in one pass: their int32 sums need 10 vector groups and ZA has 16, so
    // six rows keep their f32 sums in ZA and the others (3, 7, 8, 9) in their output rows (64 f32 per panel, loaded
    // and stored per block by the epilogue, zeroed when the panel starts). The int32 groups are ZA tiles za0.d,
    // za1.d, za2.d, za4.d, za6.d (groups 0, 2, 4, 6, 8, 10, 12, 14: rows 0–7 as in the 8-row pass; 1 and 9: rows 8
    // and 9), zeroed per block by one `zero`; the f32 sums of rows 0–2 and 4–6 the groups 3, 5, 7 from w8 and w9.
    // Every row's sums take the same roundings in the same order as in the other passes. `$sd` the third
    // quadword's rows (ZA base, int32 group, lane), `$mem` the rows with sums in memory (ZA base, int32 group,
    // lane, factor registers, the step from the previous such row in output rows).
    (@panel v64 r9 $zp:ident $ch:ident) => {
        quad_asm!(@deca $zp $ch, [("w8" "1" "0")],
            [("w8" "6" "3" "2" "3" "3") ("w9" "6" "3" "4" "5" "4") ("w8" "1" "0" "6" "7" "1")])
    };
    (@panel v64 r10 $zp:ident $ch:ident) => {
        quad_asm!(@deca $zp $ch, [("w8" "1" "0") ("w9" "1" "1")],
            [("w8" "6" "3" "2" "3" "3") ("w9" "6" "3" "4" "5" "4") ("w8" "1" "0" "6" "7" "1") ("w9" "1" "1" "6" "7" "1")])
    };
    (@deca $zp:ident $ch:ident, $sd:tt, [$(($mw:literal $mo:literal $ml:literal $mf:literal $mz:literal $step:tt))*]) => {
        concat!(
            quad_asm!(@head2),
            "mov z12.s, #0\n",
            "mov z13.s, #0\n",
            "mov z14.s, #0\n",
            "mov z15.s, #0\n",
            "mov {xt}, {xo}\n",
            $(quad_asm!(@step $step), "st1w {{z12.s-z15.s}}, pn8, [{xt}]\n",)*
            "2:\n",
            "mov {xc}, {xrec}\n",
            quad_asm!(@chunks $ch (deca $sd)),
            quad_asm!(@factors12 $zp),
            quad_asm!(@colscales),
            quad_asm!(@corr $zp),
            quad_asm!(@row8 "w8" "0" "3" "0" "16" "19" "2"),
            quad_asm!(@row8 "w8" "2" "5" "1" "12" "15" "2"),
            quad_asm!(@row8 "w8" "4" "7" "2" "16" "19" "2"),
            quad_asm!(@row8 "w9" "0" "3" "0" "12" "15" "4"),
            quad_asm!(@row8 "w9" "2" "5" "1" "16" "19" "4"),
            quad_asm!(@row8 "w9" "4" "7" "2" "12" "15" "4"),
            quad_asm!(@zpza $zp),
            "mov {xt}, {xo}\n",
            $(quad_asm!(@rowm $zp $mw $mo $ml $mf $mz $step),)*
            "zero {{za0.d, za1.d, za2.d, za4.d, za6.d}}\n",
            "add {xrec}, {xrec}, {rec}\n",
            "add {xr}, {xr}, #64\n",
            "subs {nb}, {nb}, #1\n",
            "b.ne 2b\n",
            // The f32 sums in ZA (rows 0–2, 4–6) out.
            "mov {xt}, {xo}\n",
            quad_asm!(@st "w8" "3"), "add {xt}, {xt}, {ostride}\n",
            quad_asm!(@st "w8" "5"), "add {xt}, {xt}, {ostride}\n",
            quad_asm!(@st "w8" "7"), "add {xt}, {xt}, {ostride}, lsl #1\n",
            quad_asm!(@st "w9" "3"), "add {xt}, {xt}, {ostride}\n",
            quad_asm!(@st "w9" "5"), "add {xt}, {xt}, {ostride}\n",
            quad_asm!(@st "w9" "7"),
            "// {nst}\n",
            "zero {{za}}\n",
        )
    };
    // The start of a pass of two or three quadwords: the panel's records and row factors, the low runs at {xa}
    // (128 bytes into the chunk, plus 16 per quad of rows) and the high runs 256 bytes on at {xb}, the block count.
    (@head2) => {
        concat!(
            "mov {xrec}, {xp}\n",
            "mov {xr}, {rowtab}\n",
            "mov {xa}, {lhs}\n",
            "add {xb}, {xa}, #256\n",
            "mov {nb}, {blocks}\n",
        )
    };
    // A panel's 64 f16 column scales of the block as f32 in z20–z23 (SVL 512: the whole panel, shared by the rows).
    (@colscales) => {
        concat!(
            "add {xt}, {xrec}, {sc}\n",
            "ld1h {{z20.s}}, p1/z, [{xt}, #0, mul vl]\n",
            "ld1h {{z21.s}}, p1/z, [{xt}, #1, mul vl]\n",
            "ld1h {{z22.s}}, p1/z, [{xt}, #2, mul vl]\n",
            "ld1h {{z23.s}}, p1/z, [{xt}, #3, mul vl]\n",
            "fcvt z20.s, p1/m, z20.h\n",
            "fcvt z21.s, p1/m, z21.h\n",
            "fcvt z22.s, p1/m, z22.h\n",
            "fcvt z23.s, p1/m, z23.h\n",
        )
    };
    (@st $w:literal $o:literal) => {
        concat!(
            "mova {{z16.d-z19.d}}, za.d[", $w, ", ", $o, ", vgx4]\n",
            "st1w {{z16.s-z19.s}}, pn8, [{xt}]\n",
        )
    };
    // {xt} forward by `$step` output rows.
    (@step "1") => { "add {xt}, {xt}, {ostride}\n" };
    (@step "3") => { concat!("add {xt}, {xt}, {ostride}, lsl #1\n", "add {xt}, {xt}, {ostride}\n") };
    (@step "4") => { "add {xt}, {xt}, {ostride}, lsl #2\n" };
    // A row whose f32 sums are in memory: its int32 sums (ZA base `$w`, group `$o`) out and converted, × (column
    // scale · the row's sa/16: lane `$l` of z`$f`), added to its sums at {xt} (`$step` rows on) by FMLA; with zero
    // points + c · sa·Σq (lane `$l` of z`$z`, the corrections in z8–z11).
    (@rowm $zp:ident $w:literal $o:literal $l:literal $f:literal $z:literal $step:tt) => {
        concat!(
            "mova {{z16.d-z19.d}}, za.d[", $w, ", ", $o, ", vgx4]\n",
            "scvtf {{z16.s-z19.s}}, {{z16.s-z19.s}}\n",
            quad_asm!(@step $step),
            "fmul z24.s, z20.s, z", $f, ".s[", $l, "]\n",
            "fmul z25.s, z21.s, z", $f, ".s[", $l, "]\n",
            "fmul z26.s, z22.s, z", $f, ".s[", $l, "]\n",
            "fmul z27.s, z23.s, z", $f, ".s[", $l, "]\n",
            "ld1w {{z12.s-z15.s}}, pn8/z, [{xt}]\n",
            "fmla z12.s, p1/m, z16.s, z24.s\n",
            "fmla z13.s, p1/m, z17.s, z25.s\n",
            "fmla z14.s, p1/m, z18.s, z26.s\n",
            "fmla z15.s, p1/m, z19.s, z27.s\n",
            quad_asm!(@rowmzp $zp $z $l),
            "st1w {{z12.s-z15.s}}, pn8, [{xt}]\n",
        )
    };
    (@rowmzp zp $z:literal $l:literal) => {
        concat!(
            "fmla z12.s, z8.s, z", $z, ".s[", $l, "]\n",
            "fmla z13.s, z9.s, z", $z, ".s[", $l, "]\n",
            "fmla z14.s, z10.s, z", $z, ".s[", $l, "]\n",
            "fmla z15.s, z11.s, z", $z, ".s[", $l, "]\n",
        )
    };
    (@rowmzp nozp $z:literal $l:literal) => {
        ""
    };
    // The block's corrections (zero points) into z8–z11, before any row's epilogue.
    (@corr zp) => {
        concat!("add {xt}, {xrec}, {zo}\n", "ld1w {{z8.s-z11.s}}, pn8/z, [{xt}]\n")
    };
    (@corr nozp) => {
        ""
    };
    // The zero-point terms of the rows with f32 sums in ZA (rows 0–2, 4–6).
    (@zpza zp) => {
        concat!(
            "fmla za.s[w8, 3, vgx4], {{z8.s-z11.s}}, z3.s[0]\n",
            "fmla za.s[w8, 5, vgx4], {{z8.s-z11.s}}, z3.s[1]\n",
            "fmla za.s[w8, 7, vgx4], {{z8.s-z11.s}}, z3.s[2]\n",
            "fmla za.s[w9, 3, vgx4], {{z8.s-z11.s}}, z5.s[0]\n",
            "fmla za.s[w9, 5, vgx4], {{z8.s-z11.s}}, z5.s[1]\n",
            "fmla za.s[w9, 7, vgx4], {{z8.s-z11.s}}, z5.s[2]\n",
        )
    };
    (@zpza nozp) => {
        ""
    };
    (@chunk (deca $sd:tt)) => {
        concat!(
            quad_asm!(@group10 "0", "-128", "-112", "-96", $sd),
            quad_asm!(@group10 "4", "-64", "-48", "-32", $sd),
            quad_asm!(@group10 "8", "0", "16", "32", $sd),
            quad_asm!(@group10 "12", "64", "80", "96", $sd),
            "add {xa}, {xa}, #512\n",
            "add {xb}, {xb}, #512\n",
            "add {xc}, {xc}, #1024\n",
        )
    };
    // Group g of a 9–10-row chunk: the third quadwords (rows 8–11) of the low and high runs at `$q2` (z12, z13),
    // then `@group8` for rows 0–7, then the SDOTs of the rows `$sd`.
    (@group10 $imm:literal, $q0:literal, $q1:literal, $q2:literal, [$(($w:literal $o:literal $i:literal))*]) => {
        concat!(
            "ld1rqb {{z12.b}}, p0/z, [{xa}, #", $q2, "]\n",
            "ld1rqb {{z13.b}}, p0/z, [{xb}, #", $q2, "]\n",
            quad_asm!(@group8 $imm, $q0, $q1, [("0" "0") ("2" "1") ("4" "2") ("6" "3")]),
            $(
                "sdot za.s[", $w, ", ", $o, ", vgx4], {{z16.b-z19.b}}, z12.b[", $i, "]\n",
                "sdot za.s[", $w, ", ", $o, ", vgx4], {{z20.b-z23.b}}, z13.b[", $i, "]\n",
            )*
        )
    };
    // The 12 rows' factors: z2, z4, z6 = sa × 2^−4 of rows 0–3, 4–7, 8–11; z3, z5, z7 = their sa·Σq.
    (@factors12 zp) => {
        concat!(
            "ld1rqw {{z2.s}}, p1/z, [{xr}]\n",
            "ld1rqw {{z4.s}}, p1/z, [{xr}, #16]\n",
            "ld1rqw {{z6.s}}, p1/z, [{xr}, #32]\n",
            "ld1rqw {{z3.s}}, p1/z, [{xr}, {xqo}, lsl #2]\n",
            "add {xt}, {xr}, #16\n",
            "ld1rqw {{z5.s}}, p1/z, [{xt}, {xqo}, lsl #2]\n",
            "add {xt}, {xr}, #32\n",
            "ld1rqw {{z7.s}}, p1/z, [{xt}, {xqo}, lsl #2]\n",
            "scvtf z3.s, p1/m, z3.s\n",
            "scvtf z5.s, p1/m, z5.s\n",
            "scvtf z7.s, p1/m, z7.s\n",
            "fmul z3.s, z3.s, z2.s\n",
            "fmul z5.s, z5.s, z4.s\n",
            "fmul z7.s, z7.s, z6.s\n",
            "fmul z2.s, z2.s, z28.s\n",
            "fmul z4.s, z4.s, z28.s\n",
            "fmul z6.s, z6.s, z28.s\n",
        )
    };
    (@factors12 nozp) => {
        concat!(
            "ld1rqw {{z2.s}}, p1/z, [{xr}]\n",
            "ld1rqw {{z4.s}}, p1/z, [{xr}, #16]\n",
            "ld1rqw {{z6.s}}, p1/z, [{xr}, #32]\n",
            "fmul z2.s, z2.s, z28.s\n",
            "fmul z4.s, z4.s, z28.s\n",
            "fmul z6.s, z6.s, z28.s\n",
            "// {zo} {xqo}\n",
        )
    };
    // The pass of 4 + n rows: the second quadword's rows as (int32 group, lane) `$hs`, their epilogues (int32
    // group, f32 group, lane, sums registers) `$hr`, their zero-point terms (f32 group, lane) `$hz`.
    (@octo $zp:ident $ch:ident, $hs:tt, [$(($hi:literal $hf:literal $hl:literal $h0:literal $h3:literal))*], $hz:tt) => {
        concat!(
            quad_asm!(@head2),
            "2:\n",
            "mov {xc}, {xrec}\n",
            quad_asm!(@chunks $ch (octo $hs)),
            quad_asm!(@factors8 $zp),
            quad_asm!(@colscales),
            quad_asm!(@row8 "w8" "0" "1" "0" "16" "19" "2"),
            quad_asm!(@row8 "w8" "2" "3" "1" "12" "15" "2"),
            quad_asm!(@row8 "w8" "4" "5" "2" "16" "19" "2"),
            quad_asm!(@row8 "w8" "6" "7" "3" "12" "15" "2"),
            $(quad_asm!(@row8 "w9" $hi $hf $hl $h0 $h3 "4"),)*
            quad_asm!(@zp8 $zp $hz),
            "zero {{za0.d, za2.d, za4.d, za6.d}}\n",
            "add {xrec}, {xrec}, {rec}\n",
            "add {xr}, {xr}, #64\n",
            "subs {nb}, {nb}, #1\n",
            "b.ne 2b\n",
            // The stored rows' f32 sums (groups 1, 3, …: w10 + 1) out, row after row.
            "mov {xt}, {xo}\n",
            "mov w10, #0\n",
            "mov {nb}, {nst}\n",
            "4:\n",
            "mova {{z16.d-z19.d}}, za.d[w10, 1, vgx4]\n",
            "st1w {{z16.s-z19.s}}, pn8, [{xt}]\n",
            "add {xt}, {xt}, {ostride}\n",
            "add w10, w10, #2\n",
            "subs {nb}, {nb}, #1\n",
            "b.ne 4b\n",
            "zero {{za}}\n",
        )
    };
    (@chunk (octo $hs:tt)) => {
        concat!(
            quad_asm!(@group8 "0", "-128", "-112", $hs),
            quad_asm!(@group8 "4", "-64", "-48", $hs),
            quad_asm!(@group8 "8", "0", "16", $hs),
            quad_asm!(@group8 "12", "64", "80", $hs),
            "add {xa}, {xa}, #512\n",
            "add {xb}, {xb}, #512\n",
            "add {xc}, {xc}, #1024\n",
        )
    };
    // Group g of an 8-row chunk: codes at `[{xc}, #$imm, mul vl]`; the low run's quadwords of rows 0–3 and 4–7 at
    // `[{xa}, #$q0]`, `[{xa}, #$q1]` (z8, z9), the high run's at the same offsets from {xb} (z10, z11).
    (@group8 $imm:literal, $q0:literal, $q1:literal, $hs:tt) => {
        concat!(
            "ld1rqb {{z8.b}}, p0/z, [{xa}, #", $q0, "]\n",
            "ld1rqb {{z9.b}}, p0/z, [{xa}, #", $q1, "]\n",
            "ld1rqb {{z10.b}}, p0/z, [{xb}, #", $q0, "]\n",
            "ld1rqb {{z11.b}}, p0/z, [{xb}, #", $q1, "]\n",
            quad_asm!(@decode $imm),
            quad_asm!(@sdot8 "w8", "8", "10", [("0" "0") ("2" "1") ("4" "2") ("6" "3")]),
            quad_asm!(@sdot8 "w9", "9", "11", $hs),
        )
    };
    // Per row (int32 group `$o` from ZA base `$w`, lane `$i` of the quadwords) one SDOT per field.
    (@sdot8 $w:literal, $lo:literal, $hi:literal, [$(($o:literal $i:literal))*]) => {
        concat!(
            $(
                "sdot za.s[", $w, ", ", $o, ", vgx4], {{z16.b-z19.b}}, z", $lo, ".b[", $i, "]\n",
                "sdot za.s[", $w, ", ", $o, ", vgx4], {{z20.b-z23.b}}, z", $hi, ".b[", $i, "]\n",
            )*
        )
    };
    // One row of 8 (ZA base `$w`, groups `$oi`/`$of`, lane `$r` of the factors in z`$fr`; sums in z`$s0`–z`$s3`).
    (@row8 $w:literal $oi:literal $of:literal $r:literal $s0:literal $s3:literal $fr:literal) => {
        concat!(
            "mova {{z", $s0, ".d-z", $s3, ".d}}, za.d[", $w, ", ", $oi, ", vgx4]\n",
            "scvtf {{z", $s0, ".s-z", $s3, ".s}}, {{z", $s0, ".s-z", $s3, ".s}}\n",
            "fmul z24.s, z20.s, z", $fr, ".s[", $r, "]\n",
            "fmul z25.s, z21.s, z", $fr, ".s[", $r, "]\n",
            "fmul z26.s, z22.s, z", $fr, ".s[", $r, "]\n",
            "fmul z27.s, z23.s, z", $fr, ".s[", $r, "]\n",
            "fmla za.s[", $w, ", ", $of, ", vgx4], {{z", $s0, ".s-z", $s3, ".s}}, {{z24.s-z27.s}}\n",
        )
    };
    // The 8 rows' factors: z2, z4 = sa × 2^−4 of rows 0–3, 4–7; z3, z5 = their sa·Σq.
    (@factors8 zp) => {
        concat!(
            "ld1rqw {{z2.s}}, p1/z, [{xr}]\n",
            "ld1rqw {{z4.s}}, p1/z, [{xr}, #16]\n",
            "ld1rqw {{z3.s}}, p1/z, [{xr}, {xqo}, lsl #2]\n",
            "add {xt}, {xr}, #16\n",
            "ld1rqw {{z5.s}}, p1/z, [{xt}, {xqo}, lsl #2]\n",
            "scvtf z3.s, p1/m, z3.s\n",
            "scvtf z5.s, p1/m, z5.s\n",
            "fmul z3.s, z3.s, z2.s\n",
            "fmul z5.s, z5.s, z4.s\n",
            "fmul z2.s, z2.s, z28.s\n",
            "fmul z4.s, z4.s, z28.s\n",
        )
    };
    (@factors8 nozp) => {
        concat!(
            "ld1rqw {{z2.s}}, p1/z, [{xr}]\n",
            "ld1rqw {{z4.s}}, p1/z, [{xr}, #16]\n",
            "fmul z2.s, z2.s, z28.s\n",
            "fmul z4.s, z4.s, z28.s\n",
            "// {zo} {xqo}\n",
        )
    };
    (@zp8 zp [$(($hf:literal $hl:literal))*]) => {
        concat!(
            "add {xt}, {xrec}, {zo}\n",
            "ld1w {{z8.s-z11.s}}, pn8/z, [{xt}]\n",
            "fmla za.s[w8, 1, vgx4], {{z8.s-z11.s}}, z3.s[0]\n",
            "fmla za.s[w8, 3, vgx4], {{z8.s-z11.s}}, z3.s[1]\n",
            "fmla za.s[w8, 5, vgx4], {{z8.s-z11.s}}, z3.s[2]\n",
            "fmla za.s[w8, 7, vgx4], {{z8.s-z11.s}}, z3.s[3]\n",
            $("fmla za.s[w9, ", $hf, ", vgx4], {{z8.s-z11.s}}, z5.s[", $hl, "]\n",)*
        )
    };
    (@zp8 nozp $hz:tt) => {
        ""
    };
    // One-stripe passes over the panel: two at SVL 256, one at 512.
    (@stripes v32 $zp:ident $ch:ident, $sd:tt, $rows:tt, $zps:tt, $st:tt) => {
        concat!(
            quad_asm!(@one $zp $ch, "0" "8" "16" "24", "0" "1" "2" "3", "0", $sd, $rows, $zps, $st),
            quad_asm!(@one $zp $ch, "4" "12" "20" "28", "4" "5" "6" "7", "4", $sd, $rows, $zps, $st),
        )
    };
    (@stripes v64 $zp:ident $ch:ident, $sd:tt, $rows:tt, $zps:tt, $st:tt) => {
        quad_asm!(@one $zp $ch, "0" "4" "8" "12", "0" "1" "2" "3", "0", $sd, $rows, $zps, $st)
    };
    ($v:ident $r:ident $zp:ident $ch:ident) => {
        concat!(
            ".arch_extension sme2\n",
            ".arch_extension sve\n",
            enter_streaming!(),
            "ptrue p0.b\n",
            "ptrue p1.s\n",
            "ptrue pn8.b\n",
            "dup z0.b, #8\n",
            "dup z1.b, #4\n",
            "mov w8, #0x3d800000\n",
            "dup z28.s, w8\n",
            "mov w8, #0\n",
            "mov w9, #8\n",
            "// {xb} {nst}\n",
            // Panel loop.
            "1:\n",
            quad_asm!(@panel $v $r $zp $ch),
            "add {xo}, {xo}, #256\n",
            "add {xp}, {xp}, {pstride}\n",
            "subs {np}, {np}, #1\n",
            "b.ne 1b\n",
            "smstop\n",
        )
    };
}

/// The asm of one mode over `$s.panels` panels.
macro_rules! quad_call {
    ($v:ident $r:ident $zp:ident $ch:ident; $s:ident) => {
        streaming_asm!(
            quad_asm!($v $r $zp $ch),
            xp = inout(reg) $s.rec => _,
            np = inout(reg) $s.panels => _,
            xo = inout(reg) $s.out => _,
            ostride = in(reg) $s.out_stride,
            rowtab = in(reg) $s.scales,
            xqo = in(reg) $s.to_sums,
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
            xb = out(reg) _,
            nst = in(reg) $s.stored,
            out("x8") _,
            out("x9") _,
            out("x10") _,
        )
    };
}

/// The match over a call's mode (SVL, rows, zero points, chunks per block) of `quad_call!`.
macro_rules! quad_modes {
    ($mode:expr, $p:ident; $(($v:ident $vb:literal))*; $rs:tt) => {
        match $mode {
            $(($vb, r, zp, one) => quad_modes!(@r $v, r, zp, one, $p; $rs),)*
            _ => unreachable!("SME2 few-row GEMM: SVL checked by the caller"),
        }
    };
    (@r $v:ident, $r:ident, $zp:ident, $one:ident, $p:ident; [$(($rr:ident $rn:literal))*]) => {
        match ($r, $zp, $one) {
            $(
                ($rn, false, true) => quad_call!($v $rr nozp one; $p),
                ($rn, false, false) => quad_call!($v $rr nozp many; $p),
                ($rn, true, true) => quad_call!($v $rr zp one; $p),
                ($rn, true, false) => quad_call!($v $rr zp many; $p),
            )*
            _ => unreachable!("SME2 few-row GEMM: a pass of 1–4 rows, or 5–10 at SVL 512"),
        }
    };
}

/// What one asm call walks: `panels` panels from the record pointer `rec`, its `stored` rows (1–4, at SVL 512 also
/// 5–8) of 64 f32 per panel at `out` (rows `out_stride` bytes apart).
#[derive(Clone, Copy)]
struct Pass {
    rec: *const u8,
    panels: usize,
    out: *mut f32,
    out_stride: usize,
    stored: usize,
    /// The pass's first row's block-0 scale (group-major: the next block's 16 f32 further), and from there to
    /// its Σq in elements.
    scales: *const f32,
    to_sums: usize,
    /// 128 bytes into the group's first chunk, plus 16 per quad of rows.
    lhs: *const u8,
    blocks: usize,
    chunks: usize,
    record: usize,
    panel_stride: usize,
    to_scales: usize,
    to_zp: usize,
}

/// Runs the tile `a`: one `qsi8dbp16x4` row group with 1–15 real rows, at a streaming vector length of `v` bytes.
///
/// # Safety
/// The CPU has SME2 at a streaming vector length of `v` ∈ {32, 64} bytes; `a` satisfies the `RunArgs` contract
/// with a `qsi8dbp16x4` LHS of one row group (1 ≤ rows < 16) and a `qsnbp64x4_sf16_zpc` RHS of 4-bit codes in
/// blocks of whole 32-K chunks, `blocks` > 0.
pub(crate) unsafe fn run(a: &RunArgs, v: usize) {
    assert!((1..MR).contains(&a.rows) && (v == 32 || v == 64), "SME2 few-row GEMM: {} rows at SVL {v}", a.rows);
    let whole = a.cols / NR;
    let tail = a.cols - whole * NR;
    // Σq from the scales, in f32 elements (both arrays of 4-byte values; only the asm adds it back).
    let to_sums = (a.lhs_sum as usize).wrapping_sub(a.lhs_scale as usize) / 4;
    // Passes of up to 4 rows (one quadword of the runs); at SVL 512 of 5–8 (two quadwords, only the real rows
    // computed) while 5 or more are left. At SVL 256 (8 vector groups of ZA) 5 rows run as 3 + 2, which counted the
    // same as 4 + 1 (2048², qemu 11: 0.82 M instructions, 0.93x ORT's).
    let mut row = 0;
    while row < a.rows {
        let left = a.rows - row;
        let (rows, r) = match left {
            9..=10 if v == 64 => (left, left),
            5.. if v == 64 => (left.min(2 * ROWS), left.min(2 * ROWS)),
            5 => (3, 3),
            _ => (left.min(ROWS), left.min(ROWS)),
        };
        let dst = a.dst.wrapping_add(row * a.dst_stride);
        let at = |panel: usize, panels: usize, out: *mut f32, row_floats: usize| Pass {
            rec: a.rhs.wrapping_add(panel * a.rhs_panel_stride),
            panels,
            out,
            out_stride: row_floats * 4,
            stored: rows,
            scales: a.lhs_scale.wrapping_add(row),
            to_sums,
            lhs: a.lhs.wrapping_add(128 + 4 * row),
            blocks: a.blocks,
            chunks: a.bl / CHUNK,
            record: a.rhs_record,
            panel_stride: a.rhs_panel_stride,
            to_scales: a.rhs_scales,
            to_zp: a.rhs_zp,
        };
        let (zp, one) = (a.has_zp != 0, a.bl == CHUNK);
        let mode = (v, r, zp, one);
        let pass = |p: Pass| {
            if p.panels == 0 {
                return;
            }
            // SAFETY: the CPU has SME2 at this SVL (`v32`: 32 bytes, `v64`: 64; the code, scale and store offsets
            // are in vectors of v bytes); the pass computes rows `row` .. `row` + r of the group, all real (r5..r10
            // at SVL 512 only: ZA's 16 vector groups; r9..r10 from the group's first row, whose 16 rows of runs,
            // scales and Σq the packed LHS holds). Reads per panel and block: chunks × 4 groups × 64 columns × 4
            // bytes of codes, 64 f16 scales and (zero points) 64 f32 corrections inside the record (RunArgs
            // contract: the pass's panels are the tile's); per chunk 8 quadwords of the group's 512 bytes (from
            // lhs − 128; 12 for r9..r10); per block 4–12 f32 of the group's scales and (zero points) of its Σq
            // (group-major, 16 per block). Writes 64 f32 per panel to each of its rows, `out_stride` bytes apart
            // from `out` (r9..r10 also read back rows 3, 7, 8, 9 there per block, zeroed when the panel starts):
            // the rows of dst for whole panels (inside dst, which nothing else references during the call), else
            // `last` (10 rows of 64). Every vector and predicate register, ffr, x8–x10, x12 and x14–x17 are
            // declared clobbered; ZA is left off (SMSTOP), TPIDR2_EL0 0 or untouched.
            unsafe {
                match (r, zp, one) {
                    (5.., _, _) => quad_modes!(mode, p; (v64 64); [(r5 5) (r6 6) (r7 7) (r8 8) (r9 9) (r10 10)]),
                    _ => quad_modes!(mode, p; (v32 32) (v64 64); [(r1 1) (r2 2) (r3 3) (r4 4)]),
                }
            }
        };
        pass(at(0, whole, dst, a.dst_stride));
        // A last, partial panel into a buffer (10 rows of 64, zeroed only when there is one).
        let mut last;
        let partial = if tail > 0 {
            last = [0f32; MAX_PASS_ROWS * NR];
            pass(at(whole, 1, last.as_mut_ptr(), NR));
            Some((&last[..], NR))
        } else {
            None
        };
        // SAFETY: rows `row` .. `row` + rows of the tile's output hold `cols` values each, `dst_stride` apart;
        // bias null or `cols` values (RunArgs contract).
        unsafe { super::ops::finish_rows(a, dst, rows, whole * NR, partial) };
        row += rows;
    }
}
