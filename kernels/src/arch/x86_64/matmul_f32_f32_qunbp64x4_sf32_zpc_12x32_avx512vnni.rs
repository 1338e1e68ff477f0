//! fp32-accurate GEMM, AVX-512, dequantizing B once per tile: Y = A·dequant(B)ᵀ with f32 A and f32
//! accumulation (accuracy_level 1–3; the family's kernel for M > 1).
//!
//! Tiles of at least [`MIN_ROWS`] rows: each 64-column panel is dequantized piece by piece (up to 1024 K values,
//! 256 KiB of f32) into a per-thread buffer that all rows of the tile then walk with a 12 × 32
//! register tile (24 f32 accumulators; see `qunbp64x4_panel` and `qunbp64x4_panel_avx512`). Smaller tiles take the in-register 6 × 32 body of
//! `matmul_f32_f32_qunbp64x4_sf32_zpc_6x32_avx512vnni` (codes turned into f32 per K value, never stored), which
//! wins there because a dequantized piece would serve too few rows.
//!
//! LHS: `f32` rows. RHS: `qunbp64x4_sf32_zpc`, bits 2/4/8, any block size 16 … 65536. Features: avx512f (the
//! avx512vnni rung's floor). No over-reads; padding columns of the last panel are never stored.
//!
//! [`MIN_ROWS`] = 32, measured on an AMD EPYC (Zen 4, family 25 model 17, 2 cores, AVX-512 VNNI, no AMX) with
//! ORT 1.31.1 in the same process (bench/bench_matmulnbits.py, acc 1, 1 thread, 3 rounds, one core busy with
//! other work throughout): time ratio ORT / nibble, in-register walk → dequantizing walk forced for every tile
//! (M ≤ 48 is one tile of M rows):
//!
//! | M | bs32 sym 4096×4096 | bs32 sym 576→1536 | bs128 asym 4096×4096 | bs128 asym 576→1536 |
//! |---:|---|---|---|---|
//! | 4 | 2.62 → 1.78 | 2.36 → 1.53 | | |
//! | 8 | 1.52 → 1.47 | 1.52 → 1.32 | | |
//! | 12 | 1.48 → 1.36 | 1.32 → 1.22 | 1.57 → 1.38 | 1.36 → 1.20 |
//! | 16 | 1.27 → 1.06 | 1.19 → 1.14 | 1.34 → 1.27 | 1.18 → 1.12 |
//! | 24 | 1.17 → 1.05 | 1.04 → 1.08 | 1.22 → 1.15 | 1.06 → 1.03 |
//! | 32 | 1.05 → 1.04 | 0.96 → 1.04 | 1.10 → 1.10 | 0.95 → 0.98 |
//! | 48 | 1.00 → 1.05 | 0.91 → 1.00 | 1.11 → 1.09 | 0.89 → 0.93 |
//!
//! Per kernel (cargo bench, 1536×576, 1 thread): 128 rows 43 → 50 GMAC/s. Below 32 rows a dequantized piece
//! serves too few rows to pay for itself (the in-register walk converts each code once per 6 rows, with no
//! stores); from 32 rows on the dequantizing walk is even or ahead and the gap grows with the rows (M = 128: tiles
//! of 62–66 rows). Full before/after tables: bench/results/x86-fp32-gemm.md.

use super::qunbp64x4_fma::unit;
use super::qunbp64x4_panel::{Scratch, tile};
use super::qunbp64x4_panel_avx512::Avx512;
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// Tile rows from which the dequantizing walk is used.
pub(crate) const MIN_ROWS: usize = 32;

/// # Safety
/// The CPU has avx512f; `args` satisfies the `RunArgs` contract with an `f32` LHS and a `qunbp64x4_sf32_zpc` RHS
/// of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    if args.rows >= MIN_ROWS {
        // SAFETY: the caller's guarantee, forwarded.
        Scratch::with(|s| unsafe { tile::<Avx512>(args, s) })
    } else {
        run_units!(gemm, f32, args, unit, g = 2, mr = [6, 5, 4, 3, 2, 1], unit_cols = 32);
    }
}
