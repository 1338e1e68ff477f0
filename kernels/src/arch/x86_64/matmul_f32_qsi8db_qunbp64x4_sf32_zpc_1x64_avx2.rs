//! int8-activation GEMV, AVX2 (`vpmaddubsw` + `vpmaddwd`): 1 row × 64 columns, a whole panel per pass (the
//! family's kernel for M ≤ 16, panel after panel: see `INT8_GEMV_AVX2` in `mod.rs`). Features: avx2, fma.
//!
//! LHS: `qsi8db`. RHS: `qunbp64x4_sf32_zpc` (see `qunbp64x4_avx2` for the inner loop), bits 2/4/8, any block
//! size 16 … 65536. No over-reads; padding columns of the last panel are computed, never stored.
//!
//! One 64-column unit rather than two of 32 (8 int32 + 8 f32 accumulators: more than AVX2's 16 registers hold
//! with the codes, so some f32 sums live on the stack): the layout interleaves 4 K values of all 64 columns, so
//! two 32-column passes each read 128 of every 256 bytes, and from DRAM that stream ran at 0.74–0.93x ORT's
//! (Zen 3, bench/results/x86-avx2-decode-smollm2-shapes.md); reading each record whole, in address order, it
//! runs at 0.90–1.10x (1 thread), and faster than before from cache.

use super::qunbp64x4_avx2::unit_avx2;
use super::tiles::run_units;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has the kernel's features (its `UKernel::requires`); `args` satisfies the `RunArgs` contract with a
/// `qsi8db` LHS and a `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    run_units!(gemv, int8, args, unit_avx2, g = 8, units = 1, unit_cols = 64);
}
