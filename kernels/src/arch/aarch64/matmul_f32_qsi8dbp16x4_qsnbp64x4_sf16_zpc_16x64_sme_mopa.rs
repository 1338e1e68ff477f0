//! int8-activation GEMM for prefill, SME2: 16 rows (one `qsi8dbp16x4` row group) × 64 columns (one
//! `qsnbp64x4` panel) per register tile, int32 in the four ZA tiles za0.s–za3.s through 4-way SMOPA
//! (16 rows × 4 K of activations ⊗ 16 columns × 4 K of weights per instruction at a 512-bit streaming vector).
//!
//! Layout. `qsnbp64x4_sf16_zpc` does not depend on the streaming vector length (SVL): a 32-K chunk of a panel
//! is 4 groups of 64 columns × 4 bytes (K 4g…4g+3 in the low nibbles, 16 + 4g… in the high ones), so the
//! SMOPA column operand is any run of `s` columns (4·s bytes) of a group and the row operand any `s` rows of an
//! LHS run (16 rows × 4 K = 64 bytes). With `s` = min(SVL, 64 bytes) / 4 the asm computes the 16 × 64 tile in
//! (16 / s) · (64 / 4s) passes of s rows × 4s columns (one pass at SVL 512, 4 at 256, 16 at 128; at SVL > 512
//! the vectors are predicated to their first 512 bits). The SVL is read (`rdsvl`) on every call and the pass
//! geometry follows from it, so weights packed on one thread run on any other whatever its SVL: no packed
//! geometry can mismatch the vector (the brief's `qsnbp<SVL>x4` would need a fallback when it does).
//!
//! Numerics (option (a) of `design/sme2.md` §2: f32 sums in memory): per 32-K chunk, each group's four code
//! vectors give the low field by `lsl #4` and the high one by `and #0xf0` (16·v exactly; the 2^−4 is in the
//! rows' scales), 8 SMOPA per group. Per block, for each of the s rows: row r of the
//! four tiles out of ZA by one multi-vector MOVA (`mova {z16.b-z19.b}, za0h.b[w12, 0:3]`: ZA array vectors
//! 4r…4r + 3), one multi-vector SCVTF, × (column scale · row scale · 2^−4: 4 indexed FMUL, the row scales of 4
//! rows in one LD1RQW), FMLA into the f32 sums (one multi-vector load and store: the 16 × 64 f32 live in a 4 KB
//! buffer), + c · sa·Σq with zero points (4 indexed FMLA); then `zero {za}`. That multi-vector path needs the
//! pass's 4s columns to be 4 whole vectors (SVL ≤ 512 bits); at SVL > 512 the asm takes the single-vector
//! epilogue (a MOVA / SCVTF / FMUL / FMLA / load / store per tile row), with the same operations per element in
//! the same order, so the same bits. The column scales (f16 → f32 by FCVTL) and corrections are laid out once
//! per call and panel, the rows' sa · 2^−4 and sa·Σq once per call and group, so the asm epilogue is loads and
//! vector arithmetic. The `row` numerics (activation scales 1) put the 2^−4 into the column scales instead (exact)
//! and their fast epilogue has no FMUL and no row-scale load: per row, MOVA, SCVTF, a load, 4 FMLA of the
//! converted sums by the column scales and a store, 8 instructions against the per-block numerics' 12, with the
//! same bits as (s · 2^−4) · 1 (the single-vector epilogue multiplies by the rows' 1).
//!
//! Pair passes (SVL ≤ 256 bits): the four tiles as 2 × 2, a pass 2s rows × 2s columns (16 × 16 at
//! SVL 256), so each code field vector serves two row halves: per 4-K group one 2-vector code load, two 2-vector
//! LHS loads (both row halves of runs g and 4 + g), 4 field extractions and 8 SMOPA (15 instructions, against 19
//! for an s × 4s pass); the epilogue is the same per sums vector (one MOVA of the four tiles' row i gives rows i and
//! s + i, which the pass's sums keep side by side, so one 4-vector load and store serve them).
//!
//! Static instruction budget per 32-K block, one pass at SVL 512 (32 SMOPA):
//! - inner loop: 4 groups × (1 multi-vector code load, 2 LHS loads, 8 field extractions, 8 SMOPA), 3 pointer
//!   steps and 2 for the loop = 81 (2.5 per SMOPA; the group's 4 code vectors are contiguous when they are whole
//!   vectors, SVL ≤ 512; above, each group loads 4 predicated vectors and steps its pointers: 99, 3.1);
//! - epilogue: 4 scale loads and about 8 set-up, then 4 × (1 row-scale load, 4 rows × 12, 6 loop) = 220 (about
//!   7 per SMOPA; zero points add 4 + 4 loads and 16 × 4 indexed FMLA); at SVL 256 (8 rows per 32 SMOPA) half:
//!   about 3.7 per SMOPA; the row numerics 4 × (4 rows × 8, 5 loop) ≈ 160 (5 per SMOPA; about 2.6 at SVL 256);
//! - block loop: about 8.
//!
//! Counted (qemu 11 `-cpu max`, SVL 256, 2048 × 2048, the whole Run, `bench/results/aarch64-icount-sme2.md`):
//! with the pair passes and the sums stored per pass (vector bias adds, padding passes skipped) 7.9 instructions
//! per SMOPA at M = 32 and 7.4 at M = 128 (ORT's KleidiAI kernel 8.4), nibble / ORT 0.94 and 0.89; at M = 128
//! the pair `pass` is 6.0 per SMOPA (the loop ~2.0, the per-block epilogue ~3.9: per sums vector and block one FMUL
//! of column × row scale, one FMLA, a quarter of MOVA, SCVTF, load and store), `run` 0.6. Before: 8.5 / 8.0
//! (1.01 / 0.96), the kernel alone (`kernel_icount`, M = 128): 7.1 per SMOPA, the activation quantizer 0.4. Before the
//! multi-vector code loads, the quantizer's 4-byte runs and the FCVTL scale conversion: 10.0 / 9.6 (1.19 /
//! 1.15); before the multi-vector epilogue: 18.4 / 18.0 (2.19 / 2.16). The family stays ranked below the i8mm
//! families (see `registry.rs`).
//!
//! Streaming mode: every pass is one `asm!` block from `smstart` to `smstop` with no Rust code between; ZA's
//! lazy-save protocol is honoured (a non-null TPIDR2_EL0 block gets ZA saved into its buffer, then TPIDR2_EL0
//! is cleared, as `__arm_tpidr2_save` does) and the block leaves PSTATE.SM = PSTATE.ZA = 0. Every vector and
//! predicate register is declared clobbered (SMSTART/SMSTOP zero z0–z31, so d8–d15 too). Only SVE instructions
//! legal in streaming mode (no NEON: runs without FEAT_SME_FA64).
//!
//! LHS: `qsi8dbp16x4`; RHS: `qsnbp64x4_sf16_zpc`. The asm takes 4-bit codes in blocks of whole 32-K chunks;
//! 2- and 8-bit codes and blocks of 16 run the portable body on the same formats
//! (`portable::matmul_f32_qsi8dbp4x8_qnb_portable::run_p`). Features: sme, sme2. Row tails run whole
//! row groups (the packed LHS pads them with zero rows) and column tails whole panels (zero columns); only real
//! rows and columns are stored. No over-reads.

use super::ops::store_row;
use super::sve_asm::{enter_streaming, streaming_asm};
use crate::ukernel::RunArgs;

/// Rows per LHS group (`qsi8dbp16x4`) and columns per panel (`qsnbp64x4`), K per run / column group.
pub(crate) const MR: usize = 16;
pub(crate) const NR: usize = 64;
pub(crate) const KR: usize = 4;

/// f32 per block in the per-call column buffer (64 scales, then 64 corrections) and row buffer (16 sa · 2^−4,
/// then 16 sa·Σq).
const COL_PER_BLOCK: usize = 2 * NR;
const ROW_PER_BLOCK: usize = 2 * MR;

/// The streaming vector length in bytes (`rdsvl`; legal outside streaming mode).
///
/// # Safety
/// The CPU has SME.
pub(crate) unsafe fn svl_bytes() -> usize {
    let svl: usize;
    // SAFETY: RDSVL only reads the streaming vector length (the caller's guarantee: SME); no memory, no flags.
    unsafe {
        core::arch::asm!(".arch_extension sme", "rdsvl {0}, #1", out(reg) svl, options(nomem, nostack, preserves_flags))
    };
    svl
}

/// The 64 f16 at `src` (any alignment) as f32 into `dst[0..64]` (FCVTL: exact; base AdvSIMD).
///
/// # Safety
/// `src` is readable for 128 bytes, `dst` writable for 64 f32.
#[inline]
unsafe fn widen_scales(src: *const u8, dst: *mut f32) {
    // SAFETY: reads 128 bytes at src and writes 256 at dst (the caller's guarantee); NEON only, no flags.
    unsafe {
        core::arch::asm!(
            "ld1 {{v0.8h, v1.8h, v2.8h, v3.8h}}, [{s}], #64",
            "ld1 {{v4.8h, v5.8h, v6.8h, v7.8h}}, [{s}]",
            "fcvtl v16.4s, v0.4h",
            "fcvtl2 v17.4s, v0.8h",
            "fcvtl v18.4s, v1.4h",
            "fcvtl2 v19.4s, v1.8h",
            "fcvtl v20.4s, v2.4h",
            "fcvtl2 v21.4s, v2.8h",
            "fcvtl v22.4s, v3.4h",
            "fcvtl2 v23.4s, v3.8h",
            "st1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{d}], #64",
            "st1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{d}], #64",
            "fcvtl v16.4s, v4.4h",
            "fcvtl2 v17.4s, v4.8h",
            "fcvtl v18.4s, v5.4h",
            "fcvtl2 v19.4s, v5.8h",
            "fcvtl v20.4s, v6.4h",
            "fcvtl2 v21.4s, v6.8h",
            "fcvtl v22.4s, v7.4h",
            "fcvtl2 v23.4s, v7.8h",
            "st1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{d}], #64",
            "st1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{d}]",
            s = inout(reg) src => _,
            d = inout(reg) dst => _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _, out("v6") _, out("v7") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _, out("v21") _, out("v22") _,
            out("v23") _,
            options(nostack, preserves_flags),
        )
    };
}

/// # Safety
/// The CPU has SME2; `args` satisfies the `RunArgs` contract with a `qsi8dbp16x4` LHS (the tile starts at a
/// row group) and a `qsnbp64x4_sf16_zpc` RHS.
#[target_feature(enable = "neon")] // so that `store_row` inlines
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    if !(a.bits == 4 && a.bl.is_multiple_of(32)) || a.blocks == 0 {
        // SAFETY: the same contract, for the portable body on this LHS format (any layout).
        unsafe { crate::arch::portable::matmul_f32_qsi8dbp4x8_qnb_portable::run_p::<MR, KR>(a) };
        return;
    }
    // SAFETY: the CPU has SME (the caller's guarantee).
    let svl = unsafe { svl_bytes() };
    let s = svl.min(64) / 4;
    debug_assert!(s.is_power_of_two() && (4..=16).contains(&s));
    // SVL ≤ 256 bits: passes of 2s rows × 2s columns (the four tiles 2 × 2: each code vector serves two row
    // halves); above, and for a tile of at most s rows (whose second row half would be padding), s rows × 4s
    // columns (one pass per tile at SVL 512).
    let pair = svl <= 32 && a.rows > s;
    let (pr, pc) = if pair { (2 * s, 2 * s) } else { (s, 4 * s) };
    let groups = a.rows.div_ceil(MR);
    let (zp, row) = (a.has_zp != 0, a.row != 0);

    // Per group and block: 16 sa · 2^−4 (sa = 1 in the row numerics), 16 sa·Σq.
    let mut rows = vec![0f32; groups * a.blocks * ROW_PER_BLOCK];
    for g in 0..groups {
        for b in 0..a.blocks {
            let out = &mut rows[(g * a.blocks + b) * ROW_PER_BLOCK..][..ROW_PER_BLOCK];
            for r in 0..MR {
                let i = g * MR * a.blocks + b * MR + r;
                // SAFETY: row g·16 + r's block-b scale and Σq, inside the tile's (RunArgs contract: group-major,
                // rows rounded up to the group; padding rows hold 0).
                let (sa, q) = unsafe { (*a.lhs_scale.add(i), *a.lhs_sum.add(i) as f32) };
                // The codes' 16·v: × 2^−4 (exact) with the row's scale; in the row numerics the column scales
                // carry the 2^−4 and the fast epilogue does not read these (1: the other one multiplies by it).
                out[r] = if row { 1.0 } else { sa * (1.0 / 16.0) };
                if zp {
                    out[MR + r] = if row { q } else { sa * q };
                }
            }
        }
    }

    let mut cols = vec![0f32; a.blocks * COL_PER_BLOCK];
    // One pass's sums (at most 16 × 64 f32).
    let mut sums = [0f32; MR * NR];
    for panel in 0..a.cols.div_ceil(NR) {
        let rec0 = a.rhs.wrapping_add(panel * a.rhs_panel_stride);
        for b in 0..a.blocks {
            let rec = rec0.wrapping_add(b * a.rhs_record);
            let out = &mut cols[b * COL_PER_BLOCK..][..COL_PER_BLOCK];
            // SAFETY: the record's 64 f16 scales (little-endian, as the target) into `out`'s first 64 f32, and with
            // zero points its 64 f32 corrections copied bytewise (any alignment) after them (RunArgs contract).
            unsafe {
                widen_scales(rec.add(a.rhs_scales), out.as_mut_ptr());
                if zp {
                    core::ptr::copy_nonoverlapping(rec.add(a.rhs_zp), out[NR..].as_mut_ptr().cast::<u8>(), 4 * NR);
                }
            }
            if row {
                // The codes' 2^−4 (exact: an f16 scale × 2^−4 is a normal f32), so that the row numerics'
                // epilogue is one FMLA per vector, with the bits of (s · 2^−4) · 1.
                for v in &mut out[..NR] {
                    *v *= 1.0 / 16.0;
                }
            }
        }
        for g in 0..groups {
            let act = a.lhs.wrapping_add(g * MR * a.lhs_stride);
            let rws = &rows[g * a.blocks * ROW_PER_BLOCK..][..a.blocks * ROW_PER_BLOCK];
            let real_rows = (a.rows - g * MR).min(MR);
            for ri in 0..MR / pr {
                for cq in 0..NR / pc {
                    let col0 = panel * NR + cq * pc;
                    if ri * pr >= real_rows || col0 >= a.cols {
                        continue;
                    }
                    sums[..if pair { pr * pc } else { s * NR }].fill(0.0);
                    // SAFETY: the CPU has SME2 at this SVL (read above: 4s bytes ≤ 32 for the pair passes); group g
                    // and `panel` are the tile's, with a.blocks records of whole 32-K chunks; the pass (ri, cq) reads
                    // its pr rows and pc columns inside them and writes its pr × pc sums into `sums`; `cols`/`rws`
                    // hold every block.
                    unsafe {
                        let (rec, act) = (rec0.wrapping_add(cq * 4 * pc), act.wrapping_add(ri * 4 * pr));
                        let (cols, rws) = (cols.as_ptr().wrapping_add(cq * pc), rws.as_ptr().wrapping_add(ri * pr));
                        pass(a, s, pair, rec, act, cols, rws, sums.as_mut_ptr())
                    };
                    // The pass's real rows: row ri·pr + h·s + i at h·hs + i·is of `sums` (pair passes: tile row i
                    // holds rows i and s + i side by side; pass: rows of 64).
                    let (hn, hs, is) = if pair { (2, pc, 2 * pc) } else { (1, 0, NR) };
                    for h in 0..hn {
                        for i in 0..s {
                            let r = ri * pr + h * s + i;
                            if r >= real_rows {
                                break;
                            }
                            let src = &sums[h * hs + i * is..][..pc];
                            // SAFETY: row g·16 + r < rows is inside dst (RunArgs contract), which nothing else
                            // references during the call; store_row stores only its columns below cols (and
                            // reads bias there).
                            unsafe { store_row(a, a.dst.add((g * MR + r) * a.dst_stride), col0, src) };
                        }
                    }
                }
            }
        }
    }
}

/// One row of the per-block epilogue for tile `$j` (0–3): the row out of ZA (w12), converted, × (column scale
/// · row scale), added to the sums row at `$addr` (tile $j's part of it), with zero points (`zp`) + c · sa·Σq.
macro_rules! epi_tile {
    // With zero points: + c · sa·Σq (tile $j's corrections in z2$j, the row's sa·Σq in z29).
    (@zp $j:literal) => {
        concat!("fmla z2.s, p1/m, z2", $j, ".s, z29.s\n")
    };
    ($j:literal, $addr:literal $(, $zp:ident)?) => {
        concat!(
            "mova z0.s, p1/m, za",
            $j,
            "h.s[w12, 0]\n",
            "scvtf z0.s, p1/m, z0.s\n",
            "fmul z1.s, z1",
            $j,
            ".s, z28.s\n",
            "ld1w {{z2.s}}, p1/z, ",
            $addr,
            "\n",
            "fmla z2.s, p1/m, z0.s, z1.s\n",
            $(epi_tile!(@$zp $j),)?
            "st1w {{z2.s}}, p1, ",
            $addr,
            "\n",
        )
    };
}

/// The epilogue's row loop (label `$l`): s rows of the four tiles into the sums rows at `{out}` (256 bytes
/// apart), row scales at `{rowp}` (sa, and sa·Σq 64 bytes further).
macro_rules! epi_rows {
    ($l:literal $(, $zp:ident)?) => {
        concat!(
            "mov {xo}, {out}\n",
            "mov {xr}, {rowp}\n",
            "mov w12, #0\n",
            $l,
            ":\n",
            "ld1rw {{z28.s}}, p1/z, [{xr}]\n",
            "ld1rw {{z29.s}}, p1/z, [{xr}, #64]\n",
            epi_tile!("0", "[{xo}]" $(, $zp)?),
            epi_tile!("1", "[{xo}, {s1}, lsl #2]" $(, $zp)?),
            epi_tile!("2", "[{xo}, {s2}, lsl #2]" $(, $zp)?),
            epi_tile!("3", "[{xo}, {s3}, lsl #2]" $(, $zp)?),
            "add {xo}, {xo}, #256\n",
            "add {xr}, {xr}, #4\n",
            "add w12, w12, #1\n",
            "cmp x12, {s1}\n",
            "b.lo ",
            $l,
            "b\n",
        )
    };
}

/// One MOVA's worth of the multi-vector epilogues (SVL ≤ 512 bits, four sums vectors): ZA array vectors
/// w12 + `$za` (row w12 / 4 + `$r` of za0.s–za3.s) by one multi-vector MOVA, one multi-vector SCVTF, × (column
/// scale · row scale: sums vector j takes column scales `z$c_j` and the row scale in lane `$r` of `z$a_j`), added to
/// the four sums vectors at `$addr` (one multi-vector load and store), with zero points + c · sa·Σq (corrections
/// `z$z_j`, sa·Σq in lane `$r` of `z$q_j`). The same operations in the same order per element as `epi_tile!`, so
/// the same bits. The row numerics (`row`): the column scales themselves (they carry the 2^−4; row scale 1).
/// `epi_fast_row!` (s × 4s passes: one sums row) and `epi_pair_row!` (pair passes: rows i and s + i) name the
/// registers.
macro_rules! epi_row4 {
    (@zp $r:literal $([$d:literal $z:literal $q:literal])*) => {
        concat!($("fmla z", $d, ".s, z", $z, ".s, z", $q, ".s[", $r, "]\n",)*)
    };
    ($act:ident, $r:literal, $za:literal, $addr:literal, [$c0:literal $c1:literal $c2:literal $c3:literal],
     [$a0:literal $a1:literal $a2:literal $a3:literal], [$z0:literal $z1:literal $z2:literal $z3:literal],
     [$q0:literal $q1:literal $q2:literal $q3:literal] $(, $zp:ident)?) => {
        concat!(
            "mova {{z16.b-z19.b}}, za0h.b[w12, ", $za, "]\n",
            "scvtf {{z16.s-z19.s}}, {{z16.s-z19.s}}\n",
            epi_row4!(@fmul $act $r [$c0 "24" $a0] [$c1 "25" $a1] [$c2 "26" $a2] [$c3 "27" $a3]),
            "ld1w {{z28.s-z31.s}}, pn8/z, ", $addr, "\n",
            epi_row4!(@fmla $act [$c0 $c1 $c2 $c3]),
            $(epi_row4!(@$zp $r ["28" $z0 $q0] ["29" $z1 $q1] ["30" $z2 $q2] ["31" $z3 $q3]),)?
            "st1w {{z28.s-z31.s}}, pn8, ", $addr, "\n",
        )
    };
    // Block numerics: the factors column scale × row scale into z24–z27.
    (@fmul block $r:literal $([$c:literal $f:literal $a:literal])*) => {
        concat!($("fmul z", $f, ".s, z", $c, ".s, z", $a, ".s[", $r, "]\n",)*)
    };
    (@fmul row $r:literal $([$c:literal $f:literal $a:literal])*) => { "" };
    (@fmla block [$($c:literal)*]) => {
        concat!(
            "fmla z28.s, p1/m, z16.s, z24.s\n",
            "fmla z29.s, p1/m, z17.s, z25.s\n",
            "fmla z30.s, p1/m, z18.s, z26.s\n",
            "fmla z31.s, p1/m, z19.s, z27.s\n",
        )
    };
    (@fmla row [$c0:literal $c1:literal $c2:literal $c3:literal]) => {
        concat!(
            "fmla z28.s, p1/m, z16.s, z", $c0, ".s\n",
            "fmla z29.s, p1/m, z17.s, z", $c1, ".s\n",
            "fmla z30.s, p1/m, z18.s, z", $c2, ".s\n",
            "fmla z31.s, p1/m, z19.s, z", $c3, ".s\n",
        )
    };
}

/// [`epi_row4!`] for the s × 4s passes: one sums row (4 vectors), column scales z10–z13, the row's scale in z2,
/// corrections z20–z23, sa·Σq in z3.
macro_rules! epi_fast_row {
    ($act:ident, $r:literal, $za:literal, $addr:literal $(, $zp:ident)?) => {
        epi_row4!($act, $r, $za, $addr, ["10" "11" "12" "13"], ["2" "2" "2" "2"], ["20" "21" "22" "23"],
            ["3" "3" "3" "3"] $(, $zp)?)
    };
}

/// The multi-vector epilogues' row loop (label `$l`), four ZA rows per iteration, for the s × 4s passes (`fast`:
/// s is 4, 8 or 16; s sums rows at `{out}`, 256 bytes apart, x14 two rows further; 4 rows' scales in the 128-bit
/// segments of z2, their sa·Σq in z3) or the pair passes (`pair`: s is 4 or 8; tile row i's 4 sums vectors at 4i
/// vectors from `{out}`; rows i's scales in z2, s + i's in z3, their sa·Σq in z6, z7). Row scales at `{rowp}`
/// (sa · 2^−4 per row, sa·Σq 64 bytes further; the row numerics read no sa).
macro_rules! epi_loop4 {
    (@setup fast) => { "add x14, {out}, #512\n" };
    (@setup pair) => { "" };
    (@sa fast block) => { "ld1rqw {{z2.s}}, p1/z, [{xr}]\n" };
    (@sa pair block) => {
        concat!("ld1rqw {{z2.s}}, p1/z, [{xr}]\n", "ld1rqw {{z3.s}}, p1/z, [{xr}, {s1}, lsl #2]\n")
    };
    (@sa $k:ident row) => { "" };
    (@zp fast) => { "ld1rqw {{z3.s}}, p1/z, [{xr}, #64]\n" };
    (@zp pair) => {
        concat!(
            "add x15, {xr}, #64\n",
            "ld1rqw {{z6.s}}, p1/z, [x15]\n",
            "ld1rqw {{z7.s}}, p1/z, [x15, {s1}, lsl #2]\n",
        )
    };
    (@rows fast $act:ident $(, $zp:ident)?) => {
        concat!(
            epi_fast_row!($act, "0", "0:3", "[{xo}]" $(, $zp)?),
            epi_fast_row!($act, "1", "4:7", "[{xo}, {e64}, lsl #2]" $(, $zp)?),
            epi_fast_row!($act, "2", "8:11", "[x14]" $(, $zp)?),
            epi_fast_row!($act, "3", "12:15", "[x14, {e64}, lsl #2]" $(, $zp)?),
        )
    };
    (@rows pair $act:ident $(, $zp:ident)?) => {
        concat!(
            epi_pair_row!($act, "0", "0:3", "[{xo}]" $(, $zp)?),
            epi_pair_row!($act, "1", "4:7", "[{xo}, #4, mul vl]" $(, $zp)?),
            epi_pair_row!($act, "2", "8:11", "[{xo}, #8, mul vl]" $(, $zp)?),
            epi_pair_row!($act, "3", "12:15", "[{xo}, #12, mul vl]" $(, $zp)?),
        )
    };
    (@step fast) => { concat!("add {xo}, {xo}, #1024\n", "add x14, x14, #1024\n") };
    (@step pair) => { "addvl {xo}, {xo}, #16\n" };
    ($k:ident, $act:ident, $l:literal $(, $zp:ident)?) => {
        concat!(
            "mov {xo}, {out}\n",
            epi_loop4!(@setup $k),
            "mov {xr}, {rowp}\n",
            "mov w12, #0\n",
            $l,
            ":\n",
            epi_loop4!(@sa $k $act),
            $(epi_loop4!(@$zp $k),)?
            epi_loop4!(@rows $k $act $(, $zp)?),
            epi_loop4!(@step $k),
            "add {xr}, {xr}, #16\n",
            "add w12, w12, #16\n",
            "cmp x12, {s4}\n",
            "b.lo ",
            $l,
            "b\n",
        )
    };
}

/// The 8 SMOPA of a 4-K column group, its codes in z0–z3 and LHS runs g and 4 + g in z8, z9: low fields
/// (`lsl #4`, z4–z7) against run g, high fields (`and`, in place) against run 4 + g.
macro_rules! mopa_fields {
    () => {
        concat!(
            "lsl z4.b, z0.b, #4\n",
            "lsl z5.b, z1.b, #4\n",
            "lsl z6.b, z2.b, #4\n",
            "lsl z7.b, z3.b, #4\n",
            "and z0.b, z0.b, #0xf0\n",
            "and z1.b, z1.b, #0xf0\n",
            "and z2.b, z2.b, #0xf0\n",
            "and z3.b, z3.b, #0xf0\n",
            "smopa za0.s, p0/m, p0/m, z8.b, z4.b\n",
            "smopa za1.s, p0/m, p0/m, z8.b, z5.b\n",
            "smopa za2.s, p0/m, p0/m, z8.b, z6.b\n",
            "smopa za3.s, p0/m, p0/m, z8.b, z7.b\n",
            "smopa za0.s, p0/m, p0/m, z9.b, z0.b\n",
            "smopa za1.s, p0/m, p0/m, z9.b, z1.b\n",
            "smopa za2.s, p0/m, p0/m, z9.b, z2.b\n",
            "smopa za3.s, p0/m, p0/m, z9.b, z3.b\n",
        )
    };
}

/// One 4-K column group of a chunk: codes of 4s columns at `{xc}` (4 vectors z0–z3), the LHS runs g (`{xa}`)
/// and 4 + g (256 bytes further) of s rows, low fields (`lsl #4`, z4–z7) against run g, high fields (`and`)
/// against run 4 + g: 8 SMOPA.
macro_rules! mopa_group {
    () => {
        concat!(
            "ld1w {{z0.s}}, p1/z, [{xc}]\n",
            "ld1w {{z1.s}}, p1/z, [{xc}, {s1}, lsl #2]\n",
            "ld1w {{z2.s}}, p1/z, [{xc}, {s2}, lsl #2]\n",
            "ld1w {{z3.s}}, p1/z, [{xc}, {s3}, lsl #2]\n",
            "ld1w {{z8.s}}, p1/z, [{xa}]\n",
            "ld1w {{z9.s}}, p1/z, [{xa}, {e64}, lsl #2]\n",
            mopa_fields!(),
            "add {xc}, {xc}, #256\n",
            "add {xa}, {xa}, #64\n",
        )
    };
}

/// [`mopa_group!`] for SVL ≤ 512 bits (the pass's 4s columns are 4 whole vectors): the group's codes by one
/// multi-vector load at `$codes`, its two LHS runs at `$lo` and `$hi` (byte-element loads, so the same offset
/// registers serve both: the codes' groups are 256 bytes apart, the runs 64), and no pointer steps (the chunk
/// loop steps once per 4 groups).
macro_rules! mopa_group_fast {
    ($codes:literal, $lo:literal, $hi:literal) => {
        concat!(
            "ld1w {{z0.s-z3.s}}, pn8/z, ",
            $codes,
            "\n",
            "ld1b {{z8.b}}, p0/z, ",
            $lo,
            "\n",
            "ld1b {{z9.b}}, p0/z, ",
            $hi,
            "\n",
            mopa_fields!(),
        )
    };
}

/// [`mopa_group_fast!`] of the pair passes (SVL ≤ 256 bits): a 4-K column group's 2s columns by one 2-vector
/// load at `$codes` (z0–z1), its two LHS runs of 2s rows at `$lo` (z8–z9: the row halves) and `$hi` (z14–z15),
/// each code field vector against both row halves: za0 = rows 0..s × columns 0..s, za1 = rows 0..s × columns
/// s..2s, za2 / za3 the rows s..2s likewise. 15 instructions per 8 SMOPA (the 4s-column group: 19).
macro_rules! mopa_group_pair {
    ($codes:literal, $lo:literal, $hi:literal) => {
        concat!(
            "ld1w {{z0.s-z1.s}}, pn8/z, ",
            $codes,
            "\n",
            "ld1b {{z8.b-z9.b}}, pn9/z, ",
            $lo,
            "\n",
            "ld1b {{z14.b-z15.b}}, pn9/z, ",
            $hi,
            "\n",
            "lsl z4.b, z0.b, #4\n",
            "lsl z5.b, z1.b, #4\n",
            "and z0.b, z0.b, #0xf0\n",
            "and z1.b, z1.b, #0xf0\n",
            "smopa za0.s, p0/m, p0/m, z8.b, z4.b\n",
            "smopa za1.s, p0/m, p0/m, z8.b, z5.b\n",
            "smopa za2.s, p0/m, p0/m, z9.b, z4.b\n",
            "smopa za3.s, p0/m, p0/m, z9.b, z5.b\n",
            "smopa za0.s, p0/m, p0/m, z14.b, z0.b\n",
            "smopa za1.s, p0/m, p0/m, z14.b, z1.b\n",
            "smopa za2.s, p0/m, p0/m, z15.b, z0.b\n",
            "smopa za3.s, p0/m, p0/m, z15.b, z1.b\n",
        )
    };
}

/// [`epi_row4!`] for the pair passes: tile row i gives sums rows i (columns 0..s, s..2s: column scales z10, z11,
/// row scale in z2, corrections z20, z21, sa·Σq in z6) and s + i (the same columns, row scale in z3, sa·Σq in z7),
/// which the pass's sums keep side by side.
macro_rules! epi_pair_row {
    ($act:ident, $r:literal, $za:literal, $addr:literal $(, $zp:ident)?) => {
        epi_row4!($act, $r, $za, $addr, ["10" "11" "10" "11"], ["2" "2" "3" "3"], ["20" "21" "20" "21"],
            ["6" "6" "7" "7"] $(, $zp)?)
    };
}

/// The chunk loop (label 6) of the whole-vector passes: per 32 K the 4 column groups by `$group!` (codes 256 bytes
/// apart from `{xc}`; LHS runs g at `{xa}` + 64g and 4 + g 256 bytes further, at `{xh}` + 64g), then the
/// pointers step once.
macro_rules! chunk_loop4 {
    ($group:ident) => {
        concat!(
            "add {xh}, {xa}, #256\n",
            "6:\n",
            $group!("[{xc}]", "[{xa}]", "[{xh}]"),
            $group!("[{xc}, {e64}, lsl #2]", "[{xa}, {e64}]", "[{xh}, {e64}]"),
            $group!("[{xc}, {e128}, lsl #2]", "[{xa}, {e128}]", "[{xh}, {e128}]"),
            $group!("[{xc}, {e192}, lsl #2]", "[{xa}, {e192}]", "[{xh}, {e192}]"),
            "add {xc}, {xc}, #1024\n",
            "add {xa}, {xa}, #512\n",
            "add {xh}, {xh}, #512\n",
            "subs {cc}, {cc}, #1\n",
            "b.ne 6b\n",
        )
    };
}

/// The `asm!` of a pass ([`pass`], both kinds): streaming mode entered (ZA's lazy save honoured), `$setup`
/// (predicates), the block loop (its record pointers; `$body`: the chunk loop and the block epilogue, which end at
/// label 9), ZA zeroed per block, streaming mode left; the operands both bodies use.
macro_rules! pass_asm {
    ($a:ident, $s:ident, $rec:ident, $act:ident, $cols:ident, $rows:ident, $out:ident, [$($setup:tt)*],
     [$($body:tt)*]) => {
        streaming_asm!(
            ".arch_extension sme2",
            ".arch_extension sve",
            enter_streaming!(),
            $($setup)*
            // Block loop.
            "5:",
            "mov {xc}, {rec}",
            "add {rec}, {rec}, {rstride}",
            "mov {cc}, {chunks}",
            $($body)*
            "9:",
            "zero {{za}}",
            "add {col}, {col}, #512",
            "add {rowp}, {rowp}, #128",
            "subs {nb}, {nb}, #1",
            "b.ne 5b",
            "smstop",
            rec = inout(reg) $rec => _,
            rstride = in(reg) $a.rhs_record,
            chunks = in(reg) $a.bl / 32,
            nb = inout(reg) $a.blocks => _,
            xa = inout(reg) $act => _,
            col = inout(reg) $cols => _,
            rowp = inout(reg) $rows => _,
            out = in(reg) $out,
            zp = in(reg) $a.has_zp,
            row = in(reg) $a.row,
            s1 = in(reg) $s,
            s2 = in(reg) 2 * $s,
            s3 = in(reg) 3 * $s,
            s4 = in(reg) 4 * $s,
            fast = out(reg) _,
            e64 = in(reg) 64usize,
            e128 = in(reg) 128usize,
            e192 = in(reg) 192usize,
            xh = out(reg) _,
            xc = out(reg) _,
            cc = out(reg) _,
            xo = out(reg) _,
            xr = out(reg) _,
        )
    };
}

/// One pass over every block, added to the sums at `out`: `pair` (SVL = 4s bytes ≤ 32) 2s rows (from `act`) × 2s
/// columns (from `rec`; za0–za3 as 2 × 2 tiles of s × s, [`mopa_group_pair!`]), the pass's 2s × 2s sums with tile
/// row i's rows i and s + i side by side; otherwise s rows × 4s columns (four ZA tiles of s × s side by side), sums
/// rows of 64 f32.
///
/// # Safety
/// The CPU has SME2 and `s` = min(SVL bytes, 64) / 4 for this thread (with `pair`: SVL = 4s bytes, s ∈ {4, 8});
/// `rec` is a panel's first record offset to the pass's columns, `act` a row group offset to the pass's rows,
/// `cols` / `rows` the per-call buffers offset likewise (`a.blocks` blocks each), `out` the pass's sums; all as
/// `run` lays them out, for `a` with 4-bit codes in blocks of whole 32-K chunks.
#[inline(never)] // a symbol of its own for the counts (scripts/aarch64/icount-kernel.sh)
#[allow(clippy::too_many_arguments)]
unsafe fn pass(
    a: &RunArgs,
    s: usize,
    pair: bool,
    rec: *const u8,
    act: *const u8,
    cols: *const f32,
    rows: *const f32,
    out: *mut f32,
) {
    // SAFETY: reads per block: chunks × 4 groups × the pass's code vectors (2s columns of 64 with `pair`, else 4s,
    // at the pass's offset) inside the record, 8 LHS runs × the pass's rows (2s or s of 16) per chunk inside the
    // group, the block's vectors of `cols` and f32 of `rows`; writes the pass's sums at `out` (4s² f32 with `pair`,
    // else s rows × 4s f32 64 apart): all inside the buffers `run` owns or the tile's (RunArgs contract). Every
    // vector and predicate register and ffr is declared clobbered (SMSTART/SMSTOP zero them), so are x12 and
    // x14–x17; ZA is left off (SMSTOP), TPIDR2_EL0 is 0 or untouched; flags clobbered.
    unsafe {
        macro_rules! go {
            ($($t:tt)*) => { pass_asm!(a, s, rec, act, cols, rows, out, $($t)*) };
        }
        if pair {
            go!(
                ["ptrue p0.b", "ptrue p1.s", "ptrue pn8.s", "ptrue pn9.b", "// {s2} {s3} {fast}",],
                [
                    // Chunk loop: 32 K, 4 groups (codes 256 bytes apart; LHS runs g at {xa} + 64g, and 4 + g 256
                    // bytes further, at {xh} + 64g).
                    chunk_loop4!(mopa_group_pair),
                    // Block epilogue.
                    "ld1w {{z10.s-z11.s}}, pn8/z, [{col}]",
                    "cbz {zp}, 7f",
                    "add {xo}, {col}, #256",
                    "ld1w {{z20.s-z21.s}}, pn8/z, [{xo}]",
                    "cbnz {row}, 18f",
                    epi_loop4!(pair, block, "13", zp),
                    "b 9f",
                    "18:",
                    epi_loop4!(pair, row, "19", zp),
                    "b 9f",
                    "7:",
                    "cbnz {row}, 20f",
                    epi_loop4!(pair, block, "15"),
                    "b 9f",
                    "20:",
                    epi_loop4!(pair, row, "21"),
                ]
            )
        } else {
            go!(
                [
                    "lsl {xc}, {s1}, #2",
                    "whilelo p0.b, xzr, {xc}",
                    "whilelo p1.s, xzr, {s1}",
                    "ptrue pn8.s",
                    // fast = (SVL = 4s bytes, i.e. ≤ 512 bits): a pass's 4s columns are 4 whole vectors, the
                    // multi-vector epilogue.
                    "rdsvl {fast}, #1",
                    "cmp {fast}, {s4}",
                    "cset {fast}, eq",
                ],
                [
                    "cbz {fast}, 16f",
                    // Chunk loop (SVL ≤ 512 bits): 32 K, 4 groups (codes 256 bytes apart; LHS runs g at {xa} + 64g, and
                    // 4 + g 256 bytes further, at {xh} + 64g).
                    chunk_loop4!(mopa_group_fast),
                    "b 17f",
                    // Chunk loop (any SVL): 32 K, 4 groups; then the high runs 4–7 of the chunk are done: skip them.
                    "16:",
                    mopa_group!(),
                    mopa_group!(),
                    mopa_group!(),
                    mopa_group!(),
                    "add {xa}, {xa}, #256",
                    "subs {cc}, {cc}, #1",
                    "b.ne 16b",
                    "17:",
                    // Block epilogue.
                    "ld1w {{z10.s}}, p1/z, [{col}]",
                    "ld1w {{z11.s}}, p1/z, [{col}, {s1}, lsl #2]",
                    "ld1w {{z12.s}}, p1/z, [{col}, {s2}, lsl #2]",
                    "ld1w {{z13.s}}, p1/z, [{col}, {s3}, lsl #2]",
                    "cbz {zp}, 7f",
                    "add {xo}, {col}, #256",
                    "ld1w {{z20.s}}, p1/z, [{xo}]",
                    "ld1w {{z21.s}}, p1/z, [{xo}, {s1}, lsl #2]",
                    "ld1w {{z22.s}}, p1/z, [{xo}, {s2}, lsl #2]",
                    "ld1w {{z23.s}}, p1/z, [{xo}, {s3}, lsl #2]",
                    "cbz {fast}, 12f",
                    "cbnz {row}, 18f",
                    epi_loop4!(fast, block, "13", zp),
                    "b 9f",
                    "18:",
                    epi_loop4!(fast, row, "19", zp),
                    "b 9f",
                    "12:",
                    epi_rows!("8", zp),
                    "b 9f",
                    "7:",
                    "cbz {fast}, 14f",
                    "cbnz {row}, 20f",
                    epi_loop4!(fast, block, "15"),
                    "b 9f",
                    "20:",
                    epi_loop4!(fast, row, "21"),
                    "b 9f",
                    "14:",
                    epi_rows!("8"),
                ]
            )
        }
    }
}

// PR_SME_SET_VL, SVCR and TPIDR2_EL0 as Linux gives them to user space.
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use crate::arch::aarch64::{INT8_GEMM_SME2, QSNBP64X4_SF16_ZPC};
    use crate::pack::LhsSource;
    use crate::testing::{Case, GIdx, Rng, ZpKind, activations};
    use crate::{ComputePath, Cpu, Problem, Selected, matmul_serial};

    /// (SVCR, TPIDR2_EL0) of this thread.
    fn state() -> (u64, u64) {
        let (svcr, tpidr2): (u64, u64);
        // SAFETY: reads two system registers user space may read when the CPU has SME (checked by the callers).
        unsafe {
            core::arch::asm!(
                ".arch_extension sme",
                "mrs {0}, svcr",
                "mrs {1}, tpidr2_el0",
                out(reg) svcr,
                out(reg) tpidr2,
                options(nomem, nostack, preserves_flags)
            )
        };
        (svcr, tpidr2)
    }

    /// The kernel's bits for M = 37 (a row tail), N = 150 (a column tail), K = 320 with zero points, 4-bit
    /// blocks of 64 (the asm).
    fn run() -> Vec<u32> {
        let (k, n, bl, m) = (320usize, 150usize, 64usize, 37usize);
        let mut rng = Rng::new(0x2545_F491);
        let case = Case::random(&mut rng, k, n, 4, bl, ZpKind::Packed, GIdx::None, false);
        let w = case.weights();
        let p = Problem::of(ComputePath::Int8, &w);
        let a = activations(&mut rng, m, k);
        let sel = Selected::single(&INT8_GEMM_SME2, QSNBP64X4_SF16_ZPC, &p).unwrap();
        let rhs = sel.pack_rhs(&w).unwrap();
        let mut y = vec![0f32; m * n];
        matmul_serial(&sel, &rhs, LhsSource::F32(&a), m, None, &mut y);
        y.iter().map(|v| v.to_bits()).collect()
    }

    /// After a call: streaming mode and ZA off (SVCR = 0), TPIDR2_EL0 still 0.
    #[test]
    fn leaves_streaming_mode_and_za_off() {
        if !INT8_GEMM_SME2.runs_on(Cpu::get()) {
            return;
        }
        assert_eq!(state(), (0, 0));
        run();
        assert_eq!(state(), (0, 0));
    }

    /// ZA dormant on entry (a TPIDR2 block, ZA on with a pattern: a caller's lazy save pending): the kernel saves
    /// ZA into the block's buffer, clears TPIDR2_EL0 and returns with ZA off; its result is unchanged.
    #[test]
    fn commits_a_pending_lazy_save() {
        if !INT8_GEMM_SME2.runs_on(Cpu::get()) {
            return;
        }
        let want = run();
        // SAFETY: SME (checked above).
        let svl = unsafe { super::svl_bytes() };
        let pattern: Vec<u8> = (0..svl * svl).map(|i| (i * 7 + 3) as u8).collect();
        let mut buffer = vec![0u8; svl * svl];
        // TPIDR2 block: za_save_buffer, num_za_save_slices (u16), 6 reserved zero bytes.
        let mut block = [0u64; 2];
        block[0] = buffer.as_mut_ptr() as u64;
        block[1] = svl as u64;
        // SAFETY: turns ZA on (not streaming mode), loads the pattern's SVL vectors into it (reads svl·svl bytes of
        // `pattern`) and sets TPIDR2_EL0 to the block: ZA dormant, as a caller's lazy-save setup leaves it. No
        // Rust code uses ZA or TPIDR2_EL0; the kernel below commits the save.
        unsafe {
            core::arch::asm!(
                ".arch_extension sme",
                "smstart za",
                "mov w12, #0",
                "2:",
                "ldr za[w12, 0], [{src}]",
                "addsvl {src}, {src}, #1",
                "add w12, w12, #1",
                "cmp x12, {n}",
                "b.lo 2b",
                "msr tpidr2_el0, {blk}",
                src = inout(reg) pattern.as_ptr() => _,
                n = in(reg) svl,
                blk = in(reg) block.as_ptr(),
                out("x12") _,
                options(nostack),
            )
        };
        assert_eq!(state(), (2, block.as_ptr() as u64), "ZA on, TPIDR2 set");
        let got = run();
        assert_eq!(state(), (0, 0));
        assert!(buffer == pattern, "ZA must be saved to the TPIDR2 block's buffer");
        assert!(got == want);
    }

    /// The pass geometry follows the thread's streaming vector length: a thread whose SVL is set to 16 bytes
    /// (prctl PR_SME_SET_VL) after the default one computes the same bits.
    #[test]
    fn any_streaming_vector_length_gives_the_same_bits() {
        if !INT8_GEMM_SME2.runs_on(Cpu::get()) {
            return;
        }
        let want = run();
        let mut seen = Vec::new();
        for vl in [16u64, 32, 64, 128] {
            let got = std::thread::spawn(move || {
                // SAFETY: PR_SME_SET_VL (63) takes the new length in bytes and changes only this thread's streaming
                // vector length; nothing of this thread holds SME state across it.
                let r = unsafe { libc::prctl(63, vl as libc::c_ulong) };
                assert!(r >= 0, "prctl(PR_SME_SET_VL, {vl}) failed");
                // SAFETY: SME (checked above).
                let svl = unsafe { super::svl_bytes() };
                (svl, run())
            })
            .join()
            .unwrap();
            assert!(got.1 == want, "SVL {} bytes: other bits", got.0);
            seen.push(got.0);
        }
        seen.sort_unstable();
        seen.dedup();
        // qemu-user (7.2 and 11.1) accepts PR_SME_SET_VL but RDSVL keeps the default length, so there this test
        // runs one SVL; scripts/test-aarch64.sh covers 16, 32, 64 and 128 bytes with one qemu model each.
        eprintln!("streaming vector lengths run (bytes): {seen:?}");
    }
}
