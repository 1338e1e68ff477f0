//! int8-activation GEMM for prefill, dotprod: 8 rows (two `qsi8dbp4x16` row groups) × 4 columns (one column quad
//! of a `qsnbp8x4` panel) per register tile, SDOT by element; the whole block loop of a tile is one `asm!` block,
//! so nothing leaves the registers: 8 int32 row × column-quad accumulators for the block (v0–v7), 8 f32 sums
//! (v8–v15), a group's 4 rows of one 16-K run of activations (v16–v19, one LD1 of 64 bytes), the chunk's 4 code
//! vectors of the quad (v20–v23, later their high fields in place), their low fields (v24–v27), the field mask
//! (v28). A panel is two such tiles (column quads); a tile's activations are read once per quad. A last single
//! row group (M = 4 is one) runs a one-group asm tile of the panel's 8 columns (`tile_4x8`, below); 2- and 8-bit
//! codes and blocks of 16 run the intrinsic 4 × 8 body of the same layout (`super::qsnbp8x4_int8::gemm_group`).
//!
//! Why 8 × 4: per 32 K a column quad's 4 code vectors (4 loads, 8 field extractions) serve 8 rows, twice the
//! 4 × 8 tile's sharing (field extraction 0.125 per SDOT instead of 0.25), and 8 + 8 accumulators leave room for
//! the operands (12 × 4 or 8 × 8 do not fit beside them). The per-block epilogue is the same per accumulator
//! whatever the tile: each (row, column quad) vector takes 8 SDOT per 32 K and MOVI + SCVTF + FMUL + FMLA per
//! block (0.5 per SDOT; the row numerics, over running sums, SCVTF + FMLA: 0.25).
//!
//! Instruction budget per 32 K (one block of 32) × 4 columns × 8 rows, 4-bit codes, symmetric, per-block
//! numerics, from the text (per SDOT: / 64): 64 SDOT; 4 loads of codes + 4 LD1 of 4 activation vectors, all
//! post-indexed (0.125); 8 field extractions (SHL / AND, 0.125); per block 8 SCVTF, 8 FMUL (column scales × the
//! row's block scale, by element: the per-block activation scale's cost), 8 FMLA, 2 LD1 of zeros (the
//! accumulators' restart, 4 per load from `sve_asm::ZEROS`, where 8 MOVI took a vector-pipe slot each; 0.41); the block's
//! scales LDR + FCVTL, the pair's 8 row scales one LDP (0.05); SUBS + B.NE once per two blocks (the record step is
//! the last code load's post-index; 0.01). Total 110 = 1.72 per SDOT (116 = 1.81 with MOVI; the row numerics: 98 = 1.53,
//! below; zero points add LDR of the corrections, LDP of the pair's sa·Σq and 8 FMLA: 120 = 1.88). At
//! blocks of 128: 4 chunks of 82 (with the chunk loop) + 34 + 4 per 256 SDOT = 1.43. The numerics, the zero points
//! and blocks of one chunk are compile-time modes of the text (eight asm blocks), so the loop has no branches on
//! them.
//!
//! Measured (`scripts/aarch64/icount-kernel.sh`, 2048 × 2048, qemu -cpu neoverse-n1, the whole kernel: the row
//! factors' layout, the walk and the stores included): 1.84 per SDOT at M = 32, 1.83 at M = 128 (the 4 × 8
//! intrinsic tile it replaces: 2.06); zero points 2.01 / 1.99 (were 2.26); the row numerics 1.73 / 1.70 (were
//! 1.93); block 128 1.45. Against ORT 1.31.1's own kernel (KleidiAI, per-row activation scales: no FMUL per
//! accumulator; 1.85–1.89 instructions per SDOT per Run, quantizer and op included): what the per-block numerics
//! cannot drop is the FMUL (0.125 per SDOT). Those figures predate the accumulators' restart by loads (110 per 64
//! SDOT above, was 116): the whole Run is now 0.95x ORT's at M = 32 and 128 (2048², bs32), the row numerics 0.87x
//! (bench/results/aarch64-icount.md).
//!
//! The row numerics (`rowsum` mode) keep running int32 sums over all blocks and weigh them by the differences of
//! the column scales (`ops::for_each_block_weight`: Σ s_b·dot_b summed by parts), laid out per panel (8 f32 per
//! block), so their block epilogue is one LDR of the quad's weights, 8 SCVTF (into v16–v19, v24–v27: the sums go
//! on) and 8 FMLA: 17 per 64 SDOT, where restarting the sums took LDR + FCVTL, 8 SCVTF, 8 FMLA and 8 MOVI (26).
//! Measured per call (2048 × 2048, neoverse-n1, the first call, which also computes the weights' column sums once:
//! a GEMV over ones): M = 32 16331056 → 15496272 instructions (1.73 → 1.64 per SDOT), M = 64 30513200 → 28839504
//! (1.71 → 1.62), with zero points (M = 32) 17946832 → 17112144 (1.90 → 1.81).
//!
//! The one-group tile (`tile_4x8`, `group_text!`) holds 4 rows × both column quads: 8 accumulators, 8 sums, both
//! runs of the chunk's activations (8 vectors), two code groups and one group's low fields. Each code group's two
//! quad vectors serve 4 rows of both runs (16 SDOT per 2 SHL + 2 AND), and a chunk takes 2 LD1 of 64 bytes of
//! codes and 2 of activations. Budget per 32 K × 8 columns × 4 rows (64 SDOT): 4 loads, 16 field extractions; per
//! block LDR of the 8 column scales + 2 FCVTL, LDR of the group's 4 row scales (consecutive per block:
//! group-major, no per-call layout), 8 SCVTF, 8 FMUL, 8 FMLA, 2 LD1 of zeros; the loop 1: 115 = 1.80 per SDOT.
//! The row numerics restart per block where no weights are laid out (a lone group: M = 4; LDR + 2 FCVTL, 8 SCVTF,
//! 8 FMLA, 2 LD1 of zeros: 106 = 1.66), and sum by parts with the pair tiles' weights otherwise (102 = 1.59).
//! Measured (the symbol, per call, 2048 × 2048, neoverse-n1): 1.81 per SDOT at M = 4, the row numerics 1.67
//! (M = 4) and 1.61 (M = 12); the intrinsic body it replaces took 2.06 / 1.91. The whole call at M = 4: −11.4%
//! (row −12.0%, zero points −10.4% / −11.0%). Where the task is that one group (M = 4), one asm call walks all its
//! whole panels (the group's pointers restart from their bases per panel, ~30 instructions) instead of a Rust loop
//! with a call per panel (~130): another −1.1% per call.
//!
//! The epilogue is `y += f32(acc)·(s·sa) [+ c·sq]` (row numerics: `y += f32(S)·w [+ c·sq]`, above),
//! `ops::block_epilogue`'s formula in its order of roundings, with f32(acc) converted with 4 fraction bits (the
//! fields' factor 16, exact); the column scales (f16) and corrections are read from each block's record, the rows'
//! scales and sa·Σq from a per-call layout of the group-major `qsi8dbp4x16` ones ([`PairScales`]: a pair's 8 per
//! block in one load). A whole tile (8 real rows, 8 columns below `cols`) leaves from the asm straight into the
//! output with the bias; another through `ops::Sums` and `ops::store_groups` (real rows and columns only).
//!
//! LHS: `qsi8dbp4x16` (int8 per block, rows in groups of 4, K in runs of 16; scale and Σq per row and block,
//! group-major). RHS: `qsnbp8x4_sf16_zpc`, bits 2/4/8, any block size 16 … 65536. Rows: whole groups of 4 from
//! the tile's start (padding rows of the last group computed from its zero padding, never stored); columns:
//! whole 8-column panels (the last one's padding computed, never stored). Features: neon, dotprod. No
//! over-reads: every load is inside a record or the tile's LHS groups.

use super::ops::{Dest, Sums, dest, for_each_block_weight, running_sums_fit, store_groups};
use super::qsnbp8x4_int8::{MR, NR, gemm_group};
use super::sve_asm::{ZEROS, asm_modes, ld1_zero, movi_zero, vector_asm};
use crate::ukernel::RunArgs;
use core::arch::aarch64::*;

/// # Safety
/// The CPU has neon and dotprod; `args` satisfies the `RunArgs` contract with a `qsi8dbp4x16` LHS (the tile
/// starts at a row group) and a `qsnbp8x4` RHS (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    let groups = a.rows.div_ceil(MR);
    // The asm tiles take 4-bit codes in blocks of whole 32-K chunks, row groups in pairs (the row numerics keep
    // running sums: where they fit).
    let asm = a.bits == 4 && a.bl.is_multiple_of(32) && (a.row == 0 || running_sums_fit(a));
    let pairs = if asm { groups / 2 } else { 0 };
    // SAFETY: the tile has 2·pairs row groups.
    let rows = unsafe { PairScales::new(a, pairs) };
    // The row numerics' Abel weights of the panel's 8 columns per block (`ops::for_each_block_weight`), laid out
    // per panel for the tiles (the per-block numerics read the records' scales).
    let laid = a.row != 0 && pairs > 0;
    let mut weights = vec![0f32; if laid { 8 * a.blocks } else { 0 }];
    // A lone whole row group (M = 4): one asm call walks all whole panels (no weights: the pairs lay them out).
    // One buffer for the tiles' sums that leave through `store_groups`.
    let mut out: Sums = [0f32; 96];
    let whole = if asm && groups == 1 && a.rows == MR { a.cols / NR } else { 0 };
    if whole > 0 {
        let (dest, _) = dest(a, 0, 0, 1, &mut out);
        let bstep = if a.bias.is_null() { 0 } else { 4 * NR };
        // SAFETY: group 0 and panels 0..whole are the tile's, 4-bit codes in 32-K chunks (checked above); its 4
        // rows and the panels' columns are real (whole panels below cols), so `dest` is the output rows from
        // panel 0 with their bias (4·NR bytes further per panel); the CPU has dotprod.
        unsafe { tile_4x8(a, 0, whole, 0, &weights, dest, bstep) };
    }
    for panel in whole..a.cols.div_ceil(NR) {
        if laid {
            let mut o = weights.as_mut_ptr();
            let store = |_: *const u8, [w0, w1]: [float32x4_t; 2]| {
                // SAFETY: `o` is the block's 8 f32 of `weights` (8 per block, one call per block).
                unsafe {
                    vst1q_f32(o, w0);
                    vst1q_f32(o.add(4), w1);
                    o = o.add(8);
                }
            };
            // SAFETY: the panel is the tile's.
            unsafe { for_each_block_weight(a, panel, store) };
        }
        for p in 0..pairs {
            let g = 2 * p;
            let (dest, whole) = dest(a, panel, g, 2, &mut out);
            // SAFETY: groups g, g + 1 are the tile's, panel is the tile's, 4-bit codes in 32-K chunks (checked
            // above), `rows` laid out for this call; `dest` is the tile's real output rows and columns with the
            // panel's bias, or `out`; the CPU has dotprod.
            unsafe { tile_8x4(a, panel, g, rows.pair(p), &weights, dest) };
            if !whole {
                // SAFETY: the tile's groups and panel (store_groups stores only real rows and columns).
                unsafe { store_groups(a, panel, g, 2, &out) };
            }
        }
        for g in 2 * pairs..groups {
            if !asm {
                let real = (a.rows - g * MR).min(MR);
                // SAFETY: row group g is the tile's (whole, padding rows zero), so are its scales, sums and the
                // output rows of its `real` rows (RunArgs contract); panel is the tile's; the CPU has dotprod.
                unsafe { crate::arch::dispatch!(gemm_group::<>(a, panel, g, real); bits(a.bits)) };
                continue;
            }
            let (dest, whole) = dest(a, panel, g, 1, &mut out);
            // SAFETY: group g and panel are the tile's, 4-bit codes in 32-K chunks (checked above); `dest` as above;
            // the CPU has dotprod.
            unsafe { tile_4x8(a, panel, 1, g, &weights, dest, 0) };
            if !whole {
                // SAFETY: the tile's group and panel (store_groups stores only real rows and columns).
                unsafe { store_groups(a, panel, g, 1, &out) };
            }
        }
    }
}

/// The row factors of every pair of row groups and block, laid out once per call for one load per block: the 8
/// activation scales sa (rows 0..3 of the pair's first group, then of its second; absent in the row numerics,
/// where they are 1), then with zero points the 8 sq = sa·Σq (the row numerics: Σq), as f32.
struct PairScales {
    v: Vec<f32>,
    /// f32 per (pair, block).
    per_block: usize,
    blocks: usize,
}

impl PairScales {
    /// # Safety
    /// `a` satisfies the `RunArgs` contract for a `qsi8dbp4x16` LHS with at least `2 · pairs` row groups.
    #[target_feature(enable = "neon")]
    unsafe fn new(a: &RunArgs, pairs: usize) -> PairScales {
        let (row, zp) = (a.row != 0, a.has_zp != 0);
        let per_block = 8 * (usize::from(!row) + usize::from(zp));
        let mut v = vec![0f32; pairs * a.blocks * per_block];
        let mut o = v.as_mut_ptr();
        for p in 0..pairs {
            // The pair's groups' factors of block 0 (group-major: 4 rows per block).
            let at = [2 * p * MR * a.blocks, (2 * p + 1) * MR * a.blocks];
            for b in 0..a.blocks {
                for (h, &at) in at.iter().enumerate() {
                    let i = at + b * MR;
                    // SAFETY: the group's 4 row scales and Σq of block b, inside the tile's (RunArgs contract; padding
                    // rows hold 0; the scales are not read with `row`, the sums only with `zp`); `o` is the (pair,
                    // block)'s `per_block` f32 inside `v` (4·h and 8 + 4·h are below per_block where written).
                    unsafe {
                        let sa = if row { vdupq_n_f32(1.0) } else { vld1q_f32(a.lhs_scale.add(i)) };
                        if !row {
                            vst1q_f32(o.add(4 * h), sa);
                        }
                        if zp {
                            let q = vcvtq_f32_s32(vld1q_s32(a.lhs_sum.add(i)));
                            vst1q_f32(o.add(per_block - 8 + 4 * h), if row { q } else { vmulq_f32(sa, q) });
                        }
                    }
                }
                o = o.wrapping_add(per_block);
            }
        }
        PairScales { v, per_block, blocks: a.blocks }
    }

    /// Pair `p`'s blocks.
    fn pair(&self, p: usize) -> &[f32] {
        let n = self.per_block * self.blocks;
        &self.v[p * n..(p + 1) * n]
    }
}

/// The asm text of the 8 × 4 tile over all blocks, for one mode: `$act` `block` (y += f32(acc)·(s·sa)) or `row`
/// (y += f32(acc)·s), `$zp` `zp` (+ c·sq) or `nozp`, `$chunks` `one` (blocks of 32 K: no chunk loop, two blocks
/// per pass of the loop) or `many`. Registers: accumulators v0–v7 (rows 0..3 of group `{a0}`, then of `{a1}`),
/// sums v8–v15 (the same rows), activations v16–v19 (one run of a group: its rows 0..3), codes v20–v23 (code
/// groups 0..3 of the chunk, the quad's 16 bytes of each 32; their high fields in place), low fields v24–v27, the
/// mask v28; in the epilogue v29 holds the column scales, v30 / v31 the pair's row scales, v16–v19 and v24–v27 the
/// products and the zero-point terms. Field 0 of code group j (the low nibble, `shl #4`) is K 4j..4j + 3 of the
/// chunk's first 16 K (element j of run 0), field 1 (the high nibble, `and #0xf0`) the same of the second 16 K
/// (run 1): both 16 × the signed code. Pointers advance by post-indexed loads: `{rec}` by 32 per code group (the
/// last one of a block `{rstep}`: to the next record), each `{a$g}` by 64 per run, `{rs}` by a block's row
/// factors. The sums leave plus the 4 f32 at `{bias}`, 8 rows `{dstride}` bytes apart from `{dst}`.
#[rustfmt::skip]
macro_rules! tile_text {
    ($act:ident $zp:ident one) => {
        concat!(
            tile_text!(@head),
            // Two blocks per pass; an odd count enters at the second.
            "tbnz {odd}, #0, 5f\n",
            "4:\n",
            tile_text!(@block $act $zp one),
            "5:\n",
            tile_text!(@block $act $zp one),
            "subs {nb}, {nb}, #2\n",
            "b.ne 4b\n",
            tile_text!(@tail),
        )
    };
    ($act:ident $zp:ident many) => {
        concat!(
            tile_text!(@head),
            "// {odd}\n",
            "2:\n",
            "mov {cc}, {chunks}\n",
            "3:\n",
            tile_text!(@chunk "ldr q23, [{rec}], #32\n"),
            "subs {cc}, {cc}, #1\n",
            "b.ne 3b\n",
            tile_text!(@epilogue $act $zp),
            "add {rec}, {rec}, {rstep}\n",
            "subs {nb}, {nb}, #1\n",
            "b.ne 2b\n",
            tile_text!(@tail),
        )
    };
    (@head) => {
        concat!(
            ".arch_extension dotprod\n",
            "// {zeros}\n",
            "movi v28.16b, #0xf0\n",
            movi_zero!("0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "14" "15"),
        )
    };
    // The sums plus bias, by rows.
    (@tail) => {
        concat!(
            "ldr q16, [{bias}]\n",
            "fadd v8.4s, v8.4s, v16.4s\n", "fadd v9.4s, v9.4s, v16.4s\n", "fadd v10.4s, v10.4s, v16.4s\n",
            "fadd v11.4s, v11.4s, v16.4s\n", "fadd v12.4s, v12.4s, v16.4s\n", "fadd v13.4s, v13.4s, v16.4s\n",
            "fadd v14.4s, v14.4s, v16.4s\n", "fadd v15.4s, v15.4s, v16.4s\n",
            "st1 {{v8.4s}}, [{dst}], {dstride}\n", "st1 {{v9.4s}}, [{dst}], {dstride}\n",
            "st1 {{v10.4s}}, [{dst}], {dstride}\n", "st1 {{v11.4s}}, [{dst}], {dstride}\n",
            "st1 {{v12.4s}}, [{dst}], {dstride}\n", "st1 {{v13.4s}}, [{dst}], {dstride}\n",
            "st1 {{v14.4s}}, [{dst}], {dstride}\n", "st1 {{v15.4s}}, [{dst}], {dstride}\n",
        )
    };
    // A block of one chunk: its last code load steps `{rec}` to the next record (`{cc}`, `{chunks}` unused).
    (@block $act:ident $zp:ident one) => {
        concat!(
            "// {cc} {chunks}\n",
            tile_text!(@chunk "ld1 {{v23.16b}}, [{rec}], {rstep}\n"),
            tile_text!(@epilogue $act $zp),
        )
    };
    // One 32-K chunk into the accumulators (`$last`: the load of code group 3).
    (@chunk $last:literal) => {
        concat!(
            "ldr q20, [{rec}], #32\n", "ldr q21, [{rec}], #32\n", "ldr q22, [{rec}], #32\n", $last,
            "shl v24.16b, v20.16b, #4\n", "shl v25.16b, v21.16b, #4\n",
            "shl v26.16b, v22.16b, #4\n", "shl v27.16b, v23.16b, #4\n",
            tile_text!(@run "{a0}" 24 25 26 27 0 1 2 3),
            tile_text!(@run "{a1}" 24 25 26 27 4 5 6 7),
            "and v20.16b, v20.16b, v28.16b\n", "and v21.16b, v21.16b, v28.16b\n",
            "and v22.16b, v22.16b, v28.16b\n", "and v23.16b, v23.16b, v28.16b\n",
            tile_text!(@run "{a0}" 20 21 22 23 0 1 2 3),
            tile_text!(@run "{a1}" 20 21 22 23 4 5 6 7),
        )
    };
    // One run of 16 K of one group (at `$a`): its 4 rows into accumulators `$c*`, each row's 4 elements against
    // the fields `$f*` of code groups 0..3.
    (@run $a:literal $f0:literal $f1:literal $f2:literal $f3:literal
     $c0:literal $c1:literal $c2:literal $c3:literal) => {
        concat!(
            "ld1 {{v16.16b, v17.16b, v18.16b, v19.16b}}, [", $a, "], #64\n",
            tile_text!(@row $c0 16 $f0 $f1 $f2 $f3), tile_text!(@row $c1 17 $f0 $f1 $f2 $f3),
            tile_text!(@row $c2 18 $f0 $f1 $f2 $f3), tile_text!(@row $c3 19 $f0 $f1 $f2 $f3),
        )
    };
    (@row $c:literal $v:literal $f0:literal $f1:literal $f2:literal $f3:literal) => {
        concat!(
            "sdot v", $c, ".4s, v", $f0, ".16b, v", $v, ".4b[0]\n",
            "sdot v", $c, ".4s, v", $f1, ".16b, v", $v, ".4b[1]\n",
            "sdot v", $c, ".4s, v", $f2, ".16b, v", $v, ".4b[2]\n",
            "sdot v", $c, ".4s, v", $f3, ".16b, v", $v, ".4b[3]\n",
        )
    };
    // The row numerics over running sums (`rowsum`): y += f32(S)·w, the quad's 4 Abel weights (× 2^−4 already) from
    // the panel's laid-out ones (`{ws}`: 8 f32 per block), the sums converted into v16–v19, v24–v27 (they go on).
    (@epilogue rowsum $zp:ident) => {
        concat!(
            "ldr q29, [{ws}], #32\n", "// {soff}\n",
            "scvtf v16.4s, v0.4s\n", "scvtf v17.4s, v1.4s\n", "scvtf v18.4s, v2.4s\n", "scvtf v19.4s, v3.4s\n",
            "scvtf v24.4s, v4.4s\n", "scvtf v25.4s, v5.4s\n", "scvtf v26.4s, v6.4s\n", "scvtf v27.4s, v7.4s\n",
            "fmla v8.4s, v16.4s, v29.4s\n", "fmla v9.4s, v17.4s, v29.4s\n",
            "fmla v10.4s, v18.4s, v29.4s\n", "fmla v11.4s, v19.4s, v29.4s\n",
            "fmla v12.4s, v24.4s, v29.4s\n", "fmla v13.4s, v25.4s, v29.4s\n",
            "fmla v14.4s, v26.4s, v29.4s\n", "fmla v15.4s, v27.4s, v29.4s\n",
            tile_text!(@zp $zp),
        )
    };
    // Block epilogue: the quad's 4 column scales (f16, at `{soff}` from `{rec}` here); the int32 sums (16 × the
    // products: the fields' factor) converted with 4 fraction bits (exact); the accumulators zeroed.
    (@epilogue $act:ident $zp:ident) => {
        concat!(
            "// {ws}\n",
            "ldr d29, [{rec}, {soff}]\n",
            "fcvtl v29.4s, v29.4h\n",
            "scvtf v0.4s, v0.4s, #4\n", "scvtf v1.4s, v1.4s, #4\n", "scvtf v2.4s, v2.4s, #4\n",
            "scvtf v3.4s, v3.4s, #4\n", "scvtf v4.4s, v4.4s, #4\n", "scvtf v5.4s, v5.4s, #4\n",
            "scvtf v6.4s, v6.4s, #4\n", "scvtf v7.4s, v7.4s, #4\n",
            tile_text!(@scale $act),
            tile_text!(@zp $zp),
            ld1_zero!(["0" "1" "2" "3"] ["4" "5" "6" "7"]),
        )
    };
    // y += f32(acc)·(s·sa): the product s·sa first (by element of the pair's row scales), as `block_epilogue`.
    (@scale block) => {
        concat!(
            "ldp q30, q31, [{rs}], #32\n",
            "fmul v16.4s, v29.4s, v30.s[0]\n", "fmul v17.4s, v29.4s, v30.s[1]\n",
            "fmul v18.4s, v29.4s, v30.s[2]\n", "fmul v19.4s, v29.4s, v30.s[3]\n",
            "fmul v24.4s, v29.4s, v31.s[0]\n", "fmul v25.4s, v29.4s, v31.s[1]\n",
            "fmul v26.4s, v29.4s, v31.s[2]\n", "fmul v27.4s, v29.4s, v31.s[3]\n",
            "fmla v8.4s, v0.4s, v16.4s\n", "fmla v9.4s, v1.4s, v17.4s\n",
            "fmla v10.4s, v2.4s, v18.4s\n", "fmla v11.4s, v3.4s, v19.4s\n",
            "fmla v12.4s, v4.4s, v24.4s\n", "fmla v13.4s, v5.4s, v25.4s\n",
            "fmla v14.4s, v6.4s, v26.4s\n", "fmla v15.4s, v7.4s, v27.4s\n",
        )
    };
    // y += f32(acc)·s (the row scales are 1, not laid out).
    (@scale row) => {
        concat!(
            "fmla v8.4s, v0.4s, v29.4s\n", "fmla v9.4s, v1.4s, v29.4s\n",
            "fmla v10.4s, v2.4s, v29.4s\n", "fmla v11.4s, v3.4s, v29.4s\n",
            "fmla v12.4s, v4.4s, v29.4s\n", "fmla v13.4s, v5.4s, v29.4s\n",
            "fmla v14.4s, v6.4s, v29.4s\n", "fmla v15.4s, v7.4s, v29.4s\n",
        )
    };
    // y += c·sq: the quad's 4 corrections (f32, at `{zoff}` from `{rec}`) and the pair's 8 sq, by element.
    (@zp zp) => {
        concat!(
            "ldr q24, [{rec}, {zoff}]\n",
            "ldp q25, q26, [{rs}], #32\n",
            "fmla v8.4s, v24.4s, v25.s[0]\n", "fmla v9.4s, v24.4s, v25.s[1]\n",
            "fmla v10.4s, v24.4s, v25.s[2]\n", "fmla v11.4s, v24.4s, v25.s[3]\n",
            "fmla v12.4s, v24.4s, v26.s[0]\n", "fmla v13.4s, v24.4s, v26.s[1]\n",
            "fmla v14.4s, v24.4s, v26.s[2]\n", "fmla v15.4s, v24.4s, v26.s[3]\n",
        )
    };
    (@zp nozp) => { "// {zoff} {rs}\n" };
}

/// Row groups `g`, `g + 1` × the 8 columns of `panel`, over all K, as two tiles of 4 columns (column quads), in
/// one of `tile_text!`'s eight modes chosen per call, from the pair's laid-out row factors `rows`; the sums plus
/// the bias leave into `dest` by rows (each quad its 4 columns of a row and of the bias).
///
/// # Safety
/// The CPU has neon and dotprod; `a` satisfies the `RunArgs` contract for a `qsi8dbp4x16` LHS and a 4-bit
/// `qsnbp8x4` RHS (f16 scales) with blocks of whole 32-K chunks; groups `g`, `g + 1` and `panel` are the tile's;
/// `rows` is their [`PairScales`]; `weights` the panel's laid-out Abel weights in the row numerics; `dest` holds 8
/// rows × 8 f32 `dest.stride` bytes apart, `dest.bias` 8 f32.
#[target_feature(enable = "neon,dotprod")]
unsafe fn tile_8x4(a: &RunArgs, panel: usize, g: usize, rows: &[f32], weights: &[f32], dest: Dest) {
    debug_assert!(a.bits == 4 && a.bl.is_multiple_of(32) && a.blocks > 0);
    debug_assert!(a.row == 0 || weights.len() == 8 * a.blocks);
    debug_assert!((g + 2) * MR <= a.rows.next_multiple_of(MR) && panel < a.cols.div_ceil(NR));
    let chunks = a.bl / 32;
    let one = chunks == 1;
    let at0 = g * MR * a.lhs_stride;
    // Bytes of a record's codes the post-indexed loads of a block walk (one chunk: but the last one, which steps
    // to the next record), and how far past the record's start (+ 16·quad) `{rec}` is in the epilogue.
    let walked = if one { 96 } else { 128 * chunks };
    let ahead = if one { a.rhs_record } else { 128 * chunks } as isize;
    for quad in 0..2 {
        let rec = a.rhs.wrapping_add(panel * a.rhs_panel_stride + 16 * quad);
        // One mode's asm block: the operands are the same in all eight.
        macro_rules! tile_asm {
            ($act:ident $zp:ident $chunks:ident) => {
                // SAFETY: reads: per block, the record's codes of column quad `quad` (16 bytes of each of a
                // chunk's 32-byte code groups, inside the record), its 4 scales (and 4 corrections with zero
                // points), each group's 128 bytes per chunk (2 runs of 16 K × 4 rows) and the pair's row factors
                // (`rows`: a.blocks blocks), for a.blocks blocks: all inside the tile's buffers (the caller's
                // guarantee); the pointers step past the last block without reading there; 4 f32 of bias. Writes:
                // 8 rows × 4 columns from `dst` + 4·quad, `dstride` bytes apart (the caller's guarantee). Every
                // vector register the block touches is declared; d8–d15 (callee-saved) are clobbered and saved by
                // the compiler; the flags are clobbered (no preserves_flags); no stack use.
                // The accumulators restart from the 64 bytes of `sve_asm::ZEROS` (a static).
                unsafe {
                    vector_asm!(
                        [] tile_text!($act $zp $chunks),
                        rec = inout(reg) rec => _,
                        rstep = in(reg) a.rhs_record - walked,
                        chunks = in(reg) chunks,
                        nb = inout(reg) if one { a.blocks.next_multiple_of(2) } else { a.blocks } => _,
                        odd = in(reg) a.blocks,
                        a0 = inout(reg) a.lhs.wrapping_add(at0) => _,
                        a1 = inout(reg) a.lhs.wrapping_add(at0 + MR * a.lhs_stride) => _,
                        soff = in(reg) a.rhs_scales as isize - ahead - 8 * quad as isize,
                        zoff = in(reg) a.rhs_zp as isize - ahead,
                        rs = inout(reg) rows.as_ptr() => _,
                        ws = inout(reg) weights.as_ptr().wrapping_add(4 * quad) => _,
                        dst = inout(reg) dest.ptr.wrapping_add(4 * quad) => _,
                        dstride = in(reg) dest.stride,
                        bias = in(reg) dest.bias.wrapping_add(4 * quad),
                        cc = out(reg) _,
                        zeros = in(reg) ZEROS.0.as_ptr(),
                    )
                }
            };
        }
        asm_modes!(tile_asm; rowsum; a.row != 0, a.has_zp != 0, one)
    }
}

/// The asm text of the one-group tile (4 rows × the panel's 8 columns) over all blocks, for one mode (as
/// `tile_text!`'s: `$act` `block` | `rowsum`, `$zp` `zp` | `nozp`, `$chunks` `one` | `many`). Registers:
/// accumulators v0–v7 (row r, column quad q: v(2r + q)), sums v8–v15 (the same order: a row's 8 columns are two
/// consecutive registers), the chunk's activations v16–v19 (run 0, rows 0..3) and v20–v23 (run 1), the codes of
/// two code groups v24–v27 (group j quad 0, quad 1, group j + 1 quad 0, quad 1; their high fields in place), the
/// low fields of one group v28, v29, the mask v31; in the epilogue v16–v23 hold the products (or the converted
/// sums), v24–v30 scales, corrections and sq. Each code group's two quads serve the 4 rows of both runs: 16 SDOT
/// per 4 field extractions, and per chunk 2 code loads and 2 activation loads of 64 bytes (`{rec}`, `{a0}`
/// post-indexed; the block's last code load steps to the next record in `one` mode). `{rs}` / `{rq}` walk the
/// group's 4 scales / Σq per block (group-major: consecutive), `{ws}` the panel's laid-out weights (8 per block).
/// The sums leave plus the 8 f32 at `{bias}`, 4 rows `{dstride}` bytes apart from `{dst}`.
#[rustfmt::skip]
macro_rules! group_text {
    // `{np}` panels, `{pstride}` bytes apart from `{recb}`; the output `{dstb}` + 32 bytes and the bias
    // `{bstep}` bytes further per panel. The group's pointers restart from their bases for each panel.
    ($act:ident $zp:ident $chunks:ident) => {
        concat!(
            ".arch_extension dotprod\n",
            "movi v31.16b, #0xf0\n",
            "1:\n",
            ld1_zero!(["0" "1" "2" "3"] ["4" "5" "6" "7"] ["8" "9" "10" "11"] ["12" "13" "14" "15"]),
            "mov {rec}, {recb}\n", "mov {a0}, {a0b}\n", "mov {rs}, {rsb}\n", "mov {rq}, {rqb}\n",
            "mov {dst}, {dstb}\n",
            group_text!(@blocks $act $zp $chunks),
            group_text!(@tail),
            "add {recb}, {recb}, {pstride}\n", "add {dstb}, {dstb}, #32\n", "add {bias}, {bias}, {bstep}\n",
            "subs {np}, {np}, #1\n",
            "b.ne 1b\n",
        )
    };
    // Two blocks per pass; an odd count enters at the second.
    (@blocks $act:ident $zp:ident one) => {
        concat!(
            "add {nb}, {blocks}, #1\n", "and {nb}, {nb}, #-2\n",
            "tbnz {blocks}, #0, 5f\n",
            "4:\n",
            group_text!(@block $act $zp one),
            "5:\n",
            group_text!(@block $act $zp one),
            "subs {nb}, {nb}, #2\n",
            "b.ne 4b\n",
        )
    };
    (@blocks $act:ident $zp:ident many) => {
        concat!(
            "mov {nb}, {blocks}\n",
            "2:\n",
            "mov {cc}, {chunks}\n",
            "3:\n",
            group_text!(@chunk "ld1 {{v24.16b, v25.16b, v26.16b, v27.16b}}, [{rec}], #64\n"),
            "subs {cc}, {cc}, #1\n",
            "b.ne 3b\n",
            group_text!(@epilogue $act $zp),
            "add {rec}, {rec}, {rstep}\n",
            "subs {nb}, {nb}, #1\n",
            "b.ne 2b\n",
        )
    };
    (@tail) => {
        concat!(
            "ldp q16, q17, [{bias}]\n",
            "fadd v8.4s, v8.4s, v16.4s\n", "fadd v9.4s, v9.4s, v17.4s\n", "fadd v10.4s, v10.4s, v16.4s\n",
            "fadd v11.4s, v11.4s, v17.4s\n", "fadd v12.4s, v12.4s, v16.4s\n", "fadd v13.4s, v13.4s, v17.4s\n",
            "fadd v14.4s, v14.4s, v16.4s\n", "fadd v15.4s, v15.4s, v17.4s\n",
            "st1 {{v8.4s, v9.4s}}, [{dst}], {dstride}\n", "st1 {{v10.4s, v11.4s}}, [{dst}], {dstride}\n",
            "st1 {{v12.4s, v13.4s}}, [{dst}], {dstride}\n", "st1 {{v14.4s, v15.4s}}, [{dst}], {dstride}\n",
        )
    };
    (@block $act:ident $zp:ident one) => {
        concat!(
            "// {cc} {chunks}\n",
            group_text!(@chunk "ld1 {{v24.16b, v25.16b, v26.16b, v27.16b}}, [{rec}], {rstep}\n"),
            group_text!(@epilogue $act $zp),
        )
    };
    // One 32-K chunk (`$last`: the load of code groups 2 and 3).
    (@chunk $last:literal) => {
        concat!(
            "ld1 {{v16.16b, v17.16b, v18.16b, v19.16b}}, [{a0}], #64\n",
            "ld1 {{v20.16b, v21.16b, v22.16b, v23.16b}}, [{a0}], #64\n",
            "ld1 {{v24.16b, v25.16b, v26.16b, v27.16b}}, [{rec}], #64\n",
            group_text!(@group 24 25 0), group_text!(@group 26 27 1),
            $last,
            group_text!(@group 24 25 2), group_text!(@group 26 27 3),
        )
    };
    // Code group `$j` (its quads' codes in `$q0`, `$q1`): the low fields (run 0) into v28, v29, the high ones (run
    // 1) in place, each against element `$j` of the 4 rows' activations of its run.
    (@group $q0:literal $q1:literal $j:literal) => {
        concat!(
            "shl v28.16b, v", $q0, ".16b, #4\n", "shl v29.16b, v", $q1, ".16b, #4\n",
            "and v", $q0, ".16b, v", $q0, ".16b, v31.16b\n", "and v", $q1, ".16b, v", $q1, ".16b, v31.16b\n",
            group_text!(@rows "28" "29" 16 17 18 19 $j),
            group_text!(@rows $q0 $q1 20 21 22 23 $j),
        )
    };
    (@rows $f0:literal $f1:literal $a0:literal $a1:literal $a2:literal $a3:literal $j:literal) => {
        concat!(
            "sdot v0.4s, v", $f0, ".16b, v", $a0, ".4b[", $j, "]\n", "sdot v1.4s, v", $f1, ".16b, v", $a0, ".4b[", $j, "]\n",
            "sdot v2.4s, v", $f0, ".16b, v", $a1, ".4b[", $j, "]\n", "sdot v3.4s, v", $f1, ".16b, v", $a1, ".4b[", $j, "]\n",
            "sdot v4.4s, v", $f0, ".16b, v", $a2, ".4b[", $j, "]\n", "sdot v5.4s, v", $f1, ".16b, v", $a2, ".4b[", $j, "]\n",
            "sdot v6.4s, v", $f0, ".16b, v", $a3, ".4b[", $j, "]\n", "sdot v7.4s, v", $f1, ".16b, v", $a3, ".4b[", $j, "]\n",
        )
    };
    // The row numerics over running sums: y += f32(S)·w, the panel's 8 laid-out weights of the block.
    (@epilogue rowsum $zp:ident) => {
        concat!(
            "ldp q24, q25, [{ws}], #32\n", "// {soff} {rs}\n",
            "scvtf v16.4s, v0.4s\n", "scvtf v17.4s, v1.4s\n", "scvtf v18.4s, v2.4s\n", "scvtf v19.4s, v3.4s\n",
            "scvtf v20.4s, v4.4s\n", "scvtf v21.4s, v5.4s\n", "scvtf v22.4s, v6.4s\n", "scvtf v23.4s, v7.4s\n",
            "fmla v8.4s, v16.4s, v24.4s\n", "fmla v9.4s, v17.4s, v25.4s\n",
            "fmla v10.4s, v18.4s, v24.4s\n", "fmla v11.4s, v19.4s, v25.4s\n",
            "fmla v12.4s, v20.4s, v24.4s\n", "fmla v13.4s, v21.4s, v25.4s\n",
            "fmla v14.4s, v22.4s, v24.4s\n", "fmla v15.4s, v23.4s, v25.4s\n",
            group_text!(@zp row $zp),
        )
    };
    // The row numerics restarting the accumulators per block (a lone group: no weights laid out): y += f32(acc)·s.
    (@epilogue row $zp:ident) => {
        concat!(
            "// {ws} {rs}\n",
            "ldr q24, [{rec}, {soff}]\n",
            "fcvtl v25.4s, v24.4h\n", "fcvtl2 v26.4s, v24.8h\n",
            group_text!(@convert),
            "fmla v8.4s, v0.4s, v25.4s\n", "fmla v9.4s, v1.4s, v26.4s\n",
            "fmla v10.4s, v2.4s, v25.4s\n", "fmla v11.4s, v3.4s, v26.4s\n",
            "fmla v12.4s, v4.4s, v25.4s\n", "fmla v13.4s, v5.4s, v26.4s\n",
            "fmla v14.4s, v6.4s, v25.4s\n", "fmla v15.4s, v7.4s, v26.4s\n",
            group_text!(@zp row $zp),
            ld1_zero!(["0" "1" "2" "3"] ["4" "5" "6" "7"]),
        )
    };
    // The int32 sums (16 × the products: the fields' factor) converted with 4 fraction bits (exact).
    (@convert) => {
        concat!(
            "scvtf v0.4s, v0.4s, #4\n", "scvtf v1.4s, v1.4s, #4\n", "scvtf v2.4s, v2.4s, #4\n",
            "scvtf v3.4s, v3.4s, #4\n", "scvtf v4.4s, v4.4s, #4\n", "scvtf v5.4s, v5.4s, #4\n",
            "scvtf v6.4s, v6.4s, #4\n", "scvtf v7.4s, v7.4s, #4\n",
        )
    };
    // Per-block numerics: the panel's 8 column scales (f16, at `{soff}` from `{rec}` here), the group's 4 row
    // scales; y += f32(acc)·(s·sa), the product first (as `block_epilogue`); the accumulators restart.
    (@epilogue block $zp:ident) => {
        concat!(
            "// {ws}\n",
            "ldr q24, [{rec}, {soff}]\n",
            "ldr q27, [{rs}], #16\n",
            "fcvtl v25.4s, v24.4h\n", "fcvtl2 v26.4s, v24.8h\n",
            group_text!(@convert),
            "fmul v16.4s, v25.4s, v27.s[0]\n", "fmul v17.4s, v26.4s, v27.s[0]\n",
            "fmul v18.4s, v25.4s, v27.s[1]\n", "fmul v19.4s, v26.4s, v27.s[1]\n",
            "fmul v20.4s, v25.4s, v27.s[2]\n", "fmul v21.4s, v26.4s, v27.s[2]\n",
            "fmul v22.4s, v25.4s, v27.s[3]\n", "fmul v23.4s, v26.4s, v27.s[3]\n",
            "fmla v8.4s, v0.4s, v16.4s\n", "fmla v9.4s, v1.4s, v17.4s\n",
            "fmla v10.4s, v2.4s, v18.4s\n", "fmla v11.4s, v3.4s, v19.4s\n",
            "fmla v12.4s, v4.4s, v20.4s\n", "fmla v13.4s, v5.4s, v21.4s\n",
            "fmla v14.4s, v6.4s, v22.4s\n", "fmla v15.4s, v7.4s, v23.4s\n",
            group_text!(@zp block $zp),
            ld1_zero!(["0" "1" "2" "3"] ["4" "5" "6" "7"]),
        )
    };
    // y += c·sq: the panel's 8 corrections (f32, at `{zoff}` from `{rec}`: `{cc}` is free in the epilogue), the
    // group's 4 Σq of the block (int32) as f32, times the row scales (v27) in the per-block numerics (sq = sa·Σq, as PairScales).
    (@zp $act:ident zp) => {
        concat!(
            "add {cc}, {rec}, {zoff}\n", "ldp q28, q29, [{cc}]\n",
            "ldr q30, [{rq}], #16\n",
            "scvtf v30.4s, v30.4s\n",
            group_text!(@sq $act),
            "fmla v8.4s, v28.4s, v30.s[0]\n", "fmla v9.4s, v29.4s, v30.s[0]\n",
            "fmla v10.4s, v28.4s, v30.s[1]\n", "fmla v11.4s, v29.4s, v30.s[1]\n",
            "fmla v12.4s, v28.4s, v30.s[2]\n", "fmla v13.4s, v29.4s, v30.s[2]\n",
            "fmla v14.4s, v28.4s, v30.s[3]\n", "fmla v15.4s, v29.4s, v30.s[3]\n",
        )
    };
    (@zp $act:ident nozp) => { "// {zoff} {rq}\n" };
    (@sq block) => { "fmul v30.4s, v27.4s, v30.4s\n" };
    (@sq row) => { "" };
}

/// Row group `g` × the 8 columns of each of `np` panels from `panel`, over all K, in one of `group_text!`'s modes
/// chosen per call; each panel's sums plus the 8 f32 of bias leave into `dest` by rows, the next panel's 8 f32
/// further in each row and `bstep` bytes further in the bias.
///
/// # Safety
/// The CPU has neon and dotprod; `a` satisfies the `RunArgs` contract for a `qsi8dbp4x16` LHS and a 4-bit
/// `qsnbp8x4` RHS (f16 scales) with blocks of whole 32-K chunks; group `g` and panels `panel..panel + np` are the
/// tile's; `weights` the panel's laid-out Abel weights in the row numerics (then `np` = 1) or empty; `dest` holds
/// 4 rows × 8·np f32 `dest.stride` bytes apart, `dest.bias` 8 f32 plus `bstep` bytes per further panel.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "neon,dotprod")]
unsafe fn tile_4x8(a: &RunArgs, panel: usize, np: usize, g: usize, weights: &[f32], dest: Dest, bstep: usize) {
    debug_assert!(a.bits == 4 && a.bl.is_multiple_of(32) && a.blocks > 0);
    debug_assert!(weights.is_empty() || weights.len() == 8 * a.blocks);
    debug_assert!((g + 1) * MR <= a.rows.next_multiple_of(MR) && np > 0 && panel + np <= a.cols.div_ceil(NR));
    debug_assert!(np == 1 || weights.is_empty());
    let chunks = a.bl / 32;
    let one = chunks == 1;
    // Bytes of a record's codes the post-indexed loads of a block walk (one chunk: but the last load, which steps
    // to the next record), and how far past the record's start `{rec}` is in the epilogue.
    let walked = if one { 64 } else { 128 * chunks };
    let ahead = if one { a.rhs_record } else { 128 * chunks } as isize;
    let at = g * MR * a.blocks;
    macro_rules! tile_asm {
        ($act:ident $zp:ident $chunks:ident) => {
            // SAFETY: reads: per block, the record's codes (128 bytes per chunk), its 8 scales (and 8 corrections
            // with zero points), the group's 128 bytes per chunk (2 runs of 16 K × 4 rows), its 4 row scales (not
            // in the row numerics) and with zero points its 4 Σq, and in the row numerics the panel's 8 laid-out
            // weights (`weights`), for a.blocks blocks: all inside the tile's buffers (the caller's guarantee); the
            // pointers step past the last block without reading there; 8 f32 of bias; the 64 bytes of
            // `sve_asm::ZEROS` (a static). Writes: 4 rows × 8 columns from `dst`, `dstride` bytes apart (the
            // caller's guarantee). Every vector register the block touches is declared; d8–d15 (callee-saved) are
            // clobbered and saved by the compiler; the flags are clobbered (no preserves_flags); no stack use.
            unsafe {
                vector_asm!(
                    [] group_text!($act $zp $chunks),
                    recb = inout(reg) a.rhs.wrapping_add(panel * a.rhs_panel_stride) => _,
                    rec = out(reg) _,
                    pstride = in(reg) a.rhs_panel_stride,
                    rstep = in(reg) a.rhs_record - walked,
                    chunks = in(reg) chunks,
                    blocks = in(reg) a.blocks,
                    nb = out(reg) _,
                    a0b = in(reg) a.lhs.wrapping_add(g * MR * a.lhs_stride),
                    a0 = out(reg) _,
                    soff = in(reg) a.rhs_scales as isize - ahead,
                    zoff = in(reg) a.rhs_zp as isize - ahead,
                    rsb = in(reg) a.lhs_scale.wrapping_add(at),
                    rs = out(reg) _,
                    rqb = in(reg) a.lhs_sum.wrapping_add(at),
                    rq = out(reg) _,
                    ws = inout(reg) weights.as_ptr() => _,
                    dstb = inout(reg) dest.ptr => _,
                    dst = out(reg) _,
                    dstride = in(reg) dest.stride,
                    bias = inout(reg) dest.bias => _,
                    bstep = in(reg) bstep,
                    np = inout(reg) np => _,
                    cc = out(reg) _,
                    zeros = in(reg) ZEROS.0.as_ptr(),
                )
            }
        };
    }
    // The row numerics sum by parts where the weights are laid out (for the pair tiles), else restart per block.
    if a.row == 0 || weights.is_empty() {
        asm_modes!(tile_asm; row; a.row != 0, a.has_zp != 0, one)
    } else {
        asm_modes!(tile_asm; rowsum; a.row != 0, a.has_zp != 0, one)
    }
}
