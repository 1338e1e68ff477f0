//! The AVX-512 body of the dequantizing fp32 GEMM walk (`qunbp64x4_panel`): parts of 32 columns (two zmm per
//! K value), a microkernel of up to 12 rows × 32 columns (24 accumulators, two weight loads and `R` broadcasts
//! of A per K value).

// Register tiles are indexed [row][column group]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use super::qunbp64x4_panel::{Body, KC, Store, micro_rows, piece_chunks};
use super::qunbp64x4_vnni::{KR, NR};
use crate::ukernel::RunArgs;
use std::arch::x86_64::*;

/// Column groups of 16 in a panel.
const G: usize = NR / 16;
/// Column groups of 16 per microkernel call.
const GM: usize = 2;
/// K values per microkernel loop step (pieces are whole blocks of at least 16 values, or KC).
const U: usize = 4;

/// The AVX-512 body (features: avx512f).
pub(crate) struct Avx512;

impl Body for Avx512 {
    const MR: usize = 12;
    const PART: usize = 16 * GM;

    #[target_feature(enable = "avx512f")]
    unsafe fn dequant(a: &RunArgs, panel: usize, k0: usize, len: usize, buf: *mut f32) {
        // SAFETY: forwarded (the trait's contract).
        unsafe { crate::arch::dispatch!(dequant::<>(a, panel, k0, len, buf); bits(a.bits) chunk(a.bl)) }
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn micro(rows: usize, ap: *const f32, rs: usize, b: *const f32, len: usize, s: Store) {
        // SAFETY: forwarded (the trait's contract); rows ≤ MR.
        unsafe { micro_rows!(micro(rows, (ap, rs, b, len, s)); 12 11 10 9 8 7 6 5 4 3 2 1) }
    }
}

/// [`Body::dequant`] with the bit width and chunk length (min(bl, 32)) as constants: 16 columns per zmm, part
/// `g / GM`, columns `16·(g % GM)` of each buffer row.
///
/// # Safety
/// As [`Body::dequant`]; the CPU has avx512f.
#[target_feature(enable = "avx512f")]
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
    let field = _mm512_set1_epi32(((1u32 << BITS) - 1) as i32);
    let has_zp = a.has_zp != 0;
    let mid = (1u32 << (BITS - 1)) as f32;
    // SAFETY: panel < the tile's panels, inside the packed weights (RunArgs contract).
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    piece_chunks(a, CHUNK, k0, len, |b, c_first, c_end| {
        // SAFETY: block b < blocks (inside the piece): its record of this panel.
        let rec = unsafe { prec.add(b * a.rhs_record) };
        // SAFETY: this record's f32 scales (and corrections) of the panel's 64 columns.
        let (sc, zc) = unsafe {
            let s = rec.add(a.rhs_scales).cast::<f32>();
            let z = rec.add(a.rhs_zp).cast::<f32>();
            let sc: [__m512; G] = std::array::from_fn(|g| _mm512_loadu_ps(s.add(16 * g)));
            let zc: [__m512; G] = std::array::from_fn(|g| {
                if has_zp { _mm512_loadu_ps(z.add(16 * g)) } else { _mm512_mul_ps(sc[g], _mm512_set1_ps(-mid)) }
            });
            (sc, zc)
        };
        for c in c_first..c_end {
            for grp in 0..groups {
                for g in 0..G {
                    // SAFETY: chunk c, group grp, column group g of the record's codes (64 bytes).
                    let v = unsafe { _mm512_loadu_si512(rec.add(c * chunk_bytes + grp * NR * KR + 64 * g).cast()) };
                    for l in 0..cpb {
                        for i in 0..KR {
                            let sh = _mm_cvtsi32_si128((8 * i + l * BITS) as i32);
                            let q = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srl_epi32(v, sh), field));
                            let kk = b * bl + c * CHUNK + l * lane_len + KR * grp + i - k0;
                            // SAFETY: kk < len: row kk of the buffer, columns 16g..16g+16.
                            unsafe {
                                _mm512_store_ps(
                                    buf.add((g / GM) * KC * 16 * GM + kk * 16 * GM + 16 * (g % GM)),
                                    _mm512_fmadd_ps(q, sc[g], zc[g]),
                                )
                            };
                        }
                    }
                }
            }
        }
    });
}

/// `R` rows × `16·GM` columns over `len` K values of the buffer.
///
/// # Safety
/// As [`Body::micro`] with `rows = R`; the CPU has avx512f; `buf` 64-byte aligned.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn micro<const R: usize>(ap: *const f32, rs: usize, buf: *const f32, len: usize, s: Store) {
    let mut acc = [[_mm512_setzero_ps(); GM]; R];
    // Rows in threes from one moving pointer each (row 3j + i at p[j] + i·rs): each broadcast is one
    // base + index·scale + displacement load, and a step of U values moves 4 pointers, not 12 addresses.
    let mut p: [*const f32; 4] = std::array::from_fn(|j| ap.wrapping_add(3 * j * rs));
    let mut b = buf;
    debug_assert!(len.is_multiple_of(U));
    for _ in 0..len / U {
        for u in 0..U {
            // SAFETY: row k of the buffer, k < len.
            let w: [__m512; GM] = std::array::from_fn(|g| unsafe { _mm512_load_ps(b.add(u * 16 * GM + 16 * g)) });
            for r in 0..R {
                // SAFETY: value k of row r, k < len.
                let x = _mm512_set1_ps(unsafe { *p[r / 3].add((r % 3) * rs + u) });
                for g in 0..GM {
                    acc[r][g] = _mm512_fmadd_ps(w[g], x, acc[r][g]);
                }
            }
        }
        p = p.map(|q| q.wrapping_add(U));
        b = b.wrapping_add(U * 16 * GM);
    }
    for g in 0..GM {
        let col = 16 * g;
        if col >= s.ncols {
            break;
        }
        let n = (s.ncols - col).min(16);
        let m: __mmask16 = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
        // SAFETY: the bias holds ncols values; the mask covers col..col+n.
        let bias = if s.bias.is_null() { None } else { Some(unsafe { _mm512_maskz_loadu_ps(m, s.bias.add(col)) }) };
        for r in 0..R {
            // SAFETY: row r, columns col..col+n (masked) of the tile's output.
            unsafe {
                let p = s.dst.add(r * s.dst_stride + col);
                let mut y = acc[r][g];
                if !s.first {
                    y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, p));
                }
                if let Some(b) = bias {
                    y = _mm512_add_ps(y, b);
                }
                _mm512_mask_storeu_ps(p, m, y);
            }
        }
    }
}
