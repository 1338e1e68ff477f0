//! The body shared by the AVX-512 fp32-path GEMM that dequantizes B (see `qunbp64x4_vnni` for the layout):
//! per 64-column panel and per K piece of up to [`KC`] values, the codes are turned into f32 weights
//! `w = s·q + c` (c = −s·z; without zero points c = −s·2^(bits−1)) once, into a `KC × 64` f32 buffer that stays
//! in L1/L2, and a register-blocked FMA microkernel (`R` ≤ 6 rows × 64 columns: 24 accumulators, four weight
//! loads and `R` broadcasts per K value) runs every row of the tile over it. The tile's rows of A are packed per
//! piece (6 rows interleaved per K value), once for all panels. Output rows hold the partial sums
//! between pieces (stored after the first piece, loaded and added after the others); the bias is added after
//! the last.
//!
//! ```text
//! for piece (k0 .. k0+KC):        // whole blocks, or KC values of one block
//!     ap = rows of A, k0 .. k0+KC // packed [row block][k][6]
//!     for panel:                  // 64 columns
//!         buf[k][0..64] = s·q + c // dequantize once
//!         for rows r0 .. r0+6:    // every row of the tile
//!             y[r][0..64] (+)= Σ_k ap[r][k]·buf[k]
//! ```

// Register tiles are indexed [row][column group]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use super::qunbp64x4_vnni::{KR, NR};
use crate::ukernel::RunArgs;
use std::arch::x86_64::*;

/// K values per dequantized piece: 256 × 64 f32 = 64 KiB, resident in L2 while the rows walk it.
pub(crate) const KC: usize = 256;
/// Column groups of 16 in a panel.
const G: usize = NR / 16;

/// Rows per microkernel call.
pub(crate) const MR: usize = 12;
/// Column groups of 16 per microkernel call.
const GM: usize = 2;

/// Calls `micro::<R>` for the run-time row count `$rows` (one of the listed constants, the first = MR).
macro_rules! rows {
    ($rows:expr, $ap:expr, $b:expr, $len:expr, $m:expr; $($r:literal)+) => {
        match $rows {
            $($r => micro::<$r>($ap, $b, $len, $m),)+
            _ => unreachable!("row blocks are at most MR"),
        }
    };
}
use rows;

/// Scratch of one tile: the dequantized piece (`KC × 64` f32) and the tile's rows of A for one piece, packed
/// row block by row block (`[block][k][MR]`, so the microkernel's broadcasts read consecutive addresses).
pub(crate) struct Scratch {
    piece: Vec<__m512>,
    a: Vec<f32>,
}

impl Scratch {
    pub(crate) fn new(rows: usize) -> Self {
        // SAFETY: all-zero bits are a valid __m512.
        let piece = vec![unsafe { std::mem::zeroed::<__m512>() }; KC * G];
        Scratch { piece, a: vec![0.0; rows.next_multiple_of(MR) * KC] }
    }
}

/// The whole tile: each K piece, its rows of A packed once, then each panel dequantized and walked by every
/// row block.
///
/// # Safety
/// The CPU has avx512f. `args` satisfies the `RunArgs` contract for an `f32` LHS and a `qunbp64x4_sf32_zpc`
/// RHS of `args.bits` ∈ {2, 4, 8}; `s` was made for at least `args.rows` rows.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn tile(args: &RunArgs, s: &mut Scratch) {
    let a = args;
    let total = a.blocks * a.bl;
    assert!(s.a.len() >= a.rows.next_multiple_of(MR) * KC);
    let buf = s.piece.as_mut_ptr().cast::<f32>();
    let mut k0 = 0;
    while k0 < total {
        let len = (total - k0).min(KC);
        let (first, last) = (k0 == 0, k0 + len == total);
        // Pack rows of A, values k0..k0+len: block j, value k, row r at (j·len + k)·MR + r.
        for r in 0..a.rows {
            let (j, rr) = (r / MR, r % MR);
            // SAFETY: row r of the tile holds `total` values (padded to whole blocks), k0 + len ≤ total.
            let src = unsafe { std::slice::from_raw_parts(a.lhs.cast::<f32>().add(r * a.lhs_stride + k0), len) };
            let dst = &mut s.a[j * len * MR..][..len * MR];
            for (k, &v) in src.iter().enumerate() {
                dst[k * MR + rr] = v;
            }
        }
        for panel in 0..a.cols.div_ceil(NR) {
            let c0 = panel * NR;
            let ncols = (a.cols - c0).min(NR);
            // SAFETY: forwarded; buf holds KC·NR f32 and len ≤ KC.
            unsafe { crate::arch::dispatch!(dequant::<>(a, panel, k0, len, buf); bits(a.bits) chunk(a.bl)) };
            let mut r0 = 0;
            while r0 < a.rows {
                let rows = (a.rows - r0).min(MR);
                let ap = s.a[r0 * len..].as_ptr();
                // SAFETY: rows r0..r0+rows are inside the tile, their packed values are `ap[k·MR + r]`, k < len;
                // columns c0..c0+ncols of those output rows are the tile's.
                unsafe {
                    let dst = a.dst.add(r0 * a.dst_stride + c0);
                    let bias = if a.bias.is_null() || !last { std::ptr::null() } else { a.bias.add(c0) };
                    let m = Store { dst, dst_stride: a.dst_stride, ncols, first, bias };
                    for h in 0..G / GM {
                        let (c, ncols) = (16 * GM * h, ncols.saturating_sub(16 * GM * h));
                        let bias = if m.bias.is_null() { m.bias } else { m.bias.add(c) };
                        let m = Store { dst: dst.add(c), ncols, bias, ..m };
                        if m.ncols == 0 {
                            break;
                        }
                        let b = buf.add(16 * GM * h);
                        crate::arch::x86_64::qunbp64x4_panel::rows!(rows, ap, b, len, m; 12 11 10 9 8 7 6 5 4 3 2 1);
                    }
                }
                r0 += rows;
            }
        }
        k0 += len;
    }
}

/// Writes `buf[k][0..64] = s·q + c` for K values `k0 .. k0+len` of `panel` (`k0` a multiple of the piece
/// length; a piece is whole blocks or part of one block, in whole chunks of `CHUNK` = min(bl, 32) values).
///
/// # Safety
/// The CPU has avx512f; `args` as for [`tile`]; `panel` inside the tile; `k0 + len ≤ blocks·bl`; `buf` holds
/// `len·64` f32.
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
    let mut k = k0;
    while k < k0 + len {
        let (b, off) = (k / bl, k % bl);
        let n = (bl - off).min(k0 + len - k);
        debug_assert!(off % CHUNK == 0 && n % CHUNK == 0);
        // SAFETY: block b < blocks (k < blocks·bl): its record of this panel.
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
        for c in off / CHUNK..(off + n) / CHUNK {
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
                            unsafe { _mm512_store_ps(buf.add(kk * NR + 16 * g), _mm512_fmadd_ps(q, sc[g], zc[g])) };
                        }
                    }
                }
            }
        }
        k += n;
    }
}

/// Where a microkernel call's `R × 64` results go.
#[derive(Clone, Copy)]
struct Store {
    /// Row 0, first column of the panel.
    dst: *mut f32,
    dst_stride: usize,
    /// Columns of the panel inside the tile (≤ 64).
    ncols: usize,
    /// The first piece stores; later ones add to what is there.
    first: bool,
    /// The panel's bias on the last piece, else null.
    bias: *const f32,
}

/// `R` rows × 64 columns over `len` K values of the buffer.
///
/// # Safety
/// The CPU has avx512f; `ap` holds `len·MR` f32 (value k of row r at `k·MR + r`); `buf` holds `len·64` f32; `s.dst` rows `0..R` hold `s.ncols` values (and, unless `s.first`, the partial sums); `s.bias`, if not
/// null, `s.ncols` values.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn micro<const R: usize>(ap: *const f32, buf: *const f32, len: usize, s: Store) {
    let mut acc = [[_mm512_setzero_ps(); GM]; R];
    for k in 0..len {
        // SAFETY: row k of the buffer.
        let w: [__m512; GM] = std::array::from_fn(|g| unsafe { _mm512_load_ps(buf.add(k * NR + 16 * g)) });
        for r in 0..R {
            // SAFETY: value k of row r, k < len.
            let x = _mm512_set1_ps(unsafe { *ap.add(k * MR + r) });
            for g in 0..GM {
                acc[r][g] = _mm512_fmadd_ps(w[g], x, acc[r][g]);
            }
        }
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
