//! int8-activation GEMM, AMX, on f16 scales: `matmul_f32_qsi8db_qunbp64x4_sf32_zpc_32x32_amx` reading
//! `qunbp64x4_sf16_zpc` (the shared body converts a unit's scales with `vcvtph2ps` when it unpacks the codes).
//! Same tiles, LHS, bits and block sizes.

pub(crate) use super::matmul_f32_qsi8db_qunbp64x4_sf32_zpc_32x32_amx::run;
