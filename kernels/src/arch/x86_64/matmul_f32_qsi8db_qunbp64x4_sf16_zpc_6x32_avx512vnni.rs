//! int8-activation GEMM, AVX-512 VNNI, on f16 scales: `matmul_f32_qsi8db_qunbp64x4_sf32_zpc_6x32_avx512vnni` reading
//! `qunbp64x4_sf16_zpc` (the shared body converts the 16 scales of a column group with one `vcvtph2ps`). Same tile,
//! LHS, bits and block sizes. Features: avx512f, avx512bw, avx512vnni.

pub(crate) use super::matmul_f32_qsi8db_qunbp64x4_sf32_zpc_6x32_avx512vnni::run;
