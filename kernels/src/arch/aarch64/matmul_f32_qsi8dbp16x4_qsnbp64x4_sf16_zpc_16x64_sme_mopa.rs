//! int8-activation GEMM for prefill, SME2: 16 rows (one `qsi8dbp16x4` row group) × 64 columns (one
//! `qsnbp64x4` panel) per register tile, computed in passes of two s × s int32 ZA tiles (za0.s, za1.s) through
//! 4-way SMOPA, their f32 sums in the other two (za2.s, za3.s).
//!
//! Layout. `qsnbp64x4_sf16_zpc` does not depend on the streaming vector length (SVL): a 32-K chunk of a panel
//! is 4 groups of 64 columns × 4 bytes (K 4g…4g+3 in the low nibbles, 16 + 4g… in the high ones), so the
//! SMOPA column operand is any run of `s` columns (4·s bytes) of a group and the row operand any `s` rows of an
//! LHS run (16 rows × 4 K = 64 bytes). With `s` = min(SVL, 64 bytes) / 4 a pass is s rows × 2s columns (`wide`:
//! za0, za1 side by side; one row pass and two column passes per tile at SVL 512) or, at SVL 256 for a tile of more
//! than 8 rows, 2s rows × s columns (`tall`: za0, za1 the two row halves, each code field vector serving both:
//! 16 × 8, 8 instructions per 4 SMOPA against the wide pass's 9). At SVL > 512 the vectors are predicated to their
//! first 64 bytes. The SVL is read (`rdsvl`) on every call and the pass geometry follows from it, so weights packed
//! on one thread run on any other whatever its SVL.
//!
//! Numerics: per 32-K chunk, each group's code vectors give the low field by `lsl #4` and the high one by
//! `and #0xf0` (16·v exactly; the 2^−4 is in the column scales). The f32 sums live in ZA for the whole pass: per
//! block, the int32 tiles go into them through SME2's ZA vector groups: ZA array vectors 4j + t + i·SVL/4 (i = 0..3)
//! are rows j + i·SVL/16 of tile t, so one multi-vector MOVA (`za.d[w8, t, vgx4]`), one multi-vector SCVTF and one
//! multi-vector FMLA into vector group 4j + 2 + t (the same rows of the sums tile 2 + t) carry 4 rows; the `block`
//! numerics multiply first by column scale × row scale (4 indexed FMUL, the rows' sa spread into quadwords by TBL
//! from one load of the LHS scales: no per-call table), the `row` numerics (sa = 1) by the column scales alone (the
//! multi × single FMLA). Zero points: + (sa·Σq) ⊗ correction, one FMOPA per tile and block. After the last block
//! one FMOPA of 1 ⊗ bias per tile, then the sums rows out: a pass whose columns are all real straight into the
//! output (4 rows per step, then one by one: a wide pass of a last row group stores only its real rows), another
//! into a buffer that `store_row` clips. No sums load or store per block.
//!
//! Static instruction budget per 32-K block (16 SMOPA), the tall pass at SVL 256: chunk loop 4 LHS loads (each
//! 4-vector load two runs of 16 rows) + 4 × 7 (code load, 2 field decodes, 4 SMOPA) + 4 = 36 (2.25 per SMOPA);
//! epilogue, block numerics: 2 column-scale loads, 1 LHS-scale load, 4 TBL, 4 × 7 (MOVA, SCVTF, 4 FMUL, FMLA),
//! `zero`, about 8 for the block loop ≈ 44 (2.8 per SMOPA; row numerics 4 × 3: ≈ 1.8). Wide pass at SVL 512: 2 LHS
//! loads (the 4 runs of each field) + 4 × 9 + 4 = 42 (2.6) and 2 + 1 + 4 + 8 × 7 + 9 ≈ 72 (4.5; each SMOPA there
//! does 4x the MACs of one at 256).
//!
//! Counted (qemu 11, 2048 × 2048, block 32 symmetric; `bench/results/aarch64-icount-sme2.md`): the kernel alone
//! (`kernel_icount`, M = 128: `pass` and `run`) 13.80 M → 12.65 M instructions at SVL 256, 6.28 M → 4.83 M at
//! SVL 512 against the previous design (four int32 tiles, the f32 sums in memory loaded and stored per block, a
//! per-call table of row factors). Whole Runs against ORT's KleidiAI SME2 GEMM after the 4-vector LHS loads: M = 32 /
//! 128 0.77 / 0.76x at SVL 256 and 512 (the family is ranked at those lengths, `registry.rs`).
//!
//! Streaming mode: every pass is one `asm!` block from `smstart` to `smstop` with no Rust code between; ZA's
//! lazy-save protocol is honoured (a non-null TPIDR2_EL0 block gets ZA saved into its buffer, then TPIDR2_EL0
//! is cleared, as `__arm_tpidr2_save` does) and the block leaves PSTATE.SM = PSTATE.ZA = 0. Every vector and
//! predicate register is declared clobbered (SMSTART/SMSTOP zero z0–z31, so d8–d15 too). Only SVE instructions
//! legal in streaming mode (no NEON: runs without FEAT_SME_FA64).
//!
//! LHS: `qsi8dbp16x4`; RHS: `qsnbp64x4_sf16_zpc`. The asm takes 4-bit codes in blocks of whole 32-K chunks;
//! 2- and 8-bit codes and blocks of 16 run the portable body on the same formats
//! (`portable::matmul_f32_qsi8dbp4x8_qnb_portable::run_p`). Features: sme, sme2. At SVL 256 and 512 a tile's last,
//! partial row group (1–15 real rows: every M from 2 to 15, and the tail of larger M) runs the
//! few-row SDOT kernel on the same formats (`matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_4x64_sme_dot`: up to 4 rows
//! per code decode, 8 at SVL 512, costs in proportion to the real rows, where a pass here computes SVL/4 rows),
//! but for the row counts and block sizes where the passes counted fewer (`passes_win`). At other SVLs
//! row tails run whole row groups (the packed LHS pads them with zero rows); column tails run whole panels (zero
//! columns); only real rows and columns are stored. No over-reads.

use super::matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_4x64_sme_dot as few_rows;
use super::ops::store_row;
use super::sve_asm::{enter_streaming, streaming_asm};
use crate::ukernel::RunArgs;

/// Rows per LHS group (`qsi8dbp16x4`) and columns per panel (`qsnbp64x4`), K per run / column group.
pub(crate) const MR: usize = 16;
pub(crate) const NR: usize = 64;
pub(crate) const KR: usize = 4;

/// f32 per block in the per-call column buffer: 64 scales, then 64 corrections.
const COL_PER_BLOCK: usize = 2 * NR;

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

/// The 64 f16 at `src` (any alignment) as f32 × 2^−4 into `dst[0..64]` (FCVTL and FMUL: exact, an f16 × 2^−4 is a
/// normal f32; base AdvSIMD).
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
            "mov {t:w}, #0x3d800000",
            "dup v24.4s, {t:w}",
            "fcvtl v16.4s, v0.4h",
            "fcvtl2 v17.4s, v0.8h",
            "fcvtl v18.4s, v1.4h",
            "fcvtl2 v19.4s, v1.8h",
            "fcvtl v20.4s, v2.4h",
            "fcvtl2 v21.4s, v2.8h",
            "fcvtl v22.4s, v3.4h",
            "fcvtl2 v23.4s, v3.8h",
            "fmul v16.4s, v16.4s, v24.4s",
            "fmul v17.4s, v17.4s, v24.4s",
            "fmul v18.4s, v18.4s, v24.4s",
            "fmul v19.4s, v19.4s, v24.4s",
            "fmul v20.4s, v20.4s, v24.4s",
            "fmul v21.4s, v21.4s, v24.4s",
            "fmul v22.4s, v22.4s, v24.4s",
            "fmul v23.4s, v23.4s, v24.4s",
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
            "fmul v16.4s, v16.4s, v24.4s",
            "fmul v17.4s, v17.4s, v24.4s",
            "fmul v18.4s, v18.4s, v24.4s",
            "fmul v19.4s, v19.4s, v24.4s",
            "fmul v20.4s, v20.4s, v24.4s",
            "fmul v21.4s, v21.4s, v24.4s",
            "fmul v22.4s, v22.4s, v24.4s",
            "fmul v23.4s, v23.4s, v24.4s",
            "st1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{d}], #64",
            "st1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{d}]",
            s = inout(reg) src => _,
            d = inout(reg) dst => _,
            t = out(reg) _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _, out("v6") _, out("v7") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _, out("v21") _, out("v22") _,
            out("v23") _, out("v24") _,
            options(nostack, preserves_flags),
        )
    };
}

/// Whether a last row group of `rows` (1–15) real rows runs this kernel's passes rather than the few-row SDOT kernel (a
/// code decode per 4 rows at SVL 256, per 8 at SVL 512), chosen by counting both (qemu 11, `-cpu max` and
/// `sme-default-vector-length=64`, 2048², whole Runs, `bench/results/aarch64-icount-sme2.md`; the passes with their
/// LHS runs loaded 2 or 4 at a time). A pass costs about the same whatever its real rows, the few-row kernel in
/// proportion to them. `alone`: the group is the tile's only one (at SVL 256 the pass shape is chosen for the whole
/// tile: tall, 16 rows × 8 columns, once it has more than 8 rows). SVL 256: the wide pass (8 rows × 16 columns, every
/// code vector decoded once for all its rows, the real rows stored straight into the output) for 7–8 rows alone in
/// blocks of 64 or more (blocks of 64, 7 rows: few-row 805 k, the wide pass 776 k); the tall pass (16 rows, a partial
/// one stored through `sums`) from 13 rows in blocks of 64 or more (blocks of 128: 12 rows few-row 1126 k, passes
/// 1176 k; 13 rows 1305 k, 1197 k; blocks of 64: 13 rows few-row 1475 k, passes 1431 k), never in blocks of 32 (13
/// and 15 rows few-row 1763 k and 1948 k, a whole 16-row group 1790 k). SVL 512 (the few-row kernel's passes of
/// 5–10 rows), the wide pass (16 rows × 32 columns) from 13 rows in blocks of 32, 11 in blocks of 64 and 10 in
/// blocks of 128 or more (blocks of 64: few-row 10 rows 543 k, 11 rows 626 k, the passes 591 k at 11; blocks of
/// 128: few-row 9 rows 443 k against the passes' 455 k, 10 rows 477 k against 465 k). `row`: the row numerics, whose
/// passes skip the LHS scale, so that at SVL 512 they take over sooner: from 10 rows in blocks of 32 (few-row 10 rows
/// 704 k, the passes 695 k; 9 rows 646 k, 680 k), from 9 in blocks of 64 (521 k, 509 k; 8 rows few-row 447 k) and
/// of 128 (476 k, 454 k). Blocks of 32 and 128 were counted in a build that read an environment variable per call to
/// switch (~13 k more on both sides).
fn passes_win(v: usize, rows: usize, bl: usize, alone: bool, row: bool) -> bool {
    match v {
        32 => match rows {
            7..=8 => bl >= 64 && alone,
            13.. => bl >= 64,
            _ => false,
        },
        64 => {
            rows >= match (bl, row) {
                (128.., false) => 10,
                (64.., false) => 11,
                (_, false) => 13,
                (64.., true) => 9,
                (_, true) => 10,
            }
        }
        _ => true,
    }
}

/// Whether the family's asm (this GEMM's passes, the few-row kernel, the GEMV) takes codes of `bits` in blocks of `bl`:
/// 4-bit codes in blocks of whole 32-K chunks. Other widths and block sizes run the portable bodies on the same
/// formats, so the registry ranks the family only for these (`registry::sme2_int8_ranked_for`).
pub(crate) fn asm_takes(bits: usize, bl: usize) -> bool {
    bits == 4 && bl.is_multiple_of(32)
}

/// # Safety
/// The CPU has SME2; `args` satisfies the `RunArgs` contract with a `qsi8dbp16x4` LHS (the tile starts at a
/// row group) and a `qsnbp64x4_sf16_zpc` RHS.
#[target_feature(enable = "neon")] // so that `store_row` inlines
pub(crate) unsafe fn run(args: &RunArgs) {
    let mut a = args;
    if !asm_takes(a.bits, a.bl) || a.blocks == 0 {
        // SAFETY: the same contract, for the portable body on this LHS format (any layout).
        unsafe { crate::arch::portable::matmul_f32_qsi8dbp4x8_qnb_portable::run_p::<MR, KR>(a) };
        return;
    }
    // SAFETY: the CPU has SME (the caller's guarantee).
    let v = unsafe { svl_bytes() };
    // A last, partial row group (1–15 real rows) runs the few-row SDOT kernel unless `passes_win`: a pass here
    // computes SVL/4 rows (16 × 8 or 8 × 16 at SVL 256, 16 × 32 at 512) whatever the real rows, the SDOT kernel
    // costs in proportion to the rows, and which is fewer depends on the rows and the block size (counted).
    let full = a.rows / MR * MR;
    let head;
    if full < a.rows && (v == 32 || v == 64) && !passes_win(v, a.rows - full, a.bl, full == 0, a.row != 0) {
        let tail = RunArgs {
            rows: a.rows - full,
            lhs: a.lhs.wrapping_add(full * a.lhs_stride),
            lhs_scale: a.lhs_scale.wrapping_add(full * a.blocks),
            lhs_sum: a.lhs_sum.wrapping_add(full * a.blocks),
            dst: a.dst.wrapping_add(full * a.dst_stride),
            ..*a
        };
        // SAFETY: the tile's row group full / 16 (its first row `full`: group-major scales and Σq, `blocks` × 16
        // per group) and its output rows, the same contract for those rows; SVL, bits and block size as it needs.
        unsafe { few_rows::run(&tail, v) };
        if full == 0 {
            return;
        }
        head = RunArgs { rows: full, ..*a };
        a = &head;
    }
    let s = v.min(64) / 4;
    debug_assert!(v.is_power_of_two() && v >= 16 && (4..=16).contains(&s));
    // Tall passes (SVL 256 bits and a tile of more than s = 8 rows): 2s rows × s columns, each code field vector
    // serving both row halves; otherwise s rows × 2s columns.
    let tall = v == 32 && a.rows > s;
    let g = Pass { v, s, tall };
    let (pr, pc) = g.rows_cols();
    let groups = a.rows.div_ceil(MR);
    let row_passes = MR / pr;
    let zp = a.has_zp != 0;

    let mut cols = vec![0f32; a.blocks * COL_PER_BLOCK];
    // One pass's sums (at most 16 × 32 f32: rows pc apart).
    let mut sums = [0f32; MR * NR / 2];
    for panel in 0..a.cols.div_ceil(NR) {
        let rec0 = a.rhs.wrapping_add(panel * a.rhs_panel_stride);
        for b in 0..a.blocks {
            let rec = rec0.wrapping_add(b * a.rhs_record);
            let out = &mut cols[b * COL_PER_BLOCK..][..COL_PER_BLOCK];
            // The column scales × 2^−4 (the codes are 16·v), so that the row factor is the LHS scale itself (1 in the
            // row numerics, whose epilogue then skips it).
            // SAFETY: the record's 64 f16 scales (little-endian, as the target) into `out`'s first 64 f32, and with
            // zero points its 64 f32 corrections copied bytewise (any alignment) after them (RunArgs contract).
            unsafe {
                widen_scales(rec.add(a.rhs_scales), out.as_mut_ptr());
                if zp {
                    core::ptr::copy_nonoverlapping(rec.add(a.rhs_zp), out[NR..].as_mut_ptr().cast::<u8>(), 4 * NR);
                }
            }
        }
        for gr in 0..groups {
            let act = a.lhs.wrapping_add(gr * MR * a.lhs_stride);
            let real_rows = (a.rows - gr * MR).min(MR);
            for ri in 0..row_passes {
                // The pass's rows' scales and Σq of block 0 (the next block's 16 further).
                let row0 = gr * MR * a.blocks + ri * pr;
                let (sa, sq) = (a.lhs_scale.wrapping_add(row0), a.lhs_sum.wrapping_add(row0));
                for cq in 0..NR / pc {
                    let col0 = panel * NR + cq * pc;
                    if ri * pr >= real_rows || col0 >= a.cols {
                        continue;
                    }
                    // A pass whose columns are all real stores its sums plus bias into the output rows: all its
                    // rows, or in a wide pass its real ones (a last row group's); another into `sums` (rows pc
                    // apart), which store_row adds the bias to.
                    let rows_here = (real_rows - ri * pr).min(pr);
                    let whole = col0 + pc <= a.cols && (rows_here == pr || !g.tall);
                    let (out, ostride, bias, nrows) = if whole {
                        let out = a.dst.wrapping_add((gr * MR + ri * pr) * a.dst_stride + col0);
                        let bias = if a.bias.is_null() { ZERO_BIAS.as_ptr() } else { a.bias.wrapping_add(col0) };
                        (out, 4 * a.dst_stride, bias, if g.tall { g.s } else { rows_here })
                    } else {
                        (sums.as_mut_ptr(), 4 * pc, ZERO_BIAS.as_ptr(), g.s)
                    };
                    // SAFETY: the CPU has SME2 at this SVL (read above); group gr and `panel` are the tile's, with
                    // a.blocks records of whole 32-K chunks; the pass (ri, cq) reads its pr rows and pc columns
                    // inside them and of the group's scales and Σq (a.blocks × 16 each), `cols` holds every block,
                    // `bias` pc f32; it writes `nrows` rows of pc sums at `out`, `ostride` bytes per row: real
                    // output rows and columns (inside dst, which nothing else references during the call) when
                    // `whole`, else `sums` (pr rows of pc).
                    unsafe {
                        let (rec, act) = (rec0.wrapping_add(cq * 4 * pc), act.wrapping_add(ri * 4 * pr));
                        let cols = cols.as_ptr().wrapping_add(cq * pc);
                        pass(a, &g, rec, act, cols, sa, sq, out, ostride, bias, nrows)
                    };
                    if whole {
                        continue;
                    }
                    for i in 0..pr.min(real_rows - ri * pr) {
                        // SAFETY: row gr·16 + ri·pr + i < rows is inside dst (RunArgs contract), which nothing else
                        // references during the call; store_row stores only its columns below cols (and reads bias
                        // there).
                        unsafe {
                            let dst = a.dst.add((gr * MR + ri * pr + i) * a.dst_stride);
                            store_row(a, dst, col0, &sums[i * pc..][..pc])
                        };
                    }
                }
            }
        }
    }
}

/// The bias of passes without one: 0 for each of a pass's (at most 32) columns.
static ZERO_BIAS: [f32; 2 * MAX_S] = [0.0; 2 * MAX_S];

/// Most rows (and columns) of a ZA tile the passes use: 64 bytes of int8 rows or 4-byte code columns.
const MAX_S: usize = 16;

/// A pass's geometry at streaming vector length `v` bytes: tiles of s × s int32 (s = min(v, 64) / 4) in za0 and za1,
/// their f32 sums in za2 and za3; `tall`: za0 / za1 the two row halves of 2s rows × s columns, else the two column
/// halves of s rows × 2s columns.
struct Pass {
    v: usize,
    s: usize,
    tall: bool,
}

impl Pass {
    /// (rows, columns) of a pass.
    fn rows_cols(&self) -> (usize, usize) {
        if self.tall { (2 * self.s, self.s) } else { (self.s, 2 * self.s) }
    }
}

/// The 4 SMOPA of a 4-K column group, wide pass: codes of the two tiles' columns in z0, z1 and the LHS runs g
/// (z`$lo`) and 4 + g (z`$hi`) of s rows; low fields (`lsl #4`) against run g, high fields (`and`, in place) against
/// run 4 + g.
macro_rules! mopa_wide {
    ($lo:literal, $hi:literal) => {
        concat!(
            "lsl z4.b, z0.b, #4\n",
            "lsl z5.b, z1.b, #4\n",
            "and z0.b, z0.b, #0xf0\n",
            "and z1.b, z1.b, #0xf0\n",
            "smopa za0.s, p0/m, p0/m, z",
            $lo,
            ".b, z4.b\n",
            "smopa za1.s, p0/m, p0/m, z",
            $lo,
            ".b, z5.b\n",
            "smopa za0.s, p0/m, p0/m, z",
            $hi,
            ".b, z0.b\n",
            "smopa za1.s, p0/m, p0/m, z",
            $hi,
            ".b, z1.b\n",
        )
    };
}

/// A 4-K column group of the wide pass at SVL 128 bits (the pass's 2s columns are 2 whole vectors, its s
/// rows part of a run): codes by one 2-vector load at `$codes`, the LHS runs at `$lo` and `$hi` (byte-element loads,
/// so the same offset registers serve both: the codes' groups are 256 bytes apart, the runs 64): 11 instructions per
/// 4 SMOPA.
macro_rules! group_wide {
    ($codes:literal, $lo:literal, $hi:literal) => {
        concat!(
            "ld1w {{z0.s-z1.s}}, pn8/z, ",
            $codes,
            "\n",
            "ld1b {{z8.b}}, p0/z, ",
            $lo,
            "\n",
            "ld1b {{z9.b}}, p0/z, ",
            $hi,
            "\n",
            mopa_wide!("8", "9"),
        )
    };
}

/// The chunk loop (label 6) of the wide pass at SVL 128 bits: per 32 K the 4 column groups (codes 256
/// bytes apart from `{xc}`; LHS runs g at `{xa}` + 64g and 4 + g 256 bytes further, at `{xh}` + 64g), then the
/// pointers step once.
macro_rules! chunk_loop {
    () => {
        concat!(
            "add {xh}, {xa}, #256\n",
            "6:\n",
            group_wide!("[{xc}]", "[{xa}]", "[{xh}]"),
            group_wide!("[{xc}, {e64}, lsl #2]", "[{xa}, {e64}]", "[{xh}, {e64}]"),
            group_wide!("[{xc}, {e128}, lsl #2]", "[{xa}, {e128}]", "[{xh}, {e128}]"),
            group_wide!("[{xc}, {e192}, lsl #2]", "[{xa}, {e192}]", "[{xh}, {e192}]"),
            "add {xc}, {xc}, #1024\n",
            "add {xa}, {xa}, #512\n",
            "add {xh}, {xh}, #512\n",
            "subs {cc}, {cc}, #1\n",
            "b.ne 6b\n",
        )
    };
}

/// The chunk loop (label 6) of the passes that load a chunk's LHS runs several at a time (`{xh}` unused): the
/// `$load` instructions, then per column group g (codes 256 bytes apart from `{xc}`) `$group!` with its LHS
/// registers `$rg`, then codes and runs step to the next chunk.
macro_rules! chunk_loop_runs {
    ($group:ident, [$($load:literal),+], [$($r0:literal),+], [$($r1:literal),+], [$($r2:literal),+], [$($r3:literal),+]) => {
        concat!(
            "6:\n",
            $($load, "\n",)+
            $group!("[{xc}]", $($r0),+),
            $group!("[{xc}, {e64}, lsl #2]", $($r1),+),
            $group!("[{xc}, {e128}, lsl #2]", $($r2),+),
            $group!("[{xc}, {e192}, lsl #2]", $($r3),+),
            "add {xc}, {xc}, #1024\n",
            "add {xa}, {xa}, #512\n",
            "subs {cc}, {cc}, #1\n",
            "b.ne 6b\n",
            "// {xh}\n",
        )
    };
}

/// A 4-K column group of the wide passes whose LHS runs are in registers (`chunk_loop_runs!`): the two tiles'
/// code vectors by one 2-vector load, then `mopa_wide!` against runs g (z`$lo`) and 4 + g (z`$hi`): 9 instructions
/// per 4 SMOPA.
macro_rules! group_wide_runs {
    ($codes:literal, $lo:literal, $hi:literal) => {
        concat!("ld1w {{z0.s-z1.s}}, pn8/z, ", $codes, "\n", mopa_wide!($lo, $hi))
    };
}

/// A 4-K column group of the tall pass (`chunk_loop_runs!`): the s columns' codes by one load (z0), each code
/// field vector against both row halves of run g (z`$lo0`, z`$lo1`) or 4 + g (z`$hi0`, z`$hi1`) (za0 rows 0..s,
/// za1 rows s..2s): 8 instructions per 4 SMOPA.
macro_rules! group_tall_runs {
    ($codes:literal, $lo0:literal, $lo1:literal, $hi0:literal, $hi1:literal) => {
        concat!(
            "ld1w {{z0.s}}, p1/z, ",
            $codes,
            "\n",
            "lsl z4.b, z0.b, #4\n",
            "and z0.b, z0.b, #0xf0\n",
            "smopa za0.s, p0/m, p0/m, z",
            $lo0,
            ".b, z4.b\n",
            "smopa za1.s, p0/m, p0/m, z",
            $lo1,
            ".b, z4.b\n",
            "smopa za0.s, p0/m, p0/m, z",
            $hi0,
            ".b, z0.b\n",
            "smopa za1.s, p0/m, p0/m, z",
            $hi1,
            ".b, z0.b\n",
        )
    };
}

/// The chunk loop of the wide pass at SVL 256 bits (8 rows: half of a 16-row run, two vectors): each 4-vector load
/// under the counted predicate `pn10` (96 bytes: 3 vectors, the fourth zeroed) from the pass's rows of run g takes
/// them into its first register and those of run g + 1 into its third (the second and fourth: the rows between;
/// nothing read past run g + 1): the low-field runs 0–1 (z16, z18) and 2–3 (z20, z22), the high-field runs 4–5
/// (z24, z26) and 6–7 (z8, z10); 44 instructions per chunk.
macro_rules! chunk_loop_v32w {
    () => {
        chunk_loop_runs!(
            group_wide_runs,
            [
                "ld1b {{z16.b-z19.b}}, pn10/z, [{xa}]",
                "ld1b {{z20.b-z23.b}}, pn10/z, [{xa}, #4, mul vl]",
                "ld1b {{z24.b-z27.b}}, pn10/z, [{xa}, #8, mul vl]",
                "ld1b {{z8.b-z11.b}}, pn10/z, [{xa}, #12, mul vl]"
            ],
            ["16", "24"],
            ["18", "26"],
            ["20", "8"],
            ["22", "10"]
        )
    };
}

/// The chunk loop of the wide pass at SVL 512 bits (one LHS run of 16 rows is one vector): a chunk's 4 low-field runs
/// by one 4-vector load (z16–z19), its 4 high-field runs by another (z24–z27); 42 instructions per chunk.
macro_rules! chunk_loop_v64 {
    () => {
        chunk_loop_runs!(
            group_wide_runs,
            ["ld1b {{z16.b-z19.b}}, pn9/z, [{xa}]", "ld1b {{z24.b-z27.b}}, pn9/z, [{xa}, #4, mul vl]"],
            ["16", "24"],
            ["17", "25"],
            ["18", "26"],
            ["19", "27"]
        )
    };
}

/// The chunk loop of the tall pass (SVL 256 bits: one LHS run of 16 rows is two vectors, its row halves): the
/// chunk's 8 runs by four 4-vector loads (runs 0–1 in z16–z19, 2–3 in z20–z23, 4–5 in z24–z27, 6–7 in z8–z11);
/// 36 instructions per chunk.
macro_rules! chunk_loop_tall {
    () => {
        chunk_loop_runs!(
            group_tall_runs,
            [
                "ld1b {{z16.b-z19.b}}, pn9/z, [{xa}]",
                "ld1b {{z20.b-z23.b}}, pn9/z, [{xa}, #4, mul vl]",
                "ld1b {{z24.b-z27.b}}, pn9/z, [{xa}, #8, mul vl]",
                "ld1b {{z8.b-z11.b}}, pn9/z, [{xa}, #12, mul vl]"
            ],
            ["16", "17", "24", "25"],
            ["18", "19", "26", "27"],
            ["20", "21", "8", "9"],
            ["22", "23", "10", "11"]
        )
    };
}

/// The chunk loop of the wide pass at SVL > 512 bits (the vectors predicated to their first 64 bytes): each group
/// loads its two tiles' codes apart and steps its pointers.
macro_rules! chunk_loop_any {
    () => {
        concat!(
            "add {xh}, {xa}, #256\n",
            "6:\n",
            chunk_loop_any!(@group),
            chunk_loop_any!(@group),
            chunk_loop_any!(@group),
            chunk_loop_any!(@group),
            "add {xa}, {xa}, #256\n",
            "add {xh}, {xh}, #256\n",
            "subs {cc}, {cc}, #1\n",
            "b.ne 6b\n",
        )
    };
    (@group) => {
        concat!(
            "ld1w {{z0.s}}, p1/z, [{xc}]\n",
            "ld1w {{z1.s}}, p1/z, [{xc}, {s1}, lsl #2]\n",
            "ld1b {{z8.b}}, p0/z, [{xa}]\n",
            "ld1b {{z9.b}}, p0/z, [{xh}]\n",
            mopa_wide!("8", "9"),
            "add {xc}, {xc}, #256\n",
            "add {xa}, {xa}, #64\n",
            "add {xh}, {xh}, #64\n",
        )
    };
}

/// One tile's part of one step of the block epilogue: ZA vector group x8 + `$t` (rows j + i·v/16 of int32 tile
/// `$t`) out by one MOVA, converted, × (column scale `z$c` · row factor: lane i of each quadword of `z$r`, the
/// `block` numerics; the column scale alone, `row`), added to the same rows of the f32 sums tile 2 + `$t` (vector
/// group x8 + 2 + `$t`) by one multi-vector FMLA.
macro_rules! epi_tile {
    (block, $t:literal, $u:literal, $c:literal, $r:literal) => {
        concat!(
            epi_tile!(@out $t),
            epi_tile!(@fmul "24", $c, $r, "0"),
            epi_tile!(@fmul "25", $c, $r, "1"),
            epi_tile!(@fmul "26", $c, $r, "2"),
            epi_tile!(@fmul "27", $c, $r, "3"),
            concat!("fmla za.s[w8, ", $u, ", vgx4], {{z16.s-z19.s}}, {{z24.s-z27.s}}\n"),
        )
    };
    // Vector group x8 + $t out of ZA, converted.
    (@out $t:literal) => {
        concat!("mova {{z16.d-z19.d}}, za.d[w8, ", $t, ", vgx4]\n", "scvtf {{z16.s-z19.s}}, {{z16.s-z19.s}}\n")
    };
    (@fmul $d:literal, $c:literal, $r:literal, $i:literal) => {
        concat!("fmul z", $d, ".s, z", $c, ".s, z", $r, ".s[", $i, "]\n")
    };
    (row, $t:literal, $u:literal, $c:literal, $r:literal) => {
        concat!(
            epi_tile!(@out $t),
            concat!("fmla za.s[w8, ", $u, ", vgx4], {{z16.s-z19.s}}, z", $c, ".s\n"),
        )
    };
}

/// The block epilogue: the block's int32 tiles za0, za1 into the f32 sums za2, za3 (`epi_tile!`, steps of 4 rows of
/// each tile), with zero points (`zp`) + sa·Σq ⊗ correction by one FMOPA per tile, then za0, za1 zeroed. Column
/// scales (× 2^−4) in z10 (tile 0) and z11 (tile 1), corrections in z20, z21. The `block` numerics' row factors
/// are the rows' sa, read from the LHS scales at `{sap}` (the pass's rows of the block) and spread by TBL: step j
/// takes rows j + i·v/16 (i = 0..3, lane i of every quadword) from the index vectors of [`idx_setup!`]. The steps
/// by SVL: `v32` (the tall pass at 256 bits: two steps, vector groups 0–7 from w8 = 0; tile 0's rows in z28, tile
/// 1's in z29), `v32w` (the wide pass at 256 bits: the same two steps, both tiles the rows of z28), `v64` (the wide
/// pass at 512 bits: four steps, w8 = 0 and 8), `any` (a loop of v/16 steps, label `$l`: x17 = v/4).
macro_rules! epilogue {
    (@sa v32) => { "ld1w {{z28.s-z29.s}}, pn8/z, [{sap}]\n" };
    (@sa $k:ident) => { "ld1w {{z28.s}}, p1/z, [{sap}]\n" };
    (@quads v32 block) => {
        concat!(
            "tbl z2.s, {{z28.s}}, z12.s\n",
            "tbl z3.s, {{z29.s}}, z12.s\n",
            "tbl z4.s, {{z28.s}}, z13.s\n",
            "tbl z5.s, {{z29.s}}, z13.s\n",
        )
    };
    (@quads v32w block) => { concat!("tbl z2.s, {{z28.s}}, z12.s\n", "tbl z3.s, {{z28.s}}, z13.s\n") };
    (@quads v64 block) => {
        concat!(
            "tbl z2.s, {{z28.s}}, z12.s\n",
            "tbl z3.s, {{z28.s}}, z13.s\n",
            "tbl z4.s, {{z28.s}}, z14.s\n",
            "tbl z5.s, {{z28.s}}, z15.s\n",
        )
    };
    (@quads $k:ident $act:ident) => { "" };
    // Two steps from w8: vector groups 0–3 (step j, quadwords $a for tile 0 and $b for tile 1) and 4–7 (step j + 1:
    // $c, $d).
    (@two $act:ident [$a:literal $b:literal $c:literal $d:literal]) => {
        concat!(
            epi_tile!($act, "0", "2", "10", $a),
            epi_tile!($act, "1", "3", "11", $b),
            epi_tile!($act, "4", "6", "10", $c),
            epi_tile!($act, "5", "7", "11", $d),
        )
    };
    (@steps v32 $act:ident $l:literal) => { concat!("mov w8, #0\n", epilogue!(@two $act ["2" "3" "4" "5"])) };
    (@steps v32w $act:ident $l:literal) => { concat!("mov w8, #0\n", epilogue!(@two $act ["2" "2" "3" "3"])) };
    (@steps v64 $act:ident $l:literal) => {
        concat!(
            "mov w8, #0\n",
            epilogue!(@two $act ["2" "2" "3" "3"]),
            "mov w8, #8\n",
            epilogue!(@two $act ["4" "4" "5" "5"]),
        )
    };
    (@steps any $act:ident $l:literal) => {
        concat!(
            "mov z13.d, z12.d\n",
            "mov w8, #0\n",
            $l,
            ":\n",
            epilogue!(@anyquad $act),
            epi_tile!($act, "0", "2", "10", "2"),
            epi_tile!($act, "1", "3", "11", "2"),
            "add z13.s, z13.s, #1\n",
            "add w8, w8, #4\n",
            "cmp x8, x17\n",
            "b.lo ",
            $l,
            "b\n",
        )
    };
    (@anyquad block) => { "tbl z2.s, {{z28.s}}, z13.s\n" };
    (@anyquad row) => { "" };
    // Zero points: the rows' Σq (× sa in the block numerics; the row numerics' sa are 1) ⊗ the corrections.
    (@zp v32 block zp) => {
        concat!(
            "ld1w {{z30.s-z31.s}}, pn8/z, [{sqp}]\n",
            "scvtf z30.s, p1/m, z30.s\n",
            "scvtf z31.s, p1/m, z31.s\n",
            "fmul z6.s, z30.s, z28.s\n",
            "fmul z7.s, z31.s, z29.s\n",
            "fmopa za2.s, p1/m, p1/m, z6.s, z20.s\n",
            "fmopa za3.s, p1/m, p1/m, z7.s, z21.s\n",
        )
    };
    (@zp v32 row zp) => {
        concat!(
            "ld1w {{z30.s-z31.s}}, pn8/z, [{sqp}]\n",
            "scvtf z30.s, p1/m, z30.s\n",
            "scvtf z31.s, p1/m, z31.s\n",
            "fmopa za2.s, p1/m, p1/m, z30.s, z20.s\n",
            "fmopa za3.s, p1/m, p1/m, z31.s, z21.s\n",
        )
    };
    (@zp $k:ident block zp) => {
        concat!(
            "ld1w {{z30.s}}, p1/z, [{sqp}]\n",
            "scvtf z30.s, p1/m, z30.s\n",
            "fmul z6.s, z30.s, z28.s\n",
            "fmopa za2.s, p1/m, p1/m, z6.s, z20.s\n",
            "fmopa za3.s, p1/m, p1/m, z6.s, z21.s\n",
        )
    };
    (@zp $k:ident row zp) => {
        concat!(
            "ld1w {{z30.s}}, p1/z, [{sqp}]\n",
            "scvtf z30.s, p1/m, z30.s\n",
            "fmopa za2.s, p1/m, p1/m, z30.s, z20.s\n",
            "fmopa za3.s, p1/m, p1/m, z30.s, z21.s\n",
        )
    };
    (@zp $k:ident $act:ident nozp) => { "" };
    (@load block $k:ident) => { epilogue!(@sa $k) };
    (@load row $k:ident) => { "" };
    ($k:ident, $act:ident, $zp:ident, $l:literal) => {
        concat!(
            epilogue!(@load $act $k),
            epilogue!(@quads $k $act),
            epilogue!(@steps $k $act $l),
            epilogue!(@zp $k $act $zp),
        )
    };
}

/// The TBL indices of the epilogue's row factors (`epilogue!`): lane i of every quadword of step j's index vector is
/// j + i·v/16. `v32`, `v32w`: z12, z13 (steps 0, 1); `v64`: z12–z15; `any`: z12 (step 0; the loop adds 1 per step).
macro_rules! idx_setup {
    (@base $shift:literal) => {
        concat!("index z12.s, #0, #1\n", "and z12.s, z12.s, #3\n", "lsl z12.s, z12.s, #", $shift, "\n")
    };
    (v32) => { concat!(idx_setup!(@base "1"), "mov z13.d, z12.d\n", "add z13.s, z13.s, #1\n") };
    (v32w) => { idx_setup!(v32) };
    (v64) => {
        concat!(
            idx_setup!(@base "2"),
            "mov z13.d, z12.d\n",
            "add z13.s, z13.s, #1\n",
            "mov z14.d, z12.d\n",
            "add z14.s, z14.s, #2\n",
            "mov z15.d, z12.d\n",
            "add z15.s, z15.s, #3\n",
        )
    };
    (any) => {
        concat!(
            "index z12.s, #0, #1\n",
            "and z12.s, z12.s, #3\n",
            "lsr x16, x17, #2\n",
            "dup z13.s, w16\n",
            "ptrue p2.s\n",
            "mul z12.s, p2/m, z12.s, z13.s\n",
        )
    };
}

/// The `asm!` of a pass: streaming mode entered (ZA's lazy save honoured; ZA zeroed), the predicates, the block loop
/// (`$chunks`: the chunk loop; then the tiles' column scales and corrections (tile 1's `$col1` from tile 0's) and the epilogue
/// of the call's numerics), the f32 sums of za2, za3 stored (rows `$ostride` bytes apart, tile 1's first at
/// `$out1`), streaming mode left.
macro_rules! pass_asm {
    ($a:ident, $s:expr, $rec:ident, $act:ident, $cols:ident, $sa:ident, $sq:ident, $out:ident, $ostride:ident,
     $bias:ident, $nrows:ident, $k:ident, [$($chunks:tt)*], $col1:literal, $out1:literal) => {
        streaming_asm!(
            ".arch_extension sme2",
            ".arch_extension sve",
            enter_streaming!(),
            "lsl {xc}, {s1}, #2",
            "whilelo p0.b, xzr, {xc}",
            "whilelo p1.s, xzr, {s1}",
            "ptrue pn8.s",
            "ptrue pn9.b",
            "mov {cc}, #96",
            "whilelo pn10.b, xzr, {cc}, vlx4",
            "rdsvl x17, #1",
            "lsr x17, x17, #2",
            idx_setup!($k),
            // Block loop.
            "5:",
            "mov {xc}, {rec}",
            "add {rec}, {rec}, {rstride}",
            "mov {cc}, {chunks}",
            $($chunks)*
            "ld1w {{z10.s}}, p1/z, [{col}]",
            concat!("ld1w {{z11.s}}, p1/z, [{col}", $col1, "]"),
            "tbz {mode}, #0, 7f",
            "add x16, {col}, #256",
            "ld1w {{z20.s}}, p1/z, [x16]",
            concat!("ld1w {{z21.s}}, p1/z, [x16", $col1, "]"),
            "tbnz {mode}, #1, 18f",
            epilogue!($k, block, zp, "13"),
            "b 9f",
            "18:",
            epilogue!($k, row, zp, "19"),
            "b 9f",
            "7:",
            "tbnz {mode}, #1, 20f",
            epilogue!($k, block, nozp, "15"),
            "b 9f",
            "20:",
            epilogue!($k, row, nozp, "21"),
            "9:",
            "zero {{za0.s, za1.s}}",
            "add {col}, {col}, #512",
            "add {sap}, {sap}, #64",
            "add {sqp}, {sqp}, #64",
            "subs {nb}, {nb}, #1",
            "b.ne 5b",
            // The sums plus bias (one FMOPA of 1 ⊗ bias per tile: one rounding, as sum + bias) out: rows of za2
            // (tile 0) and za3 (tile 1), 4 per step, `{ostride}` bytes apart.
            "fmov z28.s, #1.0",
            "ld1w {{z29.s}}, p1/z, [{bias}]",
            concat!("ld1w {{z30.s}}, p1/z, [{bias}", $col1, "]"),
            "fmopa za2.s, p1/m, p1/m, z28.s, z29.s",
            "fmopa za3.s, p1/m, p1/m, z28.s, z30.s",
            // Rows 0 .. {nrows} of each tile: 4 per step while 4 are left, then one by one.
            "mov w12, #0",
            "mov {xo}, {out}",
            $out1,
            "10:",
            "add {cc}, x12, #4",
            "cmp {cc}, {nrows}",
            "b.hi 22f",
            "mova {{z16.s-z19.s}}, za2h.s[w12, 0:3]",
            "mova {{z20.s-z23.s}}, za3h.s[w12, 0:3]",
            "st1w {{z16.s}}, p1, [{xo}]",
            "st1w {{z20.s}}, p1, [x15]",
            "add {xo}, {xo}, {ostride}",
            "add x15, x15, {ostride}",
            "st1w {{z17.s}}, p1, [{xo}]",
            "st1w {{z21.s}}, p1, [x15]",
            "add {xo}, {xo}, {ostride}",
            "add x15, x15, {ostride}",
            "st1w {{z18.s}}, p1, [{xo}]",
            "st1w {{z22.s}}, p1, [x15]",
            "add {xo}, {xo}, {ostride}",
            "add x15, x15, {ostride}",
            "st1w {{z19.s}}, p1, [{xo}]",
            "st1w {{z23.s}}, p1, [x15]",
            "add {xo}, {xo}, {ostride}",
            "add x15, x15, {ostride}",
            "add w12, w12, #4",
            "b 10b",
            "22:",
            "cmp x12, {nrows}",
            "b.hs 23f",
            "mova z16.s, p1/m, za2h.s[w12, 0]",
            "mova z20.s, p1/m, za3h.s[w12, 0]",
            "st1w {{z16.s}}, p1, [{xo}]",
            "st1w {{z20.s}}, p1, [x15]",
            "add {xo}, {xo}, {ostride}",
            "add x15, x15, {ostride}",
            "add w12, w12, #1",
            "b 22b",
            "23:",
            "smstop",
            rec = inout(reg) $rec => _,
            rstride = in(reg) $a.rhs_record,
            chunks = in(reg) $a.bl / 32,
            nb = inout(reg) $a.blocks => _,
            xa = inout(reg) $act => _,
            col = inout(reg) $cols => _,
            sap = inout(reg) $sa => _,
            sqp = inout(reg) $sq => _,
            out = in(reg) $out,
            mode = in(reg) ($a.has_zp != 0) as usize | ((($a.row != 0) as usize) << 1),
            bias = in(reg) $bias,
            ostride = in(reg) $ostride,
            nrows = in(reg) $nrows,
            s1 = in(reg) $s,
            e64 = in(reg) 64usize,
            e128 = in(reg) 128usize,
            e192 = in(reg) 192usize,
            xh = out(reg) _,
            xc = out(reg) _,
            cc = out(reg) _,
            xo = out(reg) _,
            out("x8") _,
        )
    };
}

/// One pass over every block (geometry `g`), its sums plus `bias` stored at `out`, `ostride` bytes per row: rows
/// 0 .. `nrows` of each tile (`nrows` ≤ s; all of them, s, in a tall pass).
///
/// # Safety
/// The CPU has SME2 and `g` was made for this thread's SVL (`v` = SVL bytes, `tall` only at v = 32); `rec` is a
/// panel's first record offset to the pass's columns, `act` a row group offset to the pass's rows, `cols` the
/// per-call column buffer offset likewise, `sa` / `sq` the pass's rows' scales and Σq (`a.blocks` blocks each),
/// `out` the pass's sums (`nrows` rows of each tile × its columns, `ostride` bytes apart), `bias` the pass's
/// columns; all as `run` lays them out, for `a` with 4-bit codes in blocks of whole 32-K chunks.
#[inline(never)] // a symbol of its own for the counts (scripts/aarch64/icount-kernel.sh)
#[allow(clippy::too_many_arguments)]
unsafe fn pass(
    a: &RunArgs,
    g: &Pass,
    rec: *const u8,
    act: *const u8,
    cols: *const f32,
    sa: *const f32,
    sq: *const i32,
    out: *mut f32,
    ostride: usize,
    bias: *const f32,
    nrows: usize,
) {
    let s = g.s;
    // SAFETY: reads per block: chunks × 4 groups × the pass's code vectors (s or 2s columns of 64 at the pass's
    // offset) inside the record, the chunk's 8 LHS runs (the pass's rows, and at SVL 256 in the 8-row wide pass the rows between them: at most 96 bytes from the pass's first row of runs 2j, never past the chunk's 512 bytes) inside the group, the
    // block's f32 of `cols` and `rows`; writes the pass's sums at `out`: all inside the buffers `run` owns or the
    // tile's (RunArgs contract). Every vector and predicate register and ffr is declared clobbered (SMSTART/SMSTOP
    // zero them), so are x8, x12 and x14–x17; ZA is left off (SMSTOP), TPIDR2_EL0 is 0 or untouched; flags
    // clobbered.
    unsafe {
        macro_rules! go {
            ($k:ident, [$($chunks:tt)*], $col1:literal, $out1:literal) => {
                pass_asm!(a, s, rec, act, cols, sa, sq, out, ostride, bias, nrows, $k, [$($chunks)*], $col1, $out1)
            };
            // Wide passes: tile 1 is columns s..2s.
            ($k:ident, [$($chunks:tt)*]) => {
                go!($k, [$($chunks)*], ", {s1}, lsl #2", "add x15, {out}, {s1}, lsl #2")
            };
        }
        match (g.tall, g.v) {
            // Tile 1: the same columns, rows s..2s.
            (true, _) => go!(v32, [chunk_loop_tall!(),], "", "mul x15, {s1}, {ostride}\nadd x15, {out}, x15"),
            (false, 64) => go!(v64, [chunk_loop_v64!(),]),
            (false, 32) => go!(v32w, [chunk_loop_v32w!(),]),
            (false, 16) => go!(any, [chunk_loop!(),]),
            _ => go!(any, [chunk_loop_any!(), "// {e64} {e128} {e192}",]),
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
