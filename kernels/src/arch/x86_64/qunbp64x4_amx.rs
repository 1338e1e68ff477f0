//! The body of the AMX int8 GEMM on `qunbp64x4_s{f32,f16}_zpc` weights (see `qunbp64x4_vnni` for the layout):
//! `tdpbssd` on tiles of 32 rows × 32 columns, one weight block (or 64 K values of it) per tile multiply, and a
//! per-block AVX-512 epilogue into f32 sums.
//!
//! Per 32-column unit of a 64-column panel, the codes of every block are unpacked once, as signed bytes
//! `q − 2^(bits−1)`, into a per-thread buffer in AMX's B layout (one 64-byte row per 4 K values: 16 columns × 4
//! bytes, exactly a `vpdpbusd` operand of the packed layout with the lanes split), with the block's 32 scales
//! (as f32) and corrections `c + 2^(bits−1)·s`; every row of the tile then walks that buffer. The LHS (`qsi8db`:
//! signed int8 rows, whole blocks, row-major) is the A operand as it lies, `lhs_stride` bytes from row to row
//! (never a multiple of 1 KiB: the packer pads such rows by a line, `LhsFormat::int8_row_stride`; 32 rows in at
//! most 4 of L1's 64 sets sent every A tile load to L2).
//!
//! Numerics per (row, column, block), integers exact: `acc = Σ q_a·(q_w − m)` (m = 2^(bits−1)), then
//! `y += cvt(acc)·(s·sa)`, and with zero points `+ (c + m·s)·(sa·Σq_a)` (c = −s·z). Without zero points c = −m·s,
//! so the correction is zero and skipped: the same integers as the VNNI kernels, which start their sums at
//! −m·Σq_a. Zero points that are whole numbers in the code range (every uint8 zero point input) are folded into
//! the unpacked codes instead, per 32-column unit: `acc = Σ q_a·(q_w − z)`, `y += cvt(acc)·(s·sa)`, no correction
//! (`unpack`); the unit's other zero points keep the correction.
//!
//! One asm block per tile configuration (the tile state is not the compiler's: nothing between two asm blocks
//! may be assumed to keep it): `ldtilecfg`, every row tile's whole K loop with its epilogue, `tilerelease`. Per
//! block and row tile of 32 rows: 4 `tdpbssd` per 64 K values (2 with one half of 16 rows), 4 `tilestored`
//! into a 4 KiB buffer, then per row 2 `vcvtdq2ps`, 2 `vmulps` (column scales × the row's sa) and 2
//! `vfmadd213ps` into the row's f32 sums in L1 (5 more with unfolded zero points). The epilogue's 6 vector
//! operations per 32 outputs, on the two 512-bit ports, bound the loop at blocks of 32 (~96 cycles against ~64
//! for the 4 tile multiplies); longer blocks share it over more multiplies.
//!
//! Measured (Intel Xeon with AMX, family 6 model 207, 2.1 GHz KVM guest, 2 cores; `gemm_time`, 1 thread, tiles
//! alone, best of 4–5 runs in turns, GFLOP/s at M = 128 / 512): 4096×4096 ~500 / ~480, N 576 K 1536 ~455 / ~470,
//! 2048→8192 ~410 / ~440, against 260–390 for the 6 × 32 AVX-512 VNNI tile on the same machine. With uint8 zero
//! points (`gemm_time --zp u8`, M = 512, SmolLM2's shapes N×K 1536×576 / 576×1536 / 192×576) the correction in the
//! epilogue gave 274–280 / 313–318 / 265–301 against 330–333 / 409–519 / 401–411 without zero points; folded
//! into the codes, 290–319 / 376–382 / 330–378: as fast as symmetric weights (same runs, in turns). A tile-op
//! microbenchmark puts 4 `tdpbssd` (K = 32) with their tile loads at ~61–85 cycles and the 4 `tilestored` plus
//! their read-back at ~90 more per block of a 32 × 32 tile: the per-block round trip through memory, which blocks
//! of 32 force, costs as much as the multiplies. Tried and measured no faster, so not kept: a 16 × 16 variant
//! with the f32 sums in zmm16–31 for the whole K loop (no sums through memory; 3–6% slower: one multiply per
//! tile store leaves the tile unit's latency exposed), and A copied into tile order per call (contiguous tile
//! loads; the copy cost more than it saved: 5–15% slower).
//!
//! ```text
//! for unit (32 columns):
//!     unpack B of every block (signed codes), scales, corrections   // once per unit
//!     for row tile (32 rows; the last as its rows need):            // one asm block per tile shape
//!         for block b:
//!             C[32×32] = Σ_t A[rows, b·bl + 64t ..][·64] × B[b][t]   // tdpbssd, int32
//!             y[r][c] += cvt(C[r][c])·s[c]·sa[r][b] (+ c'[c]·sa[r][b]·Σq_a[r][b])
//!     store y (+ bias), columns past N never
//! ```

use super::qunbp64x4_vnni::{KR, NR};
use crate::pack::ScaleType;
use crate::ukernel::RunArgs;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Rows and columns of the register tile (two AMX tile halves of 16 rows, two column groups of 16).
pub(crate) const MR: usize = 32;
pub(crate) const UNIT: usize = 32;
/// Bytes of f32 sums per row of the tile.
const ROW_BYTES: usize = UNIT * 4;
/// Bytes per block of unpacked scales and corrections (32 f32 each).
const W_BYTES: usize = 2 * UNIT * 4;

/// The part of an AMX GEMM's loop state that the shared walk ([`walk!`]) reads and updates, at offsets 64 … 183
/// of the loop's `#[repr(C, align(64))]` record, after its 64-byte tile configuration (checked below). An entry
/// is what one tile-result round trip covers: a block (int8) or a block or part of one (bf16).
#[repr(C)]
pub(crate) struct Walk {
    /// A at the current row tile, entry 0.
    pub(crate) a: *const u8,
    /// Bytes from one row tile's A to the next (32 rows).
    pub(crate) a_tile: usize,
    /// Unpacked codes of entry 0.
    pub(crate) b: *const u8,
    /// Scales and corrections of entry 0 (256 bytes per entry).
    pub(crate) w: *const f32,
    /// The current row tile's first row's per-entry factor (sa, or Σa), entry 0 (4 bytes per entry).
    pub(crate) s: *const f32,
    pub(crate) s_tile: usize,
    /// f32 sums of the current row tile (32 rows × 32 columns, 4 KiB).
    pub(crate) acc: *mut f32,
    /// One entry's tile results (32 rows × 32 columns, 4 KiB); `cbuf ^ state.cb_swap` is the other buffer.
    pub(crate) cbuf: *mut u8,
    pub(crate) tiles: usize,
    pub(crate) entries: usize,
    /// The walk's own, derived from `cbuf`: [`WalkState::new`].
    pub(crate) state: WalkState,
    /// Bytes from one entry of A to the next (in a row).
    pub(crate) a_entry: usize,
    /// Bytes from one entry's unpacked codes to the next.
    pub(crate) b_entry: usize,
}

/// The part of [`Walk`] that the walk derives or keeps for itself.
#[repr(C)]
pub(crate) struct WalkState {
    /// `cbuf ^ cb_swap` is the other 4 KiB tile-result buffer.
    cb_swap: usize,
    /// The current entry's scales and factor.
    w_cur: *const f32,
    s_cur: *const f32,
}

impl WalkState {
    /// The state of a walk whose two 4 KiB tile-result buffers start at `cbuf` (8 KiB).
    pub(crate) fn new(cbuf: *mut u8) -> WalkState {
        let cb_swap = (cbuf as usize) ^ (cbuf as usize + MR * ROW_BYTES);
        WalkState { cb_swap, w_cur: std::ptr::null(), s_cur: std::ptr::null() }
    }
}

/// Store the C tiles into the buffer at `{cb}` (rows 128 bytes apart), then step `{a}` and `{b}` to the next
/// entry ([`Walk`]'s `a_entry` and `b_entry`).
macro_rules! tile_store {
    ($two:tt) => {
        concat!(
            "mov {x6}, 128\n",
            "tilestored [{cb} + {x6}*1], tmm0\n",
            "lea {x5}, [{cb} + 64]\n",
            "tilestored [{x5} + {x6}*1], tmm1\n",
            when!(
                $two,
                concat!(
                    "lea {x5}, [{cb} + 2048]\n",
                    "tilestored [{x5} + {x6}*1], tmm2\n",
                    "lea {x5}, [{cb} + 2112]\n",
                    "tilestored [{x5} + {x6}*1], tmm3\n"
                )
            ),
            "add {a}, [{p} + 168]\n",
            "add {b}, [{p} + 176]\n",
        )
    };
}

pub(crate) use tile_store;

/// The asm block of an AMX GEMM over `walk.tiles` row tiles, `$l` a pointer to its loop record (the tile
/// configuration, then [`Walk`], then the kernel's own fields), `$ops` / `$epilogue` the kernel's macros for one
/// entry's tile multiplies and for the epilogue from the buffer at `{cb}` into the sums ([`tile_store!`] stores
/// the tiles in between). Software pipelined by one entry: entry e + 1's
/// tile multiplies are issued before entry e's epilogue (the AMX unit works while the vector ports convert and
/// add), and stored into the other buffer after it. `[$($extra)*]`: more register operands the kernel's macros use.
macro_rules! walk {
    ($l:expr, $ops:ident, $epilogue:ident, $two:tt, $zp:tt, [$($extra:tt)*]) => {
        std::arch::asm!(
            "ldtilecfg [{p}]",
            "2:",
            "mov {a}, [{p} + 64]",
            "mov {b}, [{p} + 80]",
            "mov {x1}, [{p} + 88]",
            "mov [{p} + 152], {x1}",
            "mov {x1}, [{p} + 96]",
            "mov [{p} + 160], {x1}",
            "mov {nb}, [{p} + 136]",
            "mov {cb}, [{p} + 120]",
            $ops!($two),
            tile_store!($two),
            "3:",
            "cmp {nb}, 1",
            "je 7f",
            $ops!($two),
            "7:",
            $epilogue!($zp),
            "cmp {nb}, 1",
            "je 8f",
            "xor {cb}, [{p} + 144]",
            tile_store!($two),
            "8:",
            "add qword ptr [{p} + 152], 256",
            "add qword ptr [{p} + 160], 4",
            "dec {nb}",
            "jnz 3b",
            "mov {x1}, [{p} + 72]",
            "add [{p} + 64], {x1}",
            "mov {x1}, [{p} + 104]",
            "add [{p} + 96], {x1}",
            "add qword ptr [{p} + 112], 4096",
            "dec qword ptr [{p} + 128]",
            "jnz 2b",
            "tilerelease",
            p = in(reg) $l,
            a = out(reg) _,
            b = out(reg) _,
            nb = out(reg) _,
            cb = out(reg) _,
            x1 = out(reg) _,
            x2 = out(reg) _,
            x3 = out(reg) _,
            x4 = out(reg) _,
            x5 = out(reg) _,
            x6 = out(reg) _,
            $($extra)*
            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _, out("zmm4") _,
            out("zmm5") _, out("zmm6") _, out("zmm7") _, out("zmm8") _, out("zmm9") _,
            options(nostack),
        )
    };
}
pub(crate) use walk;

/// An AMX GEMM's `unsafe fn $name(l: &mut $loop, two: bool, zp: bool)`: the [`walk!`] asm block with the kernel's
/// `$ops` / `$epilogue` macros, instantiated for each (`two`: row tiles of more than 16 rows, `zp`: the entries
/// carry corrections); `[$($extra)*]` as for [`walk!`]. The doc comments given become the function's (with its
/// `# Safety`).
macro_rules! walk_fn {
    ($(#[$doc:meta])* $name:ident($loop:ty), $ops:ident, $epilogue:ident, [$($extra:tt)*]) => {
        $(#[$doc])*
        #[target_feature(enable = "avx512f")]
        unsafe fn $name(l: &mut $loop, two: bool, zp: bool) {
            let l: *mut $loop = l;
            // SAFETY: the caller's guarantee; the asm reads and writes only through `l`'s pointers (and `l`
            // itself).
            unsafe {
                match (two, zp) {
                    (true, true) => walk!(l, $ops, $epilogue, true, true, [$($extra)*]),
                    (true, false) => walk!(l, $ops, $epilogue, true, false, [$($extra)*]),
                    (false, true) => walk!(l, $ops, $epilogue, false, true, [$($extra)*]),
                    (false, false) => walk!(l, $ops, $epilogue, false, false, [$($extra)*]),
                }
            }
        }
    };
}
pub(crate) use walk_fn;

/// The int8 GEMM's loop record: what its asm block reads, at the offsets written into it (checked below).
#[repr(C, align(64))]
struct Loop {
    /// The tile configuration (palette 1).
    cfg: [u8; 64],
    walk: Walk,
    a_stride: usize,
    /// Bytes from a row tile's first half to its second (16 rows).
    a_half: usize,
    /// K values per tile multiply: min(bl, 64).
    a_step: usize,
    /// Bytes from column group 0's codes of a block to group 1's.
    b_half: usize,
    /// Bytes from `sa` to the matching Σq_a.
    qs_delta: isize,
    sa_row: usize,
    steps: usize,
    /// Rows of each row tile (32, or the last tile's rows).
    rows: usize,
}

const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(Loop, walk) == 64 && core::mem::size_of::<Walk>() == 120);
    assert!(offset_of!(Walk, a) == 0 && offset_of!(Walk, a_tile) == 8 && offset_of!(Walk, b) == 16);
    assert!(offset_of!(Walk, w) == 24 && offset_of!(Walk, s) == 32 && offset_of!(Walk, s_tile) == 40);
    assert!(offset_of!(Walk, acc) == 48 && offset_of!(Walk, cbuf) == 56 && offset_of!(Walk, tiles) == 64);
    assert!(offset_of!(Walk, entries) == 72 && offset_of!(Walk, state) == 80);
    assert!(offset_of!(WalkState, cb_swap) == 0 && offset_of!(WalkState, w_cur) == 8);
    assert!(offset_of!(WalkState, s_cur) == 16);
    assert!(offset_of!(Walk, a_entry) == 104 && offset_of!(Walk, b_entry) == 112);
    assert!(offset_of!(Loop, a_stride) == 184 && offset_of!(Loop, a_half) == 192 && offset_of!(Loop, a_step) == 200);
    assert!(offset_of!(Loop, b_half) == 208);
    assert!(offset_of!(Loop, qs_delta) == 216 && offset_of!(Loop, sa_row) == 224 && offset_of!(Loop, steps) == 232);
    assert!(offset_of!(Loop, rows) == 240);
};

/// Scratch of one thread, kept between calls: unpacked codes, scales and corrections of one unit, the f32 sums
/// of the tile's rows and one block's int32 results (64-byte aligned).
pub(crate) struct Scratch {
    b: Vec<__m512i>,
    w: Vec<__m512i>,
    acc: Vec<__m512i>,
    cbuf: Vec<__m512i>,
}

impl Scratch {
    /// Runs `f` on this thread's scratch.
    pub(crate) fn with<T>(f: impl FnOnce(&mut Scratch) -> T) -> T {
        thread_local! {
            static SCRATCH: RefCell<Scratch> =
                const { RefCell::new(Scratch { b: Vec::new(), w: Vec::new(), acc: Vec::new(), cbuf: Vec::new() }) };
        }
        SCRATCH.with_borrow_mut(f)
    }
}

/// Grows a scratch buffer to at least `bytes` (64-byte vectors) and returns its start.
pub(crate) fn fit(v: &mut Vec<__m512i>, bytes: usize) -> *mut u8 {
    let n = bytes.div_ceil(64);
    if v.len() < n {
        // SAFETY: all-zero bits are a valid __m512i.
        v.resize(n, unsafe { std::mem::zeroed() });
    }
    v.as_mut_ptr().cast()
}

/// Palette 1 with C halves tmm0, tmm1 (rows 0–15, 64 bytes) and tmm2, tmm3 (rows 16–31), A halves tmm4, tmm5
/// (`a_bytes` per row) and B column groups tmm6, tmm7 (`b_rows` rows of 64 bytes), for row tiles of `rows`
/// (1 … 32) rows; tiles without rows stay unconfigured.
pub(crate) fn tile_config(rows: usize, a_bytes: usize, b_rows: usize) -> [u8; 64] {
    let mut cfg = [0u8; 64];
    cfg[0] = 1;
    let (top, bottom) = (rows.min(16), rows.saturating_sub(16));
    let mut set = |t: usize, r: usize, colsb: usize| {
        if r > 0 {
            cfg[16 + 2 * t..18 + 2 * t].copy_from_slice(&(colsb as u16).to_le_bytes());
            cfg[48 + t] = r as u8;
        }
    };
    for (t, r, colsb) in
        [(0, top, 64), (1, top, 64), (2, bottom, 64), (3, bottom, 64), (4, top, a_bytes), (5, bottom, a_bytes)]
    {
        set(t, r, colsb);
    }
    set(6, b_rows, 64);
    set(7, b_rows, 64);
    cfg
}

/// `$s` if `$on` is `true`, else nothing (a piece of an asm template).
macro_rules! when {
    (true, $s:expr) => {
        $s
    };
    (false, $s:expr) => {
        ""
    };
}
pub(crate) use when;

/// Zero the C tiles, then every 64-K step of the block at `{a}` (A) / `{b}` (codes): load A's halves and the two
/// column groups, 2 or 4 `tdpbssd`.
macro_rules! tile_ops {
    ($two:tt) => {
        concat!(
            "tilezero tmm0\n",
            "tilezero tmm1\n",
            when!($two, "tilezero tmm2\ntilezero tmm3\n"),
            "mov {x1}, {a}\n",
            "mov {x2}, {b}\n",
            "mov {x3}, [{p} + 232]\n",
            "mov {x4}, [{p} + 184]\n",
            "mov {x6}, 64\n",
            "4:\n",
            "tileloadd tmm4, [{x1} + {x4}*1]\n",
            "tileloadd tmm6, [{x2} + {x6}*1]\n",
            "mov {x5}, {x2}\n",
            "add {x5}, [{p} + 208]\n",
            "tileloadd tmm7, [{x5} + {x6}*1]\n",
            "tdpbssd tmm0, tmm4, tmm6\n",
            "tdpbssd tmm1, tmm4, tmm7\n",
            when!(
                $two,
                concat!(
                    "mov {x5}, {x1}\n",
                    "add {x5}, [{p} + 192]\n",
                    "tileloadd tmm5, [{x5} + {x4}*1]\n",
                    "tdpbssd tmm2, tmm5, tmm6\n",
                    "tdpbssd tmm3, tmm5, tmm7\n"
                )
            ),
            "add {x1}, [{p} + 200]\n",
            "add {x2}, 1024\n",
            "dec {x3}\n",
            "jnz 4b\n",
        )
    };
}

/// The block's epilogue over the rows of the int32 buffer at `{cb}`: per row, y += cvt(C)·(s·sa) (+ (c + m·s)·
/// sa·Σq_a with zero points), the f32 sums in memory.
macro_rules! epilogue {
    ($zp:tt) => {
        concat!(
            "mov {x1}, {cb}\n",
            "mov {x6}, [{p} + 152]\n",
            "vmovups zmm0, [{x6}]\n",
            "vmovups zmm1, [{x6} + 64]\n",
            when!($zp, "vmovups zmm2, [{x6} + 128]\nvmovups zmm3, [{x6} + 192]\nmov {x5}, [{p} + 216]\n"),
            "mov {x2}, [{p} + 112]\n",
            "mov {x3}, [{p} + 160]\n",
            "mov {x4}, [{p} + 240]\n",
            "5:\n",
            "vbroadcastss zmm4, dword ptr [{x3}]\n",
            "vmulps zmm5, zmm0, zmm4\n",
            "vmulps zmm6, zmm1, zmm4\n",
            "vcvtdq2ps zmm7, zmmword ptr [{x1}]\n",
            "vcvtdq2ps zmm8, zmmword ptr [{x1} + 64]\n",
            "vfmadd213ps zmm7, zmm5, zmmword ptr [{x2}]\n",
            "vfmadd213ps zmm8, zmm6, zmmword ptr [{x2} + 64]\n",
            when!(
                $zp,
                concat!(
                    "vcvtsi2ss xmm9, xmm9, dword ptr [{x3} + {x5}]\n",
                    "vmulss xmm9, xmm9, xmm4\n",
                    "vbroadcastss zmm9, xmm9\n",
                    "vfmadd231ps zmm7, zmm2, zmm9\n",
                    "vfmadd231ps zmm8, zmm3, zmm9\n"
                )
            ),
            "vmovups zmmword ptr [{x2}], zmm7\n",
            "vmovups zmmword ptr [{x2} + 64], zmm8\n",
            "add {x1}, 128\n",
            "add {x2}, 128\n",
            "add {x3}, [{p} + 224]\n",
            "dec {x4}\n",
            "jnz 5b\n",
        )
    };
}

walk_fn!(
    /// Runs the asm block for `l` (`two`: row tiles of more than 16 rows; `zp`: the records carry corrections).
    ///
    /// # Safety
    /// The CPU has AMX-TILE, AMX-INT8 and AVX-512F, and this process may use the tile data. Every pointer of `l` covers
    /// what the loop reads and writes: `walk.tiles` row tiles of `l.rows` rows of A (whole blocks, `a_stride` apart,
    /// the next tile `walk.a_tile` on), of sa and Σq_a, of f32 sums (4 KiB per tile); `walk.entries` blocks of unpacked
    /// codes (`walk.b_entry` bytes each) and of scales and corrections (256 bytes each); two 4 KiB int32 buffers at
    /// `walk.cbuf` and `walk.cbuf ^ walk.state.cb_swap`.
    k_loop(Loop),
    tile_ops,
    epilogue,
    []
);

/// Unpacks unit `half` (columns 32·half .. +32) of `panel`, every block: scales and corrections `c + m·s` at `w`
/// (per block 32 + 32 f32), then the codes in AMX's B layout at `b` (per block: column group 0's bl/4 rows of 64
/// bytes, then group 1's). Returns whether the unit's zero points were folded into the codes.
///
/// # Safety
/// The CPU has avx512f and avx512bw. `args` satisfies the `RunArgs` contract for a `qunbp64x4_s{f32,f16}_zpc`
/// RHS of `BITS` bits; `b` holds `blocks · 32 · bl` bytes and `w` `blocks · 256`.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn unpack<const BITS: usize>(args: &RunArgs, panel: usize, half: usize, b: *mut u8, w: *mut f32) -> bool {
    let a = args;
    let bl = a.bl;
    // SAFETY: panel < the tile's panels (RunArgs contract); `w` holds every block's entry.
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    // SAFETY: as above.
    let fold = unsafe { unit_scales::<BITS>(a, prec, half, 0, a.blocks, 1, w) };
    for blk in 0..a.blocks {
        // SAFETY: block blk's entry of `w` (written above); its codes go to block blk's bytes of `b`, inside the
        // caller's size: row `row` of group g at g·16·bl + row·64, row < bl/4.
        unsafe {
            let sub = subtrahends::<BITS>(fold, w.add(blk * 2 * UNIT));
            let bb = b.add(blk * UNIT * bl);
            decode::<BITS>(a, prec.add(blk * a.rhs_record), half, 0, bl / bl.min(32), sub, |g, row, q| {
                _mm512_storeu_si512(bb.add(g * 16 * bl + row * 64).cast(), q)
            });
        }
    }
    fold
}

/// Scales and corrections `c + m·s` (m = 2^(bits−1)) of unit `half` at `w`, `n` entries of 32 + 32 f32: entry j
/// holds block `(first + j) / per` of the panel whose records start at `prec` (`per` > 1: blocks cut into that
/// many pieces, each with its block's values). Returns whether the zero points of every entry fold into the
/// codes.
///
/// Folding: with zero points of at most 4 bits that are whole numbers in the code range (every uint8 zero point
/// input, and float ones that happen to be), each correction is `s·(m − z)` with an integer z, and the codes are
/// stored as `q − z` (in −15 … 15 at 4 bits: int8) instead of `q − m`. The multiply then sums `Σa·(q − z)`
/// exactly and the epilogue needs no correction term (5 of its 11 vector operations per row and block at blocks of
/// 32 in the int8 GEMM: ~1.3–1.5x the GEMM on asymmetric weights). Any other zero point (fractional, out of range,
/// 8-bit codes) leaves the whole unit on the corrections.
///
/// # Safety
/// The CPU has avx512f and avx512bw. `args` satisfies the `RunArgs` contract for a `qunbp64x4_s{f32,f16}_zpc`
/// RHS of `BITS` bits, `prec` is one of its panels, `(first + n − 1) / per < blocks`, and `w` holds `n · 256`
/// bytes.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn unit_scales<const BITS: usize>(
    args: &RunArgs,
    prec: *const u8,
    half: usize,
    first: usize,
    n: usize,
    per: usize,
    w: *mut f32,
) -> bool {
    let a = args;
    let has_zp = a.has_zp != 0;
    let col = UNIT * half;
    let midf = _mm512_set1_ps((1u32 << (BITS - 1)) as f32);
    let mut fold = has_zp && BITS <= 4;
    for j in 0..n {
        // SAFETY: the record of block (first + j) / per of this panel; entry j of `w` (the caller's sizes).
        unsafe {
            let rec = prec.add((first + j) / per * a.rhs_record);
            let wb = w.add(j * 2 * UNIT);
            for g in 0..2 {
                let s = match a.layout.scales {
                    ScaleType::F16 => {
                        _mm512_cvtph_ps(_mm256_loadu_si256(rec.add(a.rhs_scales + 2 * (col + 16 * g)).cast()))
                    }
                    _ => _mm512_loadu_ps(rec.add(a.rhs_scales + 4 * (col + 16 * g)).cast()),
                };
                _mm512_storeu_ps(wb.add(16 * g), s);
                if has_zp {
                    let z = _mm512_loadu_ps(rec.add(a.rhs_zp + 4 * (col + 16 * g)).cast());
                    let corr = _mm512_fmadd_ps(midf, s, z);
                    _mm512_storeu_ps(wb.add(UNIT + 16 * g), corr);
                    if fold {
                        fold = folds::<BITS>(s, corr).is_some();
                    }
                }
            }
        }
    }
    fold
}

/// What the decoded codes of one entry of [`unit_scales`] lose, per column group: m, or with folding each
/// column's z in the 4 bytes of its dword.
///
/// # Safety
/// The CPU has avx512f and avx512bw; `wb` is an entry [`unit_scales`] wrote, and it returned `true` if `fold`.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn subtrahends<const BITS: usize>(fold: bool, wb: *const f32) -> [__m512i; 2] {
    std::array::from_fn(|g| {
        if fold {
            // SAFETY: the entry's scales and corrections (the caller's guarantee).
            let (s, corr) = unsafe { (_mm512_loadu_ps(wb.add(16 * g)), _mm512_loadu_ps(wb.add(UNIT + 16 * g))) };
            let z = folds::<BITS>(s, corr).expect("checked by unit_scales");
            _mm512_mullo_epi32(z, _mm512_set1_epi32(0x0101_0101))
        } else {
            _mm512_set1_epi8((1u8 << (BITS - 1)) as i8)
        }
    })
}

/// Decodes chunks `c0 .. c1` (of min(bl, 32) K values) of unit `half` of the block record at `rec`: each 64
/// bytes of signed codes `q − sub[g]` (4 K values × 16 columns of column group g, in `vpdpbusd` order: byte 4c + j
/// is column c's K value 4·row + j) go to `emit(g, row, codes)`, `row` counted from the block's first K value.
///
/// # Safety
/// The CPU has avx512f and avx512bw. `args` satisfies the `RunArgs` contract for a `qunbp64x4_s{f32,f16}_zpc`
/// RHS of `BITS` bits, `rec` is one of its block records and `c1 ≤ bl / min(bl, 32)`.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
pub(crate) unsafe fn decode<const BITS: usize>(
    args: &RunArgs,
    rec: *const u8,
    half: usize,
    c0: usize,
    c1: usize,
    sub: [__m512i; 2],
    mut emit: impl FnMut(usize, usize, __m512i),
) {
    let chunk = args.bl.min(32);
    let cpb = 8 / BITS;
    let lane_len = chunk / cpb;
    let chunk_bytes = chunk * NR * BITS / 8;
    let field = _mm512_set1_epi8(((1u32 << BITS) - 1) as u8 as i8);
    let shift: [__m128i; 4] = std::array::from_fn(|l| _mm_cvtsi32_si128((l * BITS) as i32));
    for c in c0..c1 {
        for grp in 0..lane_len / KR {
            for (g, &sub) in sub.iter().enumerate() {
                // SAFETY: 64 bytes of codes inside the record (the caller's guarantee): column group 2·half + g,
                // K values 4·grp.. of each lane of chunk c.
                let v = unsafe {
                    _mm512_loadu_si512(rec.add(c * chunk_bytes + grp * NR * KR + (2 * half + g) * 64).cast())
                };
                for (l, &sh) in shift.iter().enumerate().take(cpb) {
                    let q = if BITS == 8 {
                        _mm512_xor_si512(v, sub)
                    } else {
                        _mm512_sub_epi8(_mm512_and_si512(_mm512_srl_epi16(v, sh), field), sub)
                    };
                    emit(g, (c * chunk + l * lane_len + KR * grp) / KR, q);
                }
            }
        }
    }
}

/// The zero points z of 16 columns (as int32) if each correction `corr = s·(m − z)` has a whole z in 0 … 2^BITS − 1
/// (within f32 rounding of the stored product; a zero scale takes z = m: its column is zero either way).
#[target_feature(enable = "avx512f")]
fn folds<const BITS: usize>(s: __m512, corr: __m512) -> Option<__m512i> {
    let mid = (1u32 << (BITS - 1)) as f32;
    let live = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(s, _mm512_setzero_ps());
    // m − z = corr / s, rounded to the nearest integer; corr was computed from the stored s and an integer, so a
    // whole z is within a few ulp of it (|m − z| ≤ 2^BITS).
    let d = _mm512_maskz_div_ps(live, corr, s);
    let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(d);
    let z = _mm512_sub_ps(_mm512_set1_ps(mid), r);
    let off = _mm512_abs_ps(_mm512_sub_ps(d, r));
    let whole = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(off, _mm512_set1_ps(1e-3));
    let low = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(z, _mm512_setzero_ps());
    let high = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(z, _mm512_set1_ps(((1u32 << BITS) - 1) as f32));
    // A dead column (zero scale) needs a zero correction too: it has no z to fold otherwise.
    let dead_ok = !live & _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(corr, _mm512_setzero_ps());
    let ok = (live & whole & low & high) | dead_ok;
    (ok == 0xFFFF).then(|| _mm512_cvtps_epi32(_mm512_mask_blend_ps(live, _mm512_set1_ps(mid), z)))
}

/// The whole tile on AMX: each 32-column unit unpacked once, then walked by every row tile.
///
/// # Safety
/// The CPU has AMX-TILE, AMX-INT8, avx512f and avx512bw, and this process may use the tile data. `args`
/// satisfies the `RunArgs` contract for a `qsi8db` LHS and a `qunbp64x4_s{f32,f16}_zpc` RHS of `args.bits`
/// ∈ {2, 4, 8}.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn tile(args: &RunArgs, s: &mut Scratch) {
    let a = args;
    let bl = a.bl;
    let kt = bl.min(64);
    let b = fit(&mut s.b, a.blocks * UNIT * bl);
    let w = fit(&mut s.w, a.blocks * W_BYTES).cast::<f32>();
    let acc = fit(&mut s.acc, a.rows.next_multiple_of(MR) * ROW_BYTES).cast::<f32>();
    let cbuf = fit(&mut s.cbuf, 2 * MR * ROW_BYTES).cast::<i32>();
    let (full, tail) = (a.rows / MR, a.rows % MR);
    let (lhs, lhs_stride) = (a.lhs.cast::<i8>(), a.lhs_stride);
    for panel in 0..a.cols.div_ceil(NR) {
        for half in 0..NR / UNIT {
            let c0 = panel * NR + half * UNIT;
            if c0 >= a.cols {
                break;
            }
            let folded: bool;
            // SAFETY: the buffers were sized for this call above; forwarded contract.
            unsafe {
                folded = crate::arch::dispatch!(unpack::<>(a, panel, half, b, w); bits(a.bits));
                std::ptr::write_bytes(acc, 0, a.rows.next_multiple_of(MR) * UNIT);
            }
            for (first, tiles, rows) in [(0, full, MR), (full * MR, usize::from(tail > 0), tail)] {
                if tiles == 0 {
                    continue;
                }
                let mut l = Loop {
                    cfg: tile_config(rows, kt, kt / KR), // A: kt bytes per row; B: kt/4 rows of 64 bytes
                    walk: Walk {
                        // SAFETY: row `first` of the tile's LHS, inside it (first < rows of the tile).
                        a: unsafe { lhs.add(first * lhs_stride) }.cast(),
                        a_tile: MR * lhs_stride,
                        b,
                        w,
                        // SAFETY: as above: the scales of row `first`.
                        s: unsafe { a.lhs_scale.add(first * a.blocks) },
                        s_tile: MR * 4 * a.blocks,
                        // SAFETY: the sums of row `first`, inside `acc` (sized for the tile's rows rounded up to MR).
                        acc: unsafe { acc.add(first * UNIT) },
                        cbuf: cbuf.cast(),
                        tiles,
                        entries: a.blocks,
                        state: WalkState::new(cbuf.cast()),
                        a_entry: bl,
                        b_entry: UNIT * bl,
                    },
                    a_stride: lhs_stride,
                    a_half: 16 * lhs_stride,
                    a_step: kt,
                    b_half: 16 * bl,
                    qs_delta: (a.lhs_sum as isize) - (a.lhs_scale as isize),
                    sa_row: 4 * a.blocks,
                    steps: bl.div_ceil(64),
                    rows,
                };
                // SAFETY: `l` describes `tiles` row tiles of `rows` rows inside the tile's LHS, scales, sums and
                // `acc`, and every block of this unit's unpacked buffers; the CPU's features are the caller's
                // guarantee.
                unsafe { k_loop(&mut l, rows > 16, a.has_zp != 0 && !folded) };
            }
            // SAFETY: `acc` holds the unit's rows; the RunArgs contract covers dst and bias.
            unsafe { store_unit(a, acc, c0) };
        }
    }
}

/// Stores the f32 sums of the unit at column `c0` (`acc`: row r's 32 at r·32) into the tile's output rows, with
/// the bias; columns past `cols` never.
///
/// # Safety
/// The CPU has avx512f; `args` satisfies the `RunArgs` contract, `c0 < cols` starts a unit, and `acc` holds
/// `rows · 32` f32.
#[target_feature(enable = "avx512f")]
unsafe fn store_unit(a: &RunArgs, acc: *const f32, c0: usize) {
    let n = (a.cols - c0).min(UNIT);
    for r in 0..a.rows {
        for g in 0..UNIT / 16 {
            let col = 16 * g;
            if col >= n {
                break;
            }
            let m: __mmask16 = if n - col >= 16 { 0xFFFF } else { (1u16 << (n - col)) - 1 };
            // SAFETY: row r's sums in `acc`; bias holds `cols` values and the mask keeps columns below cols; row r,
            // columns c0+col.. (masked) of the output are the tile's.
            unsafe {
                let mut y = _mm512_loadu_ps(acc.add(r * UNIT + col));
                if !a.bias.is_null() {
                    y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, a.bias.add(c0 + col)));
                }
                _mm512_mask_storeu_ps(a.dst.add(r * a.dst_stride + c0 + col), m, y);
            }
        }
    }
}

/// Stores the f32 sums of the tile's units `units` (`acc`: unit u's rows at (u − units.start)·rows_pad·32, as
/// [`store_unit`]).
///
/// # Safety
/// As [`store_unit`], with `units` inside the tile's ⌈cols/32⌉, `acc` holding `units.len() · rows_pad · 32` f32
/// and `rows_pad ≥ rows`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn store_units(a: &RunArgs, acc: *const f32, rows_pad: usize, units: std::ops::Range<usize>) {
    let u0 = units.start;
    for u in units {
        // SAFETY: unit u's rows (the caller's size).
        unsafe { store_unit(a, acc.add((u - u0) * rows_pad * UNIT), u * UNIT) };
    }
}
