//! Activation quantization with NEON: `pack::quantize_block` bit for bit (amax, scale = amax/127,
//! q = round-half-even(x · 127/amax) clamped to ±127, Σq; a block with a NaN or an infinity gets that scale and
//! all-zero codes, as the scalar version's arithmetic gives). Block lengths are multiples of 16.

use core::arch::aarch64::*;

/// # Panics
/// If `a` and `q` differ in length or it is not a multiple of 16.
pub(crate) fn quantize_block(a: &[f32], q: &mut [i8]) -> (f32, i32) {
    assert!(a.len() == q.len() && a.len().is_multiple_of(16), "blocks of 16·n values");
    // SAFETY: NEON is in every aarch64 CPU; lengths checked.
    unsafe { run(a, q) }
}

#[target_feature(enable = "neon")]
unsafe fn run(a: &[f32], q: &mut [i8]) -> (f32, i32) {
    let n = a.len();
    let p = a.as_ptr();
    let mut amax = vdupq_n_f32(0.0);
    let mut nan = vdupq_n_u32(0);
    for i in (0..n).step_by(4) {
        // SAFETY: i + 4 <= n values of `a`.
        let x = unsafe { vld1q_f32(p.add(i)) };
        nan = vorrq_u32(nan, vmvnq_u32(vceqq_f32(x, x)));
        amax = vmaxq_f32(amax, vabsq_f32(x));
    }
    if vmaxvq_u32(nan) != 0 {
        q.fill(0);
        return (f32::NAN, 0);
    }
    let amax = vmaxvq_f32(amax);
    let scale = amax / 127.0;
    if !(amax > 0.0 && amax.is_finite()) {
        q.fill(0);
        return (scale, 0);
    }
    let inv = 127.0 / amax;
    let (lo, hi) = (vdupq_n_s32(-127), vdupq_n_s32(127));
    let mut sum = vdupq_n_s32(0);
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n values of `a`, and of `q` (same length).
        unsafe {
            // FCVTNS: to nearest, ties to even (as f32::round_ties_even).
            let cvt = |x: float32x4_t| vminq_s32(vmaxq_s32(vcvtnq_s32_f32(vmulq_n_f32(x, inv)), lo), hi);
            let (v0, v1) = (cvt(vld1q_f32(p.add(i))), cvt(vld1q_f32(p.add(i + 4))));
            sum = vaddq_s32(sum, vaddq_s32(v0, v1));
            let h = vcombine_s16(vmovn_s32(v0), vmovn_s32(v1));
            vst1_s8(q.as_mut_ptr().add(i), vmovn_s16(h));
        }
    }
    (scale, vaddvq_s32(sum))
}

#[cfg(test)]
mod tests {
    #[test]
    fn bit_identical_to_the_scalar_quantizer() {
        crate::pack::assert_quantizer_matches_scalar(super::quantize_block);
    }
}
