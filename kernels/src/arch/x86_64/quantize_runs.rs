//! What the x86 activation quantizers (`quantize_block_avx2`, `quantize_block_avx512`) share: the choice of a
//! store path per kind of run, once per row ([`by_run!`]), the zero codes of a block the vector path does not take
//! ([`zero_codes`]), and the store of 16 codes at their packed places ([`Places`]).

use crate::pack::Runs;
use std::arch::x86_64::*;

/// Calls `$blocks::<RUN>($args)` with RUN the kind of `$runs`: 0 contiguous, 16 runs of 16·n, 8, 4, 1 any other.
macro_rules! by_run {
    ($blocks:ident, $runs:expr, ($($args:expr),*)) => {
        match $runs.run {
            _ if $runs.run == $runs.stride => $blocks::<0>($($args),*),
            r if r.is_multiple_of(16) => $blocks::<16>($($args),*),
            8 => $blocks::<8>($($args),*),
            4 => $blocks::<4>($($args),*),
            _ => $blocks::<1>($($args),*),
        }
    };
}
pub(super) use by_run;

/// The codes of a block of `n` values laid out by `runs` in `dst`, all zero (a NaN, an infinity, an all-zero block
/// or one whose 127/amax overflows).
pub(super) fn zero_codes(dst: &mut [u8], runs: Runs, n: usize) {
    for r in 0..n / runs.run {
        dst[r * runs.stride..][..runs.run].fill(runs.flip);
    }
}

/// Where a block's next 16 codes go, kept without dividing: `pos` (the chunk's first place) and what is left of
/// its run.
pub(super) struct Places {
    pos: usize,
    left: usize,
}

impl Places {
    pub(super) fn new(runs: Runs) -> Places {
        Places { pos: 0, left: runs.run }
    }

    /// Stores the 16 codes `q` of values i .. i + 16 (the next 16 after the last call's) for runs of RUN bytes
    /// (0: contiguous; 16: any multiple of 16; 1: any other length, byte by byte).
    ///
    /// # Safety
    /// SSE4.1; `runs` lays out the block's values inside `d` (its first place) and its run is what RUN says; i
    /// is a multiple of 16 below the block's length, and the calls come in order of i.
    #[target_feature(enable = "sse4.1")]
    #[inline]
    pub(super) unsafe fn store<const RUN: usize>(&mut self, d: *mut u8, runs: Runs, i: usize, q: __m128i) {
        let (pos, run, stride) = (self.pos, runs.run, runs.stride);
        // SAFETY: `pos` is `runs.at(i)`; each store covers the places of values i .. i + 16 only (whole runs, or
        // parts of runs that start at those values' places), all inside the block's places (the caller's word).
        unsafe {
            match RUN {
                0 => _mm_storeu_si128(d.add(i).cast(), q),
                16 => {
                    _mm_storeu_si128(d.add(pos).cast(), q);
                    self.pos += 16;
                    self.left -= 16;
                    if self.left == 0 {
                        self.pos += stride - run;
                        self.left = run;
                    }
                }
                8 => {
                    _mm_storel_epi64(d.add(pos).cast(), q);
                    _mm_storel_epi64(d.add(pos + stride).cast(), _mm_unpackhi_epi64(q, q));
                    self.pos += 2 * stride;
                }
                4 => {
                    d.add(pos).cast::<i32>().write_unaligned(_mm_cvtsi128_si32(q));
                    d.add(pos + stride).cast::<i32>().write_unaligned(_mm_extract_epi32::<1>(q));
                    d.add(pos + 2 * stride).cast::<i32>().write_unaligned(_mm_extract_epi32::<2>(q));
                    d.add(pos + 3 * stride).cast::<i32>().write_unaligned(_mm_extract_epi32::<3>(q));
                    self.pos += 4 * stride;
                }
                _ => {
                    let mut bytes = [0u8; 16];
                    _mm_storeu_si128(bytes.as_mut_ptr().cast(), q);
                    for (j, &b) in bytes.iter().enumerate() {
                        *d.add(runs.at(i + j)) = b;
                    }
                }
            }
        }
    }
}
