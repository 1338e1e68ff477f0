//! fp32-path GEMM for prefill, NEON, dequantizing B once per tile: Y = A·dequant(B)ᵀ with f32 A and f32
//! accumulation (accuracy_level 1–3; the family's kernel for M > 1).
//!
//! Tiles of at least [`MIN_ROWS`] rows: each 8-column panel is dequantized piece by piece (up to [`PIECE_K`] K
//! values: 32 KiB of f32) into a buffer, each value `s·2^−(8−bits)·code + c` once (the correction c = −s·z only
//! with zero points), stored K-major per column quad by ST4 (4 K × 4 columns per store: the transpose is the
//! store's); all rows of the tile then walk the piece with an 8 × 8 register tile (16 f32 accumulators, FMLA by
//! element of 4 activations; the whole loop one asm block using all 32 vector registers). Smaller tiles take the in-register 4 × 4 body (`super::qsnbp8x4_fp32::unit`: codes
//! widened per 4 rows, never stored), which wins there because a dequantized piece would serve too few rows.
//!
//! Instruction budget per 4 K × 8 columns × 8 rows (per FMLA: / 64): 64 FMLA; 2 LD1 of the piece's 4 × 4 values
//! per quad, 8 LDR of the rows' 4 activations, post-indexed (0.16); loop 2 (0.03): 76 = 1.19 per FMLA (the 8-row
//! loop is asm: as intrinsics, at 6 rows, LLVM stepped one row pointer and added the stride per row, 68 per 48
//! FMLA = 1.42; interleaving the rows per tile to walk them with one pointer cost more than it saved, since a
//! call's tiles would each interleave the same rows). Tiles of 1–7 rows left over run the intrinsic loop. Dequantizing, per 16 values
//! (one field of a quad's 16 code bytes: 4 K × 4 columns): the field (1), SXTL / SXTL2 to int16 and int32 (6),
//! SCVTF (4), DUP of the correction and FMLA by the scale's lane (8), ST4 (1): 20, paid once per tile for all its
//! rows. Against ORT 1.31.1's accuracy_level-1 path on aarch64 (B dequantized, then SGEMM: ~1.5 instructions
//! per FMLA per Run) the in-register body alone was 2.8 per FMLA at M = 32 (1.85x ORT's instructions); measured
//! figures in bench/results/aarch64-icount.md.
//!
//! The walk ([`panels`]) is generic over the piece's layout and the tiles that walk it ([`Piece`]): this kernel's
//! column quads ([`Quads`]), and the SVE kernel's rows of 8 columns, two panels per pass
//! (`super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_sve`).
//!
//! LHS: `f32` rows (K padded with zeros to the packed length). RHS: `qsnbp8x4_sf32_zpc`, bits 2/4/8, any block
//! size 16 … 65536. Columns: whole 8-column panels from the tile's start (the last one's padding computed, never
//! stored). Features: neon. No over-reads.

use super::ops::{Sums, field, store_groups};
use super::qsnbp8x4_fp32::{NR, columns_f32, unit};
use super::qsnbp8x4_int8::KR;
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

/// Tile rows from which the dequantizing walk is used (below: the in-register body).
pub(crate) const MIN_ROWS: usize = 4;

/// K values per dequantized piece (whole blocks; a larger block is one piece): 32 KiB of f32 for 8 columns.
pub(crate) const PIECE_K: usize = 1024;

/// Rows per register tile.
const MR: usize = 8;

/// # Safety
/// The CPU has neon; `args` satisfies the `RunArgs` contract with an `f32` LHS and a `qsnbp8x4_sf32_zpc` RHS
/// of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    if a.rows < MIN_ROWS {
        super::walk_quads!(a, unit, nr = NR, rows = [4, 3, 2, 1]);
        return;
    }
    // SAFETY: forwarded.
    unsafe { crate::arch::dispatch!(panels::<Quads>(a); bits(a.bits)) }
}

/// A dequantized piece's layout and the register tiles that walk it: what a kernel on the dequantizing walk
/// ([`panels`]) supplies. This kernel's is [`Quads`]; the SVE kernel's rows of 8
/// (`super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_sve`).
pub(crate) trait Piece {
    /// Panels walked together (the last pass of a tile may have fewer): their pieces side by side in the buffer
    /// (panel p's at `8·pk·p`), their sums too (panel p's at `y + p·ystride`).
    const PANELS: usize;

    /// f32 per K value along a row of the LHS the tiles read (see [`Piece::lhs`]): 1 for rows as given.
    const LHS_K: usize = 1;

    /// The LHS as the tiles read it, made once per call: `(base, stride)` with row 0's K value k at
    /// `base + LHS_K·k` and the tiles' `stride` (f32). By default the tile's rows as given (`a.lhs`,
    /// `a.lhs_stride`); a piece whose tiles read another layout writes it into `buf`, which outlives the walk.
    ///
    /// # Safety
    /// The CPU has the piece's features; `a` satisfies the `RunArgs` contract with an `f32` LHS.
    unsafe fn lhs(a: &RunArgs, _buf: &mut Vec<f32>) -> (*const f32, usize) {
        (a.lhs.cast(), a.lhs_stride)
    }

    /// Where panel p's piece of `pk` K values starts in the walk's buffer (f32 from its start): by default the
    /// pieces side by side, 8·pk·p.
    fn piece_at(p: usize, pk: usize) -> usize {
        8 * pk * p
    }

    /// Blocks `b0 .. b0 + nb` of `panel`, dequantized (`s·2^−(8−bits)·code + c`), into `w` in this layout.
    ///
    /// # Safety
    /// The CPU has the piece's features; the blocks are the panel's (RunArgs contract, `BITS` bits); `w` holds
    /// 8·nb·bl f32.
    unsafe fn dequantize<const BITS: usize>(a: &RunArgs, panel: usize, b0: usize, nb: usize, w: *mut f32);

    /// Rows `0 .. rows` (any count ≥ 1) × the 8 columns of each of `panels` (1 ..= PANELS) panels over their
    /// pieces of `pk` K values (panel p's at `w + 8·pk·p`), added to the rows' 8 sums per panel (panel p's at
    /// `y + p·ystride`, rows 8 f32 apart).
    ///
    /// # Safety
    /// The CPU has the piece's features; `x` is row 0's first activation of the piece in the layout of
    /// [`Piece::lhs`] (by default rows `stride` f32 apart; `pk` values each, a multiple of 4); `w` holds the `panels` pieces (8·pk values each) in this layout; `y`
    /// holds the sums (rows × 8 f32 from `y + p·ystride` for each panel p).
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows(
        rows: usize,
        panels: usize,
        x: *const f32,
        stride: usize,
        w: *const f32,
        pk: usize,
        y: *mut f32,
        ystride: usize,
    );
}

/// This kernel's pieces: column quad q's values K-major at `4·pk·q` (4 f32 per K), walked by 8 × 8 tiles.
pub(crate) struct Quads;

impl Piece for Quads {
    const PANELS: usize = 1;

    #[target_feature(enable = "neon")]
    unsafe fn dequantize<const BITS: usize>(a: &RunArgs, panel: usize, b0: usize, nb: usize, w: *mut f32) {
        // SAFETY: forwarded.
        unsafe { dequantize::<BITS>(a, panel, b0, nb, w) }
    }

    #[target_feature(enable = "neon")]
    unsafe fn rows(
        rows: usize,
        panels: usize,
        x: *const f32,
        stride: usize,
        w: *const f32,
        pk: usize,
        y: *mut f32,
        _ystride: usize,
    ) {
        debug_assert_eq!(panels, 1);
        let mut r0 = 0;
        while r0 < rows {
            let n = (rows - r0).min(MR);
            // SAFETY: rows r0 .. r0 + n of the caller's (its guarantee).
            unsafe {
                let (x, y) = (x.add(r0 * stride), y.add(r0 * NR));
                match n {
                    8 => rows8_x8(x, stride, w, pk, y),
                    7 => rows_x8::<7>(x, stride, w, pk, y),
                    6 => rows_x8::<6>(x, stride, w, pk, y),
                    5 => rows_x8::<5>(x, stride, w, pk, y),
                    4 => rows_x8::<4>(x, stride, w, pk, y),
                    3 => rows_x8::<3>(x, stride, w, pk, y),
                    2 => rows_x8::<2>(x, stride, w, pk, y),
                    _ => rows_x8::<1>(x, stride, w, pk, y),
                }
            }
            r0 += n;
        }
    }
}

/// The dequantizing walk: per pass of `P::PANELS` panels (fewer in the last), per piece of whole blocks, the
/// panels' pieces dequantized into `w` (in `P`'s layout), then all the tile's rows over them into the sums `y`
/// (8 f32 per row and panel), which leave with the bias after the last piece (`ops::store_groups`).
///
/// # Safety
/// As [`run`], with `a.bits` = `BITS`; the CPU has `P`'s features.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn panels<P: Piece, const BITS: usize>(a: &RunArgs) {
    let piece_blocks = (PIECE_K / a.bl).max(1).min(a.blocks);
    let mut w = vec![0f32; P::PANELS * 8 * piece_blocks * a.bl];
    // The rows' sums, 8 per row, in whole runs of 12 rows (`Sums`) for `store_groups`, one run of rows per panel.
    let ystride = a.rows.next_multiple_of(12) * NR;
    let mut y = vec![0f32; P::PANELS * ystride];
    let mut lhs_buf = Vec::new();
    // SAFETY: the caller's guarantee (RunArgs contract, P's features).
    let (lhs, lhs_stride) = unsafe { P::lhs(a, &mut lhs_buf) };
    let np = a.cols.div_ceil(NR);
    let mut panel = 0;
    while panel < np {
        let pp = P::PANELS.min(np - panel);
        y.fill(0.0);
        let mut b0 = 0;
        while b0 < a.blocks {
            let nb = piece_blocks.min(a.blocks - b0);
            let pk = nb * a.bl;
            for p in 0..pp {
                // SAFETY: blocks b0..b0 + nb of the tile's panel panel + p (RunArgs contract); `w` holds the
                // PANELS pieces of 8·pk values, this one's from `piece_at`; the CPU has P's features (the caller's
                // guarantee).
                unsafe { P::dequantize::<BITS>(a, panel + p, b0, nb, w.as_mut_ptr().add(P::piece_at(p, pk))) };
            }
            // SAFETY: the tile's rows: their LHS values b0·bl .. + pk in P's LHS layout (inside the packed length:
            // RunArgs contract, or inside `lhs_buf`, which P::lhs sized for every row and K value)
            // and their 8 sums per panel in `y`; the pieces' 8·pk values per panel in `w`.
            unsafe {
                let x = lhs.add(P::LHS_K * b0 * a.bl);
                P::rows(a.rows, pp, x, lhs_stride, w.as_ptr(), pk, y.as_mut_ptr(), ystride)
            };
            b0 += nb;
        }
        // The sums leave with the bias by 12-row runs of row groups (`store_groups`: real rows and columns only).
        for p in 0..pp {
            for g in (0..a.rows.div_ceil(4)).step_by(3) {
                let n = (a.rows.div_ceil(4) - g).min(3);
                let out: &Sums = y[p * ystride + 32 * g..][..96].try_into().expect("y holds whole 12-row runs");
                // SAFETY: groups g..g + n and the panel are the tile's.
                unsafe { store_groups(a, panel + p, g, n, out) };
            }
        }
        panel += pp;
    }
}

/// Blocks `b0 .. b0 + nb` of `panel` dequantized into `w`: column quad q's K value k (from block b0's first) at
/// `w[4·pk·q + 4·k ..][..4]` (its 4 columns), pk = nb·bl.
///
/// # Safety
/// The blocks are the panel's (RunArgs contract, `BITS` bits); `w` holds 8·nb·bl f32.
#[target_feature(enable = "neon")]
unsafe fn dequantize<const BITS: usize>(a: &RunArgs, panel: usize, b0: usize, nb: usize, w: *mut f32) {
    let cpb = 8 / BITS;
    let chunk = a.bl.min(32);
    let lane_len = chunk / cpb;
    let groups = lane_len / KR;
    let chunk_bytes = chunk * NR * BITS / 8;
    let unscale = 1.0 / (1u32 << (8 - BITS)) as f32;
    let pk = nb * a.bl;
    let prec = a.rhs.wrapping_add(panel * a.rhs_panel_stride);
    for b in 0..nb {
        let rec = prec.wrapping_add((b0 + b) * a.rhs_record);
        for quad in 0..2 {
            // SAFETY: the quad's 4 f32 scales (and corrections, with zero points) of the block's record.
            let (s, c) = unsafe {
                let s = vmulq_n_f32(vld1q_f32(rec.add(a.rhs_scales + 16 * quad).cast()), unscale);
                let c = if a.has_zp != 0 { vld1q_f32(rec.add(a.rhs_zp + 16 * quad).cast()) } else { vdupq_n_f32(0.0) };
                (s, c)
            };
            let wq = w.wrapping_add(4 * pk * quad);
            for ch in 0..a.bl / chunk {
                for grp in 0..groups {
                    // SAFETY: code group grp of chunk ch: 32 bytes inside the record; this quad's 16.
                    let v = unsafe { vld1q_s8(rec.add(ch * chunk_bytes + 32 * grp + 16 * quad).cast()) };
                    for l in 0..cpb {
                        let f = columns_f32(field::<BITS>(v, l));
                        // Column j's 4 K values: s_j·code + c_j (without zero points s_j·code: no copy of c).
                        let d = if a.has_zp != 0 {
                            float32x4x4_t(
                                vfmaq_laneq_f32::<0>(vdupq_laneq_f32::<0>(c), f[0], s),
                                vfmaq_laneq_f32::<1>(vdupq_laneq_f32::<1>(c), f[1], s),
                                vfmaq_laneq_f32::<2>(vdupq_laneq_f32::<2>(c), f[2], s),
                                vfmaq_laneq_f32::<3>(vdupq_laneq_f32::<3>(c), f[3], s),
                            )
                        } else {
                            float32x4x4_t(
                                vmulq_laneq_f32::<0>(f[0], s),
                                vmulq_laneq_f32::<1>(f[1], s),
                                vmulq_laneq_f32::<2>(f[2], s),
                                vmulq_laneq_f32::<3>(f[3], s),
                            )
                        };
                        let k = b * a.bl + ch * chunk + l * lane_len + KR * grp;
                        // SAFETY: K values k .. k + 4 < pk of quad `quad`: 16 f32 inside `w` (the caller's
                        // guarantee); ST4 stores them K-major (value i of each column, then i + 1).
                        unsafe { vst4q_f32(wq.add(4 * k), d) };
                    }
                }
            }
        }
    }
}

/// The text of [`rows8_x8`]'s loop over 4 K: row r's accumulators v(2r), v(2r + 1) (column quads 0, 1), the
/// quads' 4 K-rows of values v16–v19 and v20–v23, row r's 4 activations v(24 + r): all 32 registers.
#[rustfmt::skip]
macro_rules! rows8_text {
    () => {
        concat!(
            "ldp q0, q1, [{y}]\n", "ldp q2, q3, [{y}, #32]\n", "ldp q4, q5, [{y}, #64]\n",
            "ldp q6, q7, [{y}, #96]\n", "ldp q8, q9, [{y}, #128]\n", "ldp q10, q11, [{y}, #160]\n",
            "ldp q12, q13, [{y}, #192]\n", "ldp q14, q15, [{y}, #224]\n",
            "2:\n",
            "ld1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{w0}], #64\n",
            "ld1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{w1}], #64\n",
            "ldr q24, [{x0}], #16\n", "ldr q25, [{x1}], #16\n", "ldr q26, [{x2}], #16\n",
            "ldr q27, [{x3}], #16\n", "ldr q28, [{x4}], #16\n", "ldr q29, [{x5}], #16\n",
            "ldr q30, [{x6}], #16\n", "ldr q31, [{x7}], #16\n",
            rows8_text!(@row 0 1 24), rows8_text!(@row 2 3 25), rows8_text!(@row 4 5 26),
            rows8_text!(@row 6 7 27), rows8_text!(@row 8 9 28), rows8_text!(@row 10 11 29),
            rows8_text!(@row 12 13 30), rows8_text!(@row 14 15 31),
            "subs {n}, {n}, #1\n",
            "b.ne 2b\n",
            "stp q0, q1, [{y}]\n", "stp q2, q3, [{y}, #32]\n", "stp q4, q5, [{y}, #64]\n",
            "stp q6, q7, [{y}, #96]\n", "stp q8, q9, [{y}, #128]\n", "stp q10, q11, [{y}, #160]\n",
            "stp q12, q13, [{y}, #192]\n", "stp q14, q15, [{y}, #224]\n",
        )
    };
    (@row $c0:literal $c1:literal $x:literal) => {
        concat!(
            "fmla v", $c0, ".4s, v16.4s, v", $x, ".s[0]\n", "fmla v", $c1, ".4s, v20.4s, v", $x, ".s[0]\n",
            "fmla v", $c0, ".4s, v17.4s, v", $x, ".s[1]\n", "fmla v", $c1, ".4s, v21.4s, v", $x, ".s[1]\n",
            "fmla v", $c0, ".4s, v18.4s, v", $x, ".s[2]\n", "fmla v", $c1, ".4s, v22.4s, v", $x, ".s[2]\n",
            "fmla v", $c0, ".4s, v19.4s, v", $x, ".s[3]\n", "fmla v", $c1, ".4s, v23.4s, v", $x, ".s[3]\n",
        )
    };
}

/// [`rows_x8`] for 8 rows, the loop in asm: every row's activations by a post-indexed load of its own pointer
/// (as intrinsics, LLVM stepped one pointer and added the stride per row: 68 instructions per 4 K × 6 rows; here
/// 76 per 4 K × 8 rows).
///
/// # Safety
/// As [`rows_x8`] with R = 8.
#[target_feature(enable = "neon")]
unsafe fn rows8_x8(x: *const f32, stride: usize, w: *const f32, pk: usize, y: *mut f32) {
    debug_assert!(pk > 0 && pk.is_multiple_of(4));
    let xr = |r: usize| x.wrapping_add(r * stride);
    // SAFETY: reads: 4 f32 per K of each quad's piece (`w`, quad 1 at 4·pk) and of each of the 8 rows (`stride`
    // apart), pk K: inside (the caller's guarantee); reads and writes the 8 × 8 sums at `y`. Every vector register
    // the block touches is declared; d8–d15 (callee-saved) are clobbered and saved by the compiler; the flags are
    // clobbered; no stack use.
    unsafe {
        super::sve_asm::vector_asm!(
            [] rows8_text!(),
            w0 = inout(reg) w => _,
            w1 = inout(reg) w.wrapping_add(4 * pk) => _,
            x0 = inout(reg) xr(0) => _,
            x1 = inout(reg) xr(1) => _,
            x2 = inout(reg) xr(2) => _,
            x3 = inout(reg) xr(3) => _,
            x4 = inout(reg) xr(4) => _,
            x5 = inout(reg) xr(5) => _,
            x6 = inout(reg) xr(6) => _,
            x7 = inout(reg) xr(7) => _,
            n = inout(reg) pk / 4 => _,
            y = in(reg) y,
        )
    }
}

/// `R` rows × 8 columns over a dequantized piece of `pk` K values (`w`: quad 0's K-major values, quad 1's at
/// `4·pk`), added to the rows' 8 sums at `y`.
///
/// # Safety
/// `x` is row 0's first activation of the piece (rows `stride` f32 apart, `pk` values each, a multiple of 4);
/// `w` holds the piece's 8·pk values; `y` holds R × 8 f32.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn rows_x8<const R: usize>(x: *const f32, stride: usize, w: *const f32, pk: usize, y: *mut f32) {
    // SAFETY: the caller's guarantee (R rows of 8 sums).
    let mut acc: [[float32x4_t; 2]; R] =
        std::array::from_fn(|r| unsafe { [vld1q_f32(y.add(8 * r)), vld1q_f32(y.add(8 * r + 4))] });
    let (w0, w1) = (w, w.wrapping_add(4 * pk));
    let mut k = 0;
    while k < pk {
        // SAFETY: K values k .. k + 4 of both quads (16 f32 each) and of every row: inside (the caller's guarantee).
        unsafe {
            let (q0, q1) = (vld1q_f32_x4(w0.add(4 * k)), vld1q_f32_x4(w1.add(4 * k)));
            for (r, acc) in acc.iter_mut().enumerate() {
                let a = vld1q_f32(x.add(r * stride + k));
                acc[0] = vfmaq_laneq_f32::<0>(acc[0], q0.0, a);
                acc[1] = vfmaq_laneq_f32::<0>(acc[1], q1.0, a);
                acc[0] = vfmaq_laneq_f32::<1>(acc[0], q0.1, a);
                acc[1] = vfmaq_laneq_f32::<1>(acc[1], q1.1, a);
                acc[0] = vfmaq_laneq_f32::<2>(acc[0], q0.2, a);
                acc[1] = vfmaq_laneq_f32::<2>(acc[1], q1.2, a);
                acc[0] = vfmaq_laneq_f32::<3>(acc[0], q0.3, a);
                acc[1] = vfmaq_laneq_f32::<3>(acc[1], q1.3, a);
            }
        }
        k += 4;
    }
    for (r, acc) in acc.iter().enumerate() {
        // SAFETY: row r's 8 sums (the caller's guarantee).
        unsafe {
            vst1q_f32(y.add(8 * r), acc[0]);
            vst1q_f32(y.add(8 * r + 4), acc[1]);
        }
    }
}
