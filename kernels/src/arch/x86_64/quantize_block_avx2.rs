//! Activation quantization with AVX2: `pack::quantize_block` bit for bit (amax, scale = amax/127,
//! q = round-half-even(x · 127/amax) clamped to ±127, Σq; a block with a NaN or an infinity gets that scale and
//! all-zero codes, as the scalar version's arithmetic gives, and so does one whose 127/amax overflows), for x86
//! CPUs without AVX-512. Block lengths are
//! multiples of 16.

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
    // SAFETY: only handed out (arch::quantize_block_for) for CPUs with avx2 (and called directly by the tests
    // only when the CPU has it); RUN is what `runs.run` is (one walk per kind of run, chosen here once per row).
    unsafe { by_run!(blocks, runs, (a, bl, dst, runs, out)) }
}

/// The row's walk and every block's body in one function (no call per block).
///
/// # Safety
/// avx2; `bl` is a multiple of 16; RUN is what `runs.run` is (as `run`).
#[target_feature(enable = "avx2")]
unsafe fn blocks<const RUN: usize>(a: &[f32], bl: usize, dst: &mut [u8], runs: Runs, out: &mut [(f32, i32)]) {
    crate::pack::for_each_block(a, bl, dst, runs, out, |a, dst| {
        // SAFETY: the CPU feature and RUN are the caller's guarantee; `a` is one block (a multiple of 16 values)
        // and every place `runs.at(i)` for i < a.len() is inside `dst` (for_each_block checked the row's places
        // and gives `dst` from the block's first place); `run` stores at places of values i < a.len() only.
        unsafe { run::<RUN>(a, dst, runs) }
    });
}

/// Horizontal max of 8 i32 lanes.
#[target_feature(enable = "avx2")]
#[inline]
fn reduce_max_epi32(v: __m256i) -> i32 {
    let m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
    let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
    _mm_cvtsi128_si32(m)
}

/// Horizontal sum of 8 i32 lanes (wrapping, as the scalar sum of at most ±127 per value cannot overflow).
#[target_feature(enable = "avx2")]
#[inline]
fn reduce_add_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// One block's (scale, Σq), its codes to their places for runs of RUN bytes (0: contiguous; 16: any multiple of
/// 16; 1: any other length, byte by byte).
///
/// # Safety
/// avx2; `runs` lays out `a.len()` values (a multiple of 16) inside `dst`, and its run is what RUN says.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn run<const RUN: usize>(a: &[f32], dst: &mut [u8], runs: Runs) -> (f32, i32) {
    let n = a.len();
    let p = a.as_ptr();
    // amax on the bits of |x|: for non-negative floats the integer order is the float order, with every NaN
    // above +inf, so a NaN anywhere leaves a NaN's bits as the maximum (the scalar fold's NaN propagation).
    let abs = _mm256_set1_epi32(0x7fff_ffff);
    let (mut m0, mut m1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for i in (0..n).step_by(16) {
        // SAFETY: i + 16 <= n values of `a`.
        let (x0, x1) = unsafe { (_mm256_loadu_si256(p.add(i).cast()), _mm256_loadu_si256(p.add(i + 8).cast())) };
        m0 = _mm256_max_epi32(m0, _mm256_and_si256(x0, abs));
        m1 = _mm256_max_epi32(m1, _mm256_and_si256(x1, abs));
    }
    let amax = f32::from_bits(reduce_max_epi32(_mm256_max_epi32(m0, m1)) as u32);
    if amax.is_nan() {
        zero_codes(dst, runs, n);
        return (f32::NAN, 0);
    }
    let scale = amax / 127.0;
    let inv = 127.0 / amax;
    if !(amax > 0.0 && amax.is_finite() && inv.is_finite()) {
        zero_codes(dst, runs, n);
        return (scale, 0);
    }
    let inv = _mm256_set1_ps(inv);
    let d = dst.as_mut_ptr();
    let flip = _mm_set1_epi8(runs.flip as i8);
    let mut places = Places::new(runs);
    let mut sum = _mm256_setzero_si256();
    for i in (0..n).step_by(16) {
        // SAFETY: i + 16 <= n values of `a`.
        let (x0, x1) = unsafe { (_mm256_loadu_ps(p.add(i)), _mm256_loadu_ps(p.add(i + 8))) };
        // MXCSR's default rounding: to nearest, ties to even (as f32::round_ties_even). No clamp needed:
        // |x| <= amax and inv = fl(127/amax) make |x · inv| <= 127·(1 + 2⁻²⁴)² < 127.5, so |q| <= 127.
        let v0 = _mm256_cvtps_epi32(_mm256_mul_ps(x0, inv));
        let v1 = _mm256_cvtps_epi32(_mm256_mul_ps(x1, inv));
        sum = _mm256_add_epi32(sum, _mm256_add_epi32(v0, v1));
        // i16 lanes [v0 0..4, v1 0..4 | v0 4..8, v1 4..8] → bytes in that order → dwords reordered to v0, v1.
        let w = _mm256_packs_epi32(v0, v1);
        let c = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
        let q = _mm_xor_si128(_mm_shuffle_epi32::<0b11_01_10_00>(c), flip);
        // SAFETY: SSE4.1 (implied by the caller's features); `runs` lays out the block's values from `d` and RUN is
        // its kind (the caller's word); i steps by 16 below n, in order.
        unsafe { places.store::<RUN>(d, runs, i, q) };
    }
    (scale, reduce_add_epi32(sum))
}

#[cfg(test)]
mod tests {
    use crate::cpu::{Cpu, Feature};

    #[test]
    fn bit_identical_to_the_scalar_quantizer() {
        if !Cpu::get().has(Feature::Avx2) {
            eprintln!("SKIP: needs avx2");
            return;
        }
        crate::pack::assert_quantizer_matches_scalar(super::quantize_blocks);
    }
}
