//! The AVX2 + FMA body of the dequantizing fp32 GEMM walk (`qunbp64x4_panel`): parts of 16 columns (two ymm per
//! K value), a microkernel of up to 6 rows × 16 columns (12 accumulators, two weight loads and `R` broadcasts of
//! A per K value: 15 of the 16 ymm registers). Dequantizing one 32-byte vector of codes (8 columns × 4 K) costs
//! a shift, a mask, a convert, an FMA and a store per K value and code lane.

// Register tiles are indexed [row][column group]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use super::qunbp64x4_panel::{Body, KC, Store, micro_rows, piece_chunks};
use super::qunbp64x4_vnni::{KR, NR};
use crate::ukernel::RunArgs;
use std::arch::x86_64::*;

/// Column groups of 8 in a panel.
const G: usize = NR / 8;
/// Column groups of 8 per microkernel call.
const GM: usize = 2;
/// Columns per part.
const PART: usize = 8 * GM;
/// K values per microkernel loop step (pieces are whole blocks of at least 16 values, or KC).
const U: usize = 4;

/// The AVX2 body (features: avx2, fma).
pub(crate) struct Avx2;

impl Body for Avx2 {
    const MR: usize = 6;
    const PART: usize = PART;

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dequant(a: &RunArgs, panel: usize, k0: usize, len: usize, buf: *mut f32) {
        // SAFETY: forwarded (the trait's contract).
        unsafe { crate::arch::dispatch!(dequant::<>(a, panel, k0, len, buf); bits(a.bits) chunk(a.bl)) }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn micro(rows: usize, ap: *const f32, rs: usize, b: *const f32, len: usize, s: Store) {
        // SAFETY: forwarded (the trait's contract); rows ≤ MR.
        unsafe { micro_rows!(micro(rows, (ap, rs, b, len, s)); 6 5 4 3 2 1) }
    }
}

/// [`Body::dequant`] with the bit width and chunk length (min(bl, 32)) as constants: 8 columns per ymm, column
/// group g in part `g / GM` at columns `8·(g % GM)` of each buffer row; one group's scales and corrections in
/// registers at a time.
///
/// # Safety
/// As [`Body::dequant`]; the CPU has avx2 and fma.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn dequant<const BITS: usize, const CHUNK: usize>(
    a: &RunArgs,
    panel: usize,
    k0: usize,
    len: usize,
    buf: *mut f32,
) {
    let bl = a.bl;
    let cpb = 8 / BITS;
    let lane_len = CHUNK / cpb;
    let groups = lane_len / KR;
    let chunk_bytes = CHUNK * NR * BITS / 8;
    let field = _mm256_set1_epi32(((1u32 << BITS) - 1) as i32);
    let has_zp = a.has_zp != 0;
    let neg_mid = _mm256_set1_ps(-((1u32 << (BITS - 1)) as f32));
    // SAFETY: panel < the tile's panels, inside the packed weights (RunArgs contract).
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    piece_chunks(a, CHUNK, k0, len, |b, c_first, c_end| {
        // SAFETY: block b < blocks (inside the piece): its record of this panel.
        let rec = unsafe { prec.add(b * a.rhs_record) };
        for g in 0..G {
            // SAFETY: this record's f32 scales (and corrections) of columns 8g..8g+8.
            let (sc, zc) = unsafe {
                let sc = _mm256_loadu_ps(rec.add(a.rhs_scales).cast::<f32>().add(8 * g));
                let zc = if has_zp {
                    _mm256_loadu_ps(rec.add(a.rhs_zp).cast::<f32>().add(8 * g))
                } else {
                    _mm256_mul_ps(sc, neg_mid)
                };
                (sc, zc)
            };
            // SAFETY: part g / GM of the buffer, columns 8·(g % GM) of its rows.
            let out = unsafe { buf.add((g / GM) * KC * PART + 8 * (g % GM)) };
            for c in c_first..c_end {
                for grp in 0..groups {
                    // SAFETY: chunk c, group grp, column group g of the record's codes (32 bytes).
                    let v = unsafe { _mm256_loadu_si256(rec.add(c * chunk_bytes + grp * NR * KR + 32 * g).cast()) };
                    for l in 0..cpb {
                        for i in 0..KR {
                            let sh = _mm_cvtsi32_si128((8 * i + l * BITS) as i32);
                            let q = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(v, sh), field));
                            let kk = b * bl + c * CHUNK + l * lane_len + KR * grp + i - k0;
                            // SAFETY: kk < len: row kk of the part, 8 columns (32-byte aligned: the buffer is
                            // 64-byte aligned and rows are 64 bytes).
                            unsafe { _mm256_store_ps(out.add(kk * PART), _mm256_fmadd_ps(q, sc, zc)) };
                        }
                    }
                }
            }
        }
    });
}

/// `R` rows × [`PART`] columns over `len` K values of the buffer.
///
/// # Safety
/// As [`Body::micro`] with `rows = R`; the CPU has avx2 and fma.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn micro<const R: usize>(ap: *const f32, rs: usize, buf: *const f32, len: usize, s: Store) {
    let mut acc = [[_mm256_setzero_ps(); GM]; R];
    // Rows in threes from one moving pointer each (row 3j + i at p[j] + i·rs): each broadcast is one
    // base + index·scale + displacement load, and a step of U values moves 2 pointers, not 6 addresses.
    let mut p: [*const f32; 2] = std::array::from_fn(|j| ap.wrapping_add(3 * j * rs));
    let mut b = buf;
    debug_assert!(len.is_multiple_of(U));
    for _ in 0..len / U {
        for u in 0..U {
            // SAFETY: row k of the buffer, k < len.
            let w: [__m256; GM] = std::array::from_fn(|g| unsafe { _mm256_load_ps(b.add(u * PART + 8 * g)) });
            for r in 0..R {
                // SAFETY: value k of row r, k < len.
                let x = _mm256_set1_ps(unsafe { *p[r / 3].add((r % 3) * rs + u) });
                for g in 0..GM {
                    acc[r][g] = _mm256_fmadd_ps(w[g], x, acc[r][g]);
                }
            }
        }
        p = p.map(|q| q.wrapping_add(U));
        b = b.wrapping_add(U * PART);
    }
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for g in 0..GM {
        let col = 8 * g;
        if col >= s.ncols {
            break;
        }
        let n = (s.ncols - col).min(8);
        let m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), lanes);
        // SAFETY: the bias holds ncols values; the mask covers col..col+n.
        let bias = if s.bias.is_null() { None } else { Some(unsafe { _mm256_maskload_ps(s.bias.add(col), m) }) };
        for r in 0..R {
            // SAFETY: row r, columns col..col+n (masked) of the tile's output.
            unsafe {
                let p = s.dst.add(r * s.dst_stride + col);
                let mut y = acc[r][g];
                if !s.first {
                    y = _mm256_add_ps(y, _mm256_maskload_ps(p, m));
                }
                if let Some(b) = bias {
                    y = _mm256_add_ps(y, b);
                }
                _mm256_maskstore_ps(p, m, y);
            }
        }
    }
}
