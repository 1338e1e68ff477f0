//! Activation quantization with AVX-512: `pack::quantize_block` bit for bit (amax, scale = amax/127,
//! q = round-half-even(x · 127/amax) clamped to ±127, Σq; a block with a NaN or an infinity gets that scale and
//! all-zero codes, as the scalar version's arithmetic gives, and so does one whose 127/amax overflows). Block
//! lengths are multiples of 16.

use super::quantize_runs::{Places, by_run, zero_codes};
use crate::pack::Runs;
use std::arch::x86_64::*;

/// `pack::QuantizeBlocks`: a row's blocks, the codes written straight to their packed places (`runs`: one
/// 16-byte store per 16 values for runs of 16·n, two 8-byte or four 4-byte stores for runs of 8 or 4, a byte
/// scatter otherwise).
///
/// # Panics
/// If the block length is not a multiple of 16, or as `pack::for_each_block`.
pub(crate) fn quantize_blocks(a: &[f32], bl: usize, dst: &mut [u8], runs: Runs, out: &mut [(f32, i32)]) {
    assert!(bl.is_multiple_of(16), "blocks of 16·n values");
    // SAFETY: only handed out (arch::quantize_block_for) for CPUs with avx512f and avx512bw; RUN is what
    // `runs.run` is (one walk per kind of run, chosen here once per row).
    unsafe { by_run!(blocks, runs, (a, bl, dst, runs, out)) }
}

/// The row's walk and every block's body in one function (no call per block).
///
/// # Safety
/// avx512f and avx512bw; `bl` is a multiple of 16; RUN is what `runs.run` is (as `run`).
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn blocks<const RUN: usize>(a: &[f32], bl: usize, dst: &mut [u8], runs: Runs, out: &mut [(f32, i32)]) {
    crate::pack::for_each_block(a, bl, dst, runs, out, |a, dst| {
        // SAFETY: the CPU features and RUN are the caller's guarantee; `a` is one block (a multiple of 16 values)
        // and every place `runs.at(i)` for i < a.len() is inside `dst` (for_each_block checked the row's places
        // and gives `dst` from the block's first place); `run` stores at places of values i < a.len() only.
        unsafe { run::<RUN>(a, dst, runs) }
    });
}

/// One block's (scale, Σq), its codes to their places for runs of RUN bytes (0: contiguous; 16: any multiple of
/// 16; 1: any other length, byte by byte).
///
/// # Safety
/// avx512f and avx512bw; `runs` lays out `a.len()` values (a multiple of 16) inside `dst`, and its run is what
/// RUN says.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn run<const RUN: usize>(a: &[f32], dst: &mut [u8], runs: Runs) -> (f32, i32) {
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
        zero_codes(dst, runs, n);
        return (f32::NAN, 0);
    }
    let amax = _mm512_reduce_max_ps(amax);
    let scale = amax / 127.0;
    let inv = 127.0 / amax;
    if !(amax > 0.0 && amax.is_finite() && inv.is_finite()) {
        zero_codes(dst, runs, n);
        return (scale, 0);
    }
    let inv = _mm512_set1_ps(inv);
    let d = dst.as_mut_ptr();
    let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
    let flip = _mm_set1_epi8(runs.flip as i8);
    let mut places = Places::new(runs);
    let mut sum = _mm512_setzero_si512();
    for i in (0..n).step_by(16) {
        // SAFETY: i + 16 <= n values of `a`.
        let x = unsafe { _mm512_loadu_ps(p.add(i)) };
        // MXCSR's default rounding: to nearest, ties to even (as f32::round_ties_even).
        let v = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x, inv)), lo), hi);
        sum = _mm512_add_epi32(sum, v);
        let q = _mm_xor_si128(_mm512_cvtepi32_epi8(v), flip);
        // SAFETY: SSE4.1 (implied by the caller's features); `runs` lays out the block's values from `d` and RUN is
        // its kind (the caller's word); i steps by 16 below n, in order.
        unsafe { places.store::<RUN>(d, runs, i, q) };
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
        crate::pack::assert_quantizer_matches_scalar(super::quantize_blocks);
    }
}
