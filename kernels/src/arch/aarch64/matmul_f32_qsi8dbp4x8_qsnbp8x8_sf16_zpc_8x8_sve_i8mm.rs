//! int8-activation GEMM for prefill, SVE i8mm at 256 bits: 8 rows (two `qsi8dbp4x8` row groups: four SMMLA row
//! pairs) × 8 columns per register tile. One SVE SMMLA works on two 128-bit segments at once: the row pair's
//! 2 × 8 activations replicated into both (`ld1rqb`) against two column pairs of the `qsnbp8x8` record (a
//! 32-byte load), so each instruction does the work of two NEON SMMLA. The whole block loop of a tile is one
//! `asm!` block (stable Rust has no SVE intrinsics or register types; SVE state cannot live across Rust code):
//! 8 int32 accumulators (z0–z7, [row pair][column half]), 8 f32 sums (z8–z15), codes z16/z17, one field at a
//! time z18/z19, activations z20–z23, the field mask z24, the block epilogue's vectors z25–z31.
//!
//! The kernel uses the first 256 bits of the vector (predicates `vl32` / `vl8`), so it runs at any SVE vector
//! length of at least 256 bits (`min_sve_vl` = 32; Graviton3's Neoverse V1 has exactly 256) and is selected only
//! there: at 128 bits NEON i8mm is as wide. The vector length is read again on every call (it is per thread and
//! can change): shorter than 256 bits, every group runs the NEON body.
//!
//! Instruction budget per 32 K (one block of 32) × 8 columns × 8 rows, 4-bit codes, symmetric, per-block
//! numerics (per SVE SMMLA: / 32): 32 SMMLA; 4 code loads + 16 activation loads (0.63); 8 field extractions
//! (0.25); per block 2 NEON LD1 of zeros (zeroing 4 accumulators each, their bits above 128 included; 8 DUP
//! before), 8 SCVTF, 8 FMUL (row × column scales), 8 FMLA, 2 + 4 scale loads (0.88; the
//! row numerics keep running sums over all blocks (the Abel weights of `ops::for_each_block_weight`, as the NEON
//! i8mm tiles): no DUP, no FMUL, 2 loads: 0.56; zero points add 4 loads and 8 FMLA); loop ~9 (0.28; ~5 for blocks
//! of one chunk, which run without the chunk loop: 0.16). Total ~3.1 per SVE SMMLA = ~1.55 per
//! NEON-SMMLA-equivalent (the NEON 4×8 tile measures 3.37). The column scales
//! (× 2^−4, the field's factor, exact), their zero-point corrections and the rows' activation scales and
//! sa·Σq are laid out in the lane order of the 2 × 2 tiles (`ColumnScales` per panel, the LHS packing's
//! `PackedLhs::pairs` once per call), so the
//! asm epilogue is loads and vector arithmetic only.
//!
//! LHS: `qsi8dbp4x8`; RHS: `qsnbp8x8_sf16_zpc`. The asm runs 4-bit codes in blocks of whole 32-K chunks over
//! pairs of row groups, a last single row group the NEON i8mm kernel's one-group asm tile (`tile_4x8`: 4 rows ×
//! 8 columns, M = 4 … 7 included); everything else (2- and 8-bit codes, blocks of 16) runs the NEON i8mm body of
//! the same layout (`super::qsnbp8x8_int8::gemm_pairs`). Features: neon, i8mm, sve (SVE i8mm). No over-reads (a pair's second group is always a group of the tile).

use super::ops::Dest;
use super::ops::sve_vl_bytes;
use super::qsnbp8x8_int8::MR;
use super::qsnbp8x8_tiles::{ColumnScales, row_pairs, run_tiles};
use super::sve_asm::{sve_asm, zero_acc, zero_all};
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon, i8mm, sve and SVE i8mm with a vector length of at least 32 bytes; `args` satisfies the
/// `RunArgs` contract with a `qsi8dbp4x8` LHS (the tile starts at a row group) and a `qsnbp8x8` RHS (f16 scales)
/// of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,i8mm,sve")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    // The asm needs 256-bit vectors: this thread's may have been shortened since selection (see `sve_vl_bytes`).
    let asm = a.bits == 4 && a.bl.is_multiple_of(32) && sve_vl_bytes() >= 32;
    // SAFETY: the CPU has SVE i8mm at ≥ 256 bits when `asm` is set (checked just now); the rest is the caller's.
    unsafe {
        run_tiles(a, asm, true, super::matmul_f32_qsi8dbp4x8_qsnbp8x8_sf16_zpc_12x4_neon_i8mm::tile_4x8, tile_8x8, None)
    }
}

/// Row pair p's sums (column halves `$j0`, `$j1`: z registers) as its two rows of 8 f32 plus the bias (v30, v31),
/// `{dstride}` bytes apart from `{dst}` (the first 256 bits of each half: segment 0 column pair 2j, segment 1
/// column pair 2j + 1).
macro_rules! store_rows {
    ($j0:literal, $j1:literal) => {
        concat!(
            "uzp1 z26.d, z",
            $j0,
            ".d, z",
            $j0,
            ".d\n",
            "uzp1 z27.d, z",
            $j1,
            ".d, z",
            $j1,
            ".d\n",
            "uzp2 z28.d, z",
            $j0,
            ".d, z",
            $j0,
            ".d\n",
            "uzp2 z29.d, z",
            $j1,
            ".d, z",
            $j1,
            ".d\n",
            "fadd v26.4s, v26.4s, v30.4s\n",
            "fadd v27.4s, v27.4s, v31.4s\n",
            "fadd v28.4s, v28.4s, v30.4s\n",
            "fadd v29.4s, v29.4s, v31.4s\n",
            "st1 {{v26.4s, v27.4s}}, [{dst}], {dstride}\n",
            "st1 {{v28.4s, v29.4s}}, [{dst}], {dstride}\n",
        )
    };
}

/// One run of 8 K for the whole tile: 4 row pairs (z20–z23) × 2 column halves (the field z18/z19) into z0–z7.
macro_rules! smmla_8x8 {
    () => {
        concat!(
            "smmla z0.s, z20.b, z18.b\n",
            "smmla z1.s, z20.b, z19.b\n",
            "smmla z2.s, z21.b, z18.b\n",
            "smmla z3.s, z21.b, z19.b\n",
            "smmla z4.s, z22.b, z18.b\n",
            "smmla z5.s, z22.b, z19.b\n",
            "smmla z6.s, z23.b, z18.b\n",
            "smmla z7.s, z23.b, z19.b\n",
        )
    };
}

/// Row groups `g`, `g + 1` × the 8 columns of `panel`, over all K, into `dest` by rows (the accumulators' lanes
/// per 128-bit segment: r0 c0, r0 c1, r1 c0, r1 c1; segment 0 columns 4j, 4j + 1, segment 1 the next two).
///
/// # Safety
/// The CPU has SVE and SVE i8mm with a vector length of at least 32 bytes; `a` satisfies the `RunArgs` contract
/// for a `qsi8dbp4x8` LHS and a 4-bit `qsnbp8x8` RHS with blocks of whole 32-K chunks; groups `g`, `g + 1` and
/// `panel` are the tile's (and so are their row pairs, `a.lhs_pairs`); `cols` is filled for `panel`.
#[target_feature(enable = "neon,i8mm,sve")]
unsafe fn tile_8x8(a: &RunArgs, panel: usize, g: usize, cols: &ColumnScales, dest: Dest) {
    debug_assert!(a.bits == 4 && a.bl.is_multiple_of(32) && a.blocks > 0);
    debug_assert!(cols.holds(a.blocks) && !a.lhs_pairs.is_null());
    let rec = a.rhs.wrapping_add(panel * a.rhs_panel_stride);
    let act0 = a.lhs.wrapping_add(g * MR * a.lhs_stride);
    let act1 = a.lhs.wrapping_add((g + 1) * MR * a.lhs_stride);
    // `$head` / `$tail`: the chunk loop's head and tail, or (blocks of one chunk: 4 instructions fewer per block)
    // straight-line code.
    macro_rules! tile_asm {
        ($head:tt, $tail:tt) => {
            sve_asm!(
                ".arch_extension sve",
                ".arch_extension i8mm",
                "ptrue p0.b, vl32",
                "ptrue p1.s, vl8",
                "dup z24.b, #-16",
                zero_all!(),
                // Block loop.
                "2:",
                "mov {xc}, {rec}",
                "add {rec}, {rec}, {rstride}",
                // Chunk loop: 32 K, two 64-byte groups of 8 columns × 8 K × 2 fields; field l of group g is run
                // 2l + g of the chunk (32 bytes apart in each row group).
                $head,
                "ld1w {{z16.s}}, p1/z, [{xc}]",
                "ld1w {{z17.s}}, p1/z, [{xc}, {e8}, lsl #2]",
                "lsl z18.b, z16.b, #4",
                "lsl z19.b, z17.b, #4",
                "ld1rqb {{z20.b}}, p0/z, [{a0}]",
                "ld1rqb {{z21.b}}, p0/z, [{a0}, #16]",
                "ld1rqb {{z22.b}}, p0/z, [{a1}]",
                "ld1rqb {{z23.b}}, p0/z, [{a1}, #16]",
                smmla_8x8!(),
                "and z18.d, z16.d, z24.d",
                "and z19.d, z17.d, z24.d",
                "ld1rqb {{z20.b}}, p0/z, [{a0}, #64]",
                "ld1rqb {{z21.b}}, p0/z, [{a0}, #80]",
                "ld1rqb {{z22.b}}, p0/z, [{a1}, #64]",
                "ld1rqb {{z23.b}}, p0/z, [{a1}, #80]",
                smmla_8x8!(),
                "ld1w {{z16.s}}, p1/z, [{xc}, {e16}, lsl #2]",
                "ld1w {{z17.s}}, p1/z, [{xc}, {e24}, lsl #2]",
                "lsl z18.b, z16.b, #4",
                "lsl z19.b, z17.b, #4",
                "ld1rqb {{z20.b}}, p0/z, [{a0}, #32]",
                "ld1rqb {{z21.b}}, p0/z, [{a0}, #48]",
                "ld1rqb {{z22.b}}, p0/z, [{a1}, #32]",
                "ld1rqb {{z23.b}}, p0/z, [{a1}, #48]",
                smmla_8x8!(),
                "and z18.d, z16.d, z24.d",
                "and z19.d, z17.d, z24.d",
                "ld1rqb {{z20.b}}, p0/z, [{a0}, #96]",
                "ld1rqb {{z21.b}}, p0/z, [{a0}, #112]",
                "ld1rqb {{z22.b}}, p0/z, [{a1}, #96]",
                "ld1rqb {{z23.b}}, p0/z, [{a1}, #112]",
                smmla_8x8!(),
                "add {a0}, {a0}, #128",
                "add {a1}, {a1}, #128",
                $tail,
                // Block epilogue: y += f32(acc)·(s·sa) [+ c·sq] (the row numerics: y += f32(S)·w [+ c·sq]).
                "ld1w {{z25.s}}, p1/z, [{col}]",
                "ld1w {{z26.s}}, p1/z, [{col}, {e8}, lsl #2]",
                "cbnz {row}, 4f",
                "scvtf z0.s, p1/m, z0.s", "scvtf z1.s, p1/m, z1.s",
                "scvtf z2.s, p1/m, z2.s", "scvtf z3.s, p1/m, z3.s",
                "scvtf z4.s, p1/m, z4.s", "scvtf z5.s, p1/m, z5.s",
                "scvtf z6.s, p1/m, z6.s", "scvtf z7.s, p1/m, z7.s",
                "ld1rqw {{z27.s}}, p1/z, [{rowp}]",
                "fmul z28.s, z25.s, z27.s", "fmul z29.s, z26.s, z27.s",
                "fmla z8.s, p1/m, z0.s, z28.s", "fmla z9.s, p1/m, z1.s, z29.s",
                "ld1rqw {{z27.s}}, p1/z, [{rowp}, #16]",
                "fmul z28.s, z25.s, z27.s", "fmul z29.s, z26.s, z27.s",
                "fmla z10.s, p1/m, z2.s, z28.s", "fmla z11.s, p1/m, z3.s, z29.s",
                "ld1rqw {{z27.s}}, p1/z, [{rowp}, #64]",
                "fmul z28.s, z25.s, z27.s", "fmul z29.s, z26.s, z27.s",
                "fmla z12.s, p1/m, z4.s, z28.s", "fmla z13.s, p1/m, z5.s, z29.s",
                "ld1rqw {{z27.s}}, p1/z, [{rowp}, #80]",
                "fmul z28.s, z25.s, z27.s", "fmul z29.s, z26.s, z27.s",
                "fmla z14.s, p1/m, z6.s, z28.s", "fmla z15.s, p1/m, z7.s, z29.s",
                "b 5f",
                // The row numerics: y += f32(S)·w over the running sums, converted into z27–z30 (they go on).
                "4:",
                "scvtf z27.s, p1/m, z0.s", "scvtf z28.s, p1/m, z1.s",
                "scvtf z29.s, p1/m, z2.s", "scvtf z30.s, p1/m, z3.s",
                "fmla z8.s, p1/m, z27.s, z25.s", "fmla z9.s, p1/m, z28.s, z26.s",
                "fmla z10.s, p1/m, z29.s, z25.s", "fmla z11.s, p1/m, z30.s, z26.s",
                "scvtf z27.s, p1/m, z4.s", "scvtf z28.s, p1/m, z5.s",
                "scvtf z29.s, p1/m, z6.s", "scvtf z30.s, p1/m, z7.s",
                "fmla z12.s, p1/m, z27.s, z25.s", "fmla z13.s, p1/m, z28.s, z26.s",
                "fmla z14.s, p1/m, z29.s, z25.s", "fmla z15.s, p1/m, z30.s, z26.s",
                "5:",
                "cbz {zp}, 6f",
                "ld1w {{z30.s}}, p1/z, [{col}, {e16}, lsl #2]",
                "ld1w {{z31.s}}, p1/z, [{col}, {e24}, lsl #2]",
                "ld1rqw {{z27.s}}, p1/z, [{rowp}, #32]",
                "fmla z8.s, p1/m, z30.s, z27.s", "fmla z9.s, p1/m, z31.s, z27.s",
                "ld1rqw {{z27.s}}, p1/z, [{rowp}, #48]",
                "fmla z10.s, p1/m, z30.s, z27.s", "fmla z11.s, p1/m, z31.s, z27.s",
                "ld1rqw {{z27.s}}, p1/z, [{rowp}, #96]",
                "fmla z12.s, p1/m, z30.s, z27.s", "fmla z13.s, p1/m, z31.s, z27.s",
                "ld1rqw {{z27.s}}, p1/z, [{rowp}, #112]",
                "fmla z14.s, p1/m, z30.s, z27.s", "fmla z15.s, p1/m, z31.s, z27.s",
                "6:",
                // The row numerics keep running sums (the Abel weights of `ColumnScales`).
                "cbnz {row}, 7f",
                zero_acc!(),
                "7:",
                "add {col}, {col}, #128",
                "add {rowp}, {rowp}, {rbytes}",
                "subs {nb}, {nb}, #1",
                "b.ne 2b",
                // The sums by rows: row 2p + h's 8 columns (its 64-bit halves of the four 2 × 2 tiles of row pair p:
                // UZP1 / UZP2 of each column half's 64-bit elements) plus the bias, into `dest` by rows.
                "ldp q30, q31, [{bias}]",
                store_rows!(8, 9),
                store_rows!(10, 11),
                store_rows!(12, 13),
                store_rows!(14, 15),
                rec = inout(reg) rec => _,
                rstride = in(reg) a.rhs_record,
                chunks = in(reg) a.bl / 32,
                nb = inout(reg) a.blocks => _,
                a0 = inout(reg) act0 => _,
                a1 = inout(reg) act1 => _,
                col = inout(reg) cols.as_ptr() => _,
                rowp = inout(reg) row_pairs(a, g) => _,
                rbytes = in(reg) a.lhs_pairs_stride,
                dst = inout(reg) dest.ptr => _,
                dstride = in(reg) dest.stride,
                bias = in(reg) dest.bias,
                row = in(reg) a.row,
                zp = in(reg) a.has_zp,
                e8 = in(reg) 8usize,
                e16 = in(reg) 16usize,
                e24 = in(reg) 24usize,
                xc = out(reg) _,
                cc = out(reg) _,
                zeros = in(reg) super::sve_asm::ZEROS.0.as_ptr(),
            )
        };
    }
    // SAFETY: reads: per block, the record's codes (chunks × 128 bytes from the record's start), each group's
    // 128 bytes per chunk (4 runs of 8 K × 4 rows), 128 bytes of the column scales and the two groups' 128 bytes of
    // row pairs, for a.blocks blocks: all inside
    // the tile's buffers (the caller's guarantee); 8 f32 of `dest.bias`. Writes: 8 rows × 8 columns of `dest` (the
    // caller's guarantee). Every vector, predicate and
    // scratch register the block touches is declared; d8–d15 (callee-saved) are clobbered and saved by the
    // compiler; the flags are clobbered (no preserves_flags).
    // The accumulators restart from the 64 bytes of `sve_asm::ZEROS` (a static).
    unsafe {
        if a.bl == 32 {
            tile_asm!("// {cc} {chunks}", "")
        } else {
            tile_asm!("mov {cc}, {chunks}\n3:", "add {xc}, {xc}, #128\nsubs {cc}, {cc}, #1\nb.ne 3b")
        }
    }
}

// PR_SVE_SET_VL is Linux's (Android's too).
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use crate::arch::aarch64::{
        INT8_GEMM_I8MM, INT8_GEMM_SVE_I8MM, INT8_GEMV_DOTPROD_P8X8, INT8_GEMV_SVE_P8X8, QSNBP8X8_SF16_ZPC,
    };
    use crate::format::{Params, Weights, ZeroPoints};
    use crate::pack::LhsSource;
    use crate::{ComputePath, Cpu, Problem, Selected, UKernel, matmul_serial};

    /// A thread whose SVE vector has been shortened to 128 bits after selection (prctl PR_SVE_SET_VL) gets the
    /// NEON i8mm bodies from both SVE kernels, bit for bit what the NEON family's kernels compute, not the asm
    /// written for 256 bits.
    #[test]
    fn sve_kernels_run_the_neon_bodies_when_the_threads_vector_shrinks() {
        if !INT8_GEMM_SVE_I8MM.runs_on(Cpu::get()) || !INT8_GEMV_SVE_P8X8.runs_on(Cpu::get()) {
            return;
        }
        let (k, n, bl) = (256usize, 72usize, 32usize);
        let mut x = 0x9E37_79B9u32;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let b: Vec<u8> = (0..n * k / 2).map(|_| next() as u8).collect();
        let scales: Vec<f32> = (0..n * k / bl).map(|_| 0.01 + (next() % 100) as f32 * 1e-3).collect();
        let zp: Vec<u8> = (0..n * (k / bl).div_ceil(2)).map(|_| next() as u8).collect();
        let params = Params::new(k as i64, n as i64, 4, bl as i64).unwrap();
        let w = Weights::new(params, &b, &scales, ZeroPoints::Packed(&zp), None).unwrap();
        let p = Problem::of(ComputePath::Int8, &w);
        let a: Vec<f32> = (0..16 * k).map(|_| (next() % 2001) as f32 / 1000.0 - 1.0).collect();
        let run = |uk: &'static UKernel, m: usize| {
            let sel = Selected::single(uk, QSNBP8X8_SF16_ZPC, &p).unwrap();
            let rhs = sel.pack_rhs(&w).unwrap();
            let mut y = vec![0f32; m * n];
            matmul_serial(&sel, &rhs, LhsSource::F32(&a[..m * k]), m, None, &mut y);
            y.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
        };
        for (sve, neon, m) in
            [(&INT8_GEMM_SVE_I8MM, &INT8_GEMM_I8MM, 16), (&INT8_GEMV_SVE_P8X8, &INT8_GEMV_DOTPROD_P8X8, 1)]
        {
            let want = run(neon, m);
            let got = std::thread::scope(|s| {
                s.spawn(|| {
                    // SAFETY: PR_SVE_SET_VL (50) takes the new length in bytes and changes only this thread's
                    // vector length (Linux, qemu-user alike); nothing of this thread holds SVE state across it.
                    let r = unsafe { libc::prctl(50, 16 as libc::c_ulong) };
                    assert!(r >= 0, "prctl(PR_SVE_SET_VL, 16) failed");
                    // SAFETY: the CPU has SVE (the SVE kernels run here: checked above).
                    assert_eq!(unsafe { super::sve_vl_bytes() }, 16);
                    run(sve, m)
                })
                .join()
                .unwrap()
            });
            assert!(got == want, "{}: at 128 bits it must run the NEON body", sve.name());
        }
    }
}
