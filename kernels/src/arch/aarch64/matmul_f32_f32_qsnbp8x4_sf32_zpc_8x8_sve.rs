//! fp32-path GEMM for prefill, SVE at 256 bits, dequantizing B once per tile: Y = A·dequant(B)ᵀ with f32 A and
//! f32 accumulation (accuracy_level 1–3), on the NEON kernel's walk (`super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon`:
//! panels dequantized piece by piece, up to 1024 K values, then all the tile's rows over the pieces) with pieces
//! laid out in rows of 8 (one K value's 8 columns: 32 bytes, one 256-bit vector), two panels per pass, and asm
//! register tiles of 8 rows × 16 columns: per row and panel one accumulator holding the panel's 8 columns, FMLA
//! indexed by the row's activation. SVE's indexed FMLA takes its element within each 128-bit segment, so a row's 4
//! activations are loaded replicated into every segment (`ld1rqw`), and each FMLA does 8 columns' multiply-add:
//! two NEON FMLA by element's work.
//!
//! Registers: the rows' activations z0–z7 (the indexed operand of a single-precision FMLA must be z0–z7), the two
//! pieces' 4 K-rows z8–z11 and z12–z15, the rows' sums z16–z23 and z24–z31 (first 256 bits: predicate p1 =
//! `vl8`). The whole loop over a piece is one `asm!` block per row count (8, 4, 2, 1: a tile's rows are cut into
//! those; the loads name only rows of the tile); a last odd panel runs the one-panel tile (z16–z23 only).
//!
//! Instruction budget per 4 K × 16 columns × 8 rows (per FMLA: / 64): 64 FMLA; 8 LD1W of the K-rows, 8 LD1RQW
//! of the rows' activations (0.25); the pointer and offset steps and the loop 5 (0.08): 85 = 1.33 per FMLA, 0.17
//! per multiply-add (the NEON 8 × 8 tile: 1.19 per FMLA by element of 4 columns, 0.30; the one-panel tile here:
//! 48 per 32 FMLA, 1.5). Dequantizing (`dequantize_blocks`, one asm block per panel and piece) per group of 32
//! code bytes (8 columns × 4 K, one word per column): one load; per field and K (8 values) LSL + ASR (or ASR
//! alone), SCVTF, FMUL (FMAD with zero points), ST1W: 0.72 instructions per value at 4 bits (the NEON
//! dequantizer's quad-major pieces take 1.25, its rows of 8 by ZIP + ST4 took 1.5).
//!
//! The kernel uses the first 256 bits of the vector, so it runs at any SVE vector length of at least 256 bits
//! (`min_sve_vl` = 32) and is selected only there: at 128 bits the NEON kernel is as wide. The vector length is
//! read again on every call (it is per thread and can change); below 256 bits the call runs the NEON kernel,
//! which reads the same packed weights. Tiles under [`super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon::MIN_ROWS`]
//! rows run the NEON kernel too (its in-register body). The sums are the NEON kernel's bit for bit (each column's
//! FMA chain runs over K in the same order, each weight is the same f32) wherever a scale × 2^−(8−bits) is a
//! normal f32.
//!
//! LHS: `f32` rows (K padded with zeros to the packed length). RHS: `qsnbp8x4_sf32_zpc`, bits 2/4/8, any block
//! size 16 … 65536. Features: neon, sve. No over-reads.

use super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon::{self as neon, Piece, panels};
use super::ops::sve_vl_bytes;
use super::qsnbp8x4_int8::NR;
use super::sve_asm::{enter_streaming, streaming_asm, sve_asm};
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon and sve (with a vector length of at least 32 bytes when selected; shorter runs the NEON
/// kernel); `args` satisfies the `RunArgs` contract with an `f32` LHS and a `qsnbp8x4_sf32_zpc` RHS of
/// `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,sve")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    // This thread's vector may have been shortened since selection (see `sve_vl_bytes`).
    if a.rows < neon::MIN_ROWS || sve_vl_bytes() < 32 {
        // SAFETY: the NEON kernel reads the same layout; the caller's guarantee.
        return unsafe { neon::run(a) };
    }
    // SAFETY: the vector has at least 256 bits (checked just now); the rest is the caller's.
    unsafe { crate::arch::dispatch!(panels::<Rows8>(a); bits(a.bits)) }
}

/// Pieces in rows of 8: K value k's 8 columns at `8·k` (32 bytes), walked by the SVE tile.
pub(crate) struct Rows8;

impl Piece for Rows8 {
    const PANELS: usize = 2;

    #[target_feature(enable = "neon,sve")]
    unsafe fn dequantize<const BITS: usize>(a: &RunArgs, panel: usize, b0: usize, nb: usize, w: *mut f32) {
        // SAFETY: the blocks are the panel's, `w` holds their 8·nb·bl values (the caller's guarantee); K-rows of 8
        // f32; the vector has at least 256 bits (`run`).
        unsafe { dequantize_blocks::<BITS>(&Dq::new(a, panel, b0, nb, w, 8)) }
    }

    #[target_feature(enable = "neon,sve")]
    unsafe fn rows(
        rows: usize,
        panels: usize,
        x: *const f32,
        stride: usize,
        w: *const f32,
        pk: usize,
        y: *mut f32,
        ystride: usize,
    ) {
        let (w1, y1) = (w.wrapping_add(8 * pk), y.wrapping_add(ystride));
        let mut r0 = 0;
        while r0 < rows {
            let n = [8, 4, 2, 1].into_iter().find(|&n| n <= rows - r0).expect("rows remain");
            // SAFETY: rows r0 .. r0 + n of the caller's, of both panels when there are two (its guarantee); the
            // vector has at least 256 bits (`run`).
            unsafe {
                let (x, y, y1) = (x.add(r0 * stride), y.add(r0 * NR), y1.wrapping_add(r0 * NR));
                match (n, panels) {
                    (8, 2) => tile::<8, 2>(x, stride, [w, w1], pk, [y, y1]),
                    (4, 2) => tile::<4, 2>(x, stride, [w, w1], pk, [y, y1]),
                    (2, 2) => tile::<2, 2>(x, stride, [w, w1], pk, [y, y1]),
                    (_, 2) => tile::<1, 2>(x, stride, [w, w1], pk, [y, y1]),
                    (8, _) => tile::<8, 1>(x, stride, [w, w], pk, [y, y]),
                    (4, _) => tile::<4, 1>(x, stride, [w, w], pk, [y, y]),
                    (2, _) => tile::<2, 1>(x, stride, [w, w], pk, [y, y]),
                    _ => tile::<1, 1>(x, stride, [w, w], pk, [y, y]),
                }
            }
            r0 += n;
        }
    }
}

/// One K-row of a group's dequantized values (one field of one of its 4 K): the field of the group's 8 column
/// words (z0) brought to the top by LSL and down with its sign by ASR (`[lsl asr]`, `[- asr]` when it is already
/// at the top), converted, scaled (× z30, the block's column scales; `zp`: and + z31, the corrections, by one
/// fused FMAD as the NEON dequantizer's FMLA), stored to `[$base$off]` (8 f32); `$z` the register it uses.
#[rustfmt::skip]
macro_rules! dq_row {
    ($mode:ident $z:literal [- $asr:literal] $base:literal $off:literal) => {
        concat!("asr z", $z, ".s, z0.s, #", $asr, "\n", dq_row!(@rest $mode $z $base $off))
    };
    ($mode:ident $z:literal [$lsl:literal $asr:literal] $base:literal $off:literal) => {
        concat!(
            "lsl z", $z, ".s, z0.s, #", $lsl, "\n",
            "asr z", $z, ".s, z", $z, ".s, #", $asr, "\n",
            dq_row!(@rest $mode $z $base $off),
        )
    };
    (@rest nozp $z:literal $base:literal $off:literal) => {
        concat!(
            "scvtf z", $z, ".s, p1/m, z", $z, ".s\n",
            "fmul z", $z, ".s, z", $z, ".s, z30.s\n",
            "st1w {{z", $z, ".s}}, p1, [", $base, $off, "]\n",
        )
    };
    (@rest zp $z:literal $base:literal $off:literal) => {
        concat!(
            "scvtf z", $z, ".s, p1/m, z", $z, ".s\n",
            "fmad z", $z, ".s, p1/m, z30.s, z31.s\n",
            "st1w {{z", $z, ".s}}, p1, [", $base, $off, "]\n",
        )
    };
}

/// The 4 K-rows of one field: `[lsl asr]` (or `[- asr]`) of K 0, 1, 2, 3 of the group, stored at `$base` + i K-rows
/// (`{k1}`, `{k2}`, `{k3}`: 1, 2, 3 K-rows in f32).
#[rustfmt::skip]
macro_rules! dq_field {
    ($mode:ident $base:literal $s0:tt $s1:tt $s2:tt $s3:tt) => {
        concat!(
            dq_row!($mode "1" $s0 $base ""),
            dq_row!($mode "2" $s1 $base ", {k1}, lsl #2"),
            dq_row!($mode "3" $s2 $base ", {k2}, lsl #2"),
            dq_row!($mode "4" $s3 $base ", {k3}, lsl #2"),
        )
    };
}

/// The text of [`dequantize_blocks`] for `BITS`-bit codes (the fields of each byte, low first: field l of K i has
/// its top at bit 8·i + bits·(l + 1) of the column's word) in mode `nozp` | `zp`: `{nb}` blocks, each its scales
/// (and corrections) loaded, its chunks (`{chunks}` of `{groups}` groups), then every pointer stepped to the next
/// block's record (`{skip}` past the codes, `{record}` for the scales and corrections).
#[rustfmt::skip]
macro_rules! dq_text {
    ($mode:ident; $($fields:expr),+ $(,)?) => {
        concat!(
            "ptrue p1.s, vl8\n",
            "5:\n",
            "ld1w {{z30.s}}, p1/z, [{s}]\n",
            dq_text!(@zp $mode),
            "mov {nch}, {chunks}\n",
            "4:\n",
            "mov {g}, {groups}\n",
            "3:\n",
            "ld1w {{z0.s}}, p1/z, [{src}]\n",
            "add {src}, {src}, #32\n",
            $($fields,)+
            "add {dst}, {dst}, {gstep}\n",
            "subs {g}, {g}, #1\n",
            "b.ne 3b\n",
            "add {dst}, {dst}, {cstep}\n",
            "subs {nch}, {nch}, #1\n",
            "b.ne 4b\n",
            "add {src}, {src}, {skip}\n",
            "add {s}, {s}, {record}\n",
            "add {c}, {c}, {record}\n",
            "subs {nb}, {nb}, #1\n",
            "b.ne 5b\n",
        )
    };
    (@zp nozp) => { "// {c}\n" };
    (@zp zp) => { "ld1w {{z31.s}}, p1/z, [{c}]\n" };
}

/// The fields of a group for each width (field l's K-rows at `{dst}` + l·lane_len K-rows: `{t}` from `{f1}`, `{f2}`,
/// `{f3}`).
#[rustfmt::skip]
macro_rules! dq_fields {
    ($mode:ident 4) => {
        dq_text!($mode;
            dq_field!($mode "{dst}" [28 28] [20 28] [12 28] [4 28]),
            "add {t}, {dst}, {f1}\n",
            dq_field!($mode "{t}" [24 28] [16 28] [8 28] [- 28]),
            "// {f2} {f3}\n",
        )
    };
    ($mode:ident 2) => {
        dq_text!($mode;
            dq_field!($mode "{dst}" [30 30] [22 30] [14 30] [6 30]),
            "add {t}, {dst}, {f1}\n",
            dq_field!($mode "{t}" [28 30] [20 30] [12 30] [4 30]),
            "add {t}, {dst}, {f2}\n",
            dq_field!($mode "{t}" [26 30] [18 30] [10 30] [2 30]),
            "add {t}, {dst}, {f3}\n",
            dq_field!($mode "{t}" [24 30] [16 30] [8 30] [- 30]),
        )
    };
    ($mode:ident 8) => {
        dq_text!($mode;
            dq_field!($mode "{dst}" [24 24] [16 24] [8 24] [- 24]),
            "// {t} {f1} {f2} {f3}\n",
        )
    };
}

/// What [`dequantize_blocks`] (and the SME2 GEMM's streaming copy of it) needs: blocks `b0 .. b0 + nb` of a panel,
/// dequantized into K-rows of `row` f32 (8: rows of 8, a panel's K value k at `w + 8·k`; 16: two panels side by side,
/// the caller's `w` at the panel's half), each value `s·q + c` (`c` only with zero points) from the signed code q of
/// its field (the SVE equivalent of the NEON dequantizer's `s·2^−(8−bits)·(q·2^(8−bits)) + c`, equal to it wherever
/// `s·2^−(8−bits)` is a normal f32). Per group of 32 code bytes (8 columns × 4 K: one word per column) one load, then
/// per field and K one LSL and ASR (or one ASR), SCVTF, FMUL or FMAD and ST1W. The fields are the asm's operands.
pub(crate) struct Dq {
    pub(crate) codes: *const u8,
    pub(crate) s: *const f32,
    /// The corrections (zero points), or the scales again (`zp` false: never read).
    pub(crate) c: *const f32,
    pub(crate) zp: bool,
    pub(crate) nb: usize,
    pub(crate) chunks: usize,
    pub(crate) groups: usize,
    /// Bytes: the other fields' K-rows of a chunk, one field's l·lane_len K-rows (l = 1, 2, 3), a group's 4 K-rows,
    /// the rest of a record after its codes, a record.
    pub(crate) cstep: usize,
    pub(crate) f: [usize; 3],
    pub(crate) gstep: usize,
    pub(crate) skip: usize,
    pub(crate) record: usize,
    /// f32: K-rows 1, 2, 3 of a group.
    pub(crate) e: [usize; 3],
    pub(crate) w: *mut f32,
}

impl Dq {
    /// Blocks `b0 .. b0 + nb` (nb ≥ 1) of `panel` (`a`'s RHS, `bits` bits) into `w` in K-rows of `row` f32.
    pub(crate) fn new(a: &RunArgs, panel: usize, b0: usize, nb: usize, w: *mut f32, row: usize) -> Dq {
        let cpb = 8 / a.bits;
        let chunk = a.bl.min(32);
        let lane_len = chunk / cpb;
        let chunks = a.bl / chunk;
        let groups = lane_len / 4;
        let codes = a.rhs.wrapping_add(panel * a.rhs_panel_stride + b0 * a.rhs_record);
        let kbytes = 4 * row;
        let s = codes.wrapping_add(a.rhs_scales).cast();
        debug_assert!(nb > 0 && lane_len >= 4 && lane_len.is_multiple_of(4) && matches!(row, 8 | 16));
        Dq {
            codes,
            s,
            c: if a.has_zp != 0 { codes.wrapping_add(a.rhs_zp).cast() } else { s },
            zp: a.has_zp != 0,
            nb,
            chunks,
            groups,
            cstep: (cpb - 1) * lane_len * kbytes,
            f: [1, 2, 3].map(|l| l * lane_len * kbytes),
            gstep: 4 * kbytes,
            skip: a.rhs_record - chunks * groups * 32,
            record: a.rhs_record,
            e: [row, 2 * row, 3 * row],
            w,
        }
    }
}

/// [`dq_text!`] for the width and zero points of `$d` (a [`Dq`]) in the asm wrapper `$asm` (`sve_asm`, or
/// `streaming_asm` for [`dequantize_blocks_streaming`]) between `$pre` and `$post`.
macro_rules! dq_asm {
    ($asm:ident, $pre:expr, $post:expr, $d:expr, $bits:expr) => {{
        let d: &Dq = $d;
        macro_rules! call {
            ($mode:ident $b:tt) => {
                $asm!(
                    concat!($pre, dq_fields!($mode $b), $post),
                    src = inout(reg) d.codes => _,
                    dst = inout(reg) d.w => _,
                    s = inout(reg) d.s => _,
                    c = inout(reg) d.c => _,
                    nb = inout(reg) d.nb => _,
                    g = out(reg) _,
                    groups = in(reg) d.groups,
                    nch = out(reg) _,
                    chunks = in(reg) d.chunks,
                    cstep = in(reg) d.cstep,
                    gstep = in(reg) d.gstep,
                    skip = in(reg) d.skip,
                    record = in(reg) d.record,
                    t = out(reg) _,
                    f1 = in(reg) d.f[0],
                    f2 = in(reg) d.f[1],
                    f3 = in(reg) d.f[2],
                    k1 = in(reg) d.e[0],
                    k2 = in(reg) d.e[1],
                    k3 = in(reg) d.e[2],
                )
            };
        }
        match ($bits, d.zp) {
            (4, false) => call!(nozp 4),
            (4, true) => call!(zp 4),
            (2, false) => call!(nozp 2),
            (2, true) => call!(zp 2),
            (_, false) => call!(nozp 8),
            (_, true) => call!(zp 8),
        }
    }};
}

/// The blocks of `d` dequantized ([`Dq`]): one asm block for all of them.
///
/// # Safety
/// The CPU has SVE with a vector length of at least 32 bytes; `d` was made by [`Dq::new`] from a `RunArgs` whose
/// RHS holds the blocks, and `d.w` holds their K-rows (nb·bl of them, `row` f32 apart, 8 written per K-row).
#[target_feature(enable = "neon,sve")]
unsafe fn dequantize_blocks<const BITS: usize>(d: &Dq) {
    // SAFETY: reads the blocks' codes (chunks · groups groups of 32 bytes each), their 8 scales and 8 corrections
    // (zp mode only), the first 256 bits only (predicate p1); writes 8 f32 per K-row from `w` (the caller's
    // guarantee). Every vector and predicate register is declared (sve_asm!); the flags are clobbered; no stack use.
    unsafe { dq_asm!(sve_asm, "", "", d, BITS) }
}

/// [`dequantize_blocks`] in streaming mode, for the SME2 fp32 GEMM (`super::matmul_f32_f32_qsnbp8x4_sf32_zpc_1vlx4vl_sme_mopa`),
/// which needs no SVE outside it: the same text between [`enter_streaming!`] and SMSTOP (every instruction of it
/// legal in streaming mode without FEAT_SME_FA64).
///
/// # Safety
/// The CPU has SME with a streaming vector of at least 32 bytes; `d` as for [`dequantize_blocks`].
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dequantize_blocks_streaming<const BITS: usize>(d: &Dq) {
    // SAFETY: as in `dequantize_blocks` (predicate p1: the first 256 bits of each load and store). Streaming mode
    // entered with ZA's lazy save honoured and left with SMSTOP; every vector and predicate register, ffr, x12 and
    // x14–x17 declared clobbered (`streaming_asm!`).
    unsafe {
        dq_asm!(
            streaming_asm,
            concat!(".arch_extension sme\n", ".arch_extension sve\n", enter_streaming!()),
            "smstop\n",
            d,
            BITS
        )
    }
}

/// The tiles' sums from (`ld`) or back to (`st`) `$base`: the listed registers' first 256 bits, rows 32 bytes apart
/// (`{t}` the scratch pointer).
#[rustfmt::skip]
macro_rules! sums_text {
    (ld $base:literal $($z:literal)+) => {
        concat!("mov {t}, ", $base, "\n", $("ld1w {{z", $z, ".s}}, p1/z, [{t}]\n", "add {t}, {t}, #32\n",)+)
    };
    (st $base:literal $($z:literal)+) => {
        concat!("mov {t}, ", $base, "\n", $("st1w {{z", $z, ".s}}, p1, [{t}]\n", "add {t}, {t}, #32\n",)+)
    };
}

/// A piece's next 4 K-rows (8 f32 each) from `$w` into the listed registers, `$w` stepped past them.
#[rustfmt::skip]
macro_rules! krows_text {
    ($w:literal $z0:literal $z1:literal $z2:literal $z3:literal) => {
        concat!(
            "ld1w {{z", $z0, ".s}}, p1/z, [", $w, "]\n",
            "ld1w {{z", $z1, ".s}}, p1/z, [", $w, ", {e8}, lsl #2]\n",
            "ld1w {{z", $z2, ".s}}, p1/z, [", $w, ", {e16}, lsl #2]\n",
            "ld1w {{z", $z3, ".s}}, p1/z, [", $w, ", {e24}, lsl #2]\n",
            "add ", $w, ", ", $w, ", #128\n",
        )
    };
}

/// The text of [`tile`] with one panel (P = 1) for the listed rows `[r z]` (row r's activations in z`r`, its sums in z`z`; its
/// activation pointer the operand `x<r>`): the sums loaded from `{y}` (rows 32 bytes apart), the loop over
/// the piece by 4 K (`{n}` times: 4 K-rows of `{w}`, each row's 4 activations at `{x<r>}` + 4·`{k}`), the sums
/// stored back. `{e8}`, `{e16}`, `{e24}` hold 8, 16, 24; `{t}` is scratch.
#[rustfmt::skip]
macro_rules! tile_text {
    ($([$r:literal $z:literal])+) => {
        concat!(
            "ptrue p0.s\n",
            "ptrue p1.s, vl8\n",
            sums_text!(ld "{y}" $($z)+),
            "mov {k}, #0\n",
            "2:\n",
            krows_text!("{w}" "8" "9" "10" "11"),
            $("ld1rqw {{z", $r, ".s}}, p0/z, [{x", $r, "}, {k}, lsl #2]\n",)+
            "add {k}, {k}, #4\n",
            $("fmla z", $z, ".s, z8.s, z", $r, ".s[0]\n",)+
            $("fmla z", $z, ".s, z9.s, z", $r, ".s[1]\n",)+
            $("fmla z", $z, ".s, z10.s, z", $r, ".s[2]\n",)+
            $("fmla z", $z, ".s, z11.s, z", $r, ".s[3]\n",)+
            "subs {n}, {n}, #1\n",
            "b.ne 2b\n",
            sums_text!(st "{y}" $($z)+),
        )
    };
}

/// [`tile_text!`] for two panels (the text of [`tile`] with P = 2): row r's sums z`z` (panel 0, at `{y}`) and z`zz` (panel 1, at `{y1}`), the
/// panels' 4 K-rows z8–z11 (`{w}`) and z12–z15 (`{w1}`); each activation load serves 8 FMLA.
#[rustfmt::skip]
macro_rules! tile2_text {
    ($([$r:literal $z:literal $zz:literal])+) => {
        concat!(
            "ptrue p0.s\n",
            "ptrue p1.s, vl8\n",
            sums_text!(ld "{y}" $($z)+),
            sums_text!(ld "{y1}" $($zz)+),
            "mov {k}, #0\n",
            "2:\n",
            krows_text!("{w}" "8" "9" "10" "11"),
            krows_text!("{w1}" "12" "13" "14" "15"),
            $("ld1rqw {{z", $r, ".s}}, p0/z, [{x", $r, "}, {k}, lsl #2]\n",)+
            "add {k}, {k}, #4\n",
            $("fmla z", $z, ".s, z8.s, z", $r, ".s[0]\n", "fmla z", $zz, ".s, z12.s, z", $r, ".s[0]\n",)+
            $("fmla z", $z, ".s, z9.s, z", $r, ".s[1]\n", "fmla z", $zz, ".s, z13.s, z", $r, ".s[1]\n",)+
            $("fmla z", $z, ".s, z10.s, z", $r, ".s[2]\n", "fmla z", $zz, ".s, z14.s, z", $r, ".s[2]\n",)+
            $("fmla z", $z, ".s, z11.s, z", $r, ".s[3]\n", "fmla z", $zz, ".s, z15.s, z", $r, ".s[3]\n",)+
            "subs {n}, {n}, #1\n",
            "b.ne 2b\n",
            sums_text!(st "{y}" $($z)+),
            sums_text!(st "{y1}" $($zz)+),
        )
    };
}

/// `R` rows (8, 4, 2 or 1) × the 8 columns of `P` panels (1 or 2) over their pieces of `pk` K values in rows of 8
/// (`w[p]`), added to the rows' 8 sums per panel (`y[p]`, rows 8 f32 apart); the loop in one asm block
/// ([`tile_text!`], [`tile2_text!`]).
///
/// # Safety
/// The CPU has SVE with a vector length of at least 32 bytes; `x` is row 0's first activation of the piece (rows
/// `stride` f32 apart, `pk` values each, `pk` a positive multiple of 4); `w[p]` holds 8·pk f32 and `y[p]` R × 8 f32
/// for each p < P.
#[target_feature(enable = "neon,sve")]
unsafe fn tile<const R: usize, const P: usize>(
    x: *const f32,
    stride: usize,
    w: [*const f32; 2],
    pk: usize,
    y: [*mut f32; 2],
) {
    debug_assert!(pk > 0 && pk.is_multiple_of(4) && matches!(R, 1 | 2 | 4 | 8) && matches!(P, 1 | 2));
    // Rows past R are never loaded (the text names only rows below R); their operands repeat row 0. Likewise the
    // second panel's pointers with one panel.
    let xr = |r: usize| if r < R { x.wrapping_add(r * stride) } else { x };
    let (w1, y1) = if P == 2 { (w[1], y[1]) } else { (w[0], y[0]) };
    macro_rules! call {
        ($text:expr) => {
            // SAFETY: reads: 4 f32 per K of each of the R rows (`stride` apart, `pk` K) and 8 per K of each of the
            // P pieces (`pk` K), all inside (the caller's guarantee: the loads' first 256 bits only, predicate p1,
            // or 128 replicated, ld1rqw); reads and writes R × 8 sums per panel at `y[p]`. Every vector and
            // predicate register the block touches is declared (sve_asm!: z0–z31, p0–p3); d8–d15 (callee-saved)
            // are saved by the compiler; the flags are clobbered; no stack use.
            unsafe {
                sve_asm!(
                    concat!("// {x0} {x1} {x2} {x3} {x4} {x5} {x6} {x7} {w1} {y1}\n", $text),
                    x0 = in(reg) xr(0),
                    x1 = in(reg) xr(1),
                    x2 = in(reg) xr(2),
                    x3 = in(reg) xr(3),
                    x4 = in(reg) xr(4),
                    x5 = in(reg) xr(5),
                    x6 = in(reg) xr(6),
                    x7 = in(reg) xr(7),
                    w = inout(reg) w[0] => _,
                    w1 = inout(reg) w1 => _,
                    n = inout(reg) pk / 4 => _,
                    k = out(reg) _,
                    t = out(reg) _,
                    y = in(reg) y[0],
                    y1 = in(reg) y1,
                    e8 = in(reg) 8usize,
                    e16 = in(reg) 16usize,
                    e24 = in(reg) 24usize,
                )
            }
        };
    }
    match (R, P) {
        (8, 2) => call!(tile2_text!([0 16 24] [1 17 25] [2 18 26] [3 19 27] [4 20 28] [5 21 29] [6 22 30] [7 23 31])),
        (4, 2) => call!(tile2_text!([0 16 24] [1 17 25] [2 18 26] [3 19 27])),
        (2, 2) => call!(tile2_text!([0 16 24] [1 17 25])),
        (_, 2) => call!(tile2_text!([0 16 24])),
        (8, _) => call!(tile_text!([0 16] [1 17] [2 18] [3 19] [4 20] [5 21] [6 22] [7 23])),
        (4, _) => call!(tile_text!([0 16] [1 17] [2 18] [3 19])),
        (2, _) => call!(tile_text!([0 16] [1 17])),
        _ => call!(tile_text!([0 16])),
    }
}

// PR_SVE_SET_VL is Linux's (Android's too).
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use crate::arch::aarch64::{FP32_GEMM_NEON, FP32_GEMM_SVE, QSNBP8X4_SF32_ZPC};
    use crate::testing::{Case, GIdx, Rng, ZpKind, activations, serial_bits};
    use crate::{Cpu, UKernel};

    /// The SVE GEMM's sums are the NEON GEMM's bit for bit (each column's FMA chain over K in the same order),
    /// over row counts that take every asm tile (8, 4, 2, 1) and the in-register body below 4 rows, K in two
    /// pieces (1056 in blocks of 32), 2/4/8 bits without zero points and with packed and fractional ones, 9 panels
    /// (passes of two and a last single one, of 3 columns); and a thread whose vector was shortened to 128 bits
    /// after selection (prctl PR_SVE_SET_VL) runs the NEON kernel.
    #[test]
    fn sums_match_the_neon_gemm_bit_for_bit_at_any_vector_length() {
        if !FP32_GEMM_SVE.runs_on(Cpu::get()) {
            return;
        }
        let (k, n, bl) = (1056usize, 67usize, 32usize);
        let mut rng = Rng::new(24);
        let a = activations(&mut rng, 23, k);
        for bits in [4u32, 2, 8] {
            for zp in [ZpKind::None, ZpKind::Packed, ZpKind::Float] {
                let case = Case::random(&mut rng, k, n, bits, bl, zp, GIdx::None, false);
                let run = |uk: &'static UKernel, m: usize| serial_bits(uk, QSNBP8X4_SF32_ZPC, &case, m, &a[..m * k]);
                for m in [2usize, 4, 7, 8, 15, 23] {
                    let want = run(&FP32_GEMM_NEON, m);
                    assert!(
                        run(&FP32_GEMM_SVE, m) == want,
                        "bits {bits}, zero points {zp:?}, M = {m}: SVE sums differ from NEON's"
                    );
                    let short = crate::arch::aarch64::ops::with_sve_vl(16, || run(&FP32_GEMM_SVE, m));
                    assert!(
                        short == want,
                        "bits {bits}, zero points {zp:?}, M = {m}: at 128 bits it must run the NEON kernel"
                    );
                }
            }
        }
    }
}
