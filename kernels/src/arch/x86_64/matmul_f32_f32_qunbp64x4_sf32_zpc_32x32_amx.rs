//! fp32-accurate GEMM, AMX-BF16: Y = A·dequant(B)ᵀ with f32 A split exactly into three bf16 parts and f32
//! accumulation (accuracy_level 1–3 on CPUs with AMX-BF16: the AMX fp32 family's kernel for M > 1).
//!
//! Tiles of at least [`MIN_ROWS`] rows: `tdpbf16ps` on register tiles of 32 rows × 32 columns, three tile
//! multiplies per 32 K values (one per part of A), the codes of each 32-column unit unpacked once per K piece
//! as exact bf16 integers, an AVX-512 epilogue per block (see `qunbp64x4_amx_bf16`, which also says why the
//! result is as accurate as f32 arithmetic). Smaller tiles take the AVX-512 FMA GEMM
//! (`matmul_f32_f32_qunbp64x4_sf32_zpc_12x32_avx512vnni`), where a tile multiply would run mostly empty rows.
//! LHS: `f32` rows. RHS: `qunbp64x4_sf32_zpc`, bits 2/4/8, any block size 16 … 65536. Features: avx512f,
//! avx512bw, AMX-TILE + AMX-BF16 (with the process's permission for the tile data). No over-reads; padding
//! columns of the last panel are computed, never stored.
//!
//! [`MIN_ROWS`] = 8, measured on an Intel Xeon with AMX (family 6 model 207, 2 cores, KVM guest) with ORT 1.31.1
//! in the same process (bench/bench_matmulnbits.py, acc 1, bs32 symmetric, 1 thread, one run each), the FMA
//! GEMM for every tile against the AMX walk for every tile; µs per call (ORT's in the same run ~1% apart):
//!
//! | M | 4096×4096 FMA | AMX | N 8192, K 2048 FMA | AMX | 576×576 FMA | AMX | N 576, K 1536 FMA | AMX |
//! |---:|---|---|---|---|---|---|---|---|
//! | 4 | 1231 | 1812 | 1277 | 1785 | 24.8 | 39.3 | 62.6 | 85.0 |
//! | 8 | 2383 | 2156 | 2430 | 2017 | 46.9 | 44.3 | 123.0 | 105.8 |
//! | 12 | 3131 | 2321 | 3193 | 2313 | 62.3 | 50.5 | 164.2 | 113.6 |
//! | 16 | – | – | 4210 | 2432 | 85.8 | 53.2 | 218.7 | 123.6 |
//!
//! A tile multiply costs the same for 1 row as for 16, so below 8 rows the FMA GEMM's in-register walk wins.

use super::matmul_f32_f32_qunbp64x4_sf32_zpc_12x32_avx512vnni as fma;
use super::qunbp64x4_amx_bf16::{Scratch, tile};
use crate::ukernel::RunArgs;

/// Tile rows from which the AMX walk is used.
pub(crate) const MIN_ROWS: usize = 8;

/// # Safety
/// The CPU has avx512f, avx512bw and usable AMX-BF16; `args` satisfies the `RunArgs` contract with an `f32` LHS
/// and a `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    if args.rows >= MIN_ROWS {
        // SAFETY: the caller's guarantee, forwarded.
        Scratch::with(|s| unsafe { tile(args, s) })
    } else {
        // SAFETY: the caller's guarantee covers the FMA kernel's (avx512f).
        unsafe { fma::run(args) }
    }
}
