//! Activation quantization with NEON, a row's blocks per call: `pack::quantize_block` bit for bit (amax, scale =
//! amax/127, q = round-half-even(x · 127/amax) clamped to ±127, Σq; a block with a NaN or an infinity gets that
//! scale and all-zero codes, as the scalar version's arithmetic gives, and so does one whose 127/amax overflows),
//! and the row numerics' `pack::min_max` and `pack::quantize_block_row` (q = round-half-even(x · inv) + z clamped
//! to −128..127) bit for bit. Block lengths are multiples of 16.

use crate::pack::{RowQuant, Runs};
use core::arch::aarch64::*;

/// `pack::min_max` with NEON: (min, max) of `a` with 0 in the range (FMIN/FMAX propagate a NaN, as the scalar
/// fold does), NaN if `a` holds one.
pub(crate) fn min_max(a: &[f32]) -> (f32, f32) {
    // SAFETY: NEON is in every aarch64 CPU; the loads read whole vectors inside `a`.
    unsafe { min_max_neon(a) }
}

#[target_feature(enable = "neon")]
unsafe fn min_max_neon(a: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    // 16 values per step (one LD1 of 4 vectors into 4 + 4 running extremes), then 4, then one at a time.
    let mut w = a.chunks_exact(16);
    let (mut l4, mut h4) = ([lo; 4], [hi; 4]);
    for c in &mut w {
        // SAFETY: 16 values of `a`.
        let x = unsafe { vld1q_f32_x4(c.as_ptr()) };
        for (j, x) in [x.0, x.1, x.2, x.3].into_iter().enumerate() {
            l4[j] = vminq_f32(l4[j], x);
            h4[j] = vmaxq_f32(h4[j], x);
        }
    }
    lo = vminq_f32(vminq_f32(l4[0], l4[1]), vminq_f32(l4[2], l4[3]));
    hi = vmaxq_f32(vmaxq_f32(h4[0], h4[1]), vmaxq_f32(h4[2], h4[3]));
    let mut v = w.remainder().chunks_exact(4);
    for c in &mut v {
        // SAFETY: 4 values of `a`.
        let x = unsafe { vld1q_f32(c.as_ptr()) };
        lo = vminq_f32(lo, x);
        hi = vmaxq_f32(hi, x);
    }
    let (mut l, mut h) = (vminvq_f32(lo), vmaxvq_f32(hi));
    for &x in v.remainder() {
        if x.is_nan() || l.is_nan() {
            (l, h) = (f32::NAN, f32::NAN);
        } else {
            (l, h) = (l.min(x), h.max(x));
        }
    }
    if l.is_nan() || h.is_nan() { (f32::NAN, f32::NAN) } else { (l, h) }
}

/// `pack::quantize_block_row` with NEON (the store paths of `run`'s `write_codes`, not `run32`'s), a row's blocks
/// per call.
///
/// # Panics
/// If the block length is not a multiple of 16, or as `pack::for_each_block`.
pub(crate) fn quantize_block_row(a: &[f32], bl: usize, dst: &mut [u8], runs: Runs, rq: RowQuant, out: &mut [i32]) {
    assert!(bl.is_multiple_of(16), "blocks of 16·n values");
    // SAFETY: NEON is in every aarch64 CPU; as in `row_blocks`.
    unsafe { row_blocks(a, bl, dst, runs, rq, out) }
}

/// The row's walk and every block's body in one function (no call per block).
///
/// # Safety
/// NEON; `bl` is a multiple of 16.
#[target_feature(enable = "neon")]
unsafe fn row_blocks(a: &[f32], bl: usize, dst: &mut [u8], runs: Runs, rq: RowQuant, out: &mut [i32]) {
    crate::pack::for_each_block(a, bl, dst, runs, out, |a, dst| {
        // SAFETY: NEON; `a` is one block of bl (a multiple of 16) values, and every place `runs.at(i)` for
        // i < a.len() is inside `dst` (for_each_block checked the row's places and gives `dst` from the block's
        // first place).
        unsafe { write_codes::<true>(a, dst, runs, rq.inv, rq.zero, -128, 127) }
    });
}

/// `pack::QuantizeBlocks`: a row's blocks, the codes written straight to their packed places (`runs`: one 8-byte
/// store per 8 values for runs of 8·n, two 4-byte stores for runs of 4, a byte scatter otherwise).
///
/// # Panics
/// If the block length is not a multiple of 16, or as `pack::for_each_block`.
pub(crate) fn quantize_blocks(a: &[f32], bl: usize, dst: &mut [u8], runs: Runs, out: &mut [(f32, i32)]) {
    assert!(bl.is_multiple_of(16), "blocks of 16·n values");
    // SAFETY: NEON is in every aarch64 CPU; as in `blocks`.
    unsafe { blocks(a, bl, dst, runs, out) }
}

/// The row's walk and every block's body in one function (no call per block).
///
/// # Safety
/// NEON; `bl` is a multiple of 16.
#[target_feature(enable = "neon")]
unsafe fn blocks(a: &[f32], bl: usize, dst: &mut [u8], runs: Runs, out: &mut [(f32, i32)]) {
    // Blocks of 32·n in runs of 4, 8 or 16·k: `run32` with the run shape, the flip and whether the block is one
    // chunk as constants (no per-block branch on them, no EOR with a zero flip, no chunk loop for blocks of 32).
    if bl.is_multiple_of(32) {
        // SAFETY: forwarded (NEON; bl a multiple of 32, ONE iff bl = 32; the run shape is the constant's).
        unsafe {
            macro_rules! by_run {
                ($one:literal) => {
                    match (runs.run, runs.flip != 0) {
                        (4, false) => return blocks32::<4, false, $one>(a, bl, dst, runs, out),
                        (4, true) => return blocks32::<4, true, $one>(a, bl, dst, runs, out),
                        (8, false) => return blocks32::<8, false, $one>(a, bl, dst, runs, out),
                        (8, true) => return blocks32::<8, true, $one>(a, bl, dst, runs, out),
                        (r, false) if r.is_multiple_of(16) => return blocks32::<16, false, $one>(a, bl, dst, runs, out),
                        (r, true) if r.is_multiple_of(16) => return blocks32::<16, true, $one>(a, bl, dst, runs, out),
                        _ => {}
                    }
                };
            }
            if bl == 32 { by_run!(true) } else { by_run!(false) }
        }
    }
    crate::pack::for_each_block(a, bl, dst, runs, out, |a, dst| {
        // SAFETY: NEON; `a` is one block of bl (a multiple of 16) values, and every place `runs.at(i)` for
        // i < a.len() is inside `dst` (for_each_block checked the row's places and gives `dst` from the block's
        // first place); the stores below write places of values i < a.len() only.
        unsafe { run(a, dst, runs) }
    });
}

/// A row's blocks of 32·n (n = 1 iff ONE) through `run32::<RUN, FLIP, ONE>`.
///
/// # Safety
/// NEON; `bl` is a multiple of 32, 32 iff ONE; `runs.run` is RUN (4 or 8), or a multiple of 16 when RUN is 16;
/// `runs.flip != 0` is FLIP.
#[target_feature(enable = "neon")]
unsafe fn blocks32<const RUN: usize, const FLIP: bool, const ONE: bool>(
    a: &[f32],
    bl: usize,
    dst: &mut [u8],
    runs: Runs,
    out: &mut [(f32, i32)],
) {
    crate::pack::for_each_block(a, bl, dst, runs, out, |a, dst| {
        // SAFETY: NEON; `a` is one block of bl values laid out by `runs` (this function's contract), every place
        // `runs.at(i)` for i < bl inside `dst` (for_each_block checked the row's places and gives `dst` from the
        // block's first place).
        unsafe { run32::<RUN, FLIP, ONE>(a, dst, runs) }
    })
}

/// `run` for a block of 32·n values (n = 1 iff ONE) laid out by runs of 4 (`qsi8dbp16x4`, SME2), of 8
/// (`qsi8dbp4x8`) or of 16·k (`qsi8dbp4x16`, contiguous rows; RUN = 16), one 32-value chunk at a time: the
/// chunks' amax, then per chunk its 8 vectors (kept from the amax pass when n = 1, loaded again otherwise) to
/// codes, Σq by SADDLP + SADALP + SADDLV, the codes in eight 4-byte, four 8-byte or two 16-byte stores, the flip
/// (`FLIP`: the unsigned formats' 0x80) only where there is one (~60 instructions per chunk against ~100 for
/// `run`'s loops). A block `run` treats apart (a NaN, an infinity, all zero, or 127/amax overflowing: exactly the
/// blocks whose 127/amax is not a finite positive number) goes through `run`.
///
/// # Safety
/// NEON; `a` holds 32·n values, n = 1 iff ONE; runs of RUN (4 or 8) or of 16·k (RUN = 16) that divide `a.len()`;
/// `runs.flip != 0` is FLIP; every place `runs.at(i)`, i < `a.len()`, is inside `dst`.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn run32<const RUN: usize, const FLIP: bool, const ONE: bool>(
    a: &[f32],
    dst: &mut [u8],
    runs: Runs,
) -> (f32, i32) {
    let n = a.len();
    debug_assert!(n.is_multiple_of(32) && ONE == (n == 32));
    debug_assert!(runs.run == RUN || (RUN == 16 && runs.run.is_multiple_of(16)));
    debug_assert_eq!(runs.flip != 0, FLIP);
    let p = a.as_ptr();
    // SAFETY: 32 values of `a` from c (c + 32 <= n): two LD1 of 4 vectors.
    let load = |c: usize| unsafe { (vld1q_f32_x4(p.add(c)), vld1q_f32_x4(p.add(c + 16))) };
    let abs_max = |v: float32x4x4_t| {
        vmaxq_f32(vmaxq_f32(vabsq_f32(v.0), vabsq_f32(v.1)), vmaxq_f32(vabsq_f32(v.2), vabsq_f32(v.3)))
    };
    let (x, y) = load(0);
    // FMAX / FMAXV propagate a NaN: amax is NaN iff a value is.
    let mut m = vmaxq_f32(abs_max(x), abs_max(y));
    if !ONE {
        for c in (32..n).step_by(32) {
            let (x, y) = load(c);
            m = vmaxq_f32(m, vmaxq_f32(abs_max(x), abs_max(y)));
        }
    }
    let amax = vmaxvq_f32(m);
    let inv = 127.0 / amax;
    // The blocks `run` treats apart, in one test: amax ≥ 0 or NaN, so 127/amax is a finite positive number exactly
    // when amax is positive, finite and not so small that 127/amax overflows (a NaN amax gives a NaN, amax = 0 an
    // infinity, an infinite amax 0; a finite positive amax ≤ f32::MAX gives at least 127/f32::MAX, not 0). Finite
    // positive f32s are the bit patterns 1 ..= 0x7f7f_ffff: one integer compare (as floats LLVM emits nine).
    if inv.to_bits().wrapping_sub(1) >= 0x7f7f_ffff {
        // SAFETY: forwarded (the caller's guarantee covers `run`'s).
        return unsafe { run(a, dst, runs) };
    }
    // As `write_codes::<false>`: FCVTNS of x · inv (ties to even), no clamp needed, narrowed to 16 codes.
    let cvt = |v: float32x4_t| vmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v, inv)));
    let codes = |v: float32x4x4_t| {
        vcombine_s8(vmovn_s16(vcombine_s16(cvt(v.0), cvt(v.1))), vmovn_s16(vcombine_s16(cvt(v.2), cvt(v.3))))
    };
    let s = runs.stride;
    let mut sum = 0i32;
    let mut chunk = |c: usize, x: float32x4x4_t, y: float32x4x4_t| {
        let (q0, q1) = (codes(x), codes(y));
        // Exact: 32 codes of at most ±127 sum within i16 pairwise and within i32 across.
        sum += vaddlvq_s16(vpadalq_s8(vpaddlq_s8(q0), q1));
        let (q0, q1) = (vreinterpretq_u8_s8(q0), vreinterpretq_u8_s8(q1));
        let (q0, q1) = if FLIP {
            let flip = vdupq_n_u8(runs.flip);
            (veorq_u8(q0, flip), veorq_u8(q1, flip))
        } else {
            (q0, q1)
        };
        // The chunk's first place, `runs.at(c)`: its runs of 4, 8 or 16 start a run each; runs of 32·k hold it.
        let base = match RUN {
            4 => c / 4 * s,
            8 => c / 8 * s,
            _ if runs.run == 16 => c / 16 * s,
            _ => runs.at(c),
        };
        // SAFETY: the places of the chunk's 32 values (the caller's guarantee): runs of 4 at base + 0, s, …, 7s;
        // runs of 8 at base + 0, s, 2s and 3s; runs of 16 at base and base + s; runs of 32·k at base .. base + 32.
        // ST1 of a lane has no alignment requirement.
        unsafe {
            let d = dst.as_mut_ptr().add(base);
            if RUN == 4 {
                let (w0, w1) = (vreinterpretq_u32_u8(q0), vreinterpretq_u32_u8(q1));
                vst1q_lane_u32::<0>(d.cast(), w0);
                vst1q_lane_u32::<1>(d.add(s).cast(), w0);
                vst1q_lane_u32::<2>(d.add(2 * s).cast(), w0);
                vst1q_lane_u32::<3>(d.add(3 * s).cast(), w0);
                vst1q_lane_u32::<0>(d.add(4 * s).cast(), w1);
                vst1q_lane_u32::<1>(d.add(5 * s).cast(), w1);
                vst1q_lane_u32::<2>(d.add(6 * s).cast(), w1);
                vst1q_lane_u32::<3>(d.add(7 * s).cast(), w1);
            } else if RUN == 8 {
                let (w0, w1) = (vreinterpretq_u64_u8(q0), vreinterpretq_u64_u8(q1));
                vst1q_lane_u64::<0>(d.cast(), w0);
                vst1q_lane_u64::<1>(d.add(s).cast(), w0);
                vst1q_lane_u64::<0>(d.add(2 * s).cast(), w1);
                vst1q_lane_u64::<1>(d.add(3 * s).cast(), w1);
            } else {
                vst1q_u8(d, q0);
                vst1q_u8(d.add(if runs.run == 16 { s } else { 16 }), q1);
            }
        }
    };
    chunk(0, x, y);
    if !ONE {
        for c in (32..n).step_by(32) {
            let (x, y) = load(c);
            chunk(c, x, y);
        }
    }
    (amax / 127.0, sum)
}

#[target_feature(enable = "neon")]
#[inline]
unsafe fn run(a: &[f32], dst: &mut [u8], runs: Runs) -> (f32, i32) {
    let n = a.len();
    let p = a.as_ptr();
    // FMAX and FMAXV propagate a NaN (unlike FMAXNM): amax is NaN iff a value is.
    let mut m = [vdupq_n_f32(0.0); 4];
    for i in (0..n).step_by(16) {
        // SAFETY: i + 16 <= n values of `a` (n is a multiple of 16): one LD1 of 4 vectors.
        let x = unsafe { vld1q_f32_x4(p.add(i)) };
        m = [
            vmaxq_f32(m[0], vabsq_f32(x.0)),
            vmaxq_f32(m[1], vabsq_f32(x.1)),
            vmaxq_f32(m[2], vabsq_f32(x.2)),
            vmaxq_f32(m[3], vabsq_f32(x.3)),
        ];
    }
    let amax = vmaxvq_f32(vmaxq_f32(vmaxq_f32(m[0], m[1]), vmaxq_f32(m[2], m[3])));
    let nan = amax.is_nan();
    let scale = if nan { f32::NAN } else { amax / 127.0 };
    let inv = 127.0 / amax;
    if nan || !(amax > 0.0 && amax.is_finite() && inv.is_finite()) {
        for r in 0..n / runs.run {
            dst[r * runs.stride..][..runs.run].fill(runs.flip);
        }
        return (scale, 0);
    }
    // SAFETY: forwarded (the caller's guarantee).
    (scale, unsafe { write_codes::<false>(a, dst, runs, inv, 0, -127, 127) })
}

/// Writes q = clamp(round-half-even(x · inv) + zero, lo, hi) of every value to its packed place and returns Σq.
/// Without `CLAMP` (the per-block numerics: inv = 127 / amax, zero 0) the offset and the clamp are left out:
/// |x · inv| ≤ 127 · (1 + 2^−23)·(1 + 2^−24) rounds to at most 127, so they would change nothing.
///
/// # Safety
/// NEON; `a.len()` is a multiple of 8 and every place `runs.at(i)`, i < `a.len()`, is inside `dst`.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn write_codes<const CLAMP: bool>(
    a: &[f32],
    dst: &mut [u8],
    runs: Runs,
    inv: f32,
    zero: i32,
    lo: i32,
    hi: i32,
) -> i32 {
    debug_assert!(if CLAMP {
        lo == -128 && hi == 127 && (-128..=127).contains(&zero)
    } else {
        zero == 0 && lo == -127 && hi == 127
    });
    let (n, p) = (a.len(), a.as_ptr());
    let (lo, hi, z) = (vdupq_n_s32(lo), vdupq_n_s32(hi), vdupq_n_s32(zero));
    let flip = vdup_n_u8(runs.flip);
    let d = dst.as_mut_ptr();
    let (run, stride) = (runs.run, runs.stride);
    // Where value i goes, kept without dividing: `pos` (the chunk's first place) and what is left of its run.
    let (mut pos, mut left) = (0usize, run);
    let mut sum = vdupq_n_s32(0);
    // The zero point for the int16 halves of the 16-value steps.
    let z16 = vdupq_n_s16(zero as i16);
    // 16 values per step: one LD1 of 4 vectors narrowed to 16 codes; Σq from the int8 codes (SADDLP + SADALP;
    // exact: the codes are the int32 values, which fit int8). With `CLAMP` (the row numerics, lo = −128, hi = 127:
    // the callers' only clamp) the offset and the clamp are saturating int16 steps: SQXTN to int16, SQADD of the
    // zero point (in −128..127), SQXTN to int8 — clamp(q + zero, −128, 127) for every int32 q, 8 instructions
    // fewer than adding and clamping in int32.
    let quant16 = |i: usize| {
        let cvt = |x: float32x4_t| {
            let q = vcvtnq_s32_f32(vmulq_n_f32(x, inv));
            if CLAMP { vqmovn_s32(q) } else { vmovn_s32(q) }
        };
        // SAFETY: i + 16 <= n values of `a` (the callers' loops).
        let x = unsafe { vld1q_f32_x4(p.add(i)) };
        let h0 = vcombine_s16(cvt(x.0), cvt(x.1));
        let h1 = vcombine_s16(cvt(x.2), cvt(x.3));
        if CLAMP {
            vcombine_s8(vqmovn_s16(vqaddq_s16(h0, z16)), vqmovn_s16(vqaddq_s16(h1, z16)))
        } else {
            vcombine_s8(vmovn_s16(h0), vmovn_s16(h1))
        }
    };
    if n.is_multiple_of(16) && run == 8 {
        // Runs of 8 (the i8mm GEMMs' `qsi8dbp4x8`: a row's 8 K, then the group's next row): two whole runs per
        // step, at `pos` and `pos + stride`.
        let flip = vdupq_n_u8(runs.flip);
        for i in (0..n).step_by(16) {
            let q = quant16(i);
            sum = vpadalq_s16(sum, vpaddlq_s8(q));
            let q = veorq_u8(vreinterpretq_u8_s8(q), flip);
            // SAFETY: `pos` is `runs.at(i)` and `pos + stride` is `runs.at(i + 8)`: the places of values i .. i + 16
            // (two runs), inside `dst` (the caller's guarantee).
            unsafe {
                vst1_u8(d.add(pos), vget_low_u8(q));
                vst1_u8(d.add(pos + stride), vget_high_u8(q));
            }
            pos += 2 * stride;
        }
        return vaddvq_s32(sum);
    }
    if n.is_multiple_of(16) && run == 4 {
        // Runs of 4 (the SME2 GEMMs' `qsi8dbp16x4`: a row's 4 K, then the group's next row): four whole runs per
        // step, one 4-byte lane store each at `pos`, `pos + stride`, `pos + 2·stride`, `pos + 3·stride` (the
        // 8-value loop below takes ~3 instructions a value here, this ~1.8).
        let flip = vdupq_n_u8(runs.flip);
        for i in (0..n).step_by(16) {
            let q = quant16(i);
            sum = vpadalq_s16(sum, vpaddlq_s8(q));
            let w = vreinterpretq_u32_u8(veorq_u8(vreinterpretq_u8_s8(q), flip));
            // SAFETY: `pos` is `runs.at(i)` and `pos + j·stride` is `runs.at(i + 4j)`: the places of values i ..
            // i + 16 (four runs), inside `dst` (the caller's guarantee). ST1 of a lane has no alignment requirement.
            unsafe {
                vst1q_lane_u32::<0>(d.add(pos).cast(), w);
                vst1q_lane_u32::<1>(d.add(pos + stride).cast(), w);
                vst1q_lane_u32::<2>(d.add(pos + 2 * stride).cast(), w);
                vst1q_lane_u32::<3>(d.add(pos + 3 * stride).cast(), w);
            }
            pos += 4 * stride;
        }
        return vaddvq_s32(sum);
    }
    if run >= n && n.is_multiple_of(16) {
        // The values in one run (contiguous rows, the GEMVs' `qsi8db`): their places are 0 .. n, one 16-byte store
        // per step and no run bookkeeping (~3 instructions fewer per step than the loop below).
        let flip = vdupq_n_u8(runs.flip);
        for i in (0..n).step_by(16) {
            let q = quant16(i);
            sum = vpadalq_s16(sum, vpaddlq_s8(q));
            // SAFETY: values i .. i + 16 of one run (run ≥ n) go to places i .. i + 16 from the block's first
            // place, inside `dst` (the caller's guarantee).
            unsafe { vst1q_u8(d.add(i), veorq_u8(vreinterpretq_u8_s8(q), flip)) };
        }
        return vaddvq_s32(sum);
    }
    if run.is_multiple_of(16) && n.is_multiple_of(16) {
        // Runs of 16·k (the GEMMs' `qsi8dbp4x16`, contiguous rows): one 16-byte store per step.
        let flip = vdupq_n_u8(runs.flip);
        for i in (0..n).step_by(16) {
            let q = quant16(i);
            sum = vpadalq_s16(sum, vpaddlq_s8(q));
            // SAFETY: `pos` is `runs.at(i)`; values i .. i + 16 are one part of a run (runs of 16·k), their places
            // inside `dst` (the caller's guarantee).
            unsafe { vst1q_u8(d.add(pos), veorq_u8(vreinterpretq_u8_s8(q), flip)) };
            pos += 16;
            left -= 16;
            if left == 0 {
                pos += stride - run;
                left = run;
            }
        }
        return vaddvq_s32(sum);
    }
    for i in (0..n).step_by(8) {
        // FCVTNS: to nearest, ties to even (as f32::round_ties_even); NaN (a zero or non-finite row's 0 · ∞) to 0.
        let cvt = |x: float32x4_t| {
            let q = vcvtnq_s32_f32(vmulq_n_f32(x, inv));
            if CLAMP { vminq_s32(vmaxq_s32(vaddq_s32(q, z), lo), hi) } else { q }
        };
        // SAFETY: i + 8 <= n values of `a`.
        let (v0, v1) = unsafe { (cvt(vld1q_f32(p.add(i))), cvt(vld1q_f32(p.add(i + 4)))) };
        sum = vaddq_s32(sum, vaddq_s32(v0, v1));
        let h = vcombine_s16(vmovn_s32(v0), vmovn_s32(v1));
        let q = veor_u8(vreinterpret_u8_s8(vmovn_s16(h)), flip);
        // SAFETY: `pos` is `runs.at(i)`; each store covers the places of values i .. i + 8 only (whole runs, or
        // parts of runs that start at those values' places), all inside `dst` (the caller's guarantee).
        unsafe {
            match run {
                r if r.is_multiple_of(8) => {
                    vst1_u8(d.add(pos), q);
                    pos += 8;
                    left -= 8;
                    if left == 0 {
                        pos += stride - run;
                        left = run;
                    }
                }
                4 => {
                    let w = vreinterpret_u32_u8(q);
                    d.add(pos).cast::<u32>().write_unaligned(vget_lane_u32::<0>(w));
                    d.add(pos + stride).cast::<u32>().write_unaligned(vget_lane_u32::<1>(w));
                    pos += 2 * stride;
                }
                _ => {
                    let mut bytes = [0u8; 8];
                    vst1_u8(bytes.as_mut_ptr(), q);
                    for (j, &b) in bytes.iter().enumerate() {
                        *d.add(runs.at(i + j)) = b;
                    }
                }
            }
        }
    }
    vaddvq_s32(sum)
}

#[cfg(test)]
mod tests {
    #[test]
    fn bit_identical_to_the_scalar_quantizer() {
        crate::pack::assert_quantizer_matches_scalar(super::quantize_blocks);
    }

    #[test]
    fn row_quantizer_and_min_max_bit_identical_to_the_scalar_ones() {
        crate::pack::assert_row_quantizer_matches_scalar(super::quantize_block_row, super::min_max);
    }
}
