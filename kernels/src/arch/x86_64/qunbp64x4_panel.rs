//! The body shared by the AVX-512 fp32-path GEMM that dequantizes B (see `qunbp64x4_vnni` for the layout):
//! per K piece of up to [`KC`] values and per 64-column panel, the codes are turned into f32 weights
//! `w = s·q + c` (c = −s·z; without zero points c = −s·2^(bits−1)) once, into a buffer of two 32-column
//! halves, each `len × 32` f32 and contiguous (up to 128 KiB each, L2-resident), and a register-blocked FMA
//! microkernel (`R` ≤ [`MR`] = 12 rows × 32 columns: 24 accumulators, two weight loads and `R` broadcasts of A
//! per K value) runs every row block of the tile over each half. A is read in place: the caller's rows where
//! they are not a multiple of 4 KiB apart (`pack::f32_in_place`), else packed rows an odd number of cache lines
//! apart (`pack::f32_row_stride`), so the 12 rows of a block fall in different L1 sets (rows of a 4096-wide A,
//! 16 KiB apart, shared one set and the GEMM ran 20% slower at K = 4096; a per-tile copy of the rows into a
//! padded buffer, which this replaces, cost ~10% at M = 512). The tile's rows are cut
//! into ⌈rows/12⌉ blocks of as equal a size as they allow (66 rows: 6 × 11, not 5 × 12 + 6), so no block runs
//! with too few accumulators to cover the FMA latency.
//! Output rows hold the partial sums between pieces (stored after the first piece, loaded and added after the
//! others); the bias is added after the last. The buffers are per thread and kept between calls.
//!
//! Pieces are as even as whole blocks allow (K = 1536 in blocks of 32: two pieces of 768, not 1024 + 512). Piece
//! length, measured on an Intel Xeon (Cascade Lake, 2 cores, KVM guest, AVX-512 VNNI, another job on the
//! machine) timing the tiles alone with the lengths interleaved in one process, M = 128, 4096×4096,
//! 2048→8192, 576→1536: KC = 256 → 512 took the kernel from ~47–50 to ~50–54 GMAC/s (every micro call ends
//! with a load-add-store of its 24 accumulators; 512 halves them); 128 and 64 were slower (42–46 and 34–41
//! GMAC/s, though the 32-column half then fits L1), 1024 no faster than 512. With A read in place and tiles of
//! up to 256 rows (below), 1024 measured 2–5% faster than 512 at M = 128 and 512 on the same machine (best of
//! 3–5 in turns, 1 thread: 576×576 129 → 134 GFLOP/s, 1536×576 124 → 132, 4096×4096 122 → 129, 8192×2048
//! 125 → 128), and K = 576 is then one piece: KC = 1024.
//!
//! Reading A in place, the 4-pointer addressing of the microkernel (12 address computations per K value left the
//! loop at 53 µops per 24 FMAs, front-end bound) and tiles of up to 256 rows (a dequantized piece shared by
//! more rows) took the tiles alone from 100–106 to 121–125 GFLOP/s at M = 512 and from 101–106 to 119–130 at
//! M = 128 on 1536×576, 576×1536 and 576×576 (Intel Xeon Cascade Lake, KVM guest, 1 thread, peak ~150 GFLOP/s
//! measured with 24 independent FMA chains; `cargo run --release -p nibble-kernels --example gemm_time`, variants
//! in turns, best of 4–6).
//!
//! ```text
//! for piece (k0 .. k0+len):       // whole blocks, or KC values of one block; len ≤ KC; the last one ends at K
//!                                 // rounded up to a chunk (RunArgs::k_used: no work on the tail's padding)
//!     for panel:                  // 64 columns
//!         buf[h][k][0..32] = s·q + c of columns 32h..32h+32   // dequantize once
//!         for row block r0 .. r1 (≤ 12 rows), half h:        // every row of the tile
//!             y[r][32h..32h+32] (+)= Σ_k a[r][k0+k]·buf[h][k][0..32]
//! ```

// Register tiles are indexed [row][column group]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use super::qunbp64x4_vnni::{KR, NR};
use crate::ukernel::RunArgs;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Most K values per dequantized piece: 1024 × 64 f32 = 256 KiB, resident in L2 while the rows walk it (a power of
/// two, so that blocks longer than it are whole multiples of it).
pub(crate) const KC: usize = 1024;
/// Column groups of 16 in a panel.
const G: usize = NR / 16;

/// Rows per microkernel call.
pub(crate) const MR: usize = 12;
/// Column groups of 16 per microkernel call.
const GM: usize = 2;
/// K values per microkernel loop step (pieces are whole blocks of at least 16 values, or KC).
const U: usize = 4;

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

/// Scratch of one thread: the dequantized piece (two halves of `KC × 32` f32, 64-byte aligned), kept between
/// calls.
pub(crate) struct Scratch {
    piece: Vec<__m512>,
}

impl Scratch {
    /// Runs `f` on this thread's scratch.
    pub(crate) fn with<T>(f: impl FnOnce(&mut Scratch) -> T) -> T {
        thread_local! {
            static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch { piece: Vec::new() }) };
        }
        SCRATCH.with_borrow_mut(|s| {
            if s.piece.is_empty() {
                // SAFETY: all-zero bits are a valid __m512.
                s.piece = vec![unsafe { std::mem::zeroed::<__m512>() }; KC * G];
            }
            f(s)
        })
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
    // The K tail's padding is skipped down to whole chunks (576 in blocks of 128: 576 of 640 values).
    let used = a.k_used.next_multiple_of(a.bl.min(32)).min(total);
    let buf = s.piece.as_mut_ptr().cast::<f32>();
    // Row blocks of at most MR rows, as equal as the rows allow.
    let blocks = a.rows.div_ceil(MR);
    let bounds = |blk: usize| (a.rows * blk / blocks, a.rows * (blk + 1) / blocks);
    let mut k0 = 0;
    while k0 < used {
        let len = piece_len(total, a.bl, k0).min(used - k0);
        let (first, last) = (k0 == 0, k0 + len == used);
        for panel in 0..a.cols.div_ceil(NR) {
            let c0 = panel * NR;
            let ncols = (a.cols - c0).min(NR);
            // SAFETY: forwarded; buf holds KC·NR f32 and len ≤ KC.
            unsafe { crate::arch::dispatch!(dequant::<>(a, panel, k0, len, buf); bits(a.bits) chunk(a.bl)) };
            // SAFETY: the bias, if any, holds the tile's columns.
            let bias = if a.bias.is_null() || !last { std::ptr::null() } else { unsafe { a.bias.add(c0) } };
            for blk in 0..blocks {
                let (r0, r1) = bounds(blk);
                // SAFETY: rows r0..r1 of the tile hold `total` values (whole blocks), k0 + len ≤ total.
                let ap = unsafe { a.lhs.cast::<f32>().add(r0 * a.lhs_stride + k0) };
                for h in 0..G / GM {
                    let c = 16 * GM * h;
                    if c >= ncols {
                        break;
                    }
                    // SAFETY: rows r0..r1 of A hold `len` values from ap, `lhs_stride` apart; half h of the buffer
                    // holds `len` rows of 16·GM values; columns c0+c..c0+ncols of those output rows are the tile's.
                    unsafe {
                        let dst = a.dst.add(r0 * a.dst_stride + c0 + c);
                        let bias = if bias.is_null() { bias } else { bias.add(c) };
                        let m = Store { dst, dst_stride: a.dst_stride, ncols: ncols - c, first, bias };
                        let b = buf.add(KC * 16 * GM * h);
                        crate::arch::x86_64::qunbp64x4_panel::rows!(r1 - r0, ap, a.lhs_stride, b, len, m; 12 11 10 9 8 7 6 5 4 3 2 1);
                    }
                }
            }
        }
        k0 += len;
    }
}

/// The length of the K piece from `k0` of `total` values in blocks of `bl`: at most [`KC`] values, whole
/// blocks spread as evenly as they allow, or (blocks longer than KC, a multiple of it) KC values of one block.
fn piece_len(total: usize, bl: usize, k0: usize) -> usize {
    if bl >= KC {
        return (total - k0).min(KC);
    }
    let blocks = total / bl;
    let per_piece = blocks.div_ceil(blocks.div_ceil(KC / bl));
    (total - k0).min(per_piece * bl)
}

/// Writes `buf[h][k][0..32] = s·q + c` (columns 32h .. 32h+32, halves [`KC`]·32 values apart) for K values
/// `k0 .. k0+len` of `panel` (`k0` a multiple of the piece length; a piece is whole blocks or part of one
/// block, in whole chunks of `CHUNK` = min(bl, 32) values).
///
/// # Safety
/// The CPU has avx512f; `args` as for [`tile`]; `panel` inside the tile; `k0 + len ≤ blocks·bl`, `len ≤ KC`;
/// `buf` holds `KC·64` f32.
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
/// The CPU has avx512f; rows `0..R` of `ap` (stride `rs`) hold `len` values; `buf` holds `len` rows of
/// `16·GM` f32, contiguous; `s.dst` rows `0..R` hold `s.ncols` values (and, unless `s.first`, the partial sums); `s.bias`, if not
/// null, `s.ncols` values.
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
