//! fp32-accurate GEMM, AVX-512, dequantizing B once per tile: Y = A·dequant(B)ᵀ with f32 A and f32
//! accumulation (accuracy_level 1–3; the family's kernel for M > 1).
//!
//! Tiles of at least [`MIN_ROWS`] rows: each 64-column panel is dequantized piece by piece (up to 256 K values,
//! 64 KiB of f32) into a buffer that all rows of the tile then walk with a 12 × 32 register tile (24 f32
//! accumulators; see `qunbp64x4_panel`). Smaller tiles take the in-register 6 × 32 body of
//! `matmul_f32_f32_qunbp64x4_sf32_zpc_6x32_avx512vnni` (codes turned into f32 per K value, never stored), which
//! wins there because a dequantized piece would serve too few rows.
//!
//! LHS: `f32` rows. RHS: `qunbp64x4_sf32_zpc`, bits 2/4/8, any block size 16 … 65536. Features: avx512f (the
//! avx512vnni rung's floor). No over-reads; padding columns of the last panel are never stored.
//!
//! [`MIN_ROWS`], measured on an AMD EPYC (Zen 4, 2 cores; bench/results/x86-fp32-gemm.md): see that table.

use super::qunbp64x4_fma::unit;
use super::qunbp64x4_panel::{Scratch, tile};
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// Tile rows from which the dequantizing walk is used.
pub(crate) const MIN_ROWS: usize = 16;

/// # Safety
/// The CPU has avx512f; `args` satisfies the `RunArgs` contract with an `f32` LHS and a `qunbp64x4_sf32_zpc` RHS
/// of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    if args.rows >= MIN_ROWS {
        // SAFETY: the caller's guarantee, forwarded.
        unsafe { tile(args, &mut Scratch::new(args.rows)) }
    } else {
        run_units!(gemm, f32, args, unit, g = 2, mr = [6, 5, 4, 3, 2, 1], unit_cols = 32);
    }
}
