//! The body shared by the AVX-512 fp32-path GEMM that dequantizes B (see `qunbp64x4_vnni` for the layout):
//! per K piece of up to [`KC`] values and per 64-column panel, the codes are turned into f32 weights
//! `w = s·q + c` (c = −s·z; without zero points c = −s·2^(bits−1)) once, into a `KC × 64` f32 buffer (64 KiB,
//! L2-resident), and a register-blocked FMA microkernel (`R` ≤ [`MR`] = 12 rows × 32 columns: 24 accumulators,
//! two weight loads and `R` broadcasts of A per K value) runs every row of the tile over each half of it. The
//! tile's rows of A for the piece are copied once (row by row, one cache line of padding between rows: in
//! place, the rows of a 4096-wide A share L1 sets and the GEMM ran 20% slower at K = 4096; interleaving the
//! 12 rows per K value measured slower than this copy).
//! Output rows hold the partial sums between pieces (stored after the first piece, loaded and added after the
//! others); the bias is added after the last.
//!
//! ```text
//! for piece (k0 .. k0+KC):        // whole blocks, or KC values of one block
//!     ap[r][0..KC] = a[r][k0..k0+KC]
//!     for panel:                  // 64 columns
//!         buf[k][0..64] = s·q + c // dequantize once
//!         for rows r0 .. r0+12, half h: // every row of the tile
//!             y[r][32h..32h+32] (+)= Σ_k ap[r][k]·buf[k][32h..32h+32]
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
    ($rows:expr, $ap:expr, $rs:expr, $b:expr, $len:expr, $m:expr; $($r:literal)+) => {
        match $rows {
            $($r => micro::<$r>($ap, $rs, $b, $len, $m),)+
            _ => unreachable!("row blocks are at most MR"),
        }
    };
}
use rows;

/// Values per row of the copied A piece: KC plus one cache line, so that the rows of a register block do not
/// share L1 sets (rows of a 4096-wide A are 16 KiB apart: 12 of them in one 8-way set thrash it).
const A_STRIDE: usize = KC + 16;

/// Scratch of one tile: the dequantized piece (`KC × 64` f32, 64-byte aligned) and the tile's rows of A for the
/// piece (`A_STRIDE` apart).
pub(crate) struct Scratch {
    piece: Vec<__m512>,
    a: Vec<f32>,
}

impl Scratch {
    pub(crate) fn new(rows: usize) -> Self {
        // SAFETY: all-zero bits are a valid __m512.
        let piece = vec![unsafe { std::mem::zeroed::<__m512>() }; KC * G];
        Scratch { piece, a: vec![0.0; rows * A_STRIDE] }
    }
}

/// The whole tile: each K piece, each panel dequantized once and walked by every row block.
///
/// # Safety
/// The CPU has avx512f. `args` satisfies the `RunArgs` contract for an `f32` LHS and a `qunbp64x4_sf32_zpc`
/// RHS of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn tile(args: &RunArgs, s: &mut Scratch) {
    let a = args;
    let total = a.blocks * a.bl;
    assert!(s.a.len() >= a.rows * A_STRIDE, "scratch for {} rows", a.rows);
    let buf = s.piece.as_mut_ptr().cast::<f32>();
    let mut k0 = 0;
    while k0 < total {
        let len = (total - k0).min(KC);
        let (first, last) = (k0 == 0, k0 + len == total);
        for r in 0..a.rows {
            // SAFETY: row r of the tile holds `total` values (padded to whole blocks), k0 + len ≤ total.
            let src = unsafe { std::slice::from_raw_parts(a.lhs.cast::<f32>().add(r * a.lhs_stride + k0), len) };
            s.a[r * A_STRIDE..][..len].copy_from_slice(src);
        }
        for panel in 0..a.cols.div_ceil(NR) {
            let c0 = panel * NR;
            let ncols = (a.cols - c0).min(NR);
            // SAFETY: forwarded; buf holds KC·NR f32 and len ≤ KC.
            unsafe { crate::arch::dispatch!(dequant::<>(a, panel, k0, len, buf); bits(a.bits) chunk(a.bl)) };
            let mut r0 = 0;
            while r0 < a.rows {
                let rows = (a.rows - r0).min(MR);
                let ap = s.a[r0 * A_STRIDE..].as_ptr();
                // SAFETY: rows r0..r0+rows of the copy hold `len` values, `A_STRIDE` apart; columns c0..c0+ncols
                // of those output rows are the tile's.
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
                        crate::arch::x86_64::qunbp64x4_panel::rows!(rows, ap, A_STRIDE, b, len, m; 12 11 10 9 8 7 6 5 4 3 2 1);
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
        debug_assert!(off.is_multiple_of(CHUNK) && n.is_multiple_of(CHUNK));
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

/// Where a microkernel call's `R × 16·GM` results go.
#[derive(Clone, Copy)]
struct Store {
    /// Row 0, first column of the panel.
    dst: *mut f32,
    dst_stride: usize,
    /// Columns inside the tile from `dst` on (only the first `16·GM` are written).
    ncols: usize,
    /// The first piece stores; later ones add to what is there.
    first: bool,
    /// The panel's bias on the last piece, else null.
    bias: *const f32,
}

/// `R` rows × `16·GM` columns over `len` K values of the buffer.
///
/// # Safety
/// The CPU has avx512f; rows `0..R` of `ap` (stride `rs`) hold `len` values; `buf` rows of 64 f32 (stride
/// [`NR`]) hold `len` rows of `16·GM` values; `s.dst` rows `0..R` hold `s.ncols` values (and, unless `s.first`, the partial sums); `s.bias`, if not
/// null, `s.ncols` values.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn micro<const R: usize>(ap: *const f32, rs: usize, buf: *const f32, len: usize, s: Store) {
    let mut acc = [[_mm512_setzero_ps(); GM]; R];
    for k in 0..len {
        // SAFETY: row k of the buffer.
        let w: [__m512; GM] = std::array::from_fn(|g| unsafe { _mm512_load_ps(buf.add(k * NR + 16 * g)) });
        for r in 0..R {
            // SAFETY: value k of row r, k < len.
            let x = _mm512_set1_ps(unsafe { *ap.add(k + r * rs) });
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
