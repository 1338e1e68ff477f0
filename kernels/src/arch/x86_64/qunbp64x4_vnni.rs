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
    // SAFETY: forwarded.
    unsafe {
        crate::arch::dispatch!(unit_c::<R, G, BITS>(args, panel, half, lhs, lhs_scale, lhs_sum, dst); chunk(args.bl))
    }
}

/// Computes one unit of a tile: rows `0..R` (R ≤ 6) × the `G` groups of 16 columns of `panel` that start at
/// group `unit·G` (G·16 divides 64), over all K, for `BITS`-bit codes. The `R` rows of the int8 LHS start at
/// `lhs` (row stride `args.lhs_stride`), their scales and sums at `lhs_scale`/`lhs_sum` (stride `args.blocks`),
/// the output rows at `dst` (the tile's column 0). Columns past `args.cols` are computed but never stored.
///
/// # Safety
/// The CPU has avx512f, avx512bw and avx512vnni. `args` satisfies the `RunArgs` contract for a `qsi8db` LHS and
/// a `qunbp64x4_sf32_zpc` RHS; `lhs`, `lhs_scale`, `lhs_sum` and `dst` point at row `r0` of that tile, which
/// has at least `R` rows from there.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn unit_c<const R: usize, const G: usize, const BITS: usize, const CHUNK: usize>(
    args: &RunArgs,
    panel: usize,
    half: usize,
    lhs: *const i8,
    lhs_scale: *const f32,
    lhs_sum: *const i32,
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
                    if has_zp { _mm512_setzero_si512() } else { _mm512_set1_epi32(-mid * qsum[r]) }
                });
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
                            if has_zp { _mm512_loadu_ps(z.add(16 * g)) } else { _mm512_setzero_ps() }
                        });
                        (sc, zc)
                    }
                };
                for r in 0..R {
                    let sa_v = _mm512_set1_ps(sa[r]);
                    let corr = _mm512_set1_ps(sa[r] * qsum[r] as f32);
                    for g in 0..G {
                        let mut y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][g]), _mm512_mul_ps(sc[g], sa_v), f[r][g]);
                        if has_zp {
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
}
