//! The body shared by the AVX-512 VNNI int8 kernels on `qunbp64x4_s{f32,f16}_zpc` weights (unsigned n-bit
//! codes, panels of 64 columns × 4 K, f32 or f16 scales, zero points as a per-block correction term c = −s·z).
//! f16 scales move 10% fewer bytes at 4 bits (0.5625 instead of 0.625 per weight), which is what a decode GEMV
//! that runs at the cache's read bandwidth gains from.
//!
//! Per (panel, block) record, the codes of one chunk (C = min(bl, 32) K values) are `C/4/cpb` groups of 256
//! bytes; one 64-byte load (column group g of 16) holds, in dword lane j = column 16g + j, the 4 consecutive K
//! values 4·grp..4·grp+3 of each of the `cpb = 8/bits` lanes of the chunk (lane l in bits l·bits.. of each byte,
//! at K offset l·C/cpb). That is the u8 operand of `vpdpbusd` against a broadcast dword of 4 int8 activations.
//!
//! Integer numerics per (row, column, block): `acc = Σ q_a·q_w − m·Σ q_a` when the weights have no zero points
//! (m = 2^(bits−1), the accumulator starts at −m·Σq_a: exact), else `acc = Σ q_a·q_w` and the block adds
//! `c·sa·Σq_a` in f32. Then `y += cvt(acc)·(s·sa)`. Lanes are either masked in place (field l of a byte ×2^(l·bits),
//! one accumulator per lane, shifted back once per block: one op per 64 bytes, for one row) or shifted down to
//! plain codes first (two ops per 64 bytes, shared by every row of a multi-row tile). int32 sums wrap
//! modulo 2^32 inside a block but end exact: |Σ| ≤ 255·127·65536 < 2^31 at the largest block.
//!
//! Folded zero points (GEMM tiles of 2+ rows, 2- and 4-bit codes): where every zero point of a 32-column unit is a
//! whole number in the code range (every uint8 zero point input), the unit's first row block turns its
//! corrections back into bytes `128 − z` as it goes ([`FoldState`]), and the shifted-down codes of the row blocks
//! after it get them added (one `vpaddb` per 64
//! bytes, shared by the rows): the u8 operand is `q − z + 128` (113 … 143 at 4 bits), the sums start at
//! `−128·Σq_a`, so `acc = Σ q_a·(q − z)` exactly and the epilogue has no correction term. On the two 512-bit
//! ports that `vpdpbusd` and the epilogue's FMAs share, that is 120 instead of 132 operations per 6 × 32 tile and
//! block of 32 (96 of them `vpdpbusd`). Measured on an AMD EPYC Zen 4 (family 25 model 17, KVM guest, 1 thread;
//! `gemm_time --zp u8`, tiles alone, 4 rounds in turns, best GFLOP/s before → after): M = 128, N×K 1536×576 313 →
//! 327, 576×1536 323 → 339, 192×576 321 → 336, 4096×4096 290 → 303; M = 512 192×576 321 → 338, 576×1536 316 →
//! 333 (symmetric weights: 350–362). A first version that filled the table in a pass of its own before the
//! unit's rows (the records' scales and corrections read once more, with no work to hide their latency behind)
//! gained 0–5% on SmolLM2's shapes and lost 13% at 4096×4096 (the pass alone, folding nothing: 3–6% and 13%).
//!
//! On Zen 4 `vpdpbusd` zmm issues once per cycle (3.6 G/s measured with 12 independent chains: ~460 GOPS) and so
//! does a 512-bit FMA or `vmulps`, on the same two ports; the unpack shifts and masks, `vcvtdq2ps`, broadcasts
//! and loads go elsewhere. The block epilogue's `vmulps` (column scales × sa) and FMA per accumulator therefore
//! bound the 6 × 32 tile at 96 / 120 = 80% of the `vpdpbusd` rate at blocks of 32 (~370 GOPS); it runs 330–360
//! GOPS on symmetric weights (tiles alone), less where the weights stream from memory (N·K ≥ 16 M: ~320).

// Register tiles are indexed [row][column group]: index loops read like the algebra.
#![allow(clippy::needless_range_loop)]
use crate::ukernel::RunArgs;
use std::arch::x86_64::*;

/// Columns per panel and K values per column group of the layout.
pub(crate) const NR: usize = 64;
pub(crate) const KR: usize = 4;

/// [`unit_c`] with the chunk length (min(bl, 32): 16 or 32) as a constant, so that every loop inside a block
/// unrolls and the register tile stays in registers.
///
/// # Safety
/// As [`unit_c`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn unit<const R: usize, const G: usize, const BITS: usize>(
    args: &RunArgs,
    panel: usize,
    half: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
) {
    let mut plain = FoldState { table: std::ptr::null_mut(), folds: Some(false) };
    // SAFETY: forwarded; a unit that does not fold never reads the (absent) table.
    unsafe { unit_folded::<R, G, BITS>(args, panel, half, lhs, lhs_scale, lhs_sum, dst, &mut plain) }
}

/// What the row blocks of one 32-column unit share about folding its zero points: the unit's fold table (per
/// block, `G` vectors of bytes `128 − z`, each column's in the 4 bytes of its dword) and whether it holds the
/// unit's zero points. The unit's first row block computes with the corrections and fills the table from the
/// same scales and corrections its epilogue loads ([`fold_bytes`]); the row blocks after it fold if every zero
/// point was whole, else they keep the corrections.
pub(crate) struct FoldState {
    /// `blocks · G` vectors.
    pub(crate) table: *mut __m512i,
    /// None before the first row block; then whether the table folds the unit.
    pub(crate) folds: Option<bool>,
}

/// [`unit`] for a unit whose zero points may fold (see [`FoldState`]). One-row blocks and 8-bit codes never fold
/// (their codes are masked in place, or would leave u8): they take the corrections, which every record holds.
///
/// # Safety
/// As [`unit_c`]; `state` is this unit's: fresh (`folds: None`, `table` holding `args.blocks · G` vectors) for
/// its first row block, which has R > 1 rows, or `folds: Some(false)` for a unit that keeps its corrections.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn unit_folded<const R: usize, const G: usize, const BITS: usize>(
    args: &RunArgs,
    panel: usize,
    half: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
    state: &mut FoldState,
) {
    let zb = state.table;
    // SAFETY: forwarded; the table is the unit's, filled by its first row block before any folded one reads it.
    unsafe {
        match state.folds {
            None if R > 1 && BITS < 8 => {
                let all = crate::arch::dispatch!(
                    unit_c::<R, G, BITS>(args, panel, half, lhs, lhs_scale, lhs_sum, dst, zb); chunk(args.bl) zp(false) zp(true)
                );
                state.folds = Some(all);
            }
            Some(true) if R > 1 && BITS < 8 => {
                crate::arch::dispatch!(
                    unit_c::<R, G, BITS>(args, panel, half, lhs, lhs_scale, lhs_sum, dst, zb); chunk(args.bl) zp(true) zp(false)
                );
            }
            _ => {
                crate::arch::dispatch!(
                    unit_c::<R, G, BITS>(args, panel, half, lhs, lhs_scale, lhs_sum, dst, zb); chunk(args.bl) zp(false) zp(false)
                );
            }
        }
    }
}

/// The fold bytes of 16 columns of one block from their scales `s` and corrections `c`: each column's `128 − z`
/// in the 4 bytes of its dword, and the mask of the columns whose zero point is a whole z in 0 … 2^BITS − 1,
/// i.e. whose correction is exactly `−s·z` as the packer computed it (`s·z` rounded once, from the scale as
/// stored; a zero scale needs c = 0 and takes z = 0).
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn fold_bytes<const BITS: usize>(s: __m512, c: __m512) -> (__mmask16, __m512i) {
    let neg_c = _mm512_sub_ps(_mm512_setzero_ps(), c);
    let live = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(s, _mm512_setzero_ps());
    // −c/s is within 15·2^−14 of a whole z: rounding recovers it, the exact product checks it.
    let z = _mm512_maskz_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        live,
        _mm512_mul_ps(neg_c, _mm512_rcp14_ps(s)),
    );
    let exact = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_mul_ps(s, z), neg_c);
    let in_range = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(z, _mm512_setzero_ps())
        & _mm512_cmp_ps_mask::<_CMP_LE_OQ>(z, _mm512_set1_ps(((1u32 << BITS) - 1) as f32));
    let dead_ok = !live & _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(c, _mm512_setzero_ps());
    let bias = _mm512_sub_epi32(_mm512_set1_epi32(128), _mm512_cvtps_epi32(z));
    // The low byte of each dword into all four (z ≤ 15: 113 … 128).
    let bytes = _mm512_shuffle_epi8(bias, _mm512_set4_epi32(0x0C0C_0C0C, 0x0808_0808, 0x0404_0404, 0));
    ((live & exact & in_range) | dead_ok, bytes)
}

/// This thread's fold table, kept between calls (grown to the largest K seen).
pub(crate) fn with_fold_table<T>(vectors: usize, f: impl FnOnce(*mut __m512i) -> T) -> T {
    thread_local! {
        static TABLE: std::cell::RefCell<Vec<__m512i>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    TABLE.with_borrow_mut(|t| {
        if t.len() < vectors {
            // SAFETY: all-zero bits are a valid __m512i.
            t.resize(vectors, unsafe { std::mem::zeroed() });
        }
        f(t.as_mut_ptr())
    })
}

/// Computes one unit of a tile: rows `0..R` (R ≤ 6) × the `G` groups of 16 columns of `panel` that start at
/// group `unit·G` (G·16 divides 64), over all K, for `BITS`-bit codes. The `R` rows of the int8 LHS start at
/// `lhs` (row stride `args.lhs_stride`), their scales and sums at `lhs_scale`/`lhs_sum` (stride `args.blocks`),
/// the output rows at `dst` (the tile's column 0). Columns past `args.cols` are computed but never stored.
///
/// # Safety
/// The CPU has avx512f, avx512bw and avx512vnni. `args` satisfies the `RunArgs` contract for a `qsi8db` LHS and
/// a `qunbp64x4_sf32_zpc` RHS; `lhs`, `lhs_scale`, `lhs_sum` and `dst` point at row `r0` of that tile, which
/// has at least `R` rows from there. `FOLD`: the unit's zero points are folded into the codes by the fold table
/// `zb` (see [`FoldState`]; R > 1, BITS < 8), so the block epilogue has no correction term. `BUILD`: computes
/// with the corrections and writes the fold table at `zb`; returns whether every zero point folds (false
/// otherwise).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn unit_c<
    const R: usize,
    const G: usize,
    const BITS: usize,
    const CHUNK: usize,
    const FOLD: bool,
    const BUILD: bool,
>(
    args: &RunArgs,
    panel: usize,
    half: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
    dst: *mut f32,
    zb: *mut __m512i,
) -> bool {
    let a = args;
    let mut folds: __mmask16 = 0xFFFF;
    let bl = a.bl;
    let chunk = CHUNK;
    debug_assert_eq!(bl.min(32), CHUNK);
    let cpb = 8 / BITS;
    let lane_len = chunk / cpb;
    let groups = lane_len / KR;
    let chunk_bytes = chunk * NR * BITS / 8;
    let mid = 1i32 << (BITS - 1);
    let field_bits = ((1u32 << BITS) - 1) as u8;
    let field = _mm512_set1_epi8(field_bits as i8);
    // Lane l of a byte in place (for one row), and the shift that brings it down.
    let in_place: [__m512i; 4] = std::array::from_fn(|l| _mm512_set1_epi8((field_bits << ((l * BITS) % 8)) as i8));
    let shift: [__m128i; 4] = std::array::from_fn(|l| _mm_cvtsi32_si128((l * BITS) as i32));
    let has_zp = a.has_zp != 0;
    let f16_scales = a.layout.scales == crate::pack::ScaleType::F16;
    debug_assert!(panel < a.cols.div_ceil(NR) && half < NR / (16 * G) && R <= 6);
    // SAFETY: panel < the tile's panels, all inside the packed weights (RunArgs contract).
    let prec = unsafe { a.rhs.add(panel * a.rhs_panel_stride) };
    let c0 = panel * NR + half * 16 * G;
    {
        {
            let mut f = [[_mm512_setzero_ps(); G]; R];
            for b in 0..a.blocks {
                // SAFETY: b < blocks; scales/sums hold `blocks` values per row for R rows.
                let (sa, qsum): ([f32; R], [i32; R]) = unsafe {
                    (
                        std::array::from_fn(|r| *lhs_scale.add(r * a.blocks + b)),
                        std::array::from_fn(|r| *lhs_sum.add(r * a.blocks + b)),
                    )
                };
                // SAFETY: block b's record of this panel.
                let rec = unsafe { prec.add(b * a.rhs_record) };
                let init: [__m512i; R] = std::array::from_fn(|r| {
                    if FOLD {
                        _mm512_set1_epi32(-128 * qsum[r])
                    } else if has_zp {
                        _mm512_setzero_si512()
                    } else {
                        _mm512_set1_epi32(-mid * qsum[r])
                    }
                });
                let zv: [__m512i; G] = std::array::from_fn(|g| {
                    if FOLD {
                        // SAFETY: FOLD only with the unit's table of blocks·G vectors (unit_folded's contract).
                        unsafe { zb.add(b * G + g).read() }
                    } else {
                        field
                    }
                });
                debug_assert!(!(FOLD && BUILD));
                let mut acc = [[_mm512_setzero_si512(); G]; R];
                for r in 0..R {
                    acc[r] = [init[r]; G];
                }
                // SAFETY: row r's block b starts at lhs + r·stride + b·bl, with bl values.
                let arow: [*const i8; R] = std::array::from_fn(|r| unsafe { lhs.add(r * a.lhs_stride + b * bl) });
                let bcast = |r: usize, k: usize| {
                    // SAFETY: k < bl − 3 (k = c·chunk + l·lane_len + 4·grp ≤ bl − 4): 4 bytes of row r's block.
                    _mm512_set1_epi32(unsafe { arow[r].add(k).cast::<i32>().read_unaligned() })
                };
                if R == 1 && BITS != 8 {
                    // One row: mask each lane in place (value ×2^(l·bits)), one accumulator per lane.
                    let mut lanes = [[_mm512_setzero_si512(); G]; 4];
                    lanes[0] = acc[0];
                    for c in 0..bl / chunk {
                        for grp in 0..groups {
                            // SAFETY: chunk c, group grp, column groups half·G.. of the record's codes.
                            let base = unsafe { rec.add(c * chunk_bytes + grp * NR * KR + half * 64 * G) };
                            for l in 0..cpb {
                                let x = bcast(0, c * chunk + l * lane_len + KR * grp);
                                for g in 0..G {
                                    // SAFETY: 64 bytes inside the record (see above).
                                    let v = unsafe { _mm512_loadu_si512(base.add(64 * g).cast()) };
                                    lanes[l][g] = _mm512_dpbusd_epi32(lanes[l][g], _mm512_and_si512(v, in_place[l]), x);
                                }
                            }
                        }
                    }
                    for g in 0..G {
                        let mut s = lanes[0][g];
                        for l in 1..cpb {
                            // Exact: lane l's sum is a multiple of 2^(l·bits).
                            s = _mm512_add_epi32(s, _mm512_sra_epi32(lanes[l][g], shift[l]));
                        }
                        acc[0][g] = s;
                    }
                } else {
                    for c in 0..bl / chunk {
                        for grp in 0..groups {
                            // SAFETY: as above.
                            let base = unsafe { rec.add(c * chunk_bytes + grp * NR * KR + half * 64 * G) };
                            // SAFETY: 64 bytes inside the record.
                            let v: [__m512i; G] = std::array::from_fn(|g| {
                                // SAFETY: one vector of codes inside the record.
                                unsafe { _mm512_loadu_si512(base.add(64 * g).cast()) }
                            });
                            for l in 0..cpb {
                                let w: [__m512i; G] = std::array::from_fn(|g| {
                                    if BITS == 8 {
                                        v[g]
                                    } else if FOLD {
                                        // q − z + 128 (no carry between bytes: 113 … 143).
                                        _mm512_add_epi8(
                                            _mm512_and_si512(_mm512_srl_epi32(v[g], shift[l]), field),
                                            zv[g],
                                        )
                                    } else {
                                        _mm512_and_si512(_mm512_srl_epi32(v[g], shift[l]), field)
                                    }
                                });
                                let k = c * chunk + l * lane_len + KR * grp;
                                for r in 0..R {
                                    let x = bcast(r, k);
                                    for g in 0..G {
                                        acc[r][g] = _mm512_dpbusd_epi32(acc[r][g], w[g], x);
                                    }
                                }
                            }
                        }
                    }
                }
                let (sc, zc) = {
                    // SAFETY: scales (f32, or f16 converted with vcvtph2ps) and f32 corrections of this record's
                    // 64 columns; the unit's 16·G are inside.
                    unsafe {
                        let col = 16 * G * half;
                        let sc: [__m512; G] = if f16_scales {
                            let s = rec.add(a.rhs_scales + 2 * col);
                            std::array::from_fn(|g| _mm512_cvtph_ps(_mm256_loadu_si256(s.add(32 * g).cast())))
                        } else {
                            let s = rec.add(a.rhs_scales + 4 * col).cast::<f32>();
                            std::array::from_fn(|g| _mm512_loadu_ps(s.add(16 * g)))
                        };
                        let z = rec.add(a.rhs_zp + 4 * col).cast::<f32>();
                        let zc: [__m512; G] = std::array::from_fn(|g| {
                            if has_zp && !FOLD { _mm512_loadu_ps(z.add(16 * g)) } else { _mm512_setzero_ps() }
                        });
                        (sc, zc)
                    }
                };
                if BUILD {
                    for g in 0..G {
                        let (ok, bytes) = fold_bytes::<BITS>(sc[g], zc[g]);
                        folds &= ok;
                        // SAFETY: BUILD only with the unit's table of blocks·G vectors (unit_folded's contract).
                        unsafe { zb.add(b * G + g).write(bytes) };
                    }
                }
                for r in 0..R {
                    let sa_v = _mm512_set1_ps(sa[r]);
                    let corr = _mm512_set1_ps(sa[r] * qsum[r] as f32);
                    for g in 0..G {
                        let mut y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][g]), _mm512_mul_ps(sc[g], sa_v), f[r][g]);
                        if has_zp && !FOLD {
                            y = _mm512_fmadd_ps(zc[g], corr, y);
                        }
                        f[r][g] = y;
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
    }
    BUILD && folds == 0xFFFF
}
