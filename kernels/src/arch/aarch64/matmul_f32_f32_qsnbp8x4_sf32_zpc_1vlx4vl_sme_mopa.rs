//! fp32-path GEMM for prefill, SME2 at a 256- or 512-bit streaming vector: Y = A·dequant(B)ᵀ with f32 A and f32
//! accumulation (accuracy_level 1–3) by FMOPA (f32 outer products into ZA), on the NEON kernel's dequantizing walk
//! (`super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon::panels`) with pieces in K-rows of one streaming vector:
//! s = SVL/4 columns per K value (s = 8 at SVL 256: one panel, the SVE kernel's rows of 8; s = 16 at SVL 512: two
//! panels side by side), dequantized in streaming mode by the SVE kernel's dequantizer text
//! (`super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_sve::Dq`), so no SVE outside streaming mode is needed (Apple M4 has
//! none; Arm's C1 cores have 128-bit SVE and a 512-bit streaming vector).
//!
//! Tile: s rows × 4s columns, the four ZA tiles za0.s–za3.s (s × s f32 each) holding 4s/8 panels' sums: 8 × 32 at
//! SVL 256, 16 × 64 at SVL 512. Per K value one FMOPA per ZA tile: the s rows' activations (one vector) ⊗ the
//! tile's s dequantized weights (one vector). The activations are laid out K-major per group of s rows once per
//! call ([`Fmopa::lhs`]: NEON 4 × 4 transposes, one instruction per value), so that a group's s activations of one
//! K are one vector; 4 K of them, and 4 K of each ZA tile's columns, are one multi-vector LD1W each.
//!
//! Instruction budget per 4 K × 4s columns × s rows (per FMOPA: / 16; each FMOPA s² multiply-adds: 64 at SVL 256,
//! 256 at SVL 512): 16 FMOPA; 5 multi-vector LD1W (the group's activations, the four tiles' K-rows); the offset
//! step and the loop 3: 24 = 1.5 per FMOPA, 0.023 multiply-add at SVL 256, 0.006 at 512 (the SVE kernel's FMLA
//! tile: 0.17). Per group and piece (up to 1024 K) the block also loads the sums into ZA and stores them back (a
//! tile slice per row and ZA tile at SVL 256, LD1W / ST1W; at SVL 512 a slice holds two panels' rows, whose sums
//! are not adjacent in the walk's buffer: two predicated halves, the second loaded through a vector and MOVA) and
//! enters and leaves streaming mode once. The transpose costs about one instruction per activation per call, the
//! dequantization 0.72 per weight per tile of rows plus one streaming-mode entry per panel and piece.
//!
//! Bits: each sum's chain of fused multiply-adds runs over K in the same order, from the same starting value
//! (the sums are loaded into ZA before each piece and stored after it), on the same f32 weights as the NEON and
//! SVE kernels: the same bits, wherever a scale × 2^−(8−bits) is a normal f32.
//!
//! Streaming mode: each group's walk of a piece, and each panel's dequantization of a piece, is one `asm!` block
//! from `smstart` to `smstop` with no Rust code between ([`super::sve_asm::enter_streaming!`]: ZA's lazy-save
//! protocol honoured, ZA zeroed; every vector and predicate register declared clobbered, d8–d15 included); only
//! instructions legal in streaming mode without FEAT_SME_FA64 (SVE and SME2 loads, stores, shifts, converts,
//! multiplies, FMOPA, MOVA; no NEON).
//!
//! Vector lengths: the streaming length is read (`rdsvl`) on every call (it is per thread and can change) and the
//! tile follows it; at other lengths, and for tiles under [`super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon::MIN_ROWS`]
//! rows, the call runs the SVE kernel on a CPU with SVE (which itself falls back to NEON below 256 bits), else the
//! NEON kernel, on the same packed weights. The family is ranked only at 256 and 512 bits (`registry.rs`).
//!
//! LHS: `f32` rows (K padded with zeros to the packed length). RHS: `qsnbp8x4_sf32_zpc`, bits 2/4/8, any block
//! size 16 … 65536. Features: neon, sme, sme2. The last pass of a tile computes all four ZA tiles (the walk's
//! buffers hold a whole pass's pieces and sums); only its real panels are stored. No over-reads.

use super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon::{self as neon, Piece, panels};
use super::matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_sve::{self as sve, Dq, dequantize_blocks_streaming};
use super::matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::svl_bytes;
use super::qsnbp8x4_int8::NR;
use super::sve_asm::{enter_streaming, streaming_asm};
use crate::cpu::Feature;
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

/// # Safety
/// The CPU has neon, sme and sme2; `args` satisfies the `RunArgs` contract with an `f32` LHS and a
/// `qsnbp8x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    // SAFETY: the CPU has SME (the caller's guarantee). This thread's length may have changed since selection.
    let v = unsafe { svl_bytes() };
    if a.rows < neon::MIN_ROWS || !(v == 32 || v == 64) {
        return if crate::Cpu::get().has(Feature::Sve) {
            // SAFETY: the CPU has SVE; the SVE kernel reads the same layout and checks its own vector length.
            unsafe { sve::run(a) }
        } else {
            // SAFETY: the NEON kernel reads the same layout; the caller's guarantee.
            unsafe { neon::run(a) }
        };
    }
    type Svl256 = Fmopa<32>;
    type Svl512 = Fmopa<64>;
    // SAFETY: SVL 256 or 512 (checked just now); the rest is the caller's.
    unsafe {
        if v == 32 {
            crate::arch::dispatch!(panels::<Svl256>(a); bits(a.bits))
        } else {
            crate::arch::dispatch!(panels::<Svl512>(a); bits(a.bits))
        }
    }
}

/// Pieces in K-rows of `V`/4 columns (`V` the streaming vector length in bytes, 32 or 64), walked by
/// `V`/4 × `V` FMOPA tiles: four ZA tiles of `V`/4 columns each, `V`/8 panels per pass.
struct Fmopa<const V: usize>;

impl<const V: usize> Fmopa<V> {
    /// Rows per group of the K-major activations, and columns per K-row of a piece: f32 per streaming vector.
    const S: usize = V / 4;
    /// Panels per ZA tile (per K-row of a piece).
    const PAIR: usize = V / 32;
}

impl<const V: usize> Piece for Fmopa<V> {
    const PANELS: usize = V / 8;
    const LHS_K: usize = V / 4;

    /// Panel p's piece: K-rows of S f32 (one per ZA tile), the panel in its tile's K-rows at column 8·(p mod
    /// PAIR).
    fn piece_at(p: usize, pk: usize) -> usize {
        Self::S * pk * (p / Self::PAIR) + 8 * (p % Self::PAIR)
    }

    /// The tile's rows K-major per group of S: group g's K value k at `buf[g·S·kp + S·k ..][..S]` (kp = the
    /// packed length; rows past the tile's hold copies of its last row); the stride is a group's (S·kp f32).
    #[target_feature(enable = "neon")]
    unsafe fn lhs(a: &RunArgs, buf: &mut Vec<f32>) -> (*const f32, usize) {
        let s = Self::S;
        let kp = a.blocks * a.bl;
        let groups = a.rows.div_ceil(s);
        buf.clear();
        buf.resize(groups * s * kp, 0.0);
        let x = a.lhs.cast::<f32>();
        for g in 0..groups {
            let dst = buf[g * s * kp..].as_mut_ptr();
            for quarter in 0..s / 4 {
                let r0 = g * s + 4 * quarter;
                // Rows past the tile's repeat its last (their sums are never stored: a ZA row depends only on its
                // own activations), so the loop has no branch.
                let last = a.rows - 1;
                let src = [0, 1, 2, 3].map(|i: usize| x.wrapping_add((r0 + i).min(last) * a.lhs_stride));
                for k in (0..kp).step_by(4) {
                    // SAFETY: rows min(r0 + i, rows − 1) < rows, K values k .. k + 4 ≤ kp: inside the tile's LHS
                    // (RunArgs contract; kp is a multiple of 4, bl ≥ 16).
                    let [r0v, r1v, r2v, r3v] = src.map(|p| unsafe { vld1q_f32(p.add(k)) });
                    let (t0, t1) = (vtrn1q_f32(r0v, r1v), vtrn2q_f32(r0v, r1v));
                    let (t2, t3) = (vtrn1q_f32(r2v, r3v), vtrn2q_f32(r2v, r3v));
                    let col = |p: float32x4_t, q: float32x4_t, hi: bool| {
                        let (p, q) = (vreinterpretq_f64_f32(p), vreinterpretq_f64_f32(q));
                        vreinterpretq_f32_f64(if hi { vtrn2q_f64(p, q) } else { vtrn1q_f64(p, q) })
                    };
                    // SAFETY: K values k .. k + 4 of group g, this quarter's 4 rows: inside `buf` (sized above).
                    unsafe {
                        let d = dst.add(s * k + 4 * quarter);
                        vst1q_f32(d, col(t0, t2, false));
                        vst1q_f32(d.add(s), col(t1, t3, false));
                        vst1q_f32(d.add(2 * s), col(t0, t2, true));
                        vst1q_f32(d.add(3 * s), col(t1, t3, true));
                    }
                }
            }
        }
        (buf.as_ptr(), s * kp)
    }

    #[target_feature(enable = "neon")]
    unsafe fn dequantize<const BITS: usize>(a: &RunArgs, panel: usize, b0: usize, nb: usize, w: *mut f32) {
        // SAFETY: the blocks are the panel's; `w` holds their nb·bl K-rows, S f32 apart (the walk's buffer, at
        // `piece_at`: the caller's guarantee); SME with SVL ≥ 32 bytes (`run`).
        unsafe { dequantize_blocks_streaming::<BITS>(&Dq::new(a, panel, b0, nb, w, Self::S)) }
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
        let s = Self::S;
        for g in 0..rows.div_ceil(s) {
            let n = (rows - g * s).min(s);
            // SAFETY: group g of the K-major activations (`lhs`: S values per K, pk of them from x), the four ZA
            // tiles' pieces (S·pk f32 each, tile t's at w + S·pk·t: the last pass's unused ones hold earlier
            // values, never stored), rows g·S .. + n of the pass's panels' sums (rows 8 f32 apart, panel p's at
            // y + p·ystride); the streaming length V (`run`).
            unsafe {
                let y = y.add(g * s * NR);
                let x = x.add(g * stride);
                if V == 32 { tile256(x, w, pk, y, ystride, n) } else { tile512(x, w, pk, y, ystride, n) }
            }
        }
    }
}

/// The FMOPA loop of a group's walk of a piece: pk/4 steps of 4 K (`{steps}`) over the group's K-major activations
/// (`{x}`, 4 vectors per step) and the four ZA tiles' K-rows (`{w0}`–`{w3}`, 4 vectors each), 16 FMOPA per step;
/// `$step` the f32 per step (4 K-rows of one vector: SVL bytes).
#[rustfmt::skip]
macro_rules! fmopa_loop {
    ($step:literal) => {
        concat!(
            "mov {off}, #0\n",
            "6:\n",
            "ld1w {{z0.s-z3.s}}, pn8/z, [{x}, {off}, lsl #2]\n",
            "ld1w {{z4.s-z7.s}}, pn8/z, [{w0}, {off}, lsl #2]\n",
            "ld1w {{z8.s-z11.s}}, pn8/z, [{w1}, {off}, lsl #2]\n",
            "ld1w {{z12.s-z15.s}}, pn8/z, [{w2}, {off}, lsl #2]\n",
            "ld1w {{z16.s-z19.s}}, pn8/z, [{w3}, {off}, lsl #2]\n",
            "fmopa za0.s, p0/m, p0/m, z0.s, z4.s\n",
            "fmopa za1.s, p0/m, p0/m, z0.s, z8.s\n",
            "fmopa za2.s, p0/m, p0/m, z0.s, z12.s\n",
            "fmopa za3.s, p0/m, p0/m, z0.s, z16.s\n",
            "fmopa za0.s, p0/m, p0/m, z1.s, z5.s\n",
            "fmopa za1.s, p0/m, p0/m, z1.s, z9.s\n",
            "fmopa za2.s, p0/m, p0/m, z1.s, z13.s\n",
            "fmopa za3.s, p0/m, p0/m, z1.s, z17.s\n",
            "fmopa za0.s, p0/m, p0/m, z2.s, z6.s\n",
            "fmopa za1.s, p0/m, p0/m, z2.s, z10.s\n",
            "fmopa za2.s, p0/m, p0/m, z2.s, z14.s\n",
            "fmopa za3.s, p0/m, p0/m, z2.s, z18.s\n",
            "fmopa za0.s, p0/m, p0/m, z3.s, z7.s\n",
            "fmopa za1.s, p0/m, p0/m, z3.s, z11.s\n",
            "fmopa za2.s, p0/m, p0/m, z3.s, z15.s\n",
            "fmopa za3.s, p0/m, p0/m, z3.s, z19.s\n",
            "add {off}, {off}, #", $step, "\n",
            "subs {steps}, {steps}, #1\n",
            "b.ne 6b\n",
        )
    };
}

/// One group's walk of a piece at SVL 256: rows 0 .. n of the four panels' sums (`y`, rows 8 f32 apart, panel p's at
/// `y + p·ystride`) into ZA (row r of panel p into za<p>h.s[r]), the FMOPA loop, the sums back out.
///
/// # Safety
/// The CPU has SME2 with SVL 256 on this thread; `x` holds 8·pk f32, `w` 32·pk, `y` the 4 panels' n rows; pk is a
/// multiple of 4, 1 ≤ n ≤ 8.
unsafe fn tile256(x: *const f32, w: *const f32, pk: usize, y: *mut f32, ystride: usize, n: usize) {
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
            fmopa_loop!("32"),
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

/// [`tile256`] at SVL 512: ZA tile t's slice r holds row r of panels 2t (columns 0–7, predicate p2) and 2t + 1
/// (8–15, p3), whose sums are not adjacent (panel p's at `y + p·ystride`): each slice is loaded in two halves, the
/// second through z0 and a merging MOVA (a load into a slice zeroes its inactive elements), and stored in two
/// predicated halves, the second from 8 f32 before its row (`{m8}` = −8).
///
/// # Safety
/// The CPU has SME2 with SVL 512 on this thread; `x` holds 16·pk f32, `w` 64·pk, `y` the 8 panels' n rows; pk is a
/// multiple of 4, 1 ≤ n ≤ 16.
unsafe fn tile512(x: *const f32, w: *const f32, pk: usize, y: *mut f32, ystride: usize, n: usize) {
    // SAFETY: reads 64 bytes per K of x and of each ZA tile's piece pair, pk K; reads and writes n rows of 8 f32 of
    // the eight panels' sums (the second halves' addresses are 8 f32 before each row, and only elements 8–15 are
    // active: the row's own 8); all inside the caller's buffers (its guarantee). Every vector and predicate
    // register and ffr, x12 and x14–x17 declared clobbered (`streaming_asm!`; x14 is the halves' pointer after
    // `enter_streaming!`); ZA and streaming mode left off (SMSTOP); TPIDR2_EL0 0 or untouched; flags clobbered.
    unsafe {
        streaming_asm!(
            ".arch_extension sme2",
            ".arch_extension sve",
            enter_streaming!(),
            "ptrue p0.s",
            "ptrue pn8.s",
            "ptrue p2.s, vl8",
            "not p3.b, p0/z, p2.b",
            "mov w12, #0",
            "mov {t}, {y}",
            "5:",
            "mov x14, {t}",
            "ld1w {{za0h.s[w12, 0]}}, p2/z, [x14]",
            "add x14, x14, {ys}",
            "ld1w {{z0.s}}, p3/z, [x14, {m8}, lsl #2]",
            "mova za0h.s[w12, 0], p3/m, z0.s",
            "add x14, x14, {ys}",
            "ld1w {{za1h.s[w12, 0]}}, p2/z, [x14]",
            "add x14, x14, {ys}",
            "ld1w {{z0.s}}, p3/z, [x14, {m8}, lsl #2]",
            "mova za1h.s[w12, 0], p3/m, z0.s",
            "add x14, x14, {ys}",
            "ld1w {{za2h.s[w12, 0]}}, p2/z, [x14]",
            "add x14, x14, {ys}",
            "ld1w {{z0.s}}, p3/z, [x14, {m8}, lsl #2]",
            "mova za2h.s[w12, 0], p3/m, z0.s",
            "add x14, x14, {ys}",
            "ld1w {{za3h.s[w12, 0]}}, p2/z, [x14]",
            "add x14, x14, {ys}",
            "ld1w {{z0.s}}, p3/z, [x14, {m8}, lsl #2]",
            "mova za3h.s[w12, 0], p3/m, z0.s",
            "add {t}, {t}, #32",
            "add w12, w12, #1",
            "cmp x12, {n}",
            "b.lo 5b",
            fmopa_loop!("64"),
            "mov w12, #0",
            "7:",
            "mov x14, {y}",
            "st1w {{za0h.s[w12, 0]}}, p2, [x14]",
            "add x14, x14, {ys}",
            "st1w {{za0h.s[w12, 0]}}, p3, [x14, {m8}, lsl #2]",
            "add x14, x14, {ys}",
            "st1w {{za1h.s[w12, 0]}}, p2, [x14]",
            "add x14, x14, {ys}",
            "st1w {{za1h.s[w12, 0]}}, p3, [x14, {m8}, lsl #2]",
            "add x14, x14, {ys}",
            "st1w {{za2h.s[w12, 0]}}, p2, [x14]",
            "add x14, x14, {ys}",
            "st1w {{za2h.s[w12, 0]}}, p3, [x14, {m8}, lsl #2]",
            "add x14, x14, {ys}",
            "st1w {{za3h.s[w12, 0]}}, p2, [x14]",
            "add x14, x14, {ys}",
            "st1w {{za3h.s[w12, 0]}}, p3, [x14, {m8}, lsl #2]",
            "add {y}, {y}, #32",
            "add w12, w12, #1",
            "cmp x12, {n}",
            "b.lo 7b",
            "smstop",
            x = in(reg) x,
            w0 = in(reg) w,
            w1 = in(reg) w.wrapping_add(16 * pk),
            w2 = in(reg) w.wrapping_add(32 * pk),
            w3 = in(reg) w.wrapping_add(48 * pk),
            y = inout(reg) y => _,
            ys = in(reg) 4 * ystride,
            m8 = in(reg) -8isize,
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
    /// and without zero points, row tails (M = 4 … 23: last groups of 1–7 rows at SVL 256, of 4–15 and a second
    /// group at 512), tiles under 4 rows (M = 2, 3: the SVE kernel where the CPU has SVE, else the NEON one), K of
    /// two pieces and more (1056, 2112 at block 32; 192 at block 64), passes of 4 (SVL 256) or 8 (512) panels with
    /// a last pass of fewer, an odd count included (N = 8, 40, 48, 72, 150, 232), several column tasks (N = 1048:
    /// tasks of 512 columns, the last of 24), at this thread's lengths (run under qemu at SVL 256 and 512, with
    /// and without SVE: scripts/test-aarch64.sh), and, where the CPU has SVE, on a thread whose SVE vector is
    /// shortened to 128 bits (the dequantizer runs in streaming mode, so nothing changes but the small tiles'
    /// fallback). qemu-user keeps the streaming length when asked to change it (PR_SME_SET_VL), so the fallback at
    /// other streaming lengths runs in the ukernels suite under the models with 128- and 1024-bit streaming vectors.
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
            for m in [2usize, 3, 4, 7, 8, 9, 15, 17, 23] {
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
        if !Cpu::get().has(crate::cpu::Feature::Sve) {
            return;
        }
        crate::arch::aarch64::ops::with_sve_vl(16, || check("SVE vector shortened to 128 bits"));
    }
}
