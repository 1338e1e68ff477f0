//! int8-activation GEMV, AVX-512 VNNI: Y = A·dequant(B)ᵀ for decode (the family's kernel for M = 1).
//!
//! Tile: 1 row × 64 columns per step (one panel: 4 zmm column groups, each with one int32 accumulator per code
//! lane: 8 independent `vpdpbusd` chains for 4-bit codes); any number of rows (one at a time), columns whole
//! panels from the tile's start (the last one's padding columns computed, never stored). LHS: `qsi8db` (int8 per
//! block, row-major, scale and Σq per block). RHS: `qunbp64x4_sf32_zpc`, bits 2/4/8, any block size 16 … 65536.
//! Lanes of a code byte are masked in place (one `vpandd` per 64 bytes per lane) and shifted back once per block.
//! Features: avx512f, avx512bw, avx512vnni. No over-reads: every load is inside a record or an LHS block.

use super::qunbp64x4_vnni::unit;
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has avx512f, avx512bw and avx512vnni; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and
/// a `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    run_units!(gemv, int8, args, unit, g = 4, units = 1, unit_cols = 64);
}
