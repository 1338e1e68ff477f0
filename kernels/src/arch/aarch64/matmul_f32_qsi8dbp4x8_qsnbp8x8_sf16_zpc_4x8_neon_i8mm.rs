//! int8-activation GEMM for prefill, i8mm: 4 rows (one `qsi8dbp4x8` row group: two SMMLA row pairs) × 8 columns
//! per register tile, every accumulator in a register (8 int32 2×2 tiles for the block, 8 f32 2×2 tiles for the
//! sums), 32 SMMLA per 32 K of 4-bit codes (see `super::qsnbp8x8_int8::gemm_pairs`).
//!
//! Instruction budget per 32 K × 8 columns × 4 rows, 4-bit codes, block 32, symmetric (per SMMLA: / 32): 32 SMMLA; 8
//! code loads + 8 activation loads (0.5); 8 field extractions (0.25); per block 8 MOVI (zeroing), 8 SCVTF, 8 FMUL
//! (column × row scales: the per-block activation scale's cost), 8 FMLA (1.0; + 8 FMLA with zero points); the block's
//! scales: 1 load + 2 FCVTL + 4 DUP (columns), 1 load + 1 ZIP per row pair (0.28); loop and addresses ~4 (0.13). Total
//! ~3.16 per SMMLA. Measured (`scripts/aarch64/icount-kernel.sh`, 2048×2048, M = 32, qemu -cpu max): 3.37 per SMMLA
//! (4.09 with zero points); the 6-row tile this replaced in review (12 + 12 accumulators) measured 3.63 (LLVM spills
//! 8–14 vectors per block around the epilogue) and the 8-row tile before it 3.72.
//!
//! LHS: `qsi8dbp4x8` (int8 per block, rows in groups of 4, K in runs of 8; scale and Σq per row and block,
//! group-major). RHS: `qsnbp8x8_sf16_zpc`, bits 2/4/8, block sizes 16 … 65536 whose fields hold whole 8-K runs.
//! Rows: whole groups of 4 from the tile's start, a last group of 1–2 real rows as one row pair (padding rows
//! computed from the group's zero padding, never stored); columns: whole 8-column panels (the last one's padding
//! computed, never stored). Features: neon, i8mm. No over-reads.

use super::qsnbp8x8_int8::{MR, NR, gemm_pairs};
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon and i8mm; `args` satisfies the `RunArgs` contract with a `qsi8dbp4x8` LHS (the tile starts
/// at a row group) and a `qsnbp8x8` RHS (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,i8mm")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    for panel in 0..a.cols.div_ceil(NR) {
        for g in 0..a.rows.div_ceil(MR) {
            let rows = (a.rows - g * MR).min(MR);
            // SAFETY: row group g is the tile's (whole, padding rows zero), so are its scales, sums and the output
            // rows of its `rows` real rows (RunArgs contract); panel is the tile's; the CPU has i8mm.
            unsafe {
                if rows > 2 {
                    crate::arch::dispatch!(gemm_pairs::<2>(a, panel, 2 * g, rows); bits(a.bits))
                } else {
                    crate::arch::dispatch!(gemm_pairs::<1>(a, panel, 2 * g, rows); bits(a.bits))
                }
            }
        }
    }
}
