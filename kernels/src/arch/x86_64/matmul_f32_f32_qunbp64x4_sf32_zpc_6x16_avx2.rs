//! fp32-accurate GEMM, AVX2 + FMA, dequantizing B once per tile: Y = A·dequant(B)ᵀ with f32 A and f32
//! accumulation (accuracy_level 1–3; the avx2 family's kernel for M > 1).
//!
//! Tiles of at least [`MIN_ROWS`] rows: each 64-column panel is dequantized piece by piece (up to 1024 K values,
//! 256 KiB of f32) into a per-thread buffer that all rows of the tile then walk with a 6 × 16 register tile
//! (12 f32 accumulators; see `qunbp64x4_panel` and `qunbp64x4_panel_avx2`). Smaller tiles take the in-register
//! 3 × 16 body of `matmul_f32_f32_qunbp64x4_sf32_zpc_3x16_avx2` (codes turned into f32 per K value, never
//! stored).
//!
//! LHS: `f32` rows. RHS: `qunbp64x4_sf32_zpc`, bits 2/4/8, any block size 16 … 65536. Features: avx2, fma. No
//! over-reads; padding columns of the last panel are never stored.
//!
//! [`MIN_ROWS`] = 8, measured on an AMD EPYC (Zen 3, family 25 model 1, AVX2 + FMA, no AVX-512; 2 cores, KVM
//! guest) timing the tiles alone (`gemm_time`, 1 thread, 2 rounds in turns, GFLOP/s, the lower–higher of the
//! two; one tile of M rows; bs32 symmetric unless noted), the in-register 3 × 16 walk → the dequantizing walk:
//!
//! | M | 1536×576 | 576×1536 | 2048×2048 | 4096×4096 |
//! |---:|---|---|---|---|
//! | 2 (bs128 u8) | 37–39 → 23 | 44 → 23–24 | | 19–37 → 10–13 |
//! | 3 (bs128 u8) | 52–53 → 35 | 61 → 35 | | 30–50 → 18–20 |
//! | 4 | 32–42 → 31–48 | 44–45 → 31–48 | 42 → 30 | 9–11 → 23–35 |
//! | 6 | 51–56 → 38–56 | 51–56 → 38–56 | 53–55 → 36 | |
//! | 8 | 39 → 47–49 | 41–42 → 48–51 | | 17–20 → 38–49 |
//! | 16 | 37–38 → 59–60 | 40–41 → 62–63 | | 23–24 → 52–64 |
//! | 32 | 39–40 → 66–68 | 42–43 → 66–70 | | 32–35 → 58–72 |
//! | 128 | 41–49 → 66–76 | 44 → 69–74 | | 34 → 68–71 |
//!
//! Dequantizing a piece costs about 5 operations per 8 weights (shift, mask, convert, FMA, store), shared by the
//! tile's rows; converting in registers costs 3 per 8 weights per 3 rows, so the dequantized piece pays from
//! about 6 rows on, and the 3 × 16 walk loses its efficiency where the rows leave a 1- or 2-row block (16 rows:
//! 5 × 3 + 1).

use super::qunbp64x4_avx2::unit_fma;
use super::qunbp64x4_panel::{Scratch, tile};
use super::qunbp64x4_panel_avx2::Avx2;
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// Tile rows from which the dequantizing walk is used.
pub(crate) const MIN_ROWS: usize = 8;

/// # Safety
/// The CPU has avx2 and fma; `args` satisfies the `RunArgs` contract with an `f32` LHS and a
/// `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    if args.rows >= MIN_ROWS {
        // SAFETY: the caller's guarantee, forwarded.
        Scratch::with(|s| unsafe { tile::<Avx2>(args, s) })
    } else {
        run_units!(gemm, f32, args, unit_fma, g = 2, mr = [3, 2, 1], unit_cols = 16);
    }
}
