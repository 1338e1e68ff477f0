//! The bodies shared by the AVX2 kernels on `qunbp64x4_sf32_zpc` weights (layout: see `qunbp64x4_vnni`): one
//! ymm holds 8 columns × 4 K of one code lane group, so a 64-byte group of the layout is 2 ymm per 16 columns.
//!
//! int8 path: codes are shifted down to plain u8 values (`(v >> l·bits) & mask`) and multiplied with the
//! broadcast dword of 4 int8 activations either by AVX-VNNI `vpdpbusd ymm` or, without it, by `vpmaddubsw`
//! (u8×s8 pairs to i16: at most 2·15·128, no saturation for ≤ 4-bit codes). Without VNNI, codes of ≤ 4 bits add a
//! chunk's `vpmaddubsw` results in i16 (`vpaddw`: at most 16 products of ≤ 15·128 per lane, 30720) and widen once
//! per chunk (`vpmaddwd` by 1): 2 instructions per dot instead of 3, +30–50% for the GEMM tile on Zen 5
//! (`gemm_time`, M = 128); 8-bit codes are split into nibbles, the high one weighted ×16 in `vpmaddwd`, per dot.
//! Per block: `acc = Σ q_a·q_w − m·Σq_a` (no zero
//! points) or `+ c·sa·Σq_a` in f32 (zero points), `y += cvt(acc)·s·sa`.
//! fp32 path: codes → f32 in registers, `acc = Σ a·q` per block, `y += s·acc + c·Σa`.

// Register tiles are indexed [row][column group]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use super::qunbp64x4_vnni::{KR, NR};
use crate::ukernel::RunArgs;
use std::arch::x86_64::*;

/// Generates an int8 unit function for one feature set. `$dot(acc, w, x)` adds the dot products of u8 codes
/// `w` and s8 activations `x` to `acc`, for codes of `BITS` bits.
macro_rules! int8_unit {
    ($name:ident, $inner:ident, $features:literal, $dot:ident, $i16:literal) => {
        /// One unit of a tile: rows `0..R` × `G` groups of 8 columns of `panel` starting at group `unit·G`, over
        /// all K. LHS rows at `lhs` (stride `args.lhs_stride`), scales/sums at `lhs_scale`/`lhs_sum` (stride
        /// `args.blocks`), output rows at `dst` (the tile's column 0); columns past `args.cols` never stored.
        ///
        /// # Safety
        #[doc = concat!("The CPU has ", $features, ". `args` satisfies the `RunArgs` contract for a `qsi8db` LHS")]
        /// and a `qunbp64x4_sf32_zpc` RHS; the pointers are at a row of that tile with at least `R` rows from
        /// there.
        #[target_feature(enable = $features)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $inner<const R: usize, const G: usize, const BITS: usize, const CHUNK: usize, const ONE: bool, const UNPACKED: bool>(
            args: &RunArgs,
            panel: usize,
            unit: usize,
            lhs: *const i8,
            lhs_scale: *const f32,
            lhs_sum: *const i32,
            dst: *mut f32,
            codes: *const __m256i,
        ) {
            let a = args;
            let bl = a.bl;
            let chunk = CHUNK;
            debug_assert_eq!(bl.min(32), CHUNK);
            debug_assert_eq!(ONE, bl == CHUNK);
            // One chunk per block as a constant (blocks of 16 and 32): the chunk loop is straight code, so the
            // int32 sums live only inside it (a loop over chunks kept them live beside the i16 sums and the
            // outputs: 18 vectors for a 3 × 16 tile, spilled).
            let chunks = if ONE { 1 } else { bl / chunk };
            let cpb = 8 / BITS;
            let lane_len = chunk / cpb;
            let groups = lane_len / KR;
            let chunk_bytes = chunk * NR * BITS / 8;
            let mid = 1i32 << (BITS - 1);
            let field = _mm256_set1_epi8(((1u32 << BITS) - 1) as u8 as i8);
            let shift: [__m128i; 4] = std::array::from_fn(|l| _mm_cvtsi32_si128((l * BITS) as i32));
            let has_zp = a.has_zp != 0;
            debug_assert!(panel < a.cols.div_ceil(NR) && unit < NR / (8 * G));
            debug_assert!(!UNPACKED || (BITS <= 4 && !codes.is_null()));
            // SAFETY: panel < the tile's panels, inside the packed weights.
            let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
            let c0 = panel * NR + unit * 8 * G;
            // Byte offset of this unit's first 8 columns inside a 256-byte group (16 columns = 64 bytes).
            let goff = unit * 32 * G;
            let mut f = [[_mm256_setzero_ps(); G]; R];
            for b in 0..a.blocks {
                // SAFETY: b < blocks; R rows of scales and sums.
                let (sa, qsum): ([f32; R], [i32; R]) = unsafe {
                    (
                        std::array::from_fn(|r| *lhs_scale.add(r * a.blocks + b)),
                        std::array::from_fn(|r| *lhs_sum.add(r * a.blocks + b)),
                    )
                };
                // SAFETY: block b's record of this panel.
                let rec = unsafe { prec.add(b * a.rhs_record) };
                let mut acc = [[_mm256_setzero_si256(); G]; R];
                for r in 0..R {
                    if !has_zp {
                        acc[r] = [_mm256_set1_epi32(-mid * qsum[r]); G];
                    }
                }
                // SAFETY: row r's block b: bl values.
                let arow: [*const i8; R] = std::array::from_fn(|r| unsafe { lhs.add(r * a.lhs_stride + b * bl) });
                for c in 0..chunks {
                    // i16 sums of the chunk's `vpmaddubsw` pairs (`$i16`, codes of ≤ 4 bits): each i16 lane adds
                    // 2 · chunk / 4 ≤ 16 products of ≤ 15 · 128, so at most 30720: no wrap, and one `vpmaddwd`
                    // per chunk instead of one per pair of dots. The same int32 sums as `$dot`.
                    let mut acc16 = [[_mm256_setzero_si256(); G]; R];
                    for grp in 0..groups {
                        // SAFETY: chunk c, group grp of the record's codes.
                        let base = unsafe { rec.add(c * chunk_bytes + grp * NR * KR + goff) };
                        let v: [__m256i; G] = std::array::from_fn(|g| {
                            if UNPACKED {
                                _mm256_setzero_si256()
                            } else {
                                // SAFETY: one vector of codes inside the record.
                                unsafe { _mm256_loadu_si256(base.add(32 * g).cast()) }
                            }
                        });
                        for l in 0..cpb {
                            let at = (((b * chunks + c) * groups + grp) * cpb + l) * G;
                            let w: [__m256i; G] = std::array::from_fn(|g| {
                                if UNPACKED {
                                    // SAFETY: the unit's unpacked codes hold `blocks · bl / 4 · G` vectors in
                                    // this order ([`unpack_unit_avx2`]).
                                    unsafe { _mm256_load_si256(codes.add(at + g)) }
                                } else if BITS == 8 {
                                    v[g]
                                } else {
                                    _mm256_and_si256(_mm256_srl_epi32(v[g], shift[l]), field)
                                }
                            });
                            let k = c * chunk + l * lane_len + KR * grp;
                            for r in 0..R {
                                // SAFETY: k <= bl − 4: 4 bytes of row r's block.
                                let x = _mm256_set1_epi32(unsafe { arow[r].add(k).cast::<i32>().read_unaligned() });
                                for g in 0..G {
                                    if $i16 && BITS <= 4 {
                                        acc16[r][g] = _mm256_add_epi16(acc16[r][g], _mm256_maddubs_epi16(w[g], x));
                                    } else {
                                        acc[r][g] = $dot::<BITS>(acc[r][g], w[g], x);
                                    }
                                }
                            }
                        }
                    }
                    if $i16 && BITS <= 4 {
                        for r in 0..R {
                            for g in 0..G {
                                let p = _mm256_madd_epi16(acc16[r][g], _mm256_set1_epi16(1));
                                acc[r][g] = _mm256_add_epi32(acc[r][g], p);
                            }
                        }
                    }
                }
                let (sc, zc) = {
                    // SAFETY: this record's scales (and corrections) of the unit's columns, f32.
                    unsafe {
                        let s = rec.add(a.rhs_scales + 4 * 8 * G * unit).cast::<f32>();
                        let z = rec.add(a.rhs_zp + 4 * 8 * G * unit).cast::<f32>();
                        let sc: [__m256; G] = std::array::from_fn(|g| _mm256_loadu_ps(s.add(8 * g)));
                        let zc: [__m256; G] = std::array::from_fn(|g| {
                            if has_zp { _mm256_loadu_ps(z.add(8 * g)) } else { _mm256_setzero_ps() }
                        });
                        (sc, zc)
                    }
                };
                for r in 0..R {
                    let sa_v = _mm256_set1_ps(sa[r]);
                    let corr = _mm256_set1_ps(sa[r] * qsum[r] as f32);
                    for g in 0..G {
                        let mut y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][g]), _mm256_mul_ps(sc[g], sa_v), f[r][g]);
                        if has_zp {
                            y = _mm256_fmadd_ps(zc[g], corr, y);
                        }
                        f[r][g] = y;
                    }
                }
            }
            // SAFETY: the tile's rows r < R and columns < cols (stores are clipped).
            unsafe { store::<R, G>(a, c0, &f, dst) };
        }

        /// The unit with the chunk length (16 or 32) as a constant, so that every loop inside a block unrolls.
        ///
        /// # Safety
        #[doc = concat!("As `", stringify!($inner), "`.")]
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name<const R: usize, const G: usize, const BITS: usize>(
            args: &RunArgs,
            panel: usize,
            unit: usize,
            lhs: *const i8,
            lhs_scale: *const f32,
            lhs_sum: *const i32,
            dst: *mut f32,
        ) {
            // SAFETY: forwarded; a unit that reads codes in place never reads `codes`.
            unsafe {
                $crate::arch::dispatch!($inner::<R, G, BITS>(args, panel, unit, lhs, lhs_scale, lhs_sum, dst, std::ptr::null()); chunk_one(args.bl) zp(false))
            }
        }
    };
}

/// AVX-VNNI: one `vpdpbusd ymm`.
#[inline]
#[target_feature(enable = "avx2,fma,avxvnni")]
fn dot_vnni<const BITS: usize>(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(acc, w, x)
}

/// AVX2: `vpmaddubsw` + `vpmaddwd` (8-bit codes split into nibbles so the i16 pairs cannot saturate).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn dot_maddubs<const BITS: usize>(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
    {
        if BITS == 8 {
            let lo = _mm256_and_si256(w, _mm256_set1_epi8(0x0F));
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(w), _mm256_set1_epi8(0x0F));
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x), _mm256_set1_epi16(1));
            let q = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x), _mm256_set1_epi16(16));
            _mm256_add_epi32(acc, _mm256_add_epi32(p, q))
        } else {
            _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)))
        }
    }
}

int8_unit!(unit_avxvnni, unit_avxvnni_c, "avx2,fma,avxvnni", dot_vnni, false);
int8_unit!(unit_avx2, unit_avx2_c, "avx2,fma", dot_maddubs, true);

/// What the row blocks of one unit of the AVX2 int8 GEMM share: its codes of ≤ 4 bits shifted down to plain u8
/// values once ([`unpack_unit_avx2`], by the unit's first row block), `args.blocks · bl / 4 · G` aligned
/// vectors in the order the unit's body reads them, so that every row block after the first loads each vector
/// instead of shifting and masking it again (2 of the 6 vector operations per 2 × 16 products of a 3-row block;
/// see [`unit_avx2_unpacked`]).
pub(crate) struct UnpackedCodes {
    /// This thread's buffer ([`with_unpacked_codes`]).
    pub(crate) codes: *mut __m256i,
    /// Whether `codes` holds this unit's codes yet.
    pub(crate) filled: bool,
}

/// This thread's buffer of unpacked codes with room for `vectors` vectors, kept between calls (grown to the
/// largest unit seen: K · 16 bytes for 16 columns).
pub(crate) fn with_unpacked_codes<T>(vectors: usize, f: impl FnOnce(*mut __m256i) -> T) -> T {
    thread_local! {
        static CODES: std::cell::RefCell<Vec<__m256i>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    CODES.with_borrow_mut(|t| {
        if t.len() < vectors {
            // SAFETY: all-zero bits are a valid __m256i.
            t.resize(vectors, unsafe { std::mem::zeroed() });
        }
        f(t.as_mut_ptr())
    })
}

/// Writes the codes of `G` groups of 8 columns of `panel` from group `unit·G`, all blocks, as plain u8 values:
/// vector `(((b · bl/chunk + c) · groups + grp) · cpb + l) · G + g` is lane `l` of group `grp` of chunk `c` of
/// block `b`, columns `8g ..` of the unit (the order of the int8 body's loops).
///
/// # Safety
/// The CPU has avx2. `args` holds a `qunbp64x4_sf32_zpc` RHS of `BITS` ≤ 4 bits; `codes` has room for
/// `args.blocks · args.bl / 4 · G` aligned vectors.
#[target_feature(enable = "avx2,fma")]
unsafe fn unpack_unit_avx2<const G: usize, const BITS: usize>(
    args: &RunArgs,
    panel: usize,
    unit: usize,
    codes: *mut __m256i,
) {
    let a = args;
    let chunk = a.bl.min(32);
    let cpb = 8 / BITS;
    let groups = chunk / cpb / KR;
    let chunk_bytes = chunk * NR * BITS / 8;
    let field = _mm256_set1_epi8(((1u32 << BITS) - 1) as u8 as i8);
    let goff = unit * 32 * G;
    let mut at = 0;
    for b in 0..a.blocks {
        // SAFETY: block b's record of this panel.
        let rec = unsafe { a.rhs.add(panel * a.rhs_panel_stride + b * a.rhs_record) };
        for c in 0..a.bl / chunk {
            for grp in 0..groups {
                // SAFETY: chunk c, group grp of the record's codes.
                let base = unsafe { rec.add(c * chunk_bytes + grp * NR * KR + goff) };
                for g in 0..G {
                    // SAFETY: one vector of codes inside the record.
                    let v = unsafe { _mm256_loadu_si256(base.add(32 * g).cast()) };
                    for l in 0..cpb {
                        let w = _mm256_and_si256(_mm256_srl_epi32(v, _mm_cvtsi32_si128((l * BITS) as i32)), field);
                        // SAFETY: at + l·G + g < blocks · bl / 4 · G: inside the buffer.
                        unsafe { _mm256_store_si256(codes.add(at + l * G + g), w) };
                    }
                }
                at += cpb * G;
            }
        }
    }
}

/// [`unit_avx2`] for a unit whose row blocks share its unpacked codes (`state`, see [`UnpackedCodes`]): the
/// first row block unpacks them, every row block reads them. 8-bit codes read their records in place.
///
/// # Safety
/// As [`unit_avx2`]; `state` is this unit's: `filled: false` for its first row block, its buffer holding
/// `args.blocks · args.bl / 4 · G` vectors.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn unit_avx2_unpacked<const R: usize, const G: usize, const BITS: usize>(
    args: &RunArgs,
    panel: usize,
    unit: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
    state: &mut UnpackedCodes,
) {
    // SAFETY: forwarded; the buffer is this unit's, filled before any row block reads it.
    unsafe {
        if BITS == 8 {
            return unit_avx2::<R, G, BITS>(args, panel, unit, lhs, lhs_scale, lhs_sum, dst);
        }
        if !state.filled {
            unpack_unit_avx2::<G, BITS>(args, panel, unit, state.codes);
            state.filled = true;
        }
        let codes = state.codes.cast_const();
        crate::arch::dispatch!(unit_avx2_c::<R, G, BITS>(args, panel, unit, lhs, lhs_scale, lhs_sum, dst, codes); chunk_one(args.bl) zp(true))
    }
}

/// [`unit_fma_c`] with the chunk length (16 or 32) as a constant, so that every loop inside a block unrolls.
///
/// # Safety
/// As [`unit_fma_c`].
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn unit_fma<const R: usize, const G: usize, const BITS: usize>(
    args: &RunArgs,
    panel: usize,
    unit: usize,
    lhs: *const f32,
    dst: *mut f32,
) {
    // SAFETY: forwarded.
    unsafe { crate::arch::dispatch!(unit_fma_c::<R, G, BITS>(args, panel, unit, lhs, dst); chunk(args.bl)) }
}

/// fp32 path: one unit of a tile (rows `0..R` × `G` groups of 8 columns of `panel` from group `unit·G`), f32
/// LHS rows at `lhs`, output rows at `dst`.
///
/// # Safety
/// The CPU has avx2 and fma. `args` satisfies the `RunArgs` contract for an `f32` LHS and a `qunbp64x4_sf32_zpc`
/// RHS; the pointers are at a row of that tile with at least `R` rows from there.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn unit_fma_c<const R: usize, const G: usize, const BITS: usize, const CHUNK: usize>(
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
    let field = _mm256_set1_epi32(((1u32 << BITS) - 1) as i32);
    let has_zp = a.has_zp != 0;
    let mid = (1u32 << (BITS - 1)) as f32;
    // SAFETY: panel < the tile's panels, inside the packed weights.
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    let c0 = panel * NR + unit * 8 * G;
    let goff = unit * 32 * G;
    let mut f = [[_mm256_setzero_ps(); G]; R];
    for b in 0..a.blocks {
        // SAFETY: row r's block b: bl f32 values.
        let arow: [*const f32; R] = std::array::from_fn(|r| unsafe { lhs.add(r * a.lhs_stride + b * bl) });
        // SAFETY: block b's record of this panel.
        let rec = unsafe { prec.add(b * a.rhs_record) };
        let mut acc = [[_mm256_setzero_ps(); G]; R];
        for c in 0..bl / chunk {
            for grp in 0..groups {
                // SAFETY: chunk c, group grp of the record's codes.
                let base = unsafe { rec.add(c * chunk_bytes + grp * NR * KR + goff) };
                // SAFETY: 32 bytes inside the record.
                let v: [__m256i; G] = std::array::from_fn(|g| {
                    // SAFETY: one vector of codes inside the record.
                    unsafe { _mm256_loadu_si256(base.add(32 * g).cast()) }
                });
                for l in 0..cpb {
                    for i in 0..KR {
                        let sh = _mm_cvtsi32_si128((8 * i + l * BITS) as i32);
                        let w: [__m256; G] = std::array::from_fn(|g| {
                            _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(v[g], sh), field))
                        });
                        let k = c * chunk + l * lane_len + KR * grp + i;
                        for r in 0..R {
                            // SAFETY: k < bl: inside row r's block.
                            let x = _mm256_set1_ps(unsafe { *arow[r].add(k) });
                            for g in 0..G {
                                acc[r][g] = _mm256_fmadd_ps(w[g], x, acc[r][g]);
                            }
                        }
                    }
                }
            }
        }
        let asum: [f32; R] = std::array::from_fn(|r| {
            let mut s = _mm256_setzero_ps();
            for k in (0..bl).step_by(8) {
                // SAFETY: k + 8 <= bl values of row r's block.
                s = _mm256_add_ps(s, unsafe { _mm256_loadu_ps(arow[r].add(k)) });
            }
            hsum(s)
        });
        let (sc, zc) = {
            // SAFETY: this record's scales (and corrections) of the unit's columns, f32.
            unsafe {
                let s = rec.add(a.rhs_scales + 4 * 8 * G * unit).cast::<f32>();
                let z = rec.add(a.rhs_zp + 4 * 8 * G * unit).cast::<f32>();
                let sc: [__m256; G] = std::array::from_fn(|g| _mm256_loadu_ps(s.add(8 * g)));
                let zc: [__m256; G] = std::array::from_fn(|g| {
                    if has_zp { _mm256_loadu_ps(z.add(8 * g)) } else { _mm256_mul_ps(sc[g], _mm256_set1_ps(-mid)) }
                });
                (sc, zc)
            }
        };
        for r in 0..R {
            let x = _mm256_set1_ps(asum[r]);
            for g in 0..G {
                f[r][g] = _mm256_fmadd_ps(zc[g], x, _mm256_fmadd_ps(acc[r][g], sc[g], f[r][g]));
            }
        }
    }
    // SAFETY: the tile's rows r < R and columns < cols (stores are clipped).
    unsafe { store::<R, G>(a, c0, &f, dst) };
}

/// Horizontal sum of 8 f32.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// Stores `f` (+ bias) to rows `0..R`, columns `c0 + 8g ..` of the tile, clipped to `args.cols` (AVX2 has no
/// masked store for partial vectors that is also cheap to build: full vectors go out whole, bias added as a vector,
/// a partial one through a small buffer).
///
/// # Safety
/// The CPU has avx2; `dst` is row 0 of R rows of the tile (stride `dst_stride`), bias (if any) holds `cols`
/// values.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn store<const R: usize, const G: usize>(a: &RunArgs, c0: usize, f: &[[__m256; G]; R], dst: *mut f32) {
    for (r, fr) in f.iter().enumerate() {
        for (g, &v) in fr.iter().enumerate() {
            let col = c0 + 8 * g;
            if col >= a.cols {
                break;
            }
            let n = (a.cols - col).min(8);
            if n == 8 {
                // SAFETY: columns col .. col + 8 < cols of row r: inside the tile; bias holds `cols` values.
                unsafe {
                    let b = if a.bias.is_null() { _mm256_setzero_ps() } else { _mm256_loadu_ps(a.bias.add(col)) };
                    _mm256_storeu_ps(dst.add(r * a.dst_stride + col), _mm256_add_ps(v, b));
                }
                continue;
            }
            let mut buf = [0f32; 8];
            // SAFETY: buf holds 8 values.
            unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), v) };
            for (j, y) in buf.iter().enumerate().take(n) {
                // SAFETY: columns col + j < cols of row r: inside the tile; bias holds `cols` values.
                unsafe {
                    let bias = if a.bias.is_null() { 0.0 } else { *a.bias.add(col + j) };
                    *dst.add(r * a.dst_stride + col + j) = y + bias;
                }
            }
        }
    }
}
