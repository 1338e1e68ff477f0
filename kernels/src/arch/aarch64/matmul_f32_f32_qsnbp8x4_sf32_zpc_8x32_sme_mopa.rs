//! fp32-path GEMM for prefill, SME2 at a 256-bit streaming vector: Y = A·dequant(B)ᵀ with f32 A and f32
//! accumulation (accuracy_level 1–3) by FMOPA (f32 outer products into ZA), on the NEON kernel's dequantizing walk
//! (`super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon::panels`) with the SVE kernel's pieces (rows of 8 columns:
//! one K value of a panel is one 256-bit vector, `super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_sve::Rows8`) and
//! four panels per pass.
//!
//! Tile: 8 rows × 32 columns, the four ZA tiles za0.s–za3.s (8 × 8 f32 each at SVL 256) holding four panels'
//! sums. Per K value one FMOPA per panel: the 8 rows' activations (one vector) ⊗ the panel's 8 dequantized
//! weights (one vector). The activations are laid out K-major per group of 8 rows once per call
//! ([`Fmopa::lhs`]: a NEON 4 × 4 transpose, one instruction per value), so that a group's 8 activations of one K
//! are one vector; 4 K of them, and 4 K of each panel, are one multi-vector LD1W each.
//!
//! Instruction budget per 4 K × 32 columns × 8 rows (per FMOPA: / 16; each FMOPA 64 multiply-adds): 16 FMOPA;
//! 5 multi-vector LD1W (the group's activations, the four panels' K-rows); the offset step and the loop 3: 24 =
//! 1.5 per FMOPA, 0.023 per multiply-add (the SVE kernel's FMLA tile: 0.17). Per group and piece (up to 1024 K:
//! 4096 FMOPA) the block also loads the sums into ZA and stores them back (8 rows × 4 tiles, LD1W / ST1W of a
//! tile slice each) and enters and leaves streaming mode once. The transpose costs about one instruction per
//! activation per call, the dequantization 0.72 per weight per tile of rows (the SVE kernel's, outside
//! streaming mode).
//!
//! Bits: each sum's chain of fused multiply-adds runs over K in the same order, from the same starting value
//! (the sums are loaded into ZA before each piece and stored after it), on the same f32 weights as the NEON and
//! SVE kernels: the same bits, wherever a scale × 2^−(8−bits) is a normal f32.
//!
//! Streaming mode: each group's walk of a piece is one `asm!` block from `smstart` to `smstop` with no Rust code
//! between ([`super::sve_asm::enter_streaming!`]: ZA's lazy-save protocol honoured, ZA zeroed; every vector and
//! predicate register declared clobbered, d8–d15 included); only instructions legal in streaming mode without
//! FEAT_SME_FA64 (SVE and SME2 loads, stores, FMOPA; no NEON).
//!
//! Vector lengths: the asm is written for a 256-bit streaming vector (the family is selected only there, `sme_svl`
//! 32 in its registry row), and its dequantizer is the SVE kernel's (an SVE vector of at least 256 bits). Both
//! lengths are read again on every call (they are per thread and can change): otherwise the call runs the SVE
//! kernel (which itself falls back to NEON below 256 bits), on the same packed weights; so do tiles under
//! [`super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon::MIN_ROWS`] rows.
//!
//! LHS: `f32` rows (K padded with zeros to the packed length). RHS: `qsnbp8x4_sf32_zpc`, bits 2/4/8, any block
//! size 16 … 65536. Features: neon, sve, sme, sme2. The last pass of a tile computes all four tiles (the walk's
//! buffers hold four panels' pieces and sums); only its real panels are stored. No over-reads.

use super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon::{self as neon, Piece, panels};
use super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_sve::{self as sve, Rows8};
use super::matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::svl_bytes;
use super::ops::sve_vl_bytes;
use super::qsnbp8x4_int8::NR;
use super::sve_asm::{enter_streaming, streaming_asm};
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

/// Rows per group of the K-major activations (one streaming vector of f32 at 256 bits).
const MR: usize = 8;

/// # Safety
/// The CPU has neon, sve, sme and sme2; `args` satisfies the `RunArgs` contract with an `f32` LHS and a
/// `qsnbp8x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,sve")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    // SAFETY: the CPU has SME (the caller's guarantee). This thread's lengths may have changed since selection.
    if a.rows < neon::MIN_ROWS || unsafe { svl_bytes() } != 32 || sve_vl_bytes() < 32 {
        // SAFETY: the SVE kernel reads the same layout (and checks its own vector length); the caller's guarantee.
        return unsafe { sve::run(a) };
    }
    // SAFETY: SVL 256 and an SVE vector of at least 256 bits (checked just now); the rest is the caller's.
    unsafe { crate::arch::dispatch!(panels::<Fmopa>(a); bits(a.bits)) }
}

/// Four panels' pieces in rows of 8 (the SVE kernel's), walked by 8 × 32 FMOPA tiles over K-major activations.
struct Fmopa;

impl Piece for Fmopa {
    const PANELS: usize = 4;
    const LHS_K: usize = MR;

    /// The tile's rows K-major per group of 8: group g's K value k at `buf[g·8·kp + 8·k ..][..8]` (kp = the
    /// packed length; rows past the tile's hold copies of its last row, or zeros); the stride is a group's
    /// (8·kp f32).
    #[target_feature(enable = "neon")]
    unsafe fn lhs(a: &RunArgs, buf: &mut Vec<f32>) -> (*const f32, usize) {
        let kp = a.blocks * a.bl;
        let groups = a.rows.div_ceil(MR);
        buf.clear();
        buf.resize(groups * MR * kp, 0.0);
        let x = a.lhs.cast::<f32>();
        for g in 0..groups {
            let dst = buf[g * MR * kp..].as_mut_ptr();
            for half in 0..2 {
                let r0 = g * MR + 4 * half;
                let n = a.rows.saturating_sub(r0).min(4);
                if n == 0 {
                    break;
                }
                // Rows past the tile's repeat its last (their sums are never stored: a ZA row depends only on
                // its own activations), so the loop has no branch.
                let src = [0, 1, 2, 3].map(|i: usize| x.wrapping_add((r0 + i.min(n - 1)) * a.lhs_stride));
                for k in (0..kp).step_by(4) {
                    // SAFETY: rows r0 .. r0 + n < rows, K values k .. k + 4 ≤ kp: inside the tile's LHS (RunArgs
                    // contract; kp is a multiple of 4, bl ≥ 16).
                    let [r0v, r1v, r2v, r3v] = src.map(|p| unsafe { vld1q_f32(p.add(k)) });
                    let (t0, t1) = (vtrn1q_f32(r0v, r1v), vtrn2q_f32(r0v, r1v));
                    let (t2, t3) = (vtrn1q_f32(r2v, r3v), vtrn2q_f32(r2v, r3v));
                    let col = |p: float32x4_t, q: float32x4_t, hi: bool| {
                        let (p, q) = (vreinterpretq_f64_f32(p), vreinterpretq_f64_f32(q));
                        vreinterpretq_f32_f64(if hi { vtrn2q_f64(p, q) } else { vtrn1q_f64(p, q) })
                    };
                    // SAFETY: K values k .. k + 4 of group g, this half's 4 rows: inside `buf` (sized above).
                    unsafe {
                        let d = dst.add(MR * k + 4 * half);
                        vst1q_f32(d, col(t0, t2, false));
                        vst1q_f32(d.add(MR), col(t1, t3, false));
                        vst1q_f32(d.add(2 * MR), col(t0, t2, true));
                        vst1q_f32(d.add(3 * MR), col(t1, t3, true));
                    }
                }
            }
        }
        (buf.as_ptr(), MR * kp)
    }

    #[target_feature(enable = "neon,sve")]
    unsafe fn dequantize<const BITS: usize>(a: &RunArgs, panel: usize, b0: usize, nb: usize, w: *mut f32) {
        // SAFETY: forwarded (an SVE vector of at least 256 bits: `run`).
        unsafe { <Rows8 as Piece>::dequantize::<BITS>(a, panel, b0, nb, w) }
    }

    unsafe fn rows(
        rows: usize,
        _panels: usize,
        x: *const f32,
        stride: usize,
        w: *const f32,
        pk: usize,
        y: *mut f32,
        ystride: usize,
    ) {
        for g in 0..rows.div_ceil(MR) {
            let n = (rows - g * MR).min(MR);
            // SAFETY: group g of the K-major activations (`lhs`: 8 values per K, pk of them from x), the four
            // pieces of the walk's buffer (8·pk f32 each, panel p's at w + 8·pk·p: the last pass's unused ones hold
            // earlier values, never stored), rows g·8 .. + n of the four panels' sums (rows 8 f32 apart, panel p's
            // at y + p·ystride); SVL 256 (`run`).
            unsafe { tile(x.add(g * stride), w, pk, y.add(g * MR * NR), ystride, n) }
        }
    }
}

/// One group's walk of a piece: rows 0 .. n of the four panels' sums (`y`, rows 8 f32 apart, panel p's at
/// `y + p·ystride`) into ZA, pk/4 steps of 16 FMOPA (4 K × 4 panels) over the group's K-major activations `x`
/// and the panels' pieces (`w`, panel p's at `w + 8·pk·p`), the sums back out.
///
/// # Safety
/// The CPU has SME2 with SVL 256 on this thread; `x` holds 8·pk f32, `w` 32·pk, `y` the 4 panels' n rows; pk is a
/// multiple of 4, 1 ≤ n ≤ 8.
unsafe fn tile(x: *const f32, w: *const f32, pk: usize, y: *mut f32, ystride: usize, n: usize) {
    // SAFETY: reads 32 bytes per K of x and of each panel's piece, pk K; reads and writes n rows of 8 f32 of the
    // four panels' sums; all inside the caller's buffers (its guarantee). Every vector and predicate register and
    // ffr, x12 and x14–x17 declared clobbered (`streaming_asm!`); ZA and streaming mode left off (SMSTOP);
    // TPIDR2_EL0 0 or untouched; flags clobbered.
    unsafe {
        streaming_asm!(
            ".arch_extension sme2",
            ".arch_extension sve",
            enter_streaming!(),
            "ptrue p0.s",
            "ptrue pn8.s",
            // The sums into ZA: row r of panel p into za<p>h.s[r].
            "mov w12, #0",
            "mov {t}, {y}",
            "5:",
            "ld1w {{za0h.s[w12, 0]}}, p0/z, [{t}]",
            "ld1w {{za1h.s[w12, 0]}}, p0/z, [{t}, {ys1}, lsl #2]",
            "ld1w {{za2h.s[w12, 0]}}, p0/z, [{t}, {ys2}, lsl #2]",
            "ld1w {{za3h.s[w12, 0]}}, p0/z, [{t}, {ys3}, lsl #2]",
            "add {t}, {t}, #32",
            "add w12, w12, #1",
            "cmp x12, {n}",
            "b.lo 5b",
            // 4 K per step: the group's 4 activation vectors z0–z3, panel p's 4 K-rows z(4 + 4p) ..= z(7 + 4p).
            "mov {off}, #0",
            "6:",
            "ld1w {{z0.s-z3.s}}, pn8/z, [{x}, {off}, lsl #2]",
            "ld1w {{z4.s-z7.s}}, pn8/z, [{w0}, {off}, lsl #2]",
            "ld1w {{z8.s-z11.s}}, pn8/z, [{w1}, {off}, lsl #2]",
            "ld1w {{z12.s-z15.s}}, pn8/z, [{w2}, {off}, lsl #2]",
            "ld1w {{z16.s-z19.s}}, pn8/z, [{w3}, {off}, lsl #2]",
            "fmopa za0.s, p0/m, p0/m, z0.s, z4.s",
            "fmopa za1.s, p0/m, p0/m, z0.s, z8.s",
            "fmopa za2.s, p0/m, p0/m, z0.s, z12.s",
            "fmopa za3.s, p0/m, p0/m, z0.s, z16.s",
            "fmopa za0.s, p0/m, p0/m, z1.s, z5.s",
            "fmopa za1.s, p0/m, p0/m, z1.s, z9.s",
            "fmopa za2.s, p0/m, p0/m, z1.s, z13.s",
            "fmopa za3.s, p0/m, p0/m, z1.s, z17.s",
            "fmopa za0.s, p0/m, p0/m, z2.s, z6.s",
            "fmopa za1.s, p0/m, p0/m, z2.s, z10.s",
            "fmopa za2.s, p0/m, p0/m, z2.s, z14.s",
            "fmopa za3.s, p0/m, p0/m, z2.s, z18.s",
            "fmopa za0.s, p0/m, p0/m, z3.s, z7.s",
            "fmopa za1.s, p0/m, p0/m, z3.s, z11.s",
            "fmopa za2.s, p0/m, p0/m, z3.s, z15.s",
            "fmopa za3.s, p0/m, p0/m, z3.s, z19.s",
            "add {off}, {off}, #32",
            "subs {steps}, {steps}, #1",
            "b.ne 6b",
            // The sums back.
            "mov w12, #0",
            "7:",
            "st1w {{za0h.s[w12, 0]}}, p0, [{y}]",
            "st1w {{za1h.s[w12, 0]}}, p0, [{y}, {ys1}, lsl #2]",
            "st1w {{za2h.s[w12, 0]}}, p0, [{y}, {ys2}, lsl #2]",
            "st1w {{za3h.s[w12, 0]}}, p0, [{y}, {ys3}, lsl #2]",
            "add {y}, {y}, #32",
            "add w12, w12, #1",
            "cmp x12, {n}",
            "b.lo 7b",
            "smstop",
            x = in(reg) x,
            w0 = in(reg) w,
            w1 = in(reg) w.wrapping_add(8 * pk),
            w2 = in(reg) w.wrapping_add(16 * pk),
            w3 = in(reg) w.wrapping_add(24 * pk),
            y = inout(reg) y => _,
            ys1 = in(reg) ystride,
            ys2 = in(reg) 2 * ystride,
            ys3 = in(reg) 3 * ystride,
            n = in(reg) n,
            steps = inout(reg) pk / 4 => _,
            off = out(reg) _,
            t = out(reg) _,
        )
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use crate::Cpu;
    use crate::arch::aarch64::{FP32_GEMM_NEON, FP32_GEMM_SME2, QSNBP8X4_SF32_ZPC};
    use crate::testing::{Case, GIdx, Rng, ZpKind, activations, serial_bits};

    /// The sums equal the NEON GEMM's bit for bit (the same weights, the same FMA chains): 2, 4 and 8 bits, with
    /// and without zero points, row tails (M = 4 … 23: last groups of 1–7 rows), K of two pieces and more (1056,
    /// 2112 at block 32; 192 at block 64), 4-panel passes with a last pass of 1–3 panels (N = 40, 48, 72, 150,
    /// 232), several column tasks (N = 1048: tasks of 512 columns, the last of 24), at this thread's lengths, and
    /// on threads whose SVE vector is shortened to 128 bits (the SVE, then NEON fallback). qemu-user keeps the
    /// streaming length when asked to change it (PR_SME_SET_VL), so the other fallback is not run here.
    #[test]
    fn sums_match_the_neon_gemm_bit_for_bit() {
        if !FP32_GEMM_SME2.runs_on(Cpu::get()) {
            return;
        }
        let mut rng = Rng::new(0x5EED_F4A0);
        let mut cases = Vec::new();
        for shape @ (bits, k, n, bl, zp) in [
            (4u32, 1056usize, 150usize, 32usize, ZpKind::None),
            (4, 2112, 40, 32, ZpKind::Float),
            (2, 192, 72, 64, ZpKind::Packed),
            (8, 1056, 232, 32, ZpKind::Packed),
            (4, 192, 8, 16, ZpKind::None),
            (4, 192, 48, 32, ZpKind::None),
            (4, 320, 1048, 64, ZpKind::Packed),
        ] {
            let case = Case::random(&mut rng, k, n, bits, bl, zp, GIdx::None, false);
            for m in [4usize, 7, 8, 9, 15, 17, 23] {
                cases.push((shape, case.clone(), m, activations(&mut rng, m, k)));
            }
        }
        let check = |what: &str| {
            for ((bits, k, n, bl, zp), case, m, a) in &cases {
                let want = serial_bits(&FP32_GEMM_NEON, QSNBP8X4_SF32_ZPC, case, *m, a);
                assert!(
                    serial_bits(&FP32_GEMM_SME2, QSNBP8X4_SF32_ZPC, case, *m, a) == want,
                    "{what}: {bits} bits, K {k}, N {n}, bl {bl}, zero points {zp:?}, M {m}: other bits than NEON's"
                );
            }
        };
        check("this thread's vector lengths");
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: PR_SVE_SET_VL (50) changes only this thread's SVE vector length; nothing of this thread
                // holds SVE state across it.
                let r = unsafe { libc::prctl(50, 16 as libc::c_ulong) };
                assert!(r >= 0, "prctl(PR_SVE_SET_VL, 16) failed");
                check("SVE vector shortened to 128 bits");
            });
        });
    }
}
