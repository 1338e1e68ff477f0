//! The walk shared by the fp32-path GEMMs that dequantize B (see `qunbp64x4_vnni` for the layout): per K piece
//! of up to [`KC`] values and per 64-column panel, the codes are turned into f32 weights `w = s·q + c`
//! (c = −s·z; without zero points c = −s·2^(bits−1)) once, into a buffer of column parts of [`Body::PART`]
//! columns, each `len × PART` f32 and contiguous (the piece, up to 256 KiB, L2-resident), and a register-blocked
//! FMA microkernel (up to [`Body::MR`] rows × PART columns) runs every row block of the tile over each part.
//! Each ISA supplies the dequantization and the microkernel ([`Body`]): AVX-512 (`qunbp64x4_panel_avx512`:
//! 12 rows × 32 columns, 24 zmm accumulators, two weight loads and `R` broadcasts of A per K value) and AVX2
//! (`qunbp64x4_panel_avx2`: 6 rows × 16 columns, 12 ymm accumulators). A is read in place: the caller's rows where
//! they are not a multiple of 4 KiB apart (`pack::f32_in_place`), else packed rows an odd number of cache lines
//! apart (`pack::f32_row_stride`), so the rows of a block fall in different L1 sets (rows of a 4096-wide A,
//! 16 KiB apart, shared one set and the GEMM ran 20% slower at K = 4096; a per-tile copy of the rows into a
//! padded buffer, which this replaces, cost ~10% at M = 512). The tile's rows are cut
//! into ⌈rows/MR⌉ blocks of as equal a size as they allow (MR = 12, 66 rows: 6 × 11, not 5 × 12 + 6), so no block runs
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
//!         buf[p][k][0..P] = s·q + c of columns Pp..Pp+P       // dequantize once (P = PART)
//!         for row block r0 .. r1 (≤ MR rows), part p:        // every row of the tile
//!             y[r][Pp..Pp+P] (+)= Σ_k a[r][k0+k]·buf[p][k][0..P]
//! ```

use super::qunbp64x4_vnni::NR;
use crate::ukernel::RunArgs;
use std::cell::RefCell;

/// Most K values per dequantized piece: 1024 × 64 f32 = 256 KiB, resident in L2 while the rows walk it (a power of
/// two, so that blocks longer than it are whole multiples of it).
pub(crate) const KC: usize = 1024;

/// What an ISA supplies to the walk: the dequantization of a piece and the microkernel over it.
pub(crate) trait Body {
    /// Rows per microkernel call, at most.
    const MR: usize;
    /// Columns per microkernel call: the buffer is `NR / PART` parts of `KC × PART` f32 (part p, row k at
    /// `p·KC·PART + k·PART`).
    const PART: usize;

    /// Writes `buf[p][k][0..PART] = s·q + c` for K values `k0 .. k0+len` (row k − k0) of `panel`'s columns.
    ///
    /// # Safety
    /// The CPU has the body's features; `a` satisfies the `RunArgs` contract for an `f32` LHS and a
    /// `qunbp64x4_sf32_zpc` RHS of `a.bits` ∈ {2, 4, 8}; `panel` is inside the tile; `k0` starts a piece of
    /// [`piece_len`] and `k0 + len ≤ blocks·bl`, `len ≤ KC`, both whole chunks (min(bl, 32) values); `buf` holds
    /// `KC·NR` f32, 64-byte aligned.
    unsafe fn dequant(a: &RunArgs, panel: usize, k0: usize, len: usize, buf: *mut f32);

    /// `rows` (1 ..= MR) rows × `PART` columns over `len` K values of one part of the buffer, into `s`.
    ///
    /// # Safety
    /// The CPU has the body's features; rows `0..rows` of `ap` (stride `rs`) hold `len` values; `b` holds `len`
    /// rows of `PART` f32, contiguous and aligned to `4·PART` bytes (as [`tile`] passes it); `len` is a multiple
    /// of 4; `s.dst` rows `0..rows` hold
    /// `s.ncols` values (and, unless `s.first`, the partial sums); `s.bias`, if not null, `s.ncols` values.
    unsafe fn micro(rows: usize, ap: *const f32, rs: usize, b: *const f32, len: usize, s: Store);
}

/// A body's [`Body::micro`]: `micro_rows!(micro(rows, (args..)); 6 5 .. 1)` calls its `micro::<R>(args..)` for
/// the run-time row count `rows`, one of the listed constants (the first is the body's MR).
macro_rules! micro_rows {
    ($micro:ident($rows:expr, $args:tt); $($r:literal)+) => {
        match $rows {
            $($r => $micro::<$r> $args,)+
            _ => unreachable!("row blocks are at most MR"),
        }
    };
}
pub(crate) use micro_rows;

/// One cache line of the buffer (the buffer is 64-byte aligned).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// Scratch of one thread: the dequantized piece (`KC × NR` f32, 64-byte aligned), kept between calls.
pub(crate) struct Scratch {
    piece: Vec<Line>,
}

impl Scratch {
    /// Runs `f` on this thread's scratch.
    pub(crate) fn with<T>(f: impl FnOnce(&mut Scratch) -> T) -> T {
        thread_local! {
            static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch { piece: Vec::new() }) };
        }
        SCRATCH.with_borrow_mut(|s| {
            if s.piece.is_empty() {
                s.piece = vec![Line([0.0; 16]); KC * NR / 16];
            }
            f(s)
        })
    }
}

/// The whole tile: each K piece, each panel dequantized once and walked by every row block.
///
/// # Safety
/// The CPU has `B`'s features. `args` satisfies the `RunArgs` contract for an `f32` LHS and a
/// `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn tile<B: Body>(args: &RunArgs, s: &mut Scratch) {
    let a = args;
    let total = a.blocks * a.bl;
    // The K tail's padding is skipped down to whole chunks (576 in blocks of 128: 576 of 640 values).
    let used = a.k_used.next_multiple_of(a.bl.min(32)).min(total);
    let buf = s.piece.as_mut_ptr().cast::<f32>();
    // Row blocks of at most MR rows, as equal as the rows allow.
    let blocks = a.rows.div_ceil(B::MR);
    let bounds = |blk: usize| (a.rows * blk / blocks, a.rows * (blk + 1) / blocks);
    let mut k0 = 0;
    while k0 < used {
        let len = piece_len(total, a.bl, k0).min(used - k0);
        let (first, last) = (k0 == 0, k0 + len == used);
        for panel in 0..a.cols.div_ceil(NR) {
            let c0 = panel * NR;
            let ncols = (a.cols - c0).min(NR);
            // SAFETY: forwarded; buf holds KC·NR f32 and len ≤ KC.
            unsafe { B::dequant(a, panel, k0, len, buf) };
            // SAFETY: the bias, if any, holds the tile's columns.
            let bias = if a.bias.is_null() || !last { std::ptr::null() } else { unsafe { a.bias.add(c0) } };
            for blk in 0..blocks {
                let (r0, r1) = bounds(blk);
                // SAFETY: rows r0..r1 of the tile hold `total` values (whole blocks), k0 + len ≤ total.
                let ap = unsafe { a.lhs.cast::<f32>().add(r0 * a.lhs_stride + k0) };
                for p in 0..NR / B::PART {
                    let c = B::PART * p;
                    if c >= ncols {
                        break;
                    }
                    // SAFETY: rows r0..r1 of A hold `len` values from ap, `lhs_stride` apart; part p of the buffer
                    // holds `len` rows of PART values; columns c0+c..c0+ncols of those output rows are the tile's.
                    unsafe {
                        let dst = a.dst.add(r0 * a.dst_stride + c0 + c);
                        let bias = if bias.is_null() { bias } else { bias.add(c) };
                        let m = Store { dst, dst_stride: a.dst_stride, ncols: ncols - c, first, bias };
                        B::micro(r1 - r0, ap, a.lhs_stride, buf.add(KC * B::PART * p), len, m);
                    }
                }
            }
        }
        k0 += len;
    }
}

/// The length of the K piece from `k0` of `total` values in blocks of `bl`: at most [`KC`] values, whole
/// blocks spread as evenly as they allow, or (blocks longer than KC, a multiple of it) KC values of one block.
pub(crate) fn piece_len(total: usize, bl: usize, k0: usize) -> usize {
    if bl >= KC {
        return (total - k0).min(KC);
    }
    let blocks = total / bl;
    let per_piece = blocks.div_ceil(blocks.div_ceil(KC / bl));
    (total - k0).min(per_piece * bl)
}

/// The K values `k0 .. k0+len` of a piece, block by block: `f(block, first chunk, end chunk)` with chunks of
/// `chunk` values counted inside the block.
pub(crate) fn piece_chunks(a: &RunArgs, chunk: usize, k0: usize, len: usize, mut f: impl FnMut(usize, usize, usize)) {
    let bl = a.bl;
    let mut k = k0;
    while k < k0 + len {
        let (b, off) = (k / bl, k % bl);
        let n = (bl - off).min(k0 + len - k);
        debug_assert!(off.is_multiple_of(chunk) && n.is_multiple_of(chunk));
        f(b, off / chunk, (off + n) / chunk);
        k += n;
    }
}

/// Where a microkernel call's `R × PART` results go.
#[derive(Clone, Copy)]
pub(crate) struct Store {
    /// Row 0, first column of the part.
    pub(crate) dst: *mut f32,
    pub(crate) dst_stride: usize,
    /// Columns inside the tile from `dst` on (only the first `PART` are written).
    pub(crate) ncols: usize,
    /// The first piece stores; later ones add to what is there.
    pub(crate) first: bool,
    /// The part's bias on the last piece, else null.
    pub(crate) bias: *const f32,
}
