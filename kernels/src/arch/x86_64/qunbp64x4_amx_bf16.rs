//! The body of the AMX fp32-path GEMM on `qunbp64x4_sf32_zpc` weights (see `qunbp64x4_vnni` for the layout):
//! f32 activations split exactly into three bf16 parts, `tdpbf16ps` on tiles of 32 rows × 32 columns, one tile
//! multiply per part and 32 K values, and a per-block AVX-512 epilogue into f32 sums.
//!
//! Why this keeps fp32 accuracy: a weight is `s·(q − z)` with an integer `q − z` of at most 9 bits (|q − z| ≤ 255),
//! which bf16 (8 significant bits with its hidden one, any integer up to 256) holds exactly. An f32 activation
//! `a` is the exact sum of three bf16 values, each its next 8 significant bits: `hi = a` with the low 16 bits of
//! its encoding cleared, `mid` the same of `a − hi` (exact: the low 16 bits of a's significand), `lo = a − hi −
//! mid` (at most 8 significant bits left: exact in bf16). Every product of a part and a code is exact in f32 (at
//! most 17 significant bits), so the tile multiply computes `Σ_k a_k·(q − z)_k` of each block with f32 additions
//! only, as an f32 GEMM would, and the epilogue multiplies by the block's scale: `y += s·C` (with zero points
//! that do not fold into the codes, `+ (c + m·s)·Σ_k a_k`, the block's activation sum computed in f32 beside the
//! split). The differences from `Σ_k a_k·w_k` in f32 are the order of the additions and the scale applied per
//! block rather than per weight: rounding of the same size as the AVX-512 FMA kernels' (the kernel suite checks
//! both against an f64 reference with the same bound). What differs from f32 arithmetic: `tdpbf16ps` treats
//! bf16 inputs below 2^−126 as zero, so activations below ~2^−103 (~1e−31) lose their `lo` part (up to 2^−16 of
//! their value), below ~2^−118 their `mid` part too (up to 2^−8), and f32 denormals count as zero; an infinite
//! activation gives NaN (`inf − inf` in the split) where f32 arithmetic may give ±inf; NaN propagates as NaN.//!
//! The walk, per tile: K in pieces of at most [`KC`] values (whole blocks, or KC values of a longer block: an
//! "entry" below is a block, or that piece of one). For each piece, every row of the tile is split once into a
//! per-thread buffer: per row and per chunk of kt = min(bl, 32) values, the kt `hi` values, then `mid`, then `lo`
//! (2·kt bytes each), rows [`row_stride`] bytes apart (never a multiple of 1 KiB: 32 rows a multiple of 1 KiB apart
//! fall in 4 of L1's 64 sets). Then per 32-column unit the piece's codes are unpacked once into AMX's B layout
//! (per entry, column group 0's entry/2 rows of 64 bytes, each 2 K values × 16 columns as bf16 pairs, then group
//! 1's) with the entries' scales and corrections, and every row tile walks them in one asm block: per entry and
//! row tile of 32 rows, per chunk 2 B loads, 3 × 2 A loads and 12 `tdpbf16ps` (6 with one half of 16 rows), then 4
//! `tilestored` into a 4 KiB buffer and per row 2 `vfmadd213ps` into the row's f32 sums (2 more with unfolded
//! zero points), software-pipelined by one entry as the int8 GEMM (`qunbp64x4_amx`). The sums of every unit
//! stay in a per-thread buffer until the last piece; the bias is added when they are stored. The K tail's padding
//! is skipped down to whole chunks, as in the FMA GEMM: entries past it are not computed, and the last one is split,
//! unpacked and multiplied only over its chunks that hold values (K = 576 in blocks of 128: 576 of 640 values;
//! 2–4% of the tiles' time for the multiplies, 2–4% more for the split and unpack, `gemm_time` in turns).
//!
//! ```text
//! for piece (entries e0 .. e1):
//!     split rows 0..rows, K values of the piece → hi | mid | lo per chunk   (and Σa per row and entry)
//!     for unit (32 columns):
//!         unpack B of the piece's entries (bf16 q − z or q − m), scales, corrections
//!         for row tile (32 rows; the last as its rows need):               // one asm block per tile shape
//!             for entry e:
//!                 C[32×32] = Σ_chunk Σ_part A_part[rows, chunk] × B[e][chunk]   // tdpbf16ps, f32
//!                 y[r][c] += C[r][c]·s[c] (+ c'[c]·Σa[r][e])
//! store y (+ bias), columns past N never
//! ```

use super::qunbp64x4_amx::{
    UNIT, Walk, WalkState, decode, fit, store_units, subtrahends, tile_config, tile_store, unit_scales, walk, walk_fn,
    when,
};
use crate::ukernel::RunArgs;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Rows of the register tile (two AMX tile halves of 16 rows; two column groups of 16 make the 32 columns).
pub(crate) const MR: usize = 32;
/// Most K values per piece: 512 values of 256 rows split into bf16 parts take 768 KiB (L2-resident while every
/// unit walks them).
pub(crate) const KC: usize = 512;
/// Most 32-column units whose f32 sums a task keeps at once (512 columns: 512 KiB at 256 rows); wider tasks (an LM
/// head's) walk their units in groups of it, splitting their rows again per group where K takes several pieces.
const GROUP_UNITS: usize = 16;
/// Bytes per entry of unpacked scales and corrections (32 f32 each).
const W_BYTES: usize = 2 * UNIT * 4;

/// The loop record: what the asm block reads, at the offsets written into it (checked below): the tile
/// configuration, the shared walk's state ([`Walk`]: `s` is Σa, entries are the piece's), then this kernel's.
#[repr(C, align(64))]
struct Loop {
    /// The tile configuration (palette 1).
    cfg: [u8; 64],
    walk: Walk,
    a_stride: usize,
    /// Bytes from a row tile's first half to its second (16 rows).
    a_half: usize,
    /// Bytes of one chunk's three parts in a row (6·kt).
    a_chunk: usize,
    /// Bytes of one part of a chunk (2·kt).
    a_part: usize,
    /// Bytes from column group 0's codes of an entry to group 1's.
    b_half: usize,
    /// Bytes of one chunk's codes of a column group (kt/2 rows of 64 bytes).
    b_chunk: usize,
    sums_row: usize,
    /// Chunks per entry.
    chunks: usize,
    /// Rows of each row tile (32, or the last tile's rows).
    rows: usize,
}

const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(Loop, walk) == 64 && offset_of!(Loop, a_stride) == 184 && offset_of!(Loop, a_half) == 192);
    assert!(offset_of!(Loop, a_chunk) == 200);
    assert!(offset_of!(Loop, a_part) == 208 && offset_of!(Loop, b_half) == 216 && offset_of!(Loop, b_chunk) == 224);
    assert!(offset_of!(Loop, sums_row) == 232 && offset_of!(Loop, chunks) == 240 && offset_of!(Loop, rows) == 248);
};

/// Scratch of one thread, kept between calls (64-byte vectors): the split rows of a piece, their Σa per entry,
/// the unpacked codes, scales and corrections of one unit and piece, the f32 sums of every unit of the tile and
/// two entries' tile results.
pub(crate) struct Scratch {
    a: Vec<__m512i>,
    sums: Vec<__m512i>,
    b: Vec<__m512i>,
    w: Vec<__m512i>,
    acc: Vec<__m512i>,
    cbuf: Vec<__m512i>,
}

impl Scratch {
    /// Runs `f` on this thread's scratch.
    pub(crate) fn with<T>(f: impl FnOnce(&mut Scratch) -> T) -> T {
        thread_local! {
            static SCRATCH: RefCell<Scratch> = const {
                RefCell::new(Scratch {
                    a: Vec::new(),
                    sums: Vec::new(),
                    b: Vec::new(),
                    w: Vec::new(),
                    acc: Vec::new(),
                    cbuf: Vec::new(),
                })
            };
        }
        SCRATCH.with_borrow_mut(f)
    }
}

/// Bytes from one split row to the next for `len` K values: 6 bytes per value, one 64-byte line more where that
/// is a multiple of 1 KiB.
pub(crate) fn row_stride(len: usize) -> usize {
    let b = (6 * len).next_multiple_of(64);
    if b.is_multiple_of(1024) { b + 64 } else { b }
}

/// One part of a chunk: the A halves at `{x5}` (and `{x5}` + a_half) times both column groups, into the C tiles.
macro_rules! part {
    ($two:tt) => {
        concat!(
            "tileloadd tmm4, [{x5} + {x4}*1]\n",
            "tdpbf16ps tmm0, tmm4, tmm6\n",
            "tdpbf16ps tmm1, tmm4, tmm7\n",
            when!(
                $two,
                concat!(
                    "add {x5}, {x7}\n",
                    "tileloadd tmm5, [{x5} + {x4}*1]\n",
                    "sub {x5}, {x7}\n",
                    "tdpbf16ps tmm2, tmm5, tmm6\n",
                    "tdpbf16ps tmm3, tmm5, tmm7\n"
                )
            ),
        )
    };
}

/// Zero the C tiles, then every chunk of the entry at `{a}` (split A) / `{b}` (codes): load both column
/// groups, then each of the three parts of A times them.
macro_rules! tile_ops {
    ($two:tt) => {
        concat!(
            "tilezero tmm0\n",
            "tilezero tmm1\n",
            when!($two, "tilezero tmm2\ntilezero tmm3\n"),
            "mov {x1}, {a}\n",
            "mov {x2}, {b}\n",
            "mov {x3}, [{p} + 240]\n",
            "mov {x4}, [{p} + 184]\n",
            "mov {x7}, [{p} + 192]\n",
            "mov {x6}, 64\n",
            "4:\n",
            "tileloadd tmm6, [{x2} + {x6}*1]\n",
            "mov {x5}, {x2}\n",
            "add {x5}, [{p} + 216]\n",
            "tileloadd tmm7, [{x5} + {x6}*1]\n",
            "mov {x5}, {x1}\n",
            part!($two),
            "add {x5}, [{p} + 208]\n",
            part!($two),
            "add {x5}, [{p} + 208]\n",
            part!($two),
            "add {x1}, [{p} + 200]\n",
            "add {x2}, [{p} + 224]\n",
            "dec {x3}\n",
            "jnz 4b\n",
        )
    };
}

/// The entry's epilogue over the rows of the f32 buffer at `{cb}`: per row, y += C·s (+ (c + m·s)·Σa with
/// unfolded zero points), the f32 sums in memory.
macro_rules! epilogue {
    ($zp:tt) => {
        concat!(
            "mov {x1}, {cb}\n",
            "mov {x6}, [{p} + 152]\n",
            "vmovups zmm0, [{x6}]\n",
            "vmovups zmm1, [{x6} + 64]\n",
            when!($zp, "vmovups zmm2, [{x6} + 128]\nvmovups zmm3, [{x6} + 192]\nmov {x3}, [{p} + 160]\n"),
            "mov {x2}, [{p} + 112]\n",
            "mov {x4}, [{p} + 248]\n",
            "5:\n",
            "vmovups zmm7, zmmword ptr [{x1}]\n",
            "vmovups zmm8, zmmword ptr [{x1} + 64]\n",
            "vfmadd213ps zmm7, zmm0, zmmword ptr [{x2}]\n",
            "vfmadd213ps zmm8, zmm1, zmmword ptr [{x2} + 64]\n",
            when!(
                $zp,
                concat!(
                    "vbroadcastss zmm9, dword ptr [{x3}]\n",
                    "vfmadd231ps zmm7, zmm2, zmm9\n",
                    "vfmadd231ps zmm8, zmm3, zmm9\n",
                    "add {x3}, [{p} + 232]\n"
                )
            ),
            "vmovups zmmword ptr [{x2}], zmm7\n",
            "vmovups zmmword ptr [{x2} + 64], zmm8\n",
            "add {x1}, 128\n",
            "add {x2}, 128\n",
            "dec {x4}\n",
            "jnz 5b\n",
        )
    };
}

walk_fn!(
    /// Runs the asm block for `l` (`two`: row tiles of more than 16 rows; `zp`: the entries carry corrections).
    ///
    /// # Safety
    /// The CPU has AMX-TILE, AMX-BF16 and AVX-512F, and this process may use the tile data. Every pointer of `l` covers
    /// what the loop reads and writes: `walk.tiles` row tiles of `l.rows` rows of split A (`a_stride` apart, the next
    /// tile `walk.a_tile` on, `entries · walk.a_entry` bytes each), of Σa (if `zp`) and of f32 sums (4 KiB per tile);
    /// `walk.entries` entries of unpacked codes (`walk.b_entry` bytes each) and of scales and corrections (256 bytes
    /// each); two 4 KiB buffers at `walk.cbuf` and `walk.cbuf ^ walk.state.cb_swap`.
    k_loop(Loop),
    tile_ops,
    epilogue,
    [x7 = out(reg) _,]
);

/// The bf16 encodings (upper halves) of the odd 16-bit words of `x` and `y` (32 f32 values whose low 16 bits are
/// zero, or whose truncation is wanted), in order.
#[target_feature(enable = "avx512f,avx512bw")]
fn bf16_of(x: __m512, y: __m512) -> __m512i {
    let odd = _mm512_set_epi16(
        63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9,
        7, 5, 3, 1,
    );
    _mm512_permutex2var_epi16(_mm512_castps_si512(x), odd, _mm512_castps_si512(y))
}

/// One K piece of a tile: `n` entries of `entry` K values (a block, or a part of one) from entry `first` on, in
/// chunks of `kt` = min(bl, 32) values.
#[derive(Clone, Copy)]
struct Piece {
    first: usize,
    n: usize,
    entry: usize,
    kt: usize,
    /// K values of the piece that hold values (a multiple of kt, ≤ n·entry): the K tail's padding past them is
    /// neither split nor unpacked.
    used: usize,
}

/// Splits rows `0..rows` of the tile's A, the K values of piece `p` that hold values (`p.used`), into `dst` (rows
/// `stride` bytes apart; per chunk kt `hi`, kt `mid`, kt `lo` bf16), and with `sums` non-null writes each row's Σa
/// over each entry (`p.n` per row, row-major; a cut last entry's over its chunks).
///
/// # Safety
/// The CPU has avx512f and avx512bw. `args` satisfies the `RunArgs` contract for an `f32` LHS; the piece's
/// entries are inside `blocks·bl` values; `dst` holds `rows · stride` bytes, `stride ≥ 6·n·entry`; `sums`, if not
/// null, `rows · n` f32; kt ∈ {16, 32} divides `entry`.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn split(args: &RunArgs, p: Piece, dst: *mut u8, stride: usize, sums: *mut f32) {
    let Piece { kt, entry, used, .. } = p;
    let (k0, len) = (p.first * entry, p.n * entry);
    let hi_mask = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
    let cut = |v: __m512| _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), hi_mask));
    let m16: __mmask16 = if kt == 32 { 0xFFFF } else { 0 };
    for r in 0..args.rows {
        // SAFETY: row r of A holds blocks·bl ≥ k0 + len values (the RunArgs contract).
        let src = unsafe { args.lhs.cast::<f32>().add(r * args.lhs_stride + k0) };
        // SAFETY: row r of `dst` (the caller's size).
        let row = unsafe { dst.add(r * stride) };
        let mut total = _mm512_setzero_ps();
        for c in 0..used / kt {
            // SAFETY: K values c·kt .. +kt of the piece (the second vector only for kt = 32, by the mask).
            let (x, y) =
                unsafe { (_mm512_loadu_ps(src.add(c * kt)), _mm512_maskz_loadu_ps(m16, src.add(c * kt + 16))) };
            let (xh, yh) = (cut(x), cut(y));
            let (xr, yr) = (_mm512_sub_ps(x, xh), _mm512_sub_ps(y, yh));
            let (xm, ym) = (cut(xr), cut(yr));
            let (xl, yl) = (_mm512_sub_ps(xr, xm), _mm512_sub_ps(yr, ym));
            let at = c * 6 * kt;
            // SAFETY: the chunk's 6·kt bytes of row r (stride ≥ 6·len); a 16-value chunk stores 32 bytes per part.
            unsafe {
                let m32: __mmask32 = if kt == 32 { !0 } else { 0xFFFF };
                _mm512_mask_storeu_epi16(row.add(at).cast(), m32, bf16_of(xh, yh));
                _mm512_mask_storeu_epi16(row.add(at + 2 * kt).cast(), m32, bf16_of(xm, ym));
                _mm512_mask_storeu_epi16(row.add(at + 4 * kt).cast(), m32, bf16_of(xl, yl));
            }
            if !sums.is_null() {
                total = _mm512_add_ps(total, _mm512_add_ps(x, y));
                if ((c + 1) * kt).is_multiple_of(entry) || (c + 1) * kt == used {
                    // SAFETY: entry c·kt / entry of row r (the caller's size).
                    unsafe { *sums.add(r * (len / entry) + c * kt / entry) = _mm512_reduce_add_ps(total) };
                    total = _mm512_setzero_ps();
                }
            }
        }
    }
}

/// Unpacks unit `half` (columns 32·half .. +32) of `panel` for the entries of piece `p` (their chunks that hold
/// values, `p.used`): scales and corrections
/// at `w` (per entry 32 + 32 f32), the codes as bf16 in AMX's B layout at `b` (per entry: column group 0's entry/2
/// rows of 64 bytes, 2 K values × 16 columns each, then group 1's). Returns whether the zero points were folded
/// into the codes.
///
/// # Safety
/// The CPU has avx512f and avx512bw. `args` satisfies the `RunArgs` contract for a `qunbp64x4_sf32_zpc` RHS of
/// `BITS` bits; `p.entry` is `bl`, or a multiple of 32 dividing it; the piece's entries are inside the blocks;
/// `b` holds `p.n · 64 · p.entry` bytes and `w` `p.n · 256`.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn unpack<const BITS: usize>(
    args: &RunArgs,
    panel: usize,
    half: usize,
    p: Piece,
    b: *mut u8,
    w: *mut f32,
) -> bool {
    let a = args;
    let Piece { first, n, entry, used, .. } = p;
    let (bl, chunk) = (a.bl, a.bl.min(32));
    let per = bl / entry;
    // SAFETY: panel < the tile's panels (RunArgs contract); `w` holds n entries.
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    // SAFETY: as above; entries first.. are inside the blocks.
    let fold = unsafe { unit_scales::<BITS>(a, prec, half, first, n, per, w) };
    // Per 128-bit lane of 4 columns × K values 0..3 (bytes): the columns' K 0, 1 first, then K 2, 3; then the
    // lanes' first halves, then their second halves: [K 0,1 of columns 0..15 | K 2,3 of columns 0..15].
    let pairs = _mm512_set4_epi32(0x0F0E_0B0A, 0x0706_0302, 0x0D0C_0908, 0x0504_0100);
    let halves = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
    // bf16 of the integers 0..15, then −16..−1: a code's low 5 bits index it (codes of 2 and 4 bits: |q − z| ≤ 15).
    let table = _mm512_set_epi16(
        -16512, -16384, -16320, -16256, -16224, -16192, -16160, -16128, -16112, -16096, -16080, -16064, -16048, -16032,
        -16016, -16000, 16752, 16736, 16720, 16704, 16688, 16672, 16656, 16640, 16608, 16576, 16544, 16512, 16448,
        16384, 16256, 0,
    );
    for j in 0..n {
        let (e, blk) = (first + j, (first + j) / per);
        let c0 = (e % per) * entry / chunk;
        // SAFETY: entry j's scales (written above); its codes go to entry j's bytes of `b`: bf16 row 2·row' + t
        // of group g at g·32·entry + (2·row' + t)·64, row' = row − c0·chunk/4 < entry/4 (the caller's size).
        unsafe {
            let sub = subtrahends::<BITS>(fold, w.add(j * 2 * UNIT));
            let eb = b.add(j * 64 * entry);
            let base = c0 * chunk / 4;
            let chunks = entry.min(used - j * entry) / chunk;
            decode::<BITS>(a, prec.add(blk * a.rhs_record), half, c0, c0 + chunks, sub, |g, row, q| {
                let t = _mm512_permutexvar_epi64(halves, _mm512_shuffle_epi8(q, pairs));
                let (lo, hi) = (_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64::<1>(t));
                let (r0, r1) = if BITS <= 4 {
                    let lut = |h: __m256i| _mm512_permutexvar_epi16(_mm512_cvtepi8_epi16(h), table);
                    (lut(lo), lut(hi))
                } else {
                    let cvt = |h: __m256i| {
                        let f = |x: __m128i| _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x));
                        bf16_of(f(_mm256_castsi256_si128(h)), f(_mm256_extracti128_si256::<1>(h)))
                    };
                    (cvt(lo), cvt(hi))
                };
                let out = eb.add(g * 32 * entry + (row - base) * 128);
                _mm512_storeu_si512(out.cast(), r0);
                _mm512_storeu_si512(out.add(64).cast(), r1);
            });
        }
    }
    fold
}

/// The whole tile on AMX: K piece by piece, each piece's rows split once, each 32-column unit unpacked once per
/// piece and walked by every row tile.
///
/// # Safety
/// The CPU has AMX-TILE, AMX-BF16, avx512f and avx512bw, and this process may use the tile data. `args`
/// satisfies the `RunArgs` contract with an `f32` LHS and a `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn tile(args: &RunArgs, s: &mut Scratch) {
    let a = args;
    let bl = a.bl;
    let kt = bl.min(32);
    let entry = bl.min(KC);
    // The K tail's padding is skipped down to whole chunks (576 in blocks of 128: 576 of 640 values): entries past
    // it are not computed, and the last one only over its chunks that hold values.
    let used = a.k_used.next_multiple_of(kt).min(a.blocks * bl);
    let entries = used.div_ceil(entry);
    let last_chunks = (used - (entries - 1) * entry) / kt;
    // Pieces of whole entries, as even as they allow.
    let per_piece = (KC / entry).max(1);
    let pieces = entries.div_ceil(per_piece);
    let per_piece = entries.div_ceil(pieces);
    let units = a.cols.div_ceil(UNIT);
    let rows_pad = a.rows.next_multiple_of(MR);
    let stride = row_stride(per_piece * entry);
    let zp = a.has_zp != 0;
    let abuf = fit(&mut s.a, a.rows * stride);
    let sums = if zp { fit(&mut s.sums, a.rows * per_piece * 4).cast::<f32>() } else { std::ptr::null_mut() };
    let b = fit(&mut s.b, per_piece * 64 * entry);
    let w = fit(&mut s.w, per_piece * W_BYTES).cast::<f32>();
    let group = units.min(GROUP_UNITS);
    let acc = fit(&mut s.acc, group * rows_pad * UNIT * 4).cast::<f32>();
    let cbuf = fit(&mut s.cbuf, 2 * MR * UNIT * 4);
    let (full, tail) = (a.rows / MR, a.rows % MR);
    // Units in groups of at most GROUP_UNITS, each group's sums kept through every piece: the rows are split once
    // per group (once per task where K is one piece).
    for u0 in (0..units).step_by(GROUP_UNITS) {
        let u1 = (u0 + GROUP_UNITS).min(units);
        // SAFETY: `acc` holds group·rows_pad·32 f32 (sized above), u1 − u0 ≤ group.
        unsafe { std::ptr::write_bytes(acc, 0, (u1 - u0) * rows_pad * UNIT) };
        for piece in 0..pieces {
            let e0 = piece * per_piece;
            let n = per_piece.min(entries - e0);
            let p = Piece { first: e0, n, entry, kt, used: used.min((e0 + n) * entry) - e0 * entry };
            if pieces > 1 || u0 == 0 {
                // SAFETY: the piece's K values are inside every row (n·entry ≤ blocks·bl − e0·entry); the buffers
                // were sized above for per_piece entries.
                unsafe { split(a, p, abuf, stride, sums) };
            }
            for unit in u0..u1 {
                let (panel, half) = (unit / 2, unit % 2);
                // SAFETY: the unit's columns start inside the tile; the buffers hold per_piece ≥ n entries.
                let folded = unsafe { crate::arch::dispatch!(unpack::<>(a, panel, half, p, b, w); bits(a.bits)) };
                // The piece's entries in at most two runs: whole ones, then a last one cut short by the K tail.
                let cut = e0 + n == entries && last_chunks < entry / kt;
                let runs = [(0, n - usize::from(cut), entry / kt), (n - 1, usize::from(cut), last_chunks)];
                for (first, tiles, rows) in [(0, full, MR), (full * MR, usize::from(tail > 0), tail)] {
                    for (j0, count, chunks) in runs {
                        if tiles == 0 || count == 0 {
                            continue;
                        }
                        let mut l = Loop {
                            cfg: tile_config(rows, 2 * kt, kt / 2), // A: kt bf16 per row; B: kt/2 rows of bf16 pairs
                            walk: Walk {
                                // SAFETY: row `first` of the split rows (first < rows), entry j0 (< n).
                                a: unsafe { abuf.add(first * stride + j0 * 6 * entry) },
                                a_tile: MR * stride,
                                // SAFETY: entry j0 of the unpacked codes (j0 < n).
                                b: unsafe { b.add(j0 * 64 * entry) },
                                // SAFETY: entry j0's scales and corrections.
                                w: unsafe { w.add(j0 * 2 * UNIT) },
                                // SAFETY: row `first`'s sums of entry j0 (null without zero points: never read then).
                                s: if zp { unsafe { sums.add(first * n + j0) } } else { std::ptr::null() },
                                s_tile: MR * 4 * n,
                                // SAFETY: the unit's sums of row `first`, inside `acc`.
                                acc: unsafe { acc.add(((unit - u0) * rows_pad + first) * UNIT) },
                                cbuf,
                                tiles,
                                entries: count,
                                state: WalkState::new(cbuf),
                                a_entry: 6 * entry,
                                b_entry: 64 * entry,
                            },
                            a_stride: stride,
                            a_half: 16 * stride,
                            a_chunk: 6 * kt,
                            a_part: 2 * kt,
                            b_half: 32 * entry,
                            b_chunk: 32 * kt,
                            sums_row: 4 * n,
                            chunks,
                            rows,
                        };
                        // SAFETY: `l` describes `tiles` row tiles of `rows` rows inside the split rows, their sums and
                        // the unit's part of `acc`, and `count` entries from j0 of this unit's unpacked buffers, each
                        // read over its first `chunks` chunks; the CPU's features are the caller's guarantee.
                        unsafe { k_loop(&mut l, rows > 16, zp && !folded) };
                    }
                }
            }
        }
        // SAFETY: `acc` holds units u0..u1's rows (above); the RunArgs contract covers dst and bias.
        unsafe { store_units(a, acc, rows_pad, u0..u1) };
    }
}
