//! The body shared by the AVX-512 fp32-path kernels on `qunbp64x4_sf32_zpc` weights (see `qunbp64x4_vnni` for
//! the layout). Codes are turned into f32 in registers, never into a dequantized copy of B: for byte i of a
//! dword lane and code lane l, `(v >> (8i + l·bits)) & mask` gives the 16 columns' codes of one K value, which
//! `vcvtdq2ps` makes f32 and one FMA multiplies with the broadcast activation. Per (row, column, block):
//! `acc = Σ a·q` in f32, then `y += s·acc + c·Σa` (c = −s·z; without zero points c = −s·2^(bits−1)), Σa
//! summed from the block's activations in the same pass.

// Register tiles are indexed [row][column group]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use super::qunbp64x4_vnni::{KR, NR};
use crate::ukernel::RunArgs;
use std::arch::x86_64::*;

/// [`unit_c`] with the chunk length (16 or 32) as a constant, so that every loop inside a block unrolls.
///
/// # Safety
/// As [`unit_c`].
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn unit<const R: usize, const G: usize, const BITS: usize>(
    args: &RunArgs,
    panel: usize,
    unit: usize,
    lhs: *const f32,
    dst: *mut f32,
) {
    // SAFETY: forwarded.
    unsafe { crate::arch::dispatch!(unit_c::<R, G, BITS>(args, panel, unit, lhs, dst); chunk(args.bl)) }
}

/// One unit of a tile: rows `0..R` (R ≤ 6) × the `G` groups of 16 columns of `panel` starting at group
/// `unit·G`, over all K, `BITS`-bit codes. `lhs` is the tile's first f32 row (stride `args.lhs_stride`), `dst`
/// its output row 0 at the tile's column 0. Columns past `args.cols` are computed, never stored.
///
/// # Safety
/// The CPU has avx512f. `args` satisfies the `RunArgs` contract for an `f32` LHS and a `qunbp64x4_sf32_zpc`
/// RHS; `lhs` and `dst` point at a row of that tile that has at least `R` rows from there.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn unit_c<const R: usize, const G: usize, const BITS: usize, const CHUNK: usize>(
    args: &RunArgs,
    panel: usize,
    unit: usize,
    lhs: *const f32,
    dst: *mut f32,
) {
    let a = args;
    let bl = a.bl;
    let chunk = CHUNK;
    debug_assert_eq!(bl.min(32), CHUNK);
    let cpb = 8 / BITS;
    let lane_len = chunk / cpb;
    let groups = lane_len / KR;
    let chunk_bytes = chunk * NR * BITS / 8;
    let field = _mm512_set1_epi32(((1u32 << BITS) - 1) as i32);
    let has_zp = a.has_zp != 0;
    let mid = (1u32 << (BITS - 1)) as f32;
    debug_assert!(panel < a.cols.div_ceil(NR) && unit < NR / (16 * G) && R <= 6);
    // SAFETY: panel < the tile's panels, inside the packed weights (RunArgs contract).
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    let c0 = panel * NR + unit * 16 * G;
    let mut f = [[_mm512_setzero_ps(); G]; R];
    for b in 0..a.blocks {
        // SAFETY: row r's block b: bl f32 values at lhs + r·stride + b·bl.
        let arow: [*const f32; R] = std::array::from_fn(|r| unsafe { lhs.add(r * a.lhs_stride + b * bl) });
        // SAFETY: block b's record of this panel.
        let rec = unsafe { prec.add(b * a.rhs_record) };
        let mut acc = [[_mm512_setzero_ps(); G]; R];
        for c in 0..bl / chunk {
            for grp in 0..groups {
                // SAFETY: chunk c, group grp, column groups unit·G.. of the record's codes.
                let base = unsafe { rec.add(c * chunk_bytes + grp * NR * KR + unit * 64 * G) };
                // SAFETY: 64 bytes inside the record.
                let v: [__m512i; G] = std::array::from_fn(|g| {
                    // SAFETY: one vector of codes inside the record.
                    unsafe { _mm512_loadu_si512(base.add(64 * g).cast()) }
                });
                for l in 0..cpb {
                    for i in 0..KR {
                        let sh = _mm_cvtsi32_si128((8 * i + l * BITS) as i32);
                        let w: [__m512; G] = std::array::from_fn(|g| {
                            _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srl_epi32(v[g], sh), field))
                        });
                        let k = c * chunk + l * lane_len + KR * grp + i;
                        for r in 0..R {
                            // SAFETY: k < bl: inside row r's block.
                            let x = _mm512_set1_ps(unsafe { *arow[r].add(k) });
                            for g in 0..G {
                                acc[r][g] = _mm512_fmadd_ps(w[g], x, acc[r][g]);
                            }
                        }
                    }
                }
            }
        }
        // Σa of each row's block (16 lanes, then one reduction).
        let asum: [f32; R] = std::array::from_fn(|r| {
            let mut s = _mm512_setzero_ps();
            for k in (0..bl).step_by(16) {
                // SAFETY: k + 16 <= bl values of row r's block.
                s = _mm512_add_ps(s, unsafe { _mm512_loadu_ps(arow[r].add(k)) });
            }
            _mm512_reduce_add_ps(s)
        });
        let (sc, zc) = {
            // SAFETY: this record's scales (and corrections) of the unit's columns, f32.
            unsafe {
                let s = rec.add(a.rhs_scales + 4 * 16 * G * unit).cast::<f32>();
                let z = rec.add(a.rhs_zp + 4 * 16 * G * unit).cast::<f32>();
                let sc: [__m512; G] = std::array::from_fn(|g| _mm512_loadu_ps(s.add(16 * g)));
                let zc: [__m512; G] = std::array::from_fn(|g| {
                    if has_zp { _mm512_loadu_ps(z.add(16 * g)) } else { _mm512_mul_ps(sc[g], _mm512_set1_ps(-mid)) }
                });
                (sc, zc)
            }
        };
        for r in 0..R {
            let x = _mm512_set1_ps(asum[r]);
            for g in 0..G {
                f[r][g] = _mm512_fmadd_ps(zc[g], x, _mm512_fmadd_ps(acc[r][g], sc[g], f[r][g]));
            }
        }
    }
    for r in 0..R {
        for g in 0..G {
            let col = c0 + 16 * g;
            if col >= a.cols {
                break;
            }
            let n = (a.cols - col).min(16);
            let m: __mmask16 = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
            let mut y = f[r][g];
            if !a.bias.is_null() {
                // SAFETY: bias holds `cols` values; the mask covers columns col..col+n < cols.
                y = _mm512_add_ps(y, unsafe { _mm512_maskz_loadu_ps(m, a.bias.add(col)) });
            }
            // SAFETY: row r, columns col..col+n of the tile (masked): inside the claimed tile.
            unsafe { _mm512_mask_storeu_ps(dst.add(r * a.dst_stride + col), m, y) };
        }
    }
}
