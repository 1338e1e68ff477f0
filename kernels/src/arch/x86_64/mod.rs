//! x86_64 kernels (std::arch intrinsics inside `#[target_feature]` functions; AMX, which stable Rust has no
//! intrinsics for, in inline asm). Ladder: amx → avx512vnni → avx2 → portable.

pub(crate) mod convert_f16_f16c;
mod matmul_f32_f32_qunbp64x4_sf32_zpc_12x32_avx512vnni;
mod matmul_f32_f32_qunbp64x4_sf32_zpc_1x32_avx2;
mod matmul_f32_f32_qunbp64x4_sf32_zpc_1x64_avx512vnni;
mod matmul_f32_f32_qunbp64x4_sf32_zpc_32x32_amx;
mod matmul_f32_f32_qunbp64x4_sf32_zpc_3x16_avx2;
mod matmul_f32_f32_qunbp64x4_sf32_zpc_6x16_avx2;
mod matmul_f32_f32_qunbp64x4_sf32_zpc_6x32_avx512vnni;
mod matmul_f32_qsi8db_qunbp64x4_sf16_zpc_1x64_avx512vnni;
mod matmul_f32_qsi8db_qunbp64x4_sf16_zpc_32x32_amx;
mod matmul_f32_qsi8db_qunbp64x4_sf16_zpc_6x32_avx512vnni;
mod matmul_f32_qsi8db_qunbp64x4_sf32_zpc_1x32_avx2_vnni;
mod matmul_f32_qsi8db_qunbp64x4_sf32_zpc_1x64_avx2;
mod matmul_f32_qsi8db_qunbp64x4_sf32_zpc_1x64_avx512vnni;
mod matmul_f32_qsi8db_qunbp64x4_sf32_zpc_32x32_amx;
mod matmul_f32_qsi8db_qunbp64x4_sf32_zpc_3x16_avx2;
mod matmul_f32_qsi8db_qunbp64x4_sf32_zpc_3x16_avx2_vnni;
mod matmul_f32_qsi8db_qunbp64x4_sf32_zpc_6x32_avx512vnni;
pub(crate) mod quantize_block_avx2;
pub(crate) mod quantize_block_avx512;
mod quantize_runs;
mod qunbp64x4_amx;
mod qunbp64x4_amx_bf16;
mod qunbp64x4_avx2;
mod qunbp64x4_fma;
mod qunbp64x4_panel;
mod qunbp64x4_panel_avx2;
mod qunbp64x4_panel_avx512;
mod qunbp64x4_vnni;
#[macro_use]
mod tiles;

use crate::cpu::{Cpu, Feature, Features, Isa};
use crate::pack::{Codes, LhsFormat, RhsLayout, ScaleType, ZpStorage};
use crate::problem::ComputePath;
use crate::ukernel::{Geometry, RhsReads, UKernel};

/// Unsigned n-bit codes, 64 columns × 4 K per group (one zmm of `vpdpbusd` u8 operands per 16 columns), f32
/// scales, zero points folded into c = −s·z.
pub const QUNBP64X4_SF32_ZPC: RhsLayout = RhsLayout {
    nr: qunbp64x4_vnni::NR,
    kr: qunbp64x4_vnni::KR,
    codes: Codes::Unsigned,
    scales: ScaleType::F32,
    zero_points: ZpStorage::Correction,
    block_sums: false,
};

/// [`QUNBP64X4_SF32_ZPC`] with f16 scales: 10% fewer bytes at 4 bits (int8 path; scales must fit f16).
pub const QUNBP64X4_SF16_ZPC: RhsLayout = RhsLayout { scales: ScaleType::F16, ..QUNBP64X4_SF32_ZPC };

const AVX512VNNI: Features = Features::of(&[Feature::Avx512f, Feature::Avx512bw, Feature::Avx512Vnni]);

fn supports_all(bits: u32, bl: usize) -> bool {
    matches!(bits, 2 | 4 | 8) && bl >= 16 && bl.is_power_of_two() && bl <= crate::format::MAX_BLOCK_SIZE
}

/// int8 GEMV, AVX-512 VNNI: one row × 64 columns per register tile (8 independent accumulator chains).
pub static INT8_GEMV_AVX512VNNI: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qunbp64x4_sf32_zpc_1x64_avx512vnni",
    isa: Isa::Avx512Vnni,
    requires: AVX512VNNI,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Int8,
    lhs: LhsFormat::Qsi8Db,
    rhs: RhsReads::Only(|_: &Cpu| QUNBP64X4_SF32_ZPC),
    supports: supports_all,
    geometry: |_, _| Geometry::new(1, qunbp64x4_vnni::NR, 1),
    run: matmul_f32_qsi8db_qunbp64x4_sf32_zpc_1x64_avx512vnni::run,
};

/// int8 GEMM, AVX-512 VNNI: 6 rows × 32 columns per register tile (codes unpacked once for 6 rows).
pub static INT8_GEMM_AVX512VNNI: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qunbp64x4_sf32_zpc_6x32_avx512vnni",
    isa: Isa::Avx512Vnni,
    requires: AVX512VNNI,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Int8,
    lhs: LhsFormat::Qsi8Db,
    rhs: RhsReads::Only(|_: &Cpu| QUNBP64X4_SF32_ZPC),
    supports: supports_all,
    geometry: |_, _| Geometry { max_task_rows: 48, ..Geometry::new(6, qunbp64x4_vnni::NR, usize::MAX) },
    run: matmul_f32_qsi8db_qunbp64x4_sf32_zpc_6x32_avx512vnni::run,
};

/// int8 GEMV, AVX-512 VNNI, f16 scales.
pub static INT8_GEMV_AVX512VNNI_F16: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qunbp64x4_sf16_zpc_1x64_avx512vnni",
    rhs: RhsReads::Only(|_: &Cpu| QUNBP64X4_SF16_ZPC),
    run: matmul_f32_qsi8db_qunbp64x4_sf16_zpc_1x64_avx512vnni::run,
    ..INT8_GEMV_AVX512VNNI
};

/// int8 GEMM, AVX-512 VNNI, f16 scales.
pub static INT8_GEMM_AVX512VNNI_F16: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qunbp64x4_sf16_zpc_6x32_avx512vnni",
    rhs: RhsReads::Only(|_: &Cpu| QUNBP64X4_SF16_ZPC),
    run: matmul_f32_qsi8db_qunbp64x4_sf16_zpc_6x32_avx512vnni::run,
    ..INT8_GEMM_AVX512VNNI
};

const AMX_INT8: Features = Features::of(&[Feature::Avx512f, Feature::Avx512bw, Feature::Avx512Vnni, Feature::AmxInt8]);

/// int8 GEMM, AMX: `tdpbssd` on 32 rows × 32 columns per register tile for tiles of 32 rows or more (the AVX-512
/// VNNI 6 × 32 body below that: `MIN_ROWS` of the kernel's file, measured).
pub static INT8_GEMM_AMX: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qunbp64x4_sf32_zpc_32x32_amx",
    isa: Isa::Amx,
    requires: AMX_INT8,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Int8,
    lhs: LhsFormat::Qsi8Db,
    rhs: RhsReads::Only(|_: &Cpu| QUNBP64X4_SF32_ZPC),
    supports: supports_all,
    geometry: |_, _| Geometry {
        max_task_rows: 256,
        ..Geometry::new(qunbp64x4_amx::MR, qunbp64x4_vnni::NR, usize::MAX)
    },
    run: matmul_f32_qsi8db_qunbp64x4_sf32_zpc_32x32_amx::run,
};

/// int8 GEMM, AMX, f16 scales.
pub static INT8_GEMM_AMX_F16: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qunbp64x4_sf16_zpc_32x32_amx",
    rhs: RhsReads::Only(|_: &Cpu| QUNBP64X4_SF16_ZPC),
    run: matmul_f32_qsi8db_qunbp64x4_sf16_zpc_32x32_amx::run,
    ..INT8_GEMM_AMX
};

const AVX512F: Features = Features::of(&[Feature::Avx512f]);

/// fp32-path GEMV, AVX-512 FMA: one row × 64 columns per register tile.
pub static FP32_GEMV_AVX512: UKernel = UKernel {
    name: "matmul_f32_f32_qunbp64x4_sf32_zpc_1x64_avx512vnni",
    isa: Isa::Avx512Vnni,
    requires: AVX512F,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Fp32,
    lhs: LhsFormat::F32,
    rhs: RhsReads::Only(|_: &Cpu| QUNBP64X4_SF32_ZPC),
    supports: supports_all,
    geometry: |_, _| Geometry::new(1, qunbp64x4_vnni::NR, 1),
    run: matmul_f32_f32_qunbp64x4_sf32_zpc_1x64_avx512vnni::run,
};

/// fp32-path GEMM, AVX-512 FMA: 6 rows × 32 columns per register tile.
pub static FP32_GEMM_AVX512: UKernel = UKernel {
    name: "matmul_f32_f32_qunbp64x4_sf32_zpc_6x32_avx512vnni",
    isa: Isa::Avx512Vnni,
    requires: AVX512F,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Fp32,
    lhs: LhsFormat::F32,
    rhs: RhsReads::Only(|_: &Cpu| QUNBP64X4_SF32_ZPC),
    supports: supports_all,
    geometry: |_, _| Geometry { max_task_rows: 48, ..Geometry::new(6, qunbp64x4_vnni::NR, usize::MAX) },
    run: matmul_f32_f32_qunbp64x4_sf32_zpc_6x32_avx512vnni::run,
};

/// fp32-path GEMM, AVX-512 FMA, dequantizing each weight panel piece once per tile for tiles of 32 rows or more
/// (12 rows × 32 columns per register tile over the dequantized piece, up to 256 rows per task: the more rows
/// share a dequantized piece the less it costs; measured in `qunbp64x4_panel`); smaller tiles as
/// [`FP32_GEMM_AVX512`].
pub static FP32_GEMM_AVX512_DQ: UKernel = UKernel {
    name: "matmul_f32_f32_qunbp64x4_sf32_zpc_12x32_avx512vnni",
    geometry: |_, _| Geometry { max_task_rows: 256, ..Geometry::new(6, qunbp64x4_vnni::NR, usize::MAX) },
    run: matmul_f32_f32_qunbp64x4_sf32_zpc_12x32_avx512vnni::run,
    ..FP32_GEMM_AVX512
};

const AMX_BF16: Features = Features::of(&[Feature::Avx512f, Feature::Avx512bw, Feature::AmxBf16]);

/// fp32-path GEMM, AMX-BF16: activations split exactly into three bf16 parts, `tdpbf16ps` on 32 rows × 32 columns
/// per register tile for tiles of 8 rows or more (`MIN_ROWS` of the kernel's file, measured), up to 256 rows per
/// task and at least 256 columns where the matrix has them (each task splits its rows once: the more columns
/// share that, the less it costs; 512 measured up to 7% faster on one thread but left 2 threads unevenly loaded on
/// N = 576 and 1536, up to 1.5x slower there); smaller tiles as [`FP32_GEMM_AVX512_DQ`].
pub static FP32_GEMM_AMX: UKernel = UKernel {
    name: "matmul_f32_f32_qunbp64x4_sf32_zpc_32x32_amx",
    isa: Isa::Amx,
    requires: AMX_BF16,
    geometry: |_, _| Geometry {
        max_task_rows: 256,
        min_task_cols: 256,
        ..Geometry::new(qunbp64x4_amx_bf16::MR, qunbp64x4_vnni::NR, usize::MAX)
    },
    run: matmul_f32_f32_qunbp64x4_sf32_zpc_32x32_amx::run,
    ..FP32_GEMM_AVX512
};

const AVX2: Features = Features::of(&[Feature::Avx2, Feature::Fma]);
const AVX2_VNNI: Features = Features::of(&[Feature::Avx2, Feature::Fma, Feature::AvxVnni]);

macro_rules! avx2_kernel {
    ($static:ident, $name:literal, $file:ident, $req:expr, $path:expr, $lhs:expr, $geometry:expr) => {
        pub static $static: UKernel = UKernel {
            name: $name,
            isa: Isa::Avx2,
            requires: $req,
            min_sve_vl: 0,
            sme_svl: 0,
            path: $path,
            lhs: $lhs,
            rhs: RhsReads::Only(|_: &Cpu| QUNBP64X4_SF32_ZPC),
            supports: supports_all,
            geometry: $geometry,
            run: $file::run,
        };
    };
}

/// GEMV geometry on 64-column panels (two 32-column units each).
fn gemv_geometry(_: &Cpu, _: &RhsLayout) -> Geometry {
    Geometry::new(1, qunbp64x4_vnni::NR, 1)
}

/// GEMM geometry: 3-row register tiles, up to 48 rows per task.
fn gemm3_geometry(_: &Cpu, _: &RhsLayout) -> Geometry {
    Geometry { max_task_rows: 48, ..Geometry::new(3, qunbp64x4_vnni::NR, usize::MAX) }
}

avx2_kernel!(
    INT8_GEMV_AVXVNNI,
    "matmul_f32_qsi8db_qunbp64x4_sf32_zpc_1x32_avx2_vnni",
    matmul_f32_qsi8db_qunbp64x4_sf32_zpc_1x32_avx2_vnni,
    AVX2_VNNI,
    ComputePath::Int8,
    LhsFormat::Qsi8Db,
    gemv_geometry
);
avx2_kernel!(
    INT8_GEMM_AVXVNNI,
    "matmul_f32_qsi8db_qunbp64x4_sf32_zpc_3x16_avx2_vnni",
    matmul_f32_qsi8db_qunbp64x4_sf32_zpc_3x16_avx2_vnni,
    AVX2_VNNI,
    ComputePath::Int8,
    LhsFormat::Qsi8Db,
    gemm3_geometry
);
/// The AVX2 int8 GEMV runs M ≤ 16 (panel after panel, a panel's rows in turn: the first row streams its weights,
/// the others find them in L2 or L3; `tiles::gemv`), where the 3 × 16 GEMM walks a panel's records once per
/// 16-column unit and waits on them: measured against ORT 1.31.1 (AMD EPYC Zen 3, AVX2 only, bs32 symmetric,
/// `bench_matmulnbits.py`, ratio ORT / nibble) on 4096 × 4096 the GEMM took 0.40 / 0.58 / 0.75 at M = 2 / 4 / 8
/// (1 thread), the GEMV (then row-major) 0.97 / 1.19 / 1.11; at M = 12 and 16 on the shapes whose weights do not
/// stay in cache (L3-8B gate/up 4096 → 14336, down 14336 → 4096) the GEMM 0.79 – 1.25, the panel-major GEMV
/// 1.23 – 1.61 (1 and 2 threads); on 576 → 1536 the GEMM is faster (1.70 – 1.87 against 1.52 – 1.64).
fn int8_gemv_avx2_geometry(_: &Cpu, _: &RhsLayout) -> Geometry {
    Geometry::new(1, qunbp64x4_vnni::NR, 16)
}

/// The AVX2 fp32 GEMV runs M ≤ 6 (panel after panel, a panel's rows in turn: see `tiles::gemv`), where the
/// in-register 3 × 16 GEMM streams the weights unit by unit: measured against ORT 1.31.1 (AMD EPYC Zen 3,
/// bs32 symmetric, ratio ORT / nibble, 1 and 2 threads) on the shapes whose weights do not stay in cache (L3-8B
/// gate/up 4096 → 14336 and down 14336 → 4096) the GEMM took 0.80 – 1.40 at M = 4 and 6, the GEMV 1.13 – 1.73;
/// on 4096², 8192 → 2048 and 576 → 1536 the GEMM is faster (1.77 – 2.27 against 1.15 – 1.79), both above 1.
fn fp32_gemv_avx2_geometry(_: &Cpu, _: &RhsLayout) -> Geometry {
    Geometry::new(1, qunbp64x4_vnni::NR, 6)
}

avx2_kernel!(
    INT8_GEMV_AVX2,
    "matmul_f32_qsi8db_qunbp64x4_sf32_zpc_1x64_avx2",
    matmul_f32_qsi8db_qunbp64x4_sf32_zpc_1x64_avx2,
    AVX2,
    ComputePath::Int8,
    LhsFormat::Qsi8Db,
    int8_gemv_avx2_geometry
);
avx2_kernel!(
    INT8_GEMM_AVX2,
    "matmul_f32_qsi8db_qunbp64x4_sf32_zpc_3x16_avx2",
    matmul_f32_qsi8db_qunbp64x4_sf32_zpc_3x16_avx2,
    AVX2,
    ComputePath::Int8,
    LhsFormat::Qsi8Db,
    gemm3_geometry
);
avx2_kernel!(
    FP32_GEMV_AVX2,
    "matmul_f32_f32_qunbp64x4_sf32_zpc_1x32_avx2",
    matmul_f32_f32_qunbp64x4_sf32_zpc_1x32_avx2,
    AVX2,
    ComputePath::Fp32,
    LhsFormat::F32,
    fp32_gemv_avx2_geometry
);
avx2_kernel!(
    FP32_GEMM_AVX2,
    "matmul_f32_f32_qunbp64x4_sf32_zpc_3x16_avx2",
    matmul_f32_f32_qunbp64x4_sf32_zpc_3x16_avx2,
    AVX2,
    ComputePath::Fp32,
    LhsFormat::F32,
    gemm3_geometry
);

/// fp32-path GEMM, AVX2 + FMA, dequantizing each weight panel piece once per tile for tiles of `MIN_ROWS` rows
/// or more (in the kernel's file, measured): 6 rows × 16 columns per register tile over the dequantized piece, up
/// to 256 rows per task; smaller tiles as [`FP32_GEMM_AVX2`].
pub static FP32_GEMM_AVX2_DQ: UKernel = UKernel {
    name: "matmul_f32_f32_qunbp64x4_sf32_zpc_6x16_avx2",
    geometry: |_, _| Geometry { max_task_rows: 256, ..Geometry::new(3, qunbp64x4_vnni::NR, usize::MAX) },
    run: matmul_f32_f32_qunbp64x4_sf32_zpc_6x16_avx2::run,
    ..FP32_GEMM_AVX2
};
