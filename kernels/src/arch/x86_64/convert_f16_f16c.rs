//! f16 ↔ f32 slice conversions with F16C: `vcvtph2ps` / `vcvtps2ph` (round to nearest even), 8 values per
//! instruction in one loop. The same values as `half`'s conversions (and IEEE 754's): only faster. `half`'s slice
//! conversions call a function per 8 values (~0.3 ns per value here), which made a MatMulNBits with f16 A and Y
//! up to 30% slower than with f32 at M = 128 (SmolLM2's 576 × 576, 2 threads, the AMX fp32 GEMM): the
//! activations' conversion to f32 rows and the output's to f16 are serial parts of the call.

use half::f16;
use std::arch::x86_64::*;

/// `dst[i] = src[i]` as f32.
///
/// # Panics
/// If the slices' lengths differ.
pub(crate) fn widen(src: &[f16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "f16 → f32: {} values into {}", src.len(), dst.len());
    // SAFETY: handed out (arch::convert_f16_for) only for CPUs with AVX2 (so AVX) and F16C; the lengths are equal.
    unsafe { widen_f16c(src, dst) }
}

/// `dst[i] = src[i]` rounded to f16 (to nearest, ties to even; NaN stays NaN, overflow gives ±inf).
///
/// # Panics
/// If the slices' lengths differ.
pub(crate) fn narrow(src: &[f32], dst: &mut [f16]) {
    assert_eq!(src.len(), dst.len(), "f32 → f16: {} values into {}", src.len(), dst.len());
    // SAFETY: as for `widen`.
    unsafe { narrow_f16c(src, dst) }
}

/// Converts `src` into `dst` (equal lengths) 8 values at a time with `cvt8(from, to)` (reads 8 `S` at `from`,
/// writes 8 `D` at `to`), unrolled by 4; the last n % 8 values through 8-value copies.
///
/// # Safety
/// `cvt8` may run on this CPU; `src.len() == dst.len()`.
#[inline(always)]
unsafe fn by_eight<S: Copy + Default, D: Copy + Default>(src: &[S], dst: &mut [D], cvt8: impl Fn(*const S, *mut D)) {
    let n = src.len();
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i + 32 <= n {
        for j in (0..32).step_by(8) {
            // SAFETY: i + j + 8 ≤ n for both slices (the lengths are equal).
            cvt8(unsafe { s.add(i + j) }, unsafe { d.add(i + j) });
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: i + 8 ≤ n for both slices.
        cvt8(unsafe { s.add(i) }, unsafe { d.add(i) });
        i += 8;
    }
    if i < n {
        let (mut a, mut b) = ([S::default(); 8], [D::default(); 8]);
        a[..n - i].copy_from_slice(&src[i..]);
        cvt8(a.as_ptr(), b.as_mut_ptr());
        dst[i..].copy_from_slice(&b[..n - i]);
    }
}

/// # Safety
/// The CPU has AVX and F16C; `src.len() == dst.len()`.
#[target_feature(enable = "avx,f16c")]
unsafe fn widen_f16c(src: &[f16], dst: &mut [f32]) {
    // SAFETY: the caller's guarantee; `by_eight` hands `cvt8` 8 readable f16 and 8 writable f32.
    unsafe { by_eight(src, dst, |s, d| _mm256_storeu_ps(d, _mm256_cvtph_ps(_mm_loadu_si128(s.cast())))) }
}

/// # Safety
/// The CPU has AVX and F16C; `src.len() == dst.len()`.
#[target_feature(enable = "avx,f16c")]
unsafe fn narrow_f16c(src: &[f32], dst: &mut [f16]) {
    // SAFETY: as in `widen_f16c`, 8 readable f32 and 8 writable f16.
    unsafe {
        by_eight(src, dst, |s, d| {
            _mm_storeu_si128(d.cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(s)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{Cpu, Feature};

    /// Every f16 bit pattern widens as `half` does, and every f32 that matters narrows as `half` does: all f16
    /// values, the midpoints between neighbours (ties to even), values just off them, the subnormal and overflow
    /// edges, NaNs and infinities; lengths 0 … 70 for the tails.
    #[test]
    fn conversions_match_half_bit_for_bit() {
        let cpu = Cpu::get();
        if !(cpu.has(Feature::Avx2) && cpu.has(Feature::F16c)) {
            eprintln!("skipped: this CPU has no AVX2 + F16C");
            return;
        }
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut wide = vec![0f32; all.len()];
        widen(&all, &mut wide);
        for (h, w) in all.iter().zip(&wide) {
            assert_eq!(w.to_bits(), h.to_f32().to_bits(), "{:#06x}", h.to_bits());
        }
        let mut fs: Vec<f32> = Vec::new();
        for h in all.iter().filter(|h| h.is_finite()) {
            let x = h.to_f32();
            let next = f16::from_bits(h.to_bits().wrapping_add(1)).to_f32();
            let mid = (x as f64 + next as f64) / 2.0;
            fs.extend([x, mid as f32, f32::from_bits((mid as f32).to_bits() + 1)]);
            fs.push(f32::from_bits((mid as f32).to_bits().wrapping_sub(1)));
        }
        fs.extend([65504.0, 65519.99, 65520.0, 1e6, -1e6, 5.9e-8, 2.9e-8, 3.0e-8, 1e-10, 0.0, -0.0]);
        fs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE]);
        let mut narrow_out = vec![f16::ZERO; fs.len()];
        narrow(&fs, &mut narrow_out);
        for (x, h) in fs.iter().zip(&narrow_out) {
            let want = f16::from_f32(*x);
            if x.is_nan() {
                assert!(h.is_nan(), "{x}");
            } else {
                assert_eq!(h.to_bits(), want.to_bits(), "{x:e} ({:#010x})", x.to_bits());
            }
        }
        for n in 0..70 {
            let src: Vec<f16> = (0..n).map(|i| f16::from_f32(i as f32 * 0.37 - 9.0)).collect();
            let mut w = vec![f32::NAN; n];
            widen(&src, &mut w);
            assert!(src.iter().zip(&w).all(|(h, w)| h.to_f32() == *w), "widen, {n} values");
            let mut back = vec![f16::NAN; n];
            narrow(&w, &mut back);
            assert_eq!(back, src, "narrow, {n} values");
        }
    }
}
