//! int8-activation GEMM, AMX: Y = A·dequant(B)ᵀ for prefill on CPUs with AMX-INT8 (the AMX families' kernel for
//! M > 1).
//!
//! Tiles of at least [`MIN_ROWS`] rows: `tdpbssd` on register tiles of 32 rows × 32 columns (two 16-row halves
//! × two 16-column groups), each 32-column unit's codes unpacked once per tile into AMX's B layout and walked
//! by every row tile, an AVX-512 epilogue per block (see `qunbp64x4_amx`). Smaller tiles take the 6 × 32
//! AVX-512 VNNI body (`matmul_f32_qsi8db_qunbp64x4_sf32_zpc_6x32_avx512vnni`), where a tile multiply would run
//! mostly empty rows. LHS: `qsi8db`. RHS: `qunbp64x4_sf32_zpc` (this file) or `_sf16_zpc`, bits 2/4/8, any
//! block size 16 … 65536. Features: avx512f, avx512bw, avx512vnni, AMX-TILE + AMX-INT8 (with the process's
//! permission for the tile data). No over-reads; padding columns of the last panel are computed, never stored.
//!
//! [`MIN_ROWS`] = 32, measured on an Intel Xeon with AMX (family 6 model 207, 2 cores, KVM guest) with
//! `gemm_time` (tiles alone, 1 thread, 3 runs, GFLOP/s min–max), the AMX walk forced for every tile against the
//! VNNI kernel: a tile's codes are unpacked once per 32-column unit and every block's results go through
//! memory, which pays only when enough rows share them.
//!
//! | rows | 4096×4096 VNNI | 4096×4096 AMX | N 1536, K 576 VNNI | N 1536, K 576 AMX |
//! |---:|---|---|---|---|
//! | 2 | 113–125 | 48–55 | 177–229 | 47–61 |
//! | 4 | 199–219 | 94–105 | 231–300 | 95–114 |
//! | 8 | 258–288 | 177–192 | 273–337 | 165–198 |
//! | 16 | 298–309 | 268–278 | 249–345 | 205–290 |
//! | 32 | 322–330 | 392–411 | 248–357 | 275–350 |

use super::matmul_f32_qsi8db_qunbp64x4_sf32_zpc_6x32_avx512vnni as vnni;
use super::qunbp64x4_amx::{Scratch, tile};
use crate::ukernel::RunArgs;

/// Tile rows from which the AMX walk is used.
pub(crate) const MIN_ROWS: usize = 32;

/// # Safety
/// The CPU has avx512f, avx512bw, avx512vnni and usable AMX-INT8; `args` satisfies the `RunArgs` contract with a
/// `qsi8db` LHS and a `qunbp64x4_s{f32,f16}_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    if args.rows >= MIN_ROWS {
        // SAFETY: the caller's guarantee, forwarded.
        Scratch::with(|s| unsafe { tile(args, s) })
    } else {
        // SAFETY: the caller's guarantee covers the VNNI kernel's (its features are a subset of these).
        unsafe { vnni::run(args) }
    }
}
