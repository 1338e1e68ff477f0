//! aarch64 kernels: NEON intrinsics, and one-instruction `asm!` blocks for what Rust 1.95 has no stable
//! intrinsic for (SDOT, SMMLA, FCVTL from f16), inside `#[target_feature]` entry points; SVE kernels as whole
//! `asm!` loops (no stable SVE intrinsics). Ladder: SVE i8mm and SVE fp32 (vectors of ≥ 256 bits) → i8mm → dotprod → neon →
//! portable (features from getauxval, `crate::arch::detect`).
//!
//! Layouts (signed codes, zero points folded into a per-block correction, 8-column panels):
//! - `qsnbp8x4`: each column's 4 consecutive K in one 32-bit lane: the operand of SDOT by element (dotprod)
//!   and of SMULL against a duplicated element (neon);
//! - `qsnbp8x8`: each column's 8 consecutive K in one 64-bit half: the 2×8 operand of SMMLA (i8mm), read by
//!   the same family's GEMV with vector SDOT against 8 activations duplicated in both halves.

pub(crate) mod finish_row_tile_sme;
mod matmul_f32_f32_qsnbp8x4_sf32_zpc_1vlx4vl_sme_mopa;
mod matmul_f32_f32_qsnbp8x4_sf32_zpc_1x8_neon;
mod matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon;
mod matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_sve;
mod matmul_f32_qsi8db_qsnbp64x4_sf16_zpc_1x64_sme_dot;
mod matmul_f32_qsi8db_qsnbp8x4_sf16_zpc_1x8_neon;
mod matmul_f32_qsi8db_qsnbp8x4_sf16_zpc_1x8_neon_dotprod;
mod matmul_f32_qsi8db_qsnbp8x4_sf16_zpc_4x8_neon;
mod matmul_f32_qsi8db_qsnbp8x8_sf16_zpc_1x32_sve;
mod matmul_f32_qsi8db_qsnbp8x8_sf16_zpc_1x8_neon_dotprod;
mod matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa;
/// What the SME2 int8 family's asm takes (bit width, block size): the registry ranks the family for that only.
pub(crate) use matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::asm_takes as sme2_int8_asm_takes;
mod matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_4x64_sme_dot;
mod matmul_f32_qsi8dbp4x16_qsnbp8x4_sf16_zpc_8x4_neon_dotprod;
mod matmul_f32_qsi8dbp4x8_qsnbp8x8_sf16_zpc_12x4_neon_i8mm;
mod matmul_f32_qsi8dbp4x8_qsnbp8x8_sf16_zpc_12x8_sve_i8mm;
mod ops;
mod qsnbp8x4_fp32;
mod qsnbp8x4_int8;
mod qsnbp8x8_int8;
mod qsnbp8x8_tiles;
pub(crate) mod quantize_block_neon;
mod sve_asm;

use crate::cpu::{Cpu, Feature, Features, Isa};
use crate::pack::{Codes, LhsFormat, RhsLayout, ScaleType, ZpStorage};
use crate::problem::ComputePath;
use crate::ukernel::{Geometry, RhsReads, UKernel};

/// Signed n-bit codes, 8 columns × 4 K per group, f16 scales (int8 path: scales must fit f16), zero points
/// folded into c = s·(m − z).
pub const QSNBP8X4_SF16_ZPC: RhsLayout = RhsLayout {
    nr: qsnbp8x4_int8::NR,
    kr: qsnbp8x4_int8::KR,
    codes: Codes::Signed,
    scales: ScaleType::F16,
    zero_points: ZpStorage::Correction,
    block_sums: false,
};

/// [`QSNBP8X4_SF16_ZPC`] with f32 scales: the fp32 path's layout (scales exact).
pub const QSNBP8X4_SF32_ZPC: RhsLayout = RhsLayout { scales: ScaleType::F32, ..QSNBP8X4_SF16_ZPC };

/// [`QSNBP8X4_SF16_ZPC`] with 8 K per column group: the SMMLA operand (two columns × 8 K per 16 bytes).
pub const QSNBP8X8_SF16_ZPC: RhsLayout = RhsLayout { kr: qsnbp8x8_int8::KR, ..QSNBP8X4_SF16_ZPC };

/// [`QSNBP8X4_SF16_ZPC`] with 64-column panels: the SME2 family's SMOPA operand (any run of SVL/4 columns × 4 K
/// of a group is one vector; the same layout at every streaming vector length).
pub const QSNBP64X4_SF16_ZPC: RhsLayout = RhsLayout {
    nr: matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::NR,
    kr: matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::KR,
    ..QSNBP8X4_SF16_ZPC
};

const NEON: Features = Features::of(&[Feature::Neon]);
const DOTPROD: Features = Features::of(&[Feature::Neon, Feature::Dotprod]);
const I8MM: Features = Features::of(&[Feature::Neon, Feature::I8mm]);
const SVE: Features = Features::of(&[Feature::Neon, Feature::Sve]);
const SVE_DOTPROD: Features = Features::of(&[Feature::Neon, Feature::Dotprod, Feature::Sve]);
const SME2: Features = Features::of(&[Feature::Sme, Feature::Sme2]);
const NEON_SME2: Features = Features::of(&[Feature::Neon, Feature::Sme, Feature::Sme2]);
const SVE_I8MM: Features = Features::of(&[Feature::Neon, Feature::I8mm, Feature::Sve, Feature::SveI8mm]);

fn supports_all(bits: u32, bl: usize) -> bool {
    matches!(bits, 2 | 4 | 8) && bl >= 16 && bl.is_power_of_two() && bl <= crate::format::MAX_BLOCK_SIZE
}

/// What the `qsnbp8x8` kernels take: fields of whole 8-K runs (not 2-bit codes in 16-blocks).
fn supports_p8x8(bits: u32, bl: usize) -> bool {
    supports_all(bits, bl) && QSNBP8X8_SF16_ZPC.holds_blocks(bits, bl)
}

/// int8 GEMV, dotprod: up to 3 rows × 8 columns per pass over a panel (SDOT by element).
pub static INT8_GEMV_DOTPROD: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qsnbp8x4_sf16_zpc_1x8_neon_dotprod",
    isa: Isa::Dotprod,
    requires: DOTPROD,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Int8,
    lhs: LhsFormat::Qsi8Db,
    rhs: RhsReads::Only(|_: &Cpu| QSNBP8X4_SF16_ZPC),
    supports: supports_all,
    geometry: |_, _| Geometry::new(1, qsnbp8x4_int8::NR, 3),
    run: matmul_f32_qsi8db_qsnbp8x4_sf16_zpc_1x8_neon_dotprod::run,
};

/// int8 GEMM, dotprod: 8 rows (two `qsi8dbp4x16` groups) × 4 columns per register tile, the block loop one asm
/// block (a last single group: 4 × 8 intrinsics).
pub static INT8_GEMM_DOTPROD: UKernel = UKernel {
    name: "matmul_f32_qsi8dbp4x16_qsnbp8x4_sf16_zpc_8x4_neon_dotprod",
    lhs: LhsFormat::Qsi8DbP { mr: qsnbp8x4_int8::MR, kr: qsnbp8x4_int8::LHS_KR },
    geometry: |_, _| Geometry::new(qsnbp8x4_int8::MR, qsnbp8x4_int8::NR, usize::MAX),
    run: matmul_f32_qsi8dbp4x16_qsnbp8x4_sf16_zpc_8x4_neon_dotprod::run,
    ..INT8_GEMV_DOTPROD
};

/// int8 GEMV, base NEON (SMULL / SMLAL into int16): up to 2 rows × 8 columns per pass over a panel.
pub static INT8_GEMV_NEON: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qsnbp8x4_sf16_zpc_1x8_neon",
    isa: Isa::Neon,
    requires: NEON,
    min_sve_vl: 0,
    sme_svl: 0,
    geometry: |_, _| Geometry::new(1, qsnbp8x4_int8::NR, 3),
    run: matmul_f32_qsi8db_qsnbp8x4_sf16_zpc_1x8_neon::run,
    ..INT8_GEMV_DOTPROD
};

/// int8 GEMM, base NEON: 4 rows × 8 columns per register tile (2 rows for 2- and 8-bit codes).
pub static INT8_GEMM_NEON: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qsnbp8x4_sf16_zpc_4x8_neon",
    geometry: |_, _| Geometry::new(4, qsnbp8x4_int8::NR, usize::MAX),
    run: matmul_f32_qsi8db_qsnbp8x4_sf16_zpc_4x8_neon::run,
    ..INT8_GEMV_NEON
};

/// int8 GEMV of the i8mm family, dotprod: up to 2 rows × 8 columns per pass over a `qsnbp8x8` panel.
pub static INT8_GEMV_DOTPROD_P8X8: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qsnbp8x8_sf16_zpc_1x8_neon_dotprod",
    rhs: RhsReads::Only(|_: &Cpu| QSNBP8X8_SF16_ZPC),
    supports: supports_p8x8,
    geometry: |_, _| Geometry::new(1, qsnbp8x8_int8::NR, 1),
    run: matmul_f32_qsi8db_qsnbp8x8_sf16_zpc_1x8_neon_dotprod::run,
    ..INT8_GEMV_DOTPROD
};

/// int8 GEMM, i8mm (SMMLA): 12 (or 8) rows × 4 columns per register tile, or 4 rows × 8 columns for a single row
/// group, the block loop one asm block.
pub static INT8_GEMM_I8MM: UKernel = UKernel {
    name: "matmul_f32_qsi8dbp4x8_qsnbp8x8_sf16_zpc_12x4_neon_i8mm",
    isa: Isa::I8mm,
    requires: I8MM,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Int8,
    lhs: LhsFormat::Qsi8DbP { mr: qsnbp8x8_int8::MR, kr: qsnbp8x8_int8::KR },
    rhs: RhsReads::Only(|_: &Cpu| QSNBP8X8_SF16_ZPC),
    supports: supports_p8x8,
    // Tasks of up to 128 rows within 256 KiB of activations (L2 on every core with i8mm): fewer three-group
    // tiles cut short, and the row numerics' column weights laid out once per panel for more rows.
    geometry: |_, _| Geometry {
        task_lhs_bytes: 256 << 10,
        ..Geometry::new(qsnbp8x8_int8::MR, qsnbp8x8_int8::NR, usize::MAX)
    },
    run: matmul_f32_qsi8dbp4x8_qsnbp8x8_sf16_zpc_12x4_neon_i8mm::run,
};

/// int8 GEMV of the SVE i8mm family, SVE SDOT at 256 bits: one row × 32 columns per pass, the whole block loop
/// in one asm block (each SVE SDOT two NEON ones' work).
pub static INT8_GEMV_SVE_P8X8: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qsnbp8x8_sf16_zpc_1x32_sve",
    isa: Isa::Sve,
    requires: SVE_DOTPROD,
    min_sve_vl: 32,
    sme_svl: 0,
    run: matmul_f32_qsi8db_qsnbp8x8_sf16_zpc_1x32_sve::run,
    ..INT8_GEMV_DOTPROD_P8X8
};

/// int8 GEMM, SVE i8mm at 256 bits: 8 rows × 8 columns per register tile (each SVE SMMLA two NEON ones' work),
/// the whole block loop in one asm block; on `qsnbp8x8` weights, so it pairs with the i8mm family's GEMV.
pub static INT8_GEMM_SVE_I8MM: UKernel = UKernel {
    name: "matmul_f32_qsi8dbp4x8_qsnbp8x8_sf16_zpc_12x8_sve_i8mm",
    isa: Isa::Sve,
    requires: SVE_I8MM,
    min_sve_vl: 32,
    sme_svl: 0,
    run: matmul_f32_qsi8dbp4x8_qsnbp8x8_sf16_zpc_12x8_sve_i8mm::run,
    ..INT8_GEMM_I8MM
};

/// int8 GEMM, SME2 (SMOPA into ZA): 16 rows × 64 columns per register tile, each pass of the tile one streaming
/// asm block; the passes and their predicates follow the streaming vector length read on every call.
pub static INT8_GEMM_SME2: UKernel = UKernel {
    name: "matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa",
    isa: Isa::Sme,
    requires: SME2,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Int8,
    lhs: LhsFormat::Qsi8DbP {
        mr: matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::MR,
        kr: matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::KR,
    },
    rhs: RhsReads::Only(|_: &Cpu| QSNBP64X4_SF16_ZPC),
    supports: supports_all,
    geometry: |_, _| {
        Geometry::new(
            matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::MR,
            matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::NR,
            usize::MAX,
        )
    },
    run: matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::run,
};

/// int8 GEMV, SME2 (multi-vector SDOT into ZA, the f32 sums in ZA too): one row × one 64-column panel per
/// pass, the whole tile one streaming asm block; the stripes follow the streaming vector length read on every call.
pub static INT8_GEMV_SME2: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qsnbp64x4_sf16_zpc_1x64_sme_dot",
    lhs: LhsFormat::Qsi8Db,
    // Tasks of at least 4 panels: each call lays out the row's block factors and enters streaming mode once per
    // stripe. One row: from M = 2 the GEMM's few-row SDOT kernel (its last, partial row group) shares each code
    // vector's decode among up to 4 rows, where this kernel run row by row decodes it again per row (2048²,
    // qemu 11: M = 2 0.36 M instructions against 0.49 M at SVL 256; bench/results/aarch64-icount-sme2.md).
    geometry: |_, _| Geometry {
        min_task_cols: 256,
        ..Geometry::new(1, matmul_f32_qsi8dbp16x4_qsnbp64x4_sf16_zpc_16x64_sme_mopa::NR, 1)
    },
    run: matmul_f32_qsi8db_qsnbp64x4_sf16_zpc_1x64_sme_dot::run,
    ..INT8_GEMM_SME2
};

/// fp32-path GEMV, NEON: up to 3 rows × 4 columns per unit (codes widened to f32 in registers).
pub static FP32_GEMV_NEON: UKernel = UKernel {
    name: "matmul_f32_f32_qsnbp8x4_sf32_zpc_1x8_neon",
    isa: Isa::Neon,
    requires: NEON,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Fp32,
    lhs: LhsFormat::F32,
    rhs: RhsReads::Only(|_: &Cpu| QSNBP8X4_SF32_ZPC),
    supports: supports_all,
    geometry: |_, _| Geometry::new(1, qsnbp8x4_fp32::NR, 3),
    run: matmul_f32_f32_qsnbp8x4_sf32_zpc_1x8_neon::run,
};

/// fp32-path GEMM, NEON: each panel dequantized once per tile and walked by 8 × 8 register tiles (tiles of at
/// least 4 rows), else 4 rows × 4 columns per unit with the codes widened in registers.
pub static FP32_GEMM_NEON: UKernel = UKernel {
    name: "matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon",
    // Tasks of up to 128 rows: each dequantizes its panels once for all its rows.
    geometry: |_, _| Geometry { max_task_rows: 128, ..Geometry::new(4, qsnbp8x4_fp32::NR, usize::MAX) },
    run: matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_neon::run,
    ..FP32_GEMV_NEON
};

/// fp32-path GEMM, SVE at 256 bits: the NEON GEMM's dequantizing walk with pieces in rows of 8 columns and 8 × 8
/// asm register tiles, one SVE FMLA (indexed) per row and K for all 8 columns (two NEON FMLA by element's work).
pub static FP32_GEMM_SVE: UKernel = UKernel {
    name: "matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_sve",
    isa: Isa::Sve,
    requires: SVE,
    min_sve_vl: 32,
    sme_svl: 0,
    run: matmul_f32_f32_qsnbp8x4_sf32_zpc_8x8_sve::run,
    ..FP32_GEMM_NEON
};

/// fp32-path GEMM, SME2 at a 256- or 512-bit streaming vector: the dequantizing walk with pieces in K-rows of one
/// streaming vector (dequantized in streaming mode: no SVE needed outside it), s × 4s tiles (s = SVL/4: 8 × 32 at
/// 256 bits, 16 × 64 at 512) in the four ZA tiles by FMOPA over activations laid out K-major once per call. Other
/// lengths run the SVE or NEON kernel (the family is ranked only at 256 and 512 bits).
pub static FP32_GEMM_SME2: UKernel = UKernel {
    name: "matmul_f32_f32_qsnbp8x4_sf32_zpc_1vlx4vl_sme_mopa",
    isa: Isa::Sme,
    requires: NEON_SME2,
    min_sve_vl: 0,
    sme_svl: 0,
    // Whole passes (4 panels at SVL 256, 8 at 512); tasks of 128 rows (as the NEON GEMM) and at least 512 columns,
    // over which each task's K-major copy of its activations (about 2 instructions per value) is shared: 32 tasks of
    // 64 columns took 40% of a 32 × 2048 × 2048 Run in it.
    geometry: |cpu, _| Geometry {
        max_task_rows: 128,
        min_task_cols: 512,
        ..Geometry::new(4, if cpu.sme_svl() == Some(64) { 8 } else { 4 } * qsnbp8x4_fp32::NR, usize::MAX)
    },
    run: matmul_f32_f32_qsnbp8x4_sf32_zpc_1vlx4vl_sme_mopa::run,
    ..FP32_GEMM_SVE
};

/// The walk of an int8 kernel's tile on 8-column panels: each panel, then the rows in blocks of up to the first
/// listed count (the last block smaller), each block computed by `$body::<$op, rows, panels, bits>` (`$op` picks
/// the instruction where the body has several) with the row count and the bit width (2, 4, 8) dispatched to
/// constants. A one-row tile walks the panels in groups of the listed `panels` counts (the largest that
/// remains, then smaller ones, the last alone): its activation loads and per-block work are shared by 8·count
/// columns.
macro_rules! walk_panels {
    ($args:ident, $body:ident, $op:expr, nr = $nr:expr, rows = [$($r:literal),+], panels = [$($pp:literal),+]) => {{
        let a = $args;
        let mr = [$($r),+][0];
        let panels = a.cols.div_ceil($nr);
        let mut panel = 0;
        while panel < panels {
            let mut pp = 1;
            if a.rows == 1 {
                for c in [$($pp),+] {
                    if panel + c <= panels {
                        pp = c;
                        break;
                    }
                }
            }
            let mut r0 = 0;
            while r0 < a.rows {
                let rows = (a.rows - r0).min(mr);
                // SAFETY: rows r0..r0 + rows are inside the tile, so are their LHS rows, scales, sums and output
                // rows (RunArgs contract); panels panel..panel + pp are the tile's; the entry point has the
                // features `$op` needs.
                unsafe {
                    let lhs = a.lhs.cast::<i8>().add(r0 * a.lhs_stride);
                    let (sc, sm) = (a.lhs_scale.add(r0 * a.blocks), a.lhs_sum.add(r0 * a.blocks));
                    let dst = a.dst.add(r0 * a.dst_stride);
                    match (rows, pp) {
                        $(
                            (1, $pp) => $crate::arch::dispatch!($body::<$op, 1, $pp>(a, panel, lhs, sc, sm, dst); bits(a.bits)),
                        )+
                        $(
                            ($r, _) => $crate::arch::dispatch!($body::<$op, $r, 1>(a, panel, lhs, sc, sm, dst); bits(a.bits)),
                        )+
                        _ => unreachable!("row blocks are at most the first listed size"),
                    }
                }
                r0 += rows;
            }
            panel += pp;
        }
    }};
}
pub(crate) use walk_panels;

/// The walk of an fp32 kernel's tile: each panel, each of its column quads below `cols`, then the rows in
/// blocks of up to the first listed count, each computed by `$body::<rows, bits>`.
macro_rules! walk_quads {
    ($args:ident, $body:ident, nr = $nr:expr, rows = [$($r:literal),+]) => {{
        let a = $args;
        let mr = [$($r),+][0];
        for panel in 0..a.cols.div_ceil($nr) {
            for quad in 0..2 {
                if panel * $nr + 4 * quad >= a.cols {
                    break;
                }
                let mut r0 = 0;
                while r0 < a.rows {
                    let rows = (a.rows - r0).min(mr);
                    // SAFETY: rows r0..r0 + rows are inside the tile, so are their LHS and output rows (RunArgs
                    // contract); the quad starts below cols.
                    unsafe {
                        let lhs = a.lhs.cast::<f32>().add(r0 * a.lhs_stride);
                        let dst = a.dst.add(r0 * a.dst_stride);
                        match rows {
                            $(
                                $r => $crate::arch::dispatch!($body::<$r>(a, panel, quad, lhs, dst); bits(a.bits)),
                            )+
                            _ => unreachable!("row blocks are at most the first listed size"),
                        }
                    }
                    r0 += rows;
                }
            }
        }
    }};
}
pub(crate) use walk_quads;
