//! The aarch64 instructions Rust 1.95 has no stable intrinsics for (SDOT, SMMLA, FCVTL from f16), as one-
//! instruction `asm!` blocks, and the field extraction shared by the int8 kernels on signed-code layouts.
//!
//! Every helper is `#[target_feature(enable = "neon")]` and `#[inline]`, so it inlines into the kernel bodies
//! (NEON functions themselves). The SDOT/SMMLA blocks name their extension to the assembler
//! (`.arch_extension`), so a body can be generic over the instruction; only the entry points compiled with
//! `dotprod` / `i8mm` (and selected on CPUs that have them) instantiate the bodies that execute them.

// Register tiles are indexed [row][column quad]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use crate::pack::ScaleType;
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;
use core::arch::asm;

/// `acc.s[j] += Σ_i w.b[4j+i] · a.b[4E+i]` (SDOT by element: 4 int8 of `a` against each 32-bit lane of `w`).
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn sdot_lane<const E: i32>(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: a register-only instruction (no memory, no flags); executed only by entry points selected on CPUs with dotprod.
    unsafe {
        asm!(".arch_extension dotprod", "sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{e}]", acc = inout(vreg) acc, w = in(vreg) w, a = in(vreg) a,
             e = const E, options(pure, nomem, nostack, preserves_flags));
    }
    acc
}

/// [`sdot_lane`] with the element index as a value (constant after inlining: the match folds away).
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn sdot_elem(acc: int32x4_t, w: int8x16_t, a: int8x16_t, e: usize) -> int32x4_t {
    match e {
        0 => sdot_lane::<0>(acc, w, a),
        1 => sdot_lane::<1>(acc, w, a),
        2 => sdot_lane::<2>(acc, w, a),
        _ => sdot_lane::<3>(acc, w, a),
    }
}

/// `acc.s[j] += Σ_i w.b[4j+i] · a.b[4j+i]` (SDOT, vector form).
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn sdot(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: as `sdot_lane`.
    unsafe {
        asm!(".arch_extension dotprod", "sdot {acc:v}.4s, {w:v}.16b, {a:v}.16b", acc = inout(vreg) acc, w = in(vreg) w, a = in(vreg) a,
             options(pure, nomem, nostack, preserves_flags));
    }
    acc
}

/// `acc += A · Bᵀ` for 2×8 int8 matrices A = `a` (row i in bytes 8i..8i+7) and B = `b`, into the 2×2 int32
/// `acc` (element (i, j) in lane 2i + j): SMMLA.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn smmla(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: a register-only instruction; executed only by entry points selected on CPUs with i8mm.
    unsafe {
        asm!(".arch_extension i8mm", "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) acc, a = in(vreg) a, b = in(vreg) b,
             options(pure, nomem, nostack, preserves_flags));
    }
    acc
}

/// This thread's SVE vector length in bytes (RDVL). It is per thread and a process may change it
/// (PR_SVE_SET_VL), so the SVE kernels read it on every call and run their NEON bodies when it has become shorter
/// than the vector they are written for.
#[target_feature(enable = "sve")]
#[inline]
pub(crate) fn sve_vl_bytes() -> usize {
    let vl: usize;
    // SAFETY: a register-only instruction of base SVE; executed only by entry points selected on CPUs with SVE.
    unsafe {
        asm!(".arch_extension sve", "rdvl {vl}, #1", vl = out(reg) vl, options(pure, nomem, nostack, preserves_flags));
    }
    vl
}

/// Runs `f` on a new thread whose SVE vector length has been set to `bytes` (prctl PR_SVE_SET_VL: per thread, as
/// a process may change it after selection), checked by RDVL; its result. The CPU has SVE (the caller checks).
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
pub(crate) fn with_sve_vl<R: Send>(bytes: usize, f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: PR_SVE_SET_VL (50) takes the new length in bytes and changes only this thread's vector length
            // (Linux, qemu-user alike); nothing of this thread holds SVE state across it.
            let r = unsafe { libc::prctl(50, bytes as libc::c_ulong) };
            assert!(r >= 0, "prctl(PR_SVE_SET_VL, {bytes}) failed");
            // SAFETY: the CPU has SVE (the caller's check).
            assert_eq!(unsafe { sve_vl_bytes() }, bytes, "PR_SVE_SET_VL did not take");
            f()
        })
        .join()
        .unwrap()
    })
}

/// Four IEEE half-precision values (as bits) to f32: FCVTL, in every aarch64 CPU's base NEON. Not
/// `preserves_flags`: a signalling NaN sets FPSR's invalid-operation flag (also for FCVTL2 below).
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn f16x4_to_f32(h: uint16x4_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: a register-only instruction of base AdvSIMD.
    unsafe {
        asm!("fcvtl {o:v}.4s, {h:v}.4h", o = lateout(vreg) out, h = in(vreg) h,
             options(pure, nomem, nostack));
    }
    out
}

/// The high four IEEE half-precision values of `h` (as bits) to f32: FCVTL2.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn f16x8_high_to_f32(h: uint16x8_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: a register-only instruction of base AdvSIMD.
    unsafe {
        asm!("fcvtl2 {o:v}.4s, {h:v}.8h", o = lateout(vreg) out, h = in(vreg) h,
             options(pure, nomem, nostack));
    }
    out
}

/// Eight f16 block scales of one record as two f32 vectors (columns 0..3, 4..7): one load, FCVTL + FCVTL2.
/// The int8 layouts of this module store f16 scales (`QSNBP8X{4,8}_SF16_ZPC`); the kernels reading them are
/// fixed-layout.
///
/// # Safety
/// `p` points at 8 f16 scales.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn scales8(p: *const u8) -> [float32x4_t; 2] {
    // SAFETY: 16 bytes at `p` (the caller's guarantee).
    let h = unsafe { vld1q_u16(p.cast()) };
    [f16x4_to_f32(vget_low_u16(h)), f16x8_high_to_f32(h)]
}

/// Whether the row numerics' running int32 sums fit (`for_each_block_weight`): |q_a| ≤ 128 and |16·q_w| ≤ 128
/// (the 4-bit field's factor), so each product is at most 2^14 in magnitude and a sum over fewer than 2^17 K
/// values stays below 2^31.
pub(crate) fn running_sums_fit(a: &RunArgs) -> bool {
    a.blocks * a.bl < 1 << 17
}

/// Calls `f(record, w)` for each block of `panel` in order, with the block's record and the weights of its 8
/// columns (two f32 vectors, columns 0..3 and 4..7, from the record's f16 scales) times 2^−4 (the 4-bit field's
/// factor, exact, so an asm tile converts its int32 sums without a fixed-point shift).
///
/// The weights are the scales s_b in the per-block numerics. In the row numerics (`a.row` = 1) they are the
/// differences w_b = s_b − s_(b+1) (the last block's: its s), for asm tiles that never reset their int32
/// accumulators: after block b these hold the running sum S_b of blocks 0..=b, and y = Σ_b f32(S_b)·w_b is
/// Σ_b s_b·dot_b summed by parts (Abel), one SCVTF and one FMLA per accumulator and block instead of SCVTF, FMLA and
/// the MOVI that restarted the block. S_b is exact in int32 (where [`running_sums_fit`]); its conversion rounds only
/// beyond 2^24 (relatively 2^−24), and each term's rounding is relative to |S_b·w_b|: within the row numerics' f32
/// tolerance. The difference of two f16 scales is exact in f32 unless they are more than 13 binades apart.
///
/// # Safety
/// `panel` is one of the tile's panels in `a`'s `qsnbp8x4` / `qsnbp8x8` layout (f16 scales).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn for_each_block_weight(a: &RunArgs, panel: usize, mut f: impl FnMut(*const u8, [float32x4_t; 2])) {
    let mut rec = a.rhs.wrapping_add(panel * a.rhs_panel_stride);
    // SAFETY: `r` is one of the panel's block records (RunArgs contract): 8 f16 scales at `a.rhs_scales`.
    let scaled = |r: *const u8| unsafe {
        let s = scales8(r.add(a.rhs_scales));
        [vmulq_n_f32(s[0], 1.0 / 16.0), vmulq_n_f32(s[1], 1.0 / 16.0)]
    };
    if a.blocks == 0 {
        return;
    }
    let mut s = scaled(rec);
    // The last block apart (its weight is its s): no branch in the loop.
    for _ in 1..a.blocks {
        let next = rec.wrapping_add(a.rhs_record);
        let s_next = scaled(next);
        f(rec, if a.row != 0 { [vsubq_f32(s[0], s_next[0]), vsubq_f32(s[1], s_next[1])] } else { s });
        (s, rec) = (s_next, next);
    }
    f(rec, s);
}

/// Field `l` of every byte of `v` (signed `BITS`-bit two's-complement codes; lane l in bits l·BITS..), as int8
/// times 2^(8−BITS): shifted to the top of the byte and masked below, so no sign extension is needed (4-bit:
/// `shl #4` for the low field, `and #0xF0` for the high one). `BITS` = 8 is the byte itself.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn field<const BITS: usize>(v: int8x16_t, l: usize) -> int8x16_t {
    if BITS == 8 {
        return v;
    }
    let top = BITS * (l + 1);
    let shifted = if top == 8 { v } else { vshlq_s8(v, vdupq_n_s8((8 - top) as i8)) };
    if l == 0 {
        shifted
    } else {
        let mask = (0xFFu32 << (8 - BITS)) as u8;
        vandq_s8(shifted, vreinterpretq_s8_u8(vdupq_n_u8(mask)))
    }
}

/// int32 sums of (2^(8−BITS) · products) to f32, the factor divided out in the conversion (`scvtf #fbits`).
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn to_f32_scaled<const BITS: usize>(v: int32x4_t) -> float32x4_t {
    match BITS {
        2 => vcvtq_n_f32_s32::<6>(v),
        4 => vcvtq_n_f32_s32::<4>(v),
        _ => vcvtq_f32_s32(v),
    }
}

/// Stores `v` (4 columns from `col`) plus bias into `dst`, only the columns below `cols`.
///
/// # Safety
/// `dst` and `bias` (if not null) hold columns `col..min(col + 4, cols)`.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn store4(dst: *mut f32, bias: *const f32, col: usize, cols: usize, v: float32x4_t) {
    let n = (cols - col).min(4);
    if n == 4 {
        // SAFETY: 4 columns from col are inside dst and (if not null) bias.
        unsafe {
            let b = if bias.is_null() { vdupq_n_f32(0.0) } else { vld1q_f32(bias.add(col)) };
            vst1q_f32(dst.add(col), vaddq_f32(v, b));
        }
        return;
    }
    let mut t = [0f32; 4];
    // SAFETY: `t` holds 4 values.
    unsafe { vst1q_f32(t.as_mut_ptr(), v) };
    for (i, &y) in t[..n].iter().enumerate() {
        // SAFETY: column col + i < cols is inside dst and bias (the caller's guarantee).
        unsafe {
            let b = if bias.is_null() { 0.0 } else { *bias.add(col + i) };
            *dst.add(col + i) = y + b;
        }
    }
}

/// The chunk walk of every int8 body, GEMV and GEMM: `blocks` blocks of `chunks` chunks each (one with `ONE`:
/// blocks of 16 or 32 K, a loop without chunk bookkeeping), in K order, as one loop: `step(b, last)` accumulates
/// the next chunk (of block `b`) and, when `last` (the block's last chunk), runs the block's epilogue
/// ([`block_epilogue`]) and resets the block's accumulators. The body keeps its own pointers, advanced per chunk
/// and per block inside `step`.
#[inline(always)]
pub(crate) fn walk_chunks<const ONE: bool>(blocks: usize, chunks: usize, mut step: impl FnMut(usize, bool)) {
    for b in 0..blocks {
        if ONE {
            step(b, true);
        } else {
            for c in 0..chunks {
                step(b, c + 1 == chunks);
            }
        }
    }
}
/// The panel walk of the row-major (`qsi8db` LHS) int8 bodies, GEMV and GEMM: rows `0..R` × the 8·P columns of
/// panels `panel..panel + P` over all K, in chunks of `CHUNK` values ([`walk_chunks`]). The body is two
/// functions on its own accumulators `acc` (`init` at the start of every block): `step(acc, act, codes)` adds one
/// chunk, the rows' activations from `act` (row r at `act + r·a.lhs_stride`) against each panel p's codes of the
/// chunk at `codes[p]`; `fold(acc)` ends a block: it returns the block's int32 sums [panel][row][columns 0..3 |
/// 4..7], in the epilogue's convention for `SUM_BITS` (see [`block_epilogue`]). The walk holds the rest:
/// the record and code pointers (a chunk is `CHUNK` activations and `chunk_bytes` of codes; a block ends at the
/// next record), the block epilogue ([`accumulate_block`]) into the f32 sums, and the store.
///
/// # Safety
/// As the bodies': `a` satisfies the `RunArgs` contract for a `qsi8db` LHS and an RHS with 8-column panels and f16
/// scales; `lhs`, `lhs_scale`, `lhs_sum` and `dst` are at a row of the tile with at least `R` rows from there;
/// panels `panel..panel + P` are the tile's; `CHUNK` = min(`a.bl`, 32) (`ONE`: `a.bl` = `CHUNK`); `step` reads
/// only the chunk it is given.
#[target_feature(enable = "neon")]
#[inline]
#[allow(clippy::too_many_arguments)] // the body's six arguments, its chunk step and its two accumulator functions
pub(crate) unsafe fn walk_rows<
    const R: usize,
    const P: usize,
    const SUM_BITS: usize,
    const CHUNK: usize,
    const ONE: bool,
    const ZP: bool,
    const ROW: bool,
    S: Copy,
>(
    a: &RunArgs,
    panel: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
    chunk_bytes: usize,
    init: S,
    mut step: impl FnMut(&mut S, *const i8, &[*const u8; P]),
    fold: impl Fn(&S) -> [[[int32x4_t; 2]; R]; P],
) {
    debug_assert!(a.bl.min(32) == CHUNK && (!ONE || a.bl == CHUNK));
    debug_assert!(ZP == (a.has_zp != 0) && ROW == (a.row != 0));
    let chunks = if ONE { 1 } else { a.bl / CHUNK };
    // SAFETY: panels panel..panel + P are the tile's, inside the packed weights (RunArgs contract).
    let mut rec: [*const u8; P] = core::array::from_fn(|p| unsafe { a.rhs.add((panel + p) * a.rhs_panel_stride) });
    let mut codes = rec;
    let mut act = lhs;
    let mut acc = init;
    let mut y = [[[vdupq_n_f32(0.0); 2]; R]; P];
    walk_chunks::<ONE>(a.blocks, chunks, |b, last| {
        step(&mut acc, act, &codes);
        // The next chunk of the rows and of each record (past the last block: never read).
        act = act.wrapping_add(CHUNK);
        for p in 0..P {
            codes[p] = codes[p].wrapping_add(chunk_bytes);
        }
        if last {
            let sums = fold(&acc);
            acc = init;
            for p in 0..P {
                // SAFETY: block b's record of panel p; rows 0..R of the tile's scales and sums.
                unsafe {
                    accumulate_block::<R, SUM_BITS, ZP, ROW>(&mut y[p], &sums[p], a, rec[p], lhs_scale, lhs_sum, b)
                };
                rec[p] = rec[p].wrapping_add(a.rhs_record);
                codes[p] = rec[p];
            }
        }
    });
    for p in 0..P {
        // SAFETY: rows 0..R of the tile's output.
        unsafe { store_rows(y[p], a, panel + p, dst) };
    }
}

/// The block epilogue of the int8 numerics, one vector of 4 outputs (every int8 body, GEMV and GEMM, ends each
/// block with it): lane-wise `y + f(acc)·(s·sa) [+ c·sq]`, where `acc` holds the block's int32 sums (times
/// 2^(8−BITS): `f` divides that out exactly), `s` / `c` the weight scale / zero-point correction of each lane's
/// column, and `sa` / `sq` the activation scale / sa·Σq of each lane's row (how lanes map to rows and columns is
/// the body's: one row × 4 columns for SDOT, 2 × 2 for SMMLA). One FMUL and one FMLA, and one more FMLA with
/// zero points (`ZP`). With `ROW` (the `Row` numerics, where every sa is 1) `sa` is not read and the FMUL is
/// skipped: `y + f(acc)·s [+ c·sq]`, bit for bit what the per-block form gives with sa = 1.
/// [`block_epilogue_ref`] is its scalar reference.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn block_epilogue<const BITS: usize, const ZP: bool, const ROW: bool>(
    y: float32x4_t,
    acc: int32x4_t,
    s: float32x4_t,
    sa: float32x4_t,
    c: float32x4_t,
    sq: float32x4_t,
) -> float32x4_t {
    let scale = if ROW { s } else { vmulq_f32(s, sa) };
    let y = vfmaq_f32(y, to_f32_scaled::<BITS>(acc), scale);
    if ZP { vfmaq_f32(y, c, sq) } else { y }
}

/// [`block_epilogue`] for one lane, in scalar f32 with the same roundings (the conversion divides by a power of
/// two, exact; the products and fused multiply-adds in the same order): the kernels' epilogue must equal it bit
/// for bit.
#[cfg(test)]
pub(crate) fn block_epilogue_ref<const BITS: usize, const ZP: bool, const ROW: bool>(
    y: f32,
    acc: i32,
    s: f32,
    sa: f32,
    c: f32,
    sq: f32,
) -> f32 {
    let v = acc as f32 / (1u32 << (8 - BITS)) as f32;
    let y = v.mul_add(if ROW { s } else { s * sa }, y);
    if ZP { c.mul_add(sq, y) } else { y }
}

/// One block's contribution for rows `0..R` × 8 columns: `y += sa·(s·acc + c·Σq)` per (row, column), from the
/// int32 sums `acc` (columns 0..3, 4..7; times 2^(8−BITS)), the record's f16 scales and, when the
/// weights have zero points (`ZP`, = `a.has_zp != 0`), its f32 corrections c. `ROW` (= `a.row != 0`): the
/// activation scales are all 1 and are not read (see [`block_epilogue`]).
///
/// # Safety
/// `rec` is block `b`'s record of a panel in `a`'s layout; `lhs_scale`/`lhs_sum` hold rows `0..R` row-major
/// (stride `a.blocks`: the `qsi8db` LHS, not the group-major `qsi8dbp4x8`).
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn accumulate_block<const R: usize, const BITS: usize, const ZP: bool, const ROW: bool>(
    y: &mut [[float32x4_t; 2]; R],
    acc: &[[int32x4_t; 2]; R],
    a: &RunArgs,
    rec: *const u8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    b: usize,
) {
    debug_assert_eq!(a.layout.scales, ScaleType::F16);
    // SAFETY: the record's 8 scales.
    let s = unsafe { scales8(rec.add(a.rhs_scales)) };
    debug_assert_eq!(ZP, a.has_zp != 0);
    let c = if ZP {
        // SAFETY: the record's 8 f32 corrections (present when the weights have zero points).
        unsafe { [vld1q_f32(rec.add(a.rhs_zp).cast()), vld1q_f32(rec.add(a.rhs_zp + 16).cast())] }
    } else {
        [vdupq_n_f32(0.0); 2]
    };
    for r in 0..R {
        debug_assert_eq!(ROW, a.row != 0);
        // SAFETY: row r's scale (with ROW: 1, not read) and Σq of block b.
        let sa = if ROW { 1.0 } else { unsafe { *lhs_scale.add(r * a.blocks + b) } };
        let sq = if ZP {
            // SAFETY: as above.
            let qs = unsafe { *lhs_sum.add(r * a.blocks + b) } as f32;
            vdupq_n_f32(if ROW { qs } else { sa * qs })
        } else {
            vdupq_n_f32(0.0)
        };
        let sa = vdupq_n_f32(sa);
        for q in 0..2 {
            y[r][q] = block_epilogue::<BITS, ZP, ROW>(y[r][q], acc[r][q], s[q], sa, c[q], sq);
        }
    }
}

/// Stores one row's sums `out` (columns `col0 ..`, in groups of 4) plus bias, only the columns below `a.cols`: how
/// the one-row asm GEMVs hand over their sums.
///
/// # Safety
/// `dst` is the row's output (columns `col0 ..` below `a.cols` inside it); `a.bias` is null or holds `a.cols` values.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn store_row(a: &RunArgs, dst: *mut f32, col0: usize, out: &[f32]) {
    if col0 + out.len() <= a.cols {
        // Every column real: whole vectors, no per-group clipping (the same sums: v + bias, or + 0.0).
        for (q, v) in out.chunks_exact(4).enumerate() {
            let col = col0 + 4 * q;
            // SAFETY: columns col .. col + 4 ≤ cols of the row are inside dst and bias (the caller's guarantee).
            unsafe {
                let b = if a.bias.is_null() { vdupq_n_f32(0.0) } else { vld1q_f32(a.bias.add(col)) };
                vst1q_f32(dst.add(col), vaddq_f32(vld1q_f32(v.as_ptr()), b));
            }
        }
        return;
    }
    for (q, v) in out.chunks_exact(4).enumerate() {
        let col = col0 + 4 * q;
        if col < a.cols {
            // SAFETY: columns below cols of the row are inside dst and bias (the caller's guarantee); `v` holds 4 f32.
            unsafe { store4(dst, a.bias, col, a.cols, vld1q_f32(v.as_ptr())) };
        }
    }
}

/// Finishes `rows` output rows whose whole panels an SME2 asm pass wrote straight into the output, without bias:
/// the columns `from ..` (a last, partial panel) out of `last` (row r at `r * last_stride`) when there is one,
/// then the bias over every column. The one-row GEMV's and the few-row kernel's tail.
///
/// # Safety
/// `dst` is row 0 of `rows` output rows `a.dst_stride` apart, each holding `a.cols` values; `a.bias` is null or
/// holds `a.cols` values.
///
/// # Panics
/// If `last` holds fewer than `(rows - 1) * last_stride + a.cols - from` values.
pub(crate) unsafe fn finish_rows(a: &RunArgs, dst: *mut f32, rows: usize, from: usize, last: Option<(&[f32], usize)>) {
    // SAFETY: bias holds `cols` values (the caller's guarantee).
    let bias = (!a.bias.is_null()).then(|| unsafe { core::slice::from_raw_parts(a.bias, a.cols) });
    for r in 0..rows {
        // SAFETY: row r (< rows) of dst holds `cols` values (the caller's guarantee).
        let d = unsafe { core::slice::from_raw_parts_mut(dst.add(r * a.dst_stride), a.cols) };
        if let Some((last, stride)) = last {
            d[from..].copy_from_slice(&last[r * stride..][..a.cols - from]);
        }
        if let Some(bias) = bias {
            for (y, b) in d.iter_mut().zip(bias) {
                *y += b;
            }
        }
    }
}

/// Stores rows `0..R` × the 8 columns of `panel` (columns 0..3, 4..7 of each row in `y`) plus bias, only the
/// columns below `a.cols`.
///
/// # Safety
/// `dst` is row 0 of the tile's output (row stride `a.dst_stride`) with at least `R` rows; `a.bias` is null or
/// holds `a.cols` values.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn store_rows<const R: usize>(y: [[float32x4_t; 2]; R], a: &RunArgs, panel: usize, dst: *mut f32) {
    for r in 0..R {
        for q in 0..2 {
            let col = panel * 8 + 4 * q;
            if col < a.cols {
                // SAFETY: row r of the tile; columns below cols are inside dst and bias.
                unsafe { store4(dst.add(r * a.dst_stride), a.bias, col, a.cols, y[r][q]) };
            }
        }
    }
}

/// Rows per group and columns per panel of the int8 GEMMs' tiles (`qsi8dbp4x*` row groups × 8-column
/// `qsnbp8x*` panels), as [`Sums`] and [`store_groups`] take them.
const GROUP: usize = 4;
const PANEL: usize = 8;

/// The sums of one asm tile of up to three row groups × one panel, by rows (row r's 8 columns at 8·r): how the
/// whole-loop asm GEMMs (dotprod, i8mm, SVE i8mm) hand their sums to [`store_groups`].
pub(crate) type Sums = [f32; 96];

/// Where an asm tile leaves its sums: row r's 8 columns at `ptr` + r·`stride` bytes, each plus the 8 f32 at
/// `bias`. A whole tile (all its rows real, a whole panel) goes straight into the output rows with the panel's
/// bias; another into a [`Sums`] (rows 32 bytes apart, bias [`ZERO_BIAS`]) for `store_groups`.
#[derive(Clone, Copy)]
pub(crate) struct Dest {
    pub(crate) ptr: *mut f32,
    pub(crate) stride: usize,
    pub(crate) bias: *const f32,
}

/// The bias of sums that leave through [`Sums`] (`store_groups` adds the call's) and of a call without one.
pub(crate) static ZERO_BIAS: [f32; 8] = [0.0; 8];

/// Where the tile of groups `g..g + n` × `panel` leaves its sums, and whether that is the output itself: its rows
/// and the panel's columns all real (the sums plus the panel's bias go straight to the output rows), else `out`.
pub(crate) fn dest(a: &RunArgs, panel: usize, g: usize, n: usize, out: &mut Sums) -> (Dest, bool) {
    if (g + n) * GROUP <= a.rows && (panel + 1) * PANEL <= a.cols {
        let bias = if a.bias.is_null() { ZERO_BIAS.as_ptr() } else { a.bias.wrapping_add(panel * PANEL) };
        let ptr = a.dst.wrapping_add(g * GROUP * a.dst_stride + panel * PANEL);
        (Dest { ptr, stride: GROUP * a.dst_stride, bias }, true)
    } else {
        (Dest { ptr: out.as_mut_ptr(), stride: 32, bias: ZERO_BIAS.as_ptr() }, false)
    }
}

/// Stores a tile's sums of row groups `g..g + n` × `panel` (plus bias), only the tile's real rows and the
/// columns below `a.cols`.
///
/// # Safety
/// `a` satisfies the `RunArgs` contract; groups `g..g + n` and `panel` are the tile's.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn store_groups(a: &RunArgs, panel: usize, g: usize, n: usize, out: &Sums) {
    let rows = (a.rows - g * GROUP).min(n * GROUP);
    let col0 = panel * PANEL;
    if col0 + PANEL <= a.cols {
        // A whole panel: each row's 8 columns as two vectors, the panel's bias loaded once.
        // SAFETY: columns col0..col0 + 8 are inside bias (if not null) and every output row (RunArgs contract).
        let (b0, b1) = unsafe {
            if a.bias.is_null() {
                (vdupq_n_f32(0.0), vdupq_n_f32(0.0))
            } else {
                (vld1q_f32(a.bias.add(col0)), vld1q_f32(a.bias.add(col0 + 4)))
            }
        };
        for r in 0..rows {
            // SAFETY: row r's 8 columns inside `out`; row g·4 + r is a real row of the tile, its columns col0..col0
            // + 8 inside dst.
            unsafe {
                let (o, d) = (out.as_ptr().add(8 * r), a.dst.add((g * GROUP + r) * a.dst_stride + col0));
                vst1q_f32(d, vaddq_f32(vld1q_f32(o), b0));
                vst1q_f32(d.add(4), vaddq_f32(vld1q_f32(o.add(4)), b1));
            }
        }
        return;
    }
    for r in 0..rows {
        for j in 0..2 {
            let col = panel * PANEL + 4 * j;
            if col >= a.cols {
                break;
            }
            // SAFETY: row r's columns 4j..4j + 4 inside `out`; row g·4 + r < rows of the tile; columns below cols
            // are inside dst and bias.
            unsafe {
                let v = vld1q_f32(out.as_ptr().add(8 * r + 4 * j));
                store4(a.dst.add((g * GROUP + r) * a.dst_stride), a.bias, col, a.cols, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector epilogue equals its scalar reference bit for bit, over bit widths, zero points and values from
    /// tiny to large (int32 sums up to the largest block's bound, scales across f16's range).
    #[test]
    fn block_epilogue_matches_its_scalar_reference() {
        if !std::arch::is_aarch64_feature_detected!("neon") {
            return;
        }
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut f = |lo: f32, hi: f32| lo + (hi - lo) * ((next() >> 40) as f32 / (1u64 << 24) as f32);
        for _ in 0..2000 {
            let lanes: [[f32; 6]; 4] = core::array::from_fn(|_| {
                [f(-1e3, 1e3), f(-2e9, 2e9), f(-65504.0, 65504.0), f(0.0, 1e-2), f(-1e2, 1e2), f(-1e4, 1e4)]
            });
            let v = |i: usize| lanes.map(|l| l[i]);
            let acc: [i32; 4] = lanes.map(|l| l[1] as i32);
            // SAFETY: 4-lane arrays for the loads.
            let (y, a, s, sa, c, sq) = unsafe {
                (
                    vld1q_f32(v(0).as_ptr()),
                    vld1q_s32(acc.as_ptr()),
                    vld1q_f32(v(2).as_ptr()),
                    vld1q_f32(v(3).as_ptr()),
                    vld1q_f32(v(4).as_ptr()),
                    vld1q_f32(v(5).as_ptr()),
                )
            };
            let check = |got: float32x4_t, reference: fn(f32, i32, f32, f32, f32, f32) -> f32, what: &str| {
                let mut o = [0f32; 4];
                // SAFETY: 4 lanes into a 4-value array.
                unsafe { vst1q_f32(o.as_mut_ptr(), got) };
                for (i, l) in lanes.iter().enumerate() {
                    let want = reference(l[0], acc[i], l[2], l[3], l[4], l[5]);
                    assert_eq!(o[i].to_bits(), want.to_bits(), "{what}, lane {l:?}: {} vs {want}", o[i]);
                }
            };
            // SAFETY: the CPU has NEON (checked above; every aarch64 Linux CPU has it).
            let got = unsafe {
                [
                    block_epilogue::<2, false, false>(y, a, s, sa, c, sq),
                    block_epilogue::<2, true, false>(y, a, s, sa, c, sq),
                    block_epilogue::<4, false, false>(y, a, s, sa, c, sq),
                    block_epilogue::<4, true, false>(y, a, s, sa, c, sq),
                    block_epilogue::<8, false, false>(y, a, s, sa, c, sq),
                    block_epilogue::<8, true, false>(y, a, s, sa, c, sq),
                    block_epilogue::<4, false, true>(y, a, s, sa, c, sq),
                    block_epilogue::<4, true, true>(y, a, s, sa, c, sq),
                    block_epilogue::<2, true, true>(y, a, s, sa, c, sq),
                ]
            };
            check(got[0], block_epilogue_ref::<2, false, false>, "2-bit");
            check(got[1], block_epilogue_ref::<2, true, false>, "2-bit zp");
            check(got[2], block_epilogue_ref::<4, false, false>, "4-bit");
            check(got[3], block_epilogue_ref::<4, true, false>, "4-bit zp");
            check(got[4], block_epilogue_ref::<8, false, false>, "8-bit");
            check(got[5], block_epilogue_ref::<8, true, false>, "8-bit zp");
            check(got[6], block_epilogue_ref::<4, false, true>, "4-bit row");
            check(got[7], block_epilogue_ref::<4, true, true>, "4-bit zp row");
            check(got[8], block_epilogue_ref::<2, true, true>, "2-bit zp row");
            // The row form is the per-block form with sa = 1, bit for bit.
            // SAFETY: as above.
            let (r, b) = unsafe {
                let one = vdupq_n_f32(1.0);
                (
                    block_epilogue::<4, true, true>(y, a, s, sa, c, sq),
                    block_epilogue::<4, true, false>(y, a, s, one, c, sq),
                )
            };
            let (mut ro, mut bo) = ([0f32; 4], [0f32; 4]);
            // SAFETY: 4 lanes into 4-value arrays.
            unsafe { (vst1q_f32(ro.as_mut_ptr(), r), vst1q_f32(bo.as_mut_ptr(), b)) };
            assert_eq!(ro.map(f32::to_bits), bo.map(f32::to_bits));
        }
    }
}
