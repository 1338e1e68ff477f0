//! Activation quantization with AVX-512: `pack::quantize_block` bit for bit (amax, scale = amax/127,
//! q = round-half-even(x · 127/amax) clamped to ±127, Σq; a block with a NaN or an infinity gets that scale and
//! all-zero codes, as the scalar version's arithmetic gives). Block lengths are multiples of 16.

use std::arch::x86_64::*;

/// # Panics
/// If `a` and `q` differ in length or it is not a multiple of 16.
pub(crate) fn quantize_block(a: &[f32], q: &mut [i8]) -> (f32, i32) {
    assert!(a.len() == q.len() && a.len().is_multiple_of(16), "blocks of 16·n values");
    // SAFETY: only handed out (arch::quantize_block_for) for CPUs with avx512f and avx512bw; lengths checked.
    unsafe { run(a, q) }
}

#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn run(a: &[f32], q: &mut [i8]) -> (f32, i32) {
    let n = a.len();
    let p = a.as_ptr();
    let mut amax = _mm512_setzero_ps();
    let mut unordered: __mmask16 = 0;
    for i in (0..n).step_by(16) {
        // SAFETY: i + 16 <= n values of `a`.
        let x = unsafe { _mm512_loadu_ps(p.add(i)) };
        unordered |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        amax = _mm512_max_ps(amax, _mm512_abs_ps(x));
    }
    if unordered != 0 {
        q.fill(0);
        return (f32::NAN, 0);
    }
    let amax = _mm512_reduce_max_ps(amax);
    let scale = amax / 127.0;
    if !(amax > 0.0 && amax.is_finite()) {
        q.fill(0);
        return (scale, 0);
    }
    let inv = _mm512_set1_ps(127.0 / amax);
    let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
    let mut sum = _mm512_setzero_si512();
    for i in (0..n).step_by(16) {
        // SAFETY: i + 16 <= n values of `a`, and of `q` (same length).
        unsafe {
            let x = _mm512_loadu_ps(p.add(i));
            // MXCSR's default rounding: to nearest, ties to even (as f32::round_ties_even).
            let v = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x, inv)), lo), hi);
            sum = _mm512_add_epi32(sum, v);
            _mm_storeu_si128(q.as_mut_ptr().add(i).cast(), _mm512_cvtepi32_epi8(v));
        }
    }
    (scale, _mm512_reduce_add_epi32(sum))
}

#[cfg(test)]
mod tests {
    use crate::cpu::{Cpu, Feature};

    #[test]
    fn bit_identical_to_the_scalar_quantizer() {
        let cpu = Cpu::get();
        if !(cpu.has(Feature::Avx512f) && cpu.has(Feature::Avx512bw)) {
            eprintln!("SKIP: needs avx512f+avx512bw");
            return;
        }
        crate::pack::assert_quantizer_matches_scalar(super::quantize_block);
    }
}
