//! Packing the activations (LHS), once per call, in the format of the kernel that runs for this M.
//!
//! A is gathered into rows of `k_packed = blocks·bl` values (zero beyond K, through the RHS's g_idx `k_map`).
//! The int8 formats quantize each (row, block) symmetrically, `scale = amax/127`,
//! `q = round_half_even(a/scale)` clamped to ±127, and keep Σq per (row, block) for the zero-point correction
//! `Σ a·w = s_a·Σ_b (s_b·Σ q·v + c_b·Σ q)`. The formats differ only in how the int8 values are laid out:
//!
//! ```text
//! F32          rows of k_packed f32 (or A itself, see f32_in_place)   (fp32 path)
//! Qsi8Db       rows of k_packed i8, row-major                          (any int8 kernel)
//! Qsi8DbP      groups of mr rows; per group, for each run of kr K values, row 0's kr values, row 1's, …
//!              (SMMLA/SME-style operands: one load gives mr×kr; rows past M are zero)
//! Qsu8Db       rows of k_packed u8 = q + 128                           (u8×s8 VNNI/USDOT with signed codes:
//!              Σ (q+128)·v = Σ q·v + 128·Σ v, the layout's block sums take 128·Σ v back out)
//! ```
//! Scales (f32) and Σq (i32) are per (row, block): row-major in Qsi8Db and Qsu8Db; in Qsi8DbP group-major, per
//! group of mr rows and per block the group's mr values (rows past M: 0), so that one load gives them
//! ([`LhsFormat::scale_index`]). Either way a tile starting at row r0 (a group's first row) finds its scales at
//! offset r0·blocks.
//!
//! The int8 formats have two numerics ([`ActQuant`]). `Block` (the default) is the above. `Row` is ORT-arm64's
//! (KleidiAI's `qai8dxp`): each row quantized asymmetrically over its whole packed length, `a ≈ sa·(q − z)`
//! with q in −128..127 ([`row_quant`]); the packed values are laid out exactly as above, every block's scale is
//! 1 and its Σq the block's sum of q, so a kernel computes `Y = Σ_k q_k·w_k` with its usual block epilogue (or
//! its row variant, which skips the multiply by 1), and the tile's row epilogue
//! (`crate::arch::finish_row_tile`) gives `sa·(Y − z·Σ_k w_k) + bias`. Positions without a value (K tail,
//! g_idx gaps) quantize to q = z, so they add nothing.

use super::rhs::{NO_SOURCE, PackedRhs};
use half::f16;
use std::borrow::Cow;
use std::sync::{Mutex, MutexGuard};

/// A chunk's lock (each is taken by one task only; a poisoned one still holds its slices).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where A comes from: the provider's input tensor, row-major [M, K].
#[derive(Debug, Clone, Copy)]
pub enum LhsSource<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl LhsSource<'_> {
    pub fn len(&self) -> usize {
        match self {
            LhsSource::F32(a) => a.len(),
            LhsSource::F16(a) => a.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies row `m` (K values) into `out` through the packing's K map, as f32; positions without a source
    /// become 0. f16 rows convert with the CPU's fastest conversion ([`widen_f16`]).
    fn gather_row(&self, m: usize, k: usize, k_map: Option<&[u32]>, out: &mut [f32]) {
        if k_map.is_none() {
            match self {
                LhsSource::F32(a) => out[..k].copy_from_slice(&a[m * k..][..k]),
                LhsSource::F16(a) => widen_f16(&a[m * k..][..k], &mut out[..k]),
            }
            out[k..].fill(0.0);
            return;
        }
        let get = |i: usize| -> f32 {
            match self {
                LhsSource::F32(a) => a[m * k + i],
                LhsSource::F16(a) => a[m * k + i].to_f32(),
            }
        };
        match k_map {
            None => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = if i < k { get(i) } else { 0.0 };
                }
            }
            Some(map) => {
                for (o, &src) in out.iter_mut().zip(map) {
                    *o = if src == NO_SOURCE { 0.0 } else { get(src as usize) };
                }
            }
        }
    }
}

/// The activation formats kernels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LhsFormat {
    /// f32 rows (fp32 path).
    F32,
    /// int8 per block, row-major.
    Qsi8Db,
    /// int8 per block, rows in groups of `mr`, K interleaved in runs of `kr`.
    Qsi8DbP { mr: usize, kr: usize },
    /// int8 per block stored as u8 = q + 128, row-major.
    Qsu8Db,
}

impl LhsFormat {
    /// The name in kernel names: `f32`, `qsi8db`, `qsi8dbp<mr>x<kr>`, `qsu8db`.
    pub fn name(&self) -> String {
        match self {
            LhsFormat::F32 => "f32".into(),
            LhsFormat::Qsi8Db => "qsi8db".into(),
            LhsFormat::Qsi8DbP { mr, kr } => format!("qsi8dbp{mr}x{kr}"),
            LhsFormat::Qsu8Db => "qsu8db".into(),
        }
    }

    /// Rows per group: packed rows are padded to a multiple of it.
    pub fn mr(&self) -> usize {
        match self {
            LhsFormat::Qsi8DbP { mr, .. } => *mr,
            _ => 1,
        }
    }

    /// Where the scale and Σq of (row, block) are in the int8 formats' arrays (`blocks` per row): row-major, or in
    /// Qsi8DbP group-major (per group of mr rows, per block, the group's mr values).
    pub fn scale_index(&self, blocks: usize, row: usize, b: usize) -> usize {
        match self {
            LhsFormat::Qsi8DbP { mr, .. } => (row / mr) * mr * blocks + b * mr + row % mr,
            _ => row * blocks + b,
        }
    }

    /// Whether the format carries f32 values (else int8 with scales and sums).
    pub fn is_f32(&self) -> bool {
        matches!(self, LhsFormat::F32)
    }

    /// Whether the format can lay out rows of `k_packed` values (interleaving needs whole runs of kr).
    pub fn fits(&self, k_packed: usize) -> bool {
        match self {
            LhsFormat::Qsi8DbP { mr, kr } => *mr > 0 && *kr > 0 && k_packed.is_multiple_of(*kr),
            _ => true,
        }
    }

    /// int8 formats: the bytes from one row to the next (`Qsi8DbP`: from one row group to the next, per row).
    /// Row-major rows of `k_packed` bytes that are a multiple of 1 KiB get one more 64-byte line: 32 rows a
    /// multiple of 1 KiB apart fall in at most 4 of L1's 64 sets, and a GEMM reading a tile of them (the AMX
    /// kernel's 16-row tile loads) then reads every row from L2 (measured ~25% of the AMX GEMM at K = 4096).
    pub fn int8_row_stride(&self, k_packed: usize) -> usize {
        match self {
            LhsFormat::Qsi8Db | LhsFormat::Qsu8Db if k_packed.is_multiple_of(1024) => k_packed + 64,
            _ => k_packed,
        }
    }
}

/// The numerics of the int8 path's activations: quantized per block of the weights' block size (`block`, the
/// default: more accurate) or per row (`row`: ORT-arm64's numerics, one scale and zero point per row; fewer
/// instructions per block in the kernels). Chosen per session; decode and prefill of a session use the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ActQuant {
    #[default]
    Block,
    Row,
}

impl ActQuant {
    /// The setting's value: `block` or `row`.
    pub fn name(&self) -> &'static str {
        match self {
            ActQuant::Block => "block",
            ActQuant::Row => "row",
        }
    }

    /// Parses a setting's value (`block` or `row`, surrounding spaces ignored); None for anything else.
    pub fn parse(v: &str) -> Option<ActQuant> {
        match v.trim() {
            "block" => Some(ActQuant::Block),
            "row" => Some(ActQuant::Row),
            _ => None,
        }
    }
}

impl std::fmt::Display for ActQuant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One row's asymmetric quantization (`ActQuant::Row`): `a ≈ scale·(q − zero)`, q = clamp(round_half_even(a ·
/// inv) + zero, −128, 127).
/// `repr(C)`: the SME2 row epilogue reads it at fixed offsets (`arch::aarch64::finish_row_tile_sme`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct RowQuant {
    pub scale: f32,
    /// 1/scale, or 0 for a zero or non-finite row.
    pub inv: f32,
    pub zero: i32,
}

/// The quantization of a row whose values lie in [lo, hi] (the caller's min and max): the range is widened to
/// hold 0, mapped onto −128..127 (scale = (hi − lo)/255) and the zero point, −128 − lo/scale, rounded (half to
/// even) into −128..127 — KleidiAI's `qai8dxp` scheme. An all-zero row (or one whose range 1/range overflows)
/// gets scale 0 and zero point 0 (q = 0);
/// a row holding a NaN a NaN scale, an infinity an infinite one (as `Block` does), so non-finite activations
/// reach the output instead of vanishing in the rounding.
pub fn row_quant(lo: f32, hi: f32) -> RowQuant {
    if lo.is_nan() || hi.is_nan() {
        return RowQuant { scale: f32::NAN, inv: 0.0, zero: 0 };
    }
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    let range = hi - lo;
    if !range.is_finite() {
        return RowQuant { scale: f32::INFINITY, inv: 0.0, zero: 0 };
    }
    if range == 0.0 {
        return RowQuant { scale: 0.0, inv: 0.0, zero: 0 };
    }
    let scale = range / 255.0;
    let inv = 255.0 / range;
    if !inv.is_finite() {
        // A range of a few subnormals: quantized to 0 (an error of at most the range per value).
        return RowQuant { scale: 0.0, inv: 0.0, zero: 0 };
    }
    let zero = (-128.0 - lo * inv).round_ties_even().clamp(-128.0, 127.0) as i32;
    RowQuant { scale, inv, zero }
}

/// (min, max) of `a`, NaN if it holds one.
pub fn min_max(a: &[f32]) -> (f32, f32) {
    a.iter().fold(
        (0f32, 0f32),
        |(lo, hi), &x| {
            if x.is_nan() || lo.is_nan() { (f32::NAN, f32::NAN) } else { (lo.min(x), hi.max(x)) }
        },
    )
}

/// The blocks of `bl` values of a row (or part of one) quantized with the row's [`RowQuant`], each code written to
/// its packed place (see [`Runs`]), block b's Σq to `out[b]`: the portable [`QuantizeRow`]. Panics as
/// [`for_each_block`].
pub fn quantize_block_row(a: &[f32], bl: usize, dst: &mut [u8], runs: Runs, rq: RowQuant, out: &mut [i32]) {
    for_each_block(a, bl, dst, runs, out, |a, dst| block_row(a, dst, runs, rq));
}

/// One block of [`quantize_block_row`] (`dst` from its first place).
fn block_row(a: &[f32], dst: &mut [u8], runs: Runs, rq: RowQuant) -> i32 {
    let zero = rq.zero as f32;
    let mut sum = 0i32;
    for (r, vals) in a.chunks(runs.run).enumerate() {
        for (d, &x) in dst[r * runs.stride..][..vals.len()].iter_mut().zip(vals) {
            let v = ((x * rq.inv).round_ties_even() + zero).clamp(-128.0, 127.0) as i8;
            *d = v as u8 ^ runs.flip;
            sum += v as i32;
        }
    }
    sum
}

/// Activations packed for one call.
#[derive(Debug, Clone)]
pub struct PackedLhs<'a> {
    pub(crate) format: LhsFormat,
    /// Rows of A.
    pub(crate) m: usize,
    pub(crate) k_packed: usize,
    pub(crate) blocks: usize,
    /// F32: the values, row r at `r · f32_stride`: the caller's A itself where its rows can be read in place
    /// ([`f32_in_place`]), else rows copied [`f32_row_stride`]`(k_packed)` apart.
    pub(crate) f32s: Cow<'a, [f32]>,
    pub(crate) f32_stride: usize,
    /// int8 formats: the values (i8 or u8 bytes), `m` rows rounded up to `mr`, row r at
    /// `r ·` [`Self::int8_stride`] (zero past `k_packed`).
    pub(crate) bytes: Vec<u8>,
    /// int8 formats: per (row, block) scale and Σq, `m` rows rounded up to `mr`, at
    /// [`LhsFormat::scale_index`].
    pub(crate) scale: Vec<f32>,
    pub(crate) sum: Vec<i32>,
    /// The numerics; with `Row`, every block scale is 1 and `row` holds each row's quantization (`m` entries).
    pub(crate) act: ActQuant,
    pub(crate) row: Vec<RowQuant>,
    /// `qsi8dbp4x8` only (the i8mm GEMMs' asm tiles, `arch::aarch64::qsnbp8x8_tiles`): the per-block row factors
    /// in the lane order of SMMLA's 2 × 2 tiles, laid out once per call (not by every tile of it): per block, per
    /// row group, [`PAIR_ROW_F32`] f32: the group's scales as row pairs, each lane duplicated [sa0 sa0 sa1 sa1
    /// sa2 sa2 sa3 sa3], then sa·Σq (the zero-point correction's row factor; Σq in the `Row` numerics, whose
    /// scales are 1) the same way. Block b of group g at `(b · groups + g) · PAIR_ROW_F32`.
    pub(crate) pairs: Vec<f32>,
}

/// f32 per (block, row group) in [`PackedLhs::pairs`].
pub const PAIR_ROW_F32: usize = 16;

/// Most f32 values of packed activations a thread keeps for its next call (16 MiB): a prefill's rows are
/// written straight into the last call's buffer instead of a fresh one that is zeroed (or faulted in) first,
/// which cost as much as a tenth of an fp32 GEMM at M = 512, K = 576.
const KEEP_F32: usize = 4 << 20;

thread_local! {
    static SPARE_F32: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A buffer of `n` f32 for packed rows, whose values are all overwritten by the packing: this thread's spare
/// buffer if it has one (stale values), else zeros.
fn f32_buffer(n: usize) -> Vec<f32> {
    let mut v = SPARE_F32.take();
    if v.len() >= n {
        v.truncate(n);
    } else {
        v.clear();
        v.resize(n, 0.0);
    }
    v
}

impl Drop for PackedLhs<'_> {
    /// Hands copied f32 rows back to this thread as its spare buffer (up to [`KEEP_F32`] values).
    fn drop(&mut self) {
        if let Cow::Owned(v) = std::mem::take(&mut self.f32s)
            && v.capacity() > 0
            && v.capacity() <= KEEP_F32
        {
            SPARE_F32.set(v);
        }
    }
}

/// Whether the fp32 kernels can read f32 rows of `k` values straight from the caller's A: no K map, no K
/// tail (`k_packed == k`), and rows that are not a multiple of 4 KiB apart (those put the rows of a register
/// block in one L1 set: the x86 fp32 GEMM ran ~20% slower at K = 2048 and 4096 reading them in place, ~2% at
/// K = 1536, the same at 576; copying 512 rows of 576 cost ~4% of that GEMM).
pub fn f32_in_place(k: usize, k_packed: usize, has_k_map: bool) -> bool {
    !has_k_map && k_packed == k && !(k * 4).is_multiple_of(4096)
}

/// The distance between f32 rows of `k_packed` values: `k_packed` padded to an odd number of 64-byte lines, so
/// that the rows a GEMM register block reads together fall in different L1 sets (rows of 2048, 4096 or 8192
/// f32 are a multiple of 4 KiB apart: all in one set, which 8 or 12 rows thrash).
pub fn f32_row_stride(k_packed: usize) -> usize {
    let lines = k_packed.div_ceil(16);
    (lines | 1) * 16
}

/// Where a block's int8 codes go in the packed bytes: value i at `(i / run)·stride + i % run` of the destination,
/// as the byte `(q as u8) ^ flip` (flip 0x80 stores q + 128). Row-major formats write a block as one run;
/// Qsi8DbP writes it as runs of kr bytes, mr·kr apart (one run per row of the group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runs {
    pub run: usize,
    pub stride: usize,
    pub flip: u8,
}

impl Runs {
    /// One contiguous run of `len` bytes.
    #[inline]
    pub fn contiguous(len: usize, flip: u8) -> Runs {
        Runs { run: len.max(1), stride: len.max(1), flip }
    }

    /// Where value `i` goes.
    #[inline]
    pub fn at(&self, i: usize) -> usize {
        (i / self.run) * self.stride + i % self.run
    }

    /// # Panics
    /// Unless a block of `len` values is whole runs (`stride >= run > 0`) that fit in `dst` bytes.
    #[inline]
    pub fn check(&self, len: usize, dst: usize) {
        // Called per row (per block for gathered blocks): runs are powers of two in every format, so no division
        // there.
        let n = if self.run.is_power_of_two() { len >> self.run.trailing_zeros() } else { len / self.run.max(1) };
        assert!(
            self.run > 0 && self.stride >= self.run && n * self.run == len,
            "{self:?} cannot lay out a block of {len}"
        );
        let span = if len == 0 { 0 } else { (n - 1) * self.stride + self.run };
        assert!(span <= dst, "{self:?}: a block of {len} spans {span} bytes, destination has {dst}");
    }
}

/// Quantizes the blocks of `bl` values of one row slice `a` (`a.len()` = bl · `out.len()`) as [`quantize_block`]
/// does each, bit for bit, writing value i's code straight to its packed place `runs.at(i)` of `dst` and block b's
/// (scale, Σq) to `out[b]` (arch-specific versions are tested against [`quantize_block_runs`]). One call per row,
/// not per block: the call, the checks and the choice of store path are paid once per row. Panics as
/// [`for_each_block`].
pub type QuantizeBlocks = fn(&[f32], usize, &mut [u8], Runs, &mut [(f32, i32)]);

/// The walk every [`QuantizeBlocks`] shares: checks the row's contract (`bl` > 0 and a multiple of `runs.run`,
/// `a.len()` = bl · `out.len()`, the row's places inside `dst`: [`Runs::check`]), then gives `f` each block's
/// values with `dst` from the block's first place (block b's: `runs.at(b · bl)`, laid out by `runs` from there)
/// and stores its result in `out[b]` (also the walk of the `Row` numerics' [`QuantizeRow`]).
///
/// # Panics
/// If the contract does not hold.
#[inline]
pub fn for_each_block<T>(
    a: &[f32],
    bl: usize,
    dst: &mut [u8],
    runs: Runs,
    out: &mut [T],
    mut f: impl FnMut(&[f32], &mut [u8]) -> T,
) {
    assert!(
        bl > 0 && bl.is_multiple_of(runs.run) && a.len() == bl * out.len(),
        "{} values in blocks of {bl} with {} results and {runs:?}",
        a.len(),
        out.len()
    );
    runs.check(a.len(), dst.len());
    let step = bl / runs.run * runs.stride;
    for (b, (o, x)) in out.iter_mut().zip(a.chunks_exact(bl)).enumerate() {
        *o = f(x, &mut dst[b * step..]);
    }
}

/// A row's blocks quantized with the row's [`RowQuant`] as [`quantize_block_row`] does, bit for bit (arch
/// versions are tested against it), block b's Σq into `out[b]`.
pub type QuantizeRow = fn(&[f32], usize, &mut [u8], Runs, RowQuant, &mut [i32]);

/// [`min_max`], bit for bit as far as [`row_quant`] sees it (arch versions are tested against it).
pub type MinMax = fn(&[f32]) -> (f32, f32);

/// An f16 → f32 slice conversion (equal lengths).
pub type WidenF16 = fn(&[f16], &mut [f32]);
/// An f32 → f16 slice conversion (equal lengths; to nearest, ties to even).
pub type NarrowF16 = fn(&[f32], &mut [f16]);

/// `half`'s f16 → f32 slice conversion (FCVT on aarch64, F16C on x86 when it has it, else software).
pub fn widen_f16_portable(src: &[f16], dst: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    src.convert_to_f32_slice(dst);
}

/// `half`'s f32 → f16 slice conversion.
pub fn narrow_f16_portable(src: &[f32], dst: &mut [f16]) {
    use half::slice::HalfFloatSliceExt;
    dst.convert_from_f32_slice(src);
}

/// The CPU's fastest f16 → f32 and f32 → f16 slice conversions (`arch::convert_f16_for`), chosen once.
fn f16_conversions() -> (WidenF16, NarrowF16) {
    static CONVERT: std::sync::OnceLock<(WidenF16, NarrowF16)> = std::sync::OnceLock::new();
    *CONVERT.get_or_init(|| crate::arch::convert_f16_for(crate::Cpu::get()))
}

/// `dst[i] = src[i]` as f32, with the CPU's fastest conversion (f16 activations of a MatMulNBits).
///
/// # Panics
/// If the lengths differ.
pub fn widen_f16(src: &[f16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "f16 → f32: {} values into {}", src.len(), dst.len());
    (f16_conversions().0)(src, dst)
}

/// `dst[i] = src[i]` rounded to f16 (to nearest, ties to even), with the CPU's fastest conversion (f16 outputs).
///
/// # Panics
/// If the lengths differ.
pub fn narrow_f16(src: &[f32], dst: &mut [f16]) {
    assert_eq!(src.len(), dst.len(), "f32 → f16: {} values into {}", src.len(), dst.len());
    (f16_conversions().1)(src, dst)
}

/// One task's rows of an int8 pack: bytes, scales, sums, row quantizations (`Row` only, else empty).
type Int8Chunk<'a> = (&'a mut [u8], &'a mut [f32], &'a mut [i32], &'a mut [RowQuant]);

/// One pack: everything about a call that the row chunks share.
#[derive(Clone, Copy)]
struct Job<'a> {
    a: LhsSource<'a>,
    m: usize,
    k: usize,
    kp: usize,
    /// int8 formats: bytes from row to row ([`LhsFormat::int8_row_stride`]).
    stride: usize,
    bl: usize,
    blocks: usize,
    k_map: Option<&'a [u32]>,
    format: LhsFormat,
    quant: QuantizeBlocks,
    act: ActQuant,
    /// The row numerics' quantizer and range (the CPU's fastest: the same numbers).
    quant_row: QuantizeRow,
    min_max: MinMax,
}

impl Job<'_> {
    /// F32: rows r0.. into `out` (whole rows of kp).
    fn fill_f32(&self, r0: usize, out: &mut [f32]) {
        for (j, row) in out.chunks_exact_mut(f32_row_stride(self.kp)).enumerate().take(self.m.saturating_sub(r0)) {
            let (values, pad) = row.split_at_mut(self.kp);
            self.a.gather_row(r0 + j, self.k, self.k_map, values);
            pad.fill(0.0);
        }
    }

    /// int8 formats: rows r0.. (r0 a group's first row) into the chunk's bytes, scales, sums and (`Row`) row
    /// quantizations.
    fn fill_int8(&self, r0: usize, bytes: &mut [u8], scale: &mut [f32], sum: &mut [i32], rows: &mut [RowQuant]) {
        let (k, kp, bl, stride) = (self.k, self.kp, self.bl, self.stride);
        let mut blk: Vec<f32> = Vec::new();
        // Blocks read straight from A (K values in order, f32, whole blocks): one quantizer call per row.
        let direct = match self.a {
            LhsSource::F32(_) if self.k_map.is_none() => k / bl,
            _ => 0,
        };
        let mut res = vec![(0f32, 0i32); self.blocks];
        let mut sums = vec![0i32; if self.act == ActQuant::Row { self.blocks } else { 0 }];
        for j in 0..(bytes.len() / stride).min(self.m.saturating_sub(r0)) {
            let i = r0 + j;
            // Row j's first code and scale, and the steps from one block to the next (no division per block).
            let (off0, off_step, runs, at0, at_step) = match self.format {
                LhsFormat::Qsi8Db => (j * stride, bl, Runs::contiguous(bl, 0), j * self.blocks, 1),
                LhsFormat::Qsu8Db => (j * stride, bl, Runs::contiguous(bl, 0x80), j * self.blocks, 1),
                LhsFormat::Qsi8DbP { mr, kr } => {
                    let (g, r) = (j / mr, j % mr);
                    (
                        g * mr * kp + r * kr,
                        bl * mr,
                        Runs { run: kr, stride: mr * kr, flip: 0 },
                        g * mr * self.blocks + r,
                        mr,
                    )
                }
                LhsFormat::F32 => unreachable!("f32 rows are gathered"),
            };
            let rq = match self.act {
                ActQuant::Block => None,
                ActQuant::Row => {
                    let q = self.row_quant(i, &mut blk);
                    *rows.get_mut(j).expect("Row packs have a slot per row") = q;
                    Some(q)
                }
            };
            if let LhsSource::F32(a) = self.a
                && direct > 0
            {
                let (src, dst) = (&a[i * k..][..direct * bl], &mut bytes[off0..]);
                match rq {
                    None => (self.quant)(src, bl, dst, runs, &mut res[..direct]),
                    Some(rq) => {
                        (self.quant_row)(src, bl, dst, runs, rq, &mut sums[..direct]);
                        res[..direct].iter_mut().zip(&sums).for_each(|(r, &t)| *r = (1.0, t));
                    }
                }
            }
            for b in direct..self.blocks {
                // Gathered: a g_idx map, f16 values or the zero tail past K.
                self.gather_block(i, b, &mut blk);
                let dst = &mut bytes[off0 + b * off_step..];
                res[b] = match rq {
                    None => {
                        let mut r = [(0f32, 0i32)];
                        (self.quant)(&blk, bl, dst, runs, &mut r);
                        r[0]
                    }
                    Some(rq) => {
                        let mut t = [0i32];
                        (self.quant_row)(&blk, bl, dst, runs, rq, &mut t);
                        (1.0, t[0])
                    }
                };
            }
            for (b, &(s, t)) in res.iter().enumerate() {
                let at = at0 + b * at_step;
                scale[at] = s;
                sum[at] = t;
            }
        }
    }

    /// Row i's quantization (`Row`) from the min and max of its packed values (those without a source are 0,
    /// which the range always holds): straight from A when K is in order and f32, else block by block.
    fn row_quant(&self, i: usize, blk: &mut Vec<f32>) -> RowQuant {
        let (lo, hi) = match self.a {
            LhsSource::F32(a) if self.k_map.is_none() => (self.min_max)(&a[i * self.k..][..self.k]),
            _ => (0..self.blocks).fold((0f32, 0f32), |(lo, hi), b| {
                self.gather_block(i, b, blk);
                let (l, h) = (self.min_max)(blk);
                if l.is_nan() || lo.is_nan() { (f32::NAN, f32::NAN) } else { (lo.min(l), hi.max(h)) }
            }),
        };
        row_quant(lo, hi)
    }

    /// Block b of row i as f32 through the K map (zero where nothing maps or past K).
    fn gather_block(&self, i: usize, b: usize, out: &mut Vec<f32>) {
        let (k, bl) = (self.k, self.bl);
        out.clear();
        out.resize(bl, 0.0);
        let k0 = b * bl;
        match self.k_map {
            None => {
                let n = k.saturating_sub(k0).min(bl);
                match self.a {
                    LhsSource::F32(a) => out[..n].copy_from_slice(&a[i * k + k0..][..n]),
                    LhsSource::F16(a) => widen_f16(&a[i * k + k0..][..n], &mut out[..n]),
                }
            }
            Some(map) => {
                for (o, &src) in out.iter_mut().zip(&map[k0..k0 + bl]) {
                    if src != NO_SOURCE {
                        *o = match self.a {
                            LhsSource::F32(a) => a[i * k + src as usize],
                            LhsSource::F16(a) => a[i * k + src as usize].to_f32(),
                        };
                    }
                }
            }
        }
    }
}

impl<'a> PackedLhs<'a> {
    /// Packs `m` rows of A (each K long) for `rhs`, in `format`.
    ///
    /// # Panics
    /// If `a` does not hold m·K values, or the format cannot lay out this K (see [`LhsFormat::fits`]).
    pub fn pack(a: LhsSource<'a>, m: usize, rhs: &PackedRhs, format: LhsFormat) -> Self {
        Self::pack_with(a, m, rhs, format, quantize_block_runs)
    }

    /// [`PackedLhs::pack`] with a given block quantizer (the CPU's fastest; the same numbers), on this thread.
    pub fn pack_with(a: LhsSource<'a>, m: usize, rhs: &PackedRhs, format: LhsFormat, quant: QuantizeBlocks) -> Self {
        Self::pack_as(a, m, rhs, format, quant, ActQuant::Block)
    }

    /// [`PackedLhs::pack_with`] in the numerics `act` (int8 formats; F32 ignores it).
    pub fn pack_as(
        a: LhsSource<'a>,
        m: usize,
        rhs: &PackedRhs,
        format: LhsFormat,
        quant: QuantizeBlocks,
        act: ActQuant,
    ) -> Self {
        let r: Result<Self, std::convert::Infallible> = Self::pack_par(a, m, rhs, format, quant, act, 1, |n, f| {
            (0..n).for_each(f);
            Ok(())
        });
        let Ok(lhs) = r;
        lhs
    }

    /// [`PackedLhs::pack_as`] in up to `tasks` chunks of whole row groups run through `par` (a parallel-for as
    /// in [`crate::Selected::matmul`]; not called at all for one task). The same bytes, scales and sums for any
    /// number of tasks.
    ///
    /// # Panics
    /// As [`PackedLhs::pack`]; also if the format's runs do not divide the block size.
    #[allow(clippy::too_many_arguments)]
    pub fn pack_par<E>(
        a: LhsSource<'a>,
        m: usize,
        rhs: &PackedRhs,
        format: LhsFormat,
        quant: QuantizeBlocks,
        act: ActQuant,
        tasks: usize,
        par: impl FnOnce(usize, &(dyn Fn(usize) + Sync)) -> Result<(), E>,
    ) -> Result<Self, E> {
        let k = rhs.params.k;
        assert_eq!(a.len(), m * k, "A has {} values, expected M*K = {}*{}", a.len(), m, k);
        let (kp, bl, blocks) = (rhs.k_packed(), rhs.params.block_size, rhs.blocks);
        assert!(format.fits(kp), "LHS format {} cannot lay out rows of {kp} values", format.name());
        if let LhsFormat::Qsi8DbP { kr, .. } = format {
            assert!(bl.is_multiple_of(kr), "LHS format {} cannot lay out blocks of {bl}", format.name());
        }
        let mut out = PackedLhs {
            format,
            m,
            k_packed: kp,
            blocks,
            f32s: Cow::Borrowed(&[]),
            f32_stride: kp,
            bytes: Vec::new(),
            scale: Vec::new(),
            sum: Vec::new(),
            act: if format.is_f32() { ActQuant::Block } else { act },
            row: Vec::new(),
            pairs: Vec::new(),
        };
        if m == 0 || kp == 0 {
            return Ok(out);
        }
        let act = out.act;
        let (quant_row, min_max) = crate::arch::quantize_row_for(crate::Cpu::get());
        let stride = out.int8_stride();
        let k_map = rhs.k_map.as_deref();
        let job = Job { a, m, k, kp, stride, bl, blocks, k_map, format, quant, act, quant_row, min_max };
        let mr = format.mr();
        let groups = m.div_ceil(mr);
        let per_task = groups.div_ceil(tasks.clamp(1, groups)) * mr;
        let tasks = m.div_ceil(per_task);
        if format.is_f32() {
            if let LhsSource::F32(src) = a
                && f32_in_place(k, kp, job.k_map.is_some())
            {
                out.f32s = Cow::Borrowed(src);
                out.f32_stride = k;
                return Ok(out);
            }
            let stride = f32_row_stride(kp);
            let mut rows = f32_buffer(m * stride);
            if tasks == 1 {
                job.fill_f32(0, &mut rows);
            } else {
                let chunks: Vec<Mutex<&mut [f32]>> = rows.chunks_mut(per_task * stride).map(Mutex::new).collect();
                par(tasks, &|t| job.fill_f32(t * per_task, &mut lock(&chunks[t])))?;
            }
            out.f32s = Cow::Owned(rows);
            out.f32_stride = stride;
            return Ok(out);
        }
        let rows = m.next_multiple_of(mr);
        out.bytes = vec![0u8; rows * stride];
        out.scale = vec![0f32; rows * blocks];
        out.sum = vec![0i32; rows * blocks];
        let row_len = if act == ActQuant::Row { per_task } else { 0 };
        if act == ActQuant::Row {
            out.row = vec![RowQuant { scale: 0.0, inv: 0.0, zero: 0 }; rows];
        }
        if tasks == 1 {
            job.fill_int8(0, &mut out.bytes, &mut out.scale, &mut out.sum, &mut out.row);
        } else {
            let mut row_chunks: Vec<&mut [RowQuant]> = out.row.chunks_mut(row_len.max(1)).collect();
            row_chunks.resize_with(tasks, Default::default);
            let chunks: Vec<Mutex<Int8Chunk<'_>>> = out
                .bytes
                .chunks_mut(per_task * stride)
                .zip(out.scale.chunks_mut(per_task * blocks))
                .zip(out.sum.chunks_mut(per_task * blocks))
                .zip(row_chunks)
                .map(|(((b, s), t), r)| Mutex::new((b, s, t, r)))
                .collect();
            par(tasks, &|t| {
                let mut c = lock(&chunks[t]);
                let (b, s, u, r) = &mut *c;
                job.fill_int8(t * per_task, b, s, u, r);
            })?;
        }
        out.row.truncate(m);
        if format == (LhsFormat::Qsi8DbP { mr: 4, kr: 8 }) {
            out.pairs = pair_rows(&out.scale, &out.sum, blocks);
        }
        Ok(out)
    }

    pub fn format(&self) -> LhsFormat {
        self.format
    }

    pub fn rows(&self) -> usize {
        self.m
    }

    /// int8 formats: bytes from one packed row to the next ([`LhsFormat::int8_row_stride`] of `k_packed`).
    pub(crate) fn int8_stride(&self) -> usize {
        self.format.int8_row_stride(self.k_packed)
    }

    /// The int8 value q of (row, packed k), read back from any int8 format (tests).
    pub fn q_at(&self, row: usize, kk: usize) -> i8 {
        let (kp, stride) = (self.k_packed, self.int8_stride());
        match self.format {
            LhsFormat::F32 => panic!("q_at on f32 activations"),
            LhsFormat::Qsi8Db => self.bytes[row * stride + kk] as i8,
            LhsFormat::Qsu8Db => (self.bytes[row * stride + kk] as i32 - 128) as i8,
            LhsFormat::Qsi8DbP { mr, kr } => {
                self.bytes[(row / mr) * mr * kp + ((kk / kr) * mr + row % mr) * kr + kk % kr] as i8
            }
        }
    }

    /// The numerics the activations were quantized in.
    pub fn act(&self) -> ActQuant {
        self.act
    }

    /// `Row`: row `row`'s quantization.
    pub fn row_at(&self, row: usize) -> RowQuant {
        self.row[row]
    }

    /// Scale and Σq of (row, block) (int8 formats).
    pub fn block_at(&self, row: usize, b: usize) -> (f32, i32) {
        let at = self.format.scale_index(self.blocks, row, b);
        (self.scale[at], self.sum[at])
    }
}

/// [`PackedLhs::pairs`] from a `qsi8dbp4x8` pack's group-major scales and sums (4 rows per group and block).
fn pair_rows(scale: &[f32], sum: &[i32], blocks: usize) -> Vec<f32> {
    const MR: usize = 4;
    let groups = scale.len() / (MR * blocks);
    let mut v = vec![0f32; groups * blocks * PAIR_ROW_F32];
    for (g, (s, q)) in scale.chunks_exact(MR * blocks).zip(sum.chunks_exact(MR * blocks)).enumerate() {
        for (b, (s, q)) in s.chunks_exact(MR).zip(q.chunks_exact(MR)).enumerate() {
            let d = &mut v[(b * groups + g) * PAIR_ROW_F32..][..PAIR_ROW_F32];
            for r in 0..MR {
                let sq = s[r] * q[r] as f32;
                d[2 * r] = s[r];
                d[2 * r + 1] = s[r];
                d[2 * MR + 2 * r] = sq;
                d[2 * MR + 2 * r + 1] = sq;
            }
        }
    }
    v
}

/// Symmetric int8 quantization of one block: returns (scale, Σq). scale = amax/127. A block holding a NaN gets a
/// NaN scale (and an infinite value an infinite one), so non-finite activations reach the output as they would in
/// f32 arithmetic instead of vanishing in the rounding. A block whose amax is below 127/f32::MAX (127/amax
/// overflows) gets all-zero codes.
pub fn quantize_block(a: &[f32], q: &mut [i8]) -> (f32, i32) {
    let (scale, inv) = block_scale(a);
    let mut sum = 0i32;
    for (qi, &x) in q.iter_mut().zip(a) {
        let v = code(x, inv);
        *qi = v;
        sum += v as i32;
    }
    (scale, sum)
}

/// [`quantize_block`] on each block, writing each code to its packed place (see [`Runs`]): the portable
/// [`QuantizeBlocks`].
pub fn quantize_block_runs(a: &[f32], bl: usize, dst: &mut [u8], runs: Runs, out: &mut [(f32, i32)]) {
    for_each_block(a, bl, dst, runs, out, |a, dst| block_runs(a, dst, runs));
}

/// One block of [`quantize_block_runs`] (`dst` from its first place).
fn block_runs(a: &[f32], dst: &mut [u8], runs: Runs) -> (f32, i32) {
    let (scale, inv) = block_scale(a);
    let mut sum = 0i32;
    for (r, vals) in a.chunks(runs.run).enumerate() {
        for (d, &x) in dst[r * runs.stride..][..vals.len()].iter_mut().zip(vals) {
            let v = code(x, inv);
            *d = v as u8 ^ runs.flip;
            sum += v as i32;
        }
    }
    (scale, sum)
}

/// (scale, 1/scale; 0 for a zero or non-finite block, and for a block of a few subnormals whose 127/amax
/// overflows: amax < 127/f32::MAX ≈ 3.7e-37, quantized to 0, an error of at most amax per value, as
/// [`row_quant`] does with such a range).
fn block_scale(a: &[f32]) -> (f32, f32) {
    let amax = a.iter().fold(0f32, |m, &x| if x.is_nan() || m.is_nan() { f32::NAN } else { m.max(x.abs()) });
    let inv = 127.0 / amax;
    (amax / 127.0, if amax > 0.0 && amax.is_finite() && inv.is_finite() { inv } else { 0.0 })
}

fn code(x: f32, inv: f32) -> i8 {
    (x * inv).round_ties_even().clamp(-127.0, 127.0) as i8
}

/// The blocks the quantizer tests run on, each with its length and trial number: random values of 16 … 4096, zero
/// blocks, NaN and ±infinity, tiny values (down to subnormals), exact ties, and one-signed blocks (all ≥ 0,
/// all ≤ 0).
#[cfg(test)]
fn for_each_test_block(mut seed: u64, mut f: impl FnMut(usize, usize, &[f32])) {
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for len in [16usize, 32, 64, 128, 4096] {
        for trial in 0..200 {
            let mut a: Vec<f32> = (0..len).map(|_| (next() % 20001) as f32 / 1000.0 - 10.0).collect();
            match trial % 10 {
                0 => a.fill(0.0),
                1 => a[len / 2] = f32::NAN,
                2 => a[3] = f32::INFINITY,
                3 => a[len - 1] = f32::NEG_INFINITY,
                4 => a.iter_mut().for_each(|x| *x *= 1e-30),
                5 => a.iter_mut().enumerate().for_each(|(i, x)| *x = (i as f32 - 8.0) * 0.5), // ties
                6 => a.iter_mut().for_each(|x| *x = x.abs()),
                7 => a.iter_mut().for_each(|x| *x = -x.abs()),
                // Around the smallest amax whose 127/amax is finite (127/f32::MAX ≈ 3.7e-37), and subnormals.
                8 => {
                    let s = [1e-45, 1e-40, 1e-38, 3.6e-38, 3.8e-38, 1e-37][trial / 10 % 6];
                    a.iter_mut().for_each(|x| *x *= s);
                }
                _ => {}
            }
            f(len, trial, &a);
        }
    }
}

/// Every kind of [`Runs`] the packer uses for a block of `len` (contiguous, runs of 4, 8 and 16 bytes, + 128), and
/// runs of 32 and 64 inside longer blocks.
#[cfg(test)]
fn test_runs(len: usize) -> Vec<Runs> {
    let mut runs = vec![
        Runs::contiguous(len, 0),
        Runs::contiguous(len, 0x80),
        Runs { run: 8, stride: 32, flip: 0 },
        Runs { run: 4, stride: 16, flip: 0 },
        Runs { run: 16, stride: 48, flip: 0x80 },
        Runs { run: 8, stride: 8, flip: 0 },
        Runs { run: 8, stride: 24, flip: 0x80 },
        Runs { run: 4, stride: 12, flip: 0x80 },
    ];
    // Runs of 32 and 64 that are not the whole block (chunks of 32 inside a longer run), where they divide it.
    for (run, stride, flip) in [(32, 40, 0), (64, 96, 0x80)] {
        if len > run && len.is_multiple_of(run) {
            runs.push(Runs { run, stride, flip });
        }
    }
    runs
}

/// Bytes around a block of `len` laid out by `runs` (3 past its span), all 0x5a: writes outside it show.
#[cfg(test)]
fn test_span(len: usize, runs: Runs) -> Vec<u8> {
    vec![0x5au8; (len / runs.run - 1) * runs.stride + runs.run + 3]
}

/// Test helper: `f` gives [`quantize_block`]'s results bit for bit (codes, scale bits, Σq) on every test block
/// ([`for_each_test_block`]), written through every kind of [`Runs`] ([`test_runs`]) and touching no other byte.
#[cfg(test)]
pub(crate) fn assert_quantizer_matches_scalar(f: QuantizeBlocks) {
    // Rows of 1 and of 3 blocks: each test block alone, and (up to 128 values) with the two test blocks of its
    // length before it.
    let mut seen: Vec<Vec<f32>> = Vec::new();
    for_each_test_block(0x1234_5678, |len, trial, a| {
        seen.retain(|b| b.len() == len);
        seen.push(a.to_vec());
        let rows = if seen.len() >= 3 && len <= 128 { vec![1, 3] } else { vec![1] };
        for nb in rows {
            let row: Vec<f32> = seen[seen.len() - nb..].concat();
            let n = row.len();
            let mut q1 = vec![0i8; n];
            let r1: Vec<(u32, i32)> = row
                .chunks_exact(len)
                .zip(q1.chunks_exact_mut(len))
                .map(|(a, q)| quantize_block(a, q))
                .map(|(s, t)| (s.to_bits(), t))
                .collect();
            for runs in test_runs(len) {
                let (mut want, mut got) = (test_span(n, runs), test_span(n, runs));
                for (i, &v) in q1.iter().enumerate() {
                    want[runs.at(i)] = v as u8 ^ runs.flip;
                }
                let mut r2 = vec![(f32::NAN, -1); nb];
                f(&row, len, &mut got, runs, &mut r2);
                let r2: Vec<(u32, i32)> = r2.iter().map(|&(s, t)| (s.to_bits(), t)).collect();
                assert_eq!(want, got, "len {len} × {nb} trial {trial} {runs:?}");
                assert_eq!(r1, r2, "len {len} × {nb} trial {trial}");
            }
        }
    });
}

/// Test helper: `q` and `mm` give [`quantize_block_row`]'s and [`min_max`]'s results bit for bit (codes, Σq, and
/// the [`row_quant`] of the range, also over lengths with a 1..3-value tail) on every test block, through every
/// kind of [`Runs`].
#[cfg(test)]
pub(crate) fn assert_row_quantizer_matches_scalar(q: QuantizeRow, mm: MinMax) {
    let bits = |r: RowQuant| (r.scale.to_bits(), r.inv.to_bits(), r.zero);
    let quant = |(lo, hi): (f32, f32)| row_quant(lo, hi);
    for_each_test_block(0x8765_4321, |len, trial, a| {
        for tail in [0, 1, 3] {
            let r = &a[..len - tail];
            assert_eq!(bits(quant(mm(r))), bits(quant(min_max(r))), "len {len} trial {trial} tail {tail}");
        }
        // Rows of 1 block and (up to 128 values) of 3: the block repeated, with its middle copy negated.
        let three: Vec<f32> = [a, &a.iter().map(|x| -x).collect::<Vec<_>>(), a].concat();
        let rows: &[&[f32]] = if len <= 128 { &[a, &three] } else { &[a] };
        for &row in rows {
            let (n, nb) = (row.len(), row.len() / len);
            let rq = quant(min_max(row));
            for runs in test_runs(len) {
                let (mut want, mut got) = (test_span(n, runs), test_span(n, runs));
                let (mut s1, mut s2) = (vec![0i32; nb], vec![-1i32; nb]);
                quantize_block_row(row, len, &mut want, runs, rq, &mut s1);
                q(row, len, &mut got, runs, rq, &mut s2);
                assert_eq!(want, got, "len {len} × {nb} trial {trial} {runs:?} {rq:?}");
                assert_eq!(s1, s2, "len {len} × {nb} trial {trial}");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Params, Weights, ZeroPoints};
    use crate::pack::RhsLayout;

    /// The packer as it was before quantizing in place: each row gathered into a scratch row, quantized block by
    /// block with the scalar quantizer into a scratch row of codes, then copied into the format.
    fn pack_old(a: LhsSource<'_>, m: usize, rhs: &PackedRhs, format: LhsFormat) -> PackedLhs<'static> {
        let k = rhs.params.k;
        let (kp, bl, blocks) = (rhs.k_packed(), rhs.params.block_size, rhs.blocks);
        let k_map = rhs.k_map.as_deref();
        let mut out = PackedLhs {
            format,
            m,
            k_packed: kp,
            blocks,
            f32s: Cow::Borrowed(&[]),
            f32_stride: f32_row_stride(kp),
            bytes: Vec::new(),
            scale: Vec::new(),
            sum: Vec::new(),
            act: ActQuant::Block,
            row: Vec::new(),
            pairs: Vec::new(),
        };
        if format.is_f32() {
            let mut rows = vec![0f32; m * f32_row_stride(kp)];
            for (i, row) in rows.chunks_exact_mut(f32_row_stride(kp).max(1)).enumerate().take(m) {
                a.gather_row(i, k, k_map, &mut row[..kp]);
            }
            out.f32s = Cow::Owned(rows);
            return out;
        }
        let rows = m.next_multiple_of(format.mr());
        out.bytes = vec![0u8; rows * out.int8_stride()];
        out.scale = vec![0f32; rows * blocks];
        out.sum = vec![0i32; rows * blocks];
        let (mut row, mut q) = (vec![0f32; kp], vec![0i8; kp]);
        let pairs = format == LhsFormat::Qsi8DbP { mr: 4, kr: 8 };
        let groups = rows / 4;
        if pairs {
            out.pairs = vec![0f32; groups * blocks * PAIR_ROW_F32];
        }
        for i in 0..m {
            a.gather_row(i, k, k_map, &mut row);
            for b in 0..blocks {
                let (s, t) = quantize_block(&row[b * bl..][..bl], &mut q[b * bl..][..bl]);
                let at = format.scale_index(blocks, i, b);
                out.scale[at] = s;
                out.sum[at] = t;
                if pairs {
                    // Row i's lanes in block b's record of its group (padding rows stay 0).
                    let at = (b * groups + i / 4) * PAIR_ROW_F32 + 2 * (i % 4);
                    out.pairs[at..at + 2].fill(s);
                    out.pairs[at + 8..at + 10].fill(s * t as f32);
                }
            }
            for (kk, &v) in q.iter().enumerate() {
                let at = match format {
                    LhsFormat::Qsi8DbP { mr, kr } => (i / mr) * mr * kp + ((kk / kr) * mr + i % mr) * kr + kk % kr,
                    _ => i * out.int8_stride() + kk,
                };
                out.bytes[at] = if format == LhsFormat::Qsu8Db { (v as i32 + 128) as u8 } else { v as u8 };
            }
        }
        out
    }

    #[test]
    fn f32_rows_are_read_in_place_only_where_the_stride_allows() {
        assert!(f32_in_place(576, 576, false) && f32_in_place(1536, 1536, false) && f32_in_place(96, 96, false));
        assert!(!f32_in_place(2048, 2048, false) && !f32_in_place(4096, 4096, false), "a multiple of 4 KiB apart");
        assert!(!f32_in_place(519, 544, false), "a K tail is padded with zeros");
        assert!(!f32_in_place(576, 576, true), "a K map gathers");
        // Copied rows: an odd number of 64-byte lines apart.
        assert_eq!([f32_row_stride(576), f32_row_stride(4096), f32_row_stride(592)], [592, 4112, 592]);
    }

    fn assert_same(x: &PackedLhs, y: &PackedLhs, what: &str) {
        assert_eq!((x.format, x.m, x.k_packed, x.blocks), (y.format, y.m, y.k_packed, y.blocks), "{what}");
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        // f32 rows compared value by value: one side may read the caller's A in place (another row stride).
        let f32_rows = |l: &PackedLhs<'_>| -> Vec<u32> {
            (0..if l.f32s.is_empty() { 0 } else { l.m })
                .flat_map(|r| bits(&l.f32s[r * l.f32_stride..][..l.k_packed]))
                .collect()
        };
        assert_eq!(f32_rows(x), f32_rows(y), "{what}: f32 values");
        assert_eq!(x.bytes, y.bytes, "{what}: bytes");
        assert_eq!(bits(&x.scale), bits(&y.scale), "{what}: scales");
        assert_eq!(x.sum, y.sum, "{what}: sums");
        assert_eq!(bits(&x.pairs), bits(&y.pairs), "{what}: row pairs");
        assert_eq!(x.act, y.act, "{what}: numerics");
        let rows = |v: &[RowQuant]| v.iter().map(|r| (r.scale.to_bits(), r.inv.to_bits(), r.zero)).collect::<Vec<_>>();
        assert_eq!(rows(&x.row), rows(&y.row), "{what}: row quantizations");
    }

    /// In-place quantization (portable and this CPU's quantizer), serial and in 2, 3 and 7 tasks on threads, gives
    /// the old scratch-row packer's bytes, scales and sums: every format, odd K and K tails, block sizes 16 … 128,
    /// g_idx regrouping, f32 and f16 sources (with NaN and zero rows), M = 1..9 and 64.
    #[test]
    fn in_place_and_parallel_packing_match_the_scratch_packer() {
        let formats = [
            LhsFormat::F32,
            LhsFormat::Qsi8Db,
            LhsFormat::Qsu8Db,
            LhsFormat::Qsi8DbP { mr: 4, kr: 8 },
            LhsFormat::Qsi8DbP { mr: 4, kr: 4 },
            LhsFormat::Qsi8DbP { mr: 2, kr: 16 },
            LhsFormat::Qsi8DbP { mr: 3, kr: 8 },
        ];
        let quants: [QuantizeBlocks; 2] = [quantize_block_runs, crate::arch::quantize_block_for(crate::Cpu::get())];
        let threads = |n: usize, f: &(dyn Fn(usize) + Sync)| -> Result<(), ()> {
            std::thread::scope(|s| {
                for i in 0..3 {
                    s.spawn(move || (i..n).step_by(3).for_each(f));
                }
            });
            Ok(())
        };
        for (k, bl, gidx) in [
            (300usize, 32usize, false),
            (37, 16, false),
            (128, 64, false),
            (200, 128, false),
            (97, 16, true),
            (300, 32, true),
        ] {
            let n = 5;
            let p = Params::new(k as i64, n as i64, 4, bl as i64).unwrap();
            let b: Vec<u8> = (0..n * p.k_blocks() * p.blob_size()).map(|i| (i * 7 % 256) as u8).collect();
            let scales = vec![0.5f32; n * p.k_blocks()];
            let g: Vec<i32> = (0..k).map(|i| ((i * 5 + 3) % p.k_blocks()) as i32).collect();
            let w = Weights::new(p, &b, &scales, ZeroPoints::Default, gidx.then_some(&g[..])).unwrap();
            let rhs = PackedRhs::pack(&w, RhsLayout::plain(8, 4)).unwrap();
            assert_eq!(rhs.k_map.is_some(), gidx, "K={k}: g_idx regrouping");
            for m in (1..=9).chain([64]) {
                let mut a: Vec<f32> =
                    (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / (7.0 + (i % 13) as f32)).collect();
                if m > 2 {
                    a[k..2 * k].fill(0.0);
                    a[2 * k + k / 2] = f32::NAN;
                }
                let a16: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
                for src in [LhsSource::F32(&a), LhsSource::F16(&a16)] {
                    for format in formats {
                        if !format.fits(rhs.k_packed()) {
                            continue;
                        }
                        let old = pack_old(src, m, &rhs, format);
                        for quant in quants {
                            for tasks in [1, 2, 3, 7] {
                                let new =
                                    PackedLhs::pack_par(src, m, &rhs, format, quant, ActQuant::Block, tasks, threads)
                                        .unwrap();
                                let what = format!("K={k} bl={bl} g_idx={gidx} M={m} {} tasks={tasks}", format.name());
                                assert_same(&old, &new, &what);
                                let row1 = PackedLhs::pack_as(src, m, &rhs, format, quant, ActQuant::Row);
                                let row =
                                    PackedLhs::pack_par(src, m, &rhs, format, quant, ActQuant::Row, tasks, threads)
                                        .unwrap();
                                assert_same(&row1, &row, &format!("{what} row"));
                                if !format.is_f32() {
                                    check_row_pack(&row, src, k, rhs.k_map.as_deref(), &what);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// A `Row` pack against its definition: every block scale 1, Σq per block, each packed value's code
    /// q = clamp(round(a/scale) + z) with the row's (scale, z) from the row's min and max, within half a step.
    fn check_row_pack(p: &PackedLhs, src: LhsSource<'_>, k: usize, k_map: Option<&[u32]>, what: &str) {
        let kp = p.k_packed;
        let bl = kp / p.blocks;
        let mut row = vec![0f32; kp];
        for i in 0..p.m {
            src.gather_row(i, k, k_map, &mut row);
            let rq = p.row_at(i);
            let (lo, hi) = min_max(&row);
            let bits = |r: RowQuant| (r.scale.to_bits(), r.inv.to_bits(), r.zero);
            assert_eq!(bits(rq), bits(row_quant(lo, hi)), "{what}: row {i}");
            for b in 0..p.blocks {
                let (s, t) = p.block_at(i, b);
                assert_eq!(s, 1.0, "{what}: row {i} block {b} scale");
                let qs: i32 = (0..bl).map(|o| p.q_at(i, b * bl + o) as i32).sum();
                assert_eq!(t, qs, "{what}: row {i} block {b} Σq");
            }
            if !rq.scale.is_finite() || rq.scale == 0.0 {
                continue;
            }
            for (kk, &x) in row.iter().enumerate() {
                let q = p.q_at(i, kk) as i32;
                let back = rq.scale * (q - rq.zero) as f32;
                assert!((back - x).abs() <= rq.scale * 0.5001 + 1e-6, "{what}: row {i} k {kk}: {x} -> q {q} -> {back}");
            }
        }
    }

    #[test]
    fn row_quant_covers_the_range_with_zero_exact() {
        for (lo, hi) in [(-1.0f32, 3.0), (0.5, 2.0), (-4.0, -0.25), (-1e-30, 1e-30), (-7.0, 7.0)] {
            let rq = row_quant(lo, hi);
            let (l, h) = (lo.min(0.0), hi.max(0.0));
            // lo, 0 and hi quantize within half a step (clamped into −128..127), 0 exactly onto z.
            for x in [l, 0.0, h, (l + h) / 2.0] {
                let exact = x * rq.inv + rq.zero as f32;
                let q = ((x * rq.inv).round_ties_even() + rq.zero as f32).clamp(-128.0, 127.0);
                assert!((q - exact).abs() <= 0.5001, "{lo} {hi}: {rq:?}: {x} -> {q}, exactly {exact}");
            }
            assert_eq!(0.0 * rq.inv + rq.zero as f32, rq.zero as f32);
            assert!((-128..=127).contains(&rq.zero));
        }
        assert_eq!(row_quant(0.0, 0.0), RowQuant { scale: 0.0, inv: 0.0, zero: 0 });
        assert!(row_quant(f32::NAN, 1.0).scale.is_nan());
        assert!(row_quant(-1.0, f32::INFINITY).scale.is_infinite());
        // Non-negative rows (after ReLU/SiLU-like activations) use all 256 codes: z = −128.
        assert_eq!(row_quant(0.0, 5.0).zero, -128);
        assert_eq!(ActQuant::parse(" row "), Some(ActQuant::Row));
        assert_eq!(ActQuant::parse("block"), Some(ActQuant::Block));
        assert_eq!(ActQuant::parse("per_row"), None);
    }

    #[test]
    fn this_cpus_row_quantizer_matches_scalar() {
        let (q, mm) = crate::arch::quantize_row_for(crate::Cpu::get());
        assert_row_quantizer_matches_scalar(q, mm);
    }

    #[test]
    fn portable_runs_quantizer_matches_scalar() {
        assert_quantizer_matches_scalar(quantize_block_runs);
    }

    #[test]
    fn quantize_block_round_trips_within_half_a_step() {
        let a: Vec<f32> = (0..64).map(|i| ((i * 37 % 29) as f32 - 14.0) / 7.0).collect();
        let mut q = vec![0i8; 64];
        let (s, sum) = quantize_block(&a, &mut q);
        assert_eq!(sum, q.iter().map(|&v| v as i32).sum::<i32>());
        for (&x, &v) in a.iter().zip(&q) {
            assert!((x - v as f32 * s).abs() <= s * 0.5 + 1e-6);
        }
        let (s0, sum0) = quantize_block(&[0.0; 16], &mut q[..16]);
        assert_eq!((s0, sum0), (0.0, 0));
        let mut nan_block = [0.5f32; 16];
        nan_block[3] = f32::NAN;
        assert!(quantize_block(&nan_block, &mut q[..16]).0.is_nan());
        nan_block[3] = f32::NEG_INFINITY;
        assert!(quantize_block(&nan_block, &mut q[..16]).0.is_infinite());
    }
}
