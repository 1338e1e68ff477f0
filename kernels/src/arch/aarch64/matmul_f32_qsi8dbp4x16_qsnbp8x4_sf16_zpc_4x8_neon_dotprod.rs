//! int8-activation GEMM for prefill, dotprod: 4 rows (one `qsi8dbp4x16` row group) × 8 columns per register
//! tile, SDOT by element, every accumulator in a register (8 int32 row × column-quad vectors for the block, 8 f32
//! for the sums, 8 activation vectors, the codes of one group; no stack access in the loop), 64 SDOT per 32 K
//! of 4-bit codes (see `super::qsnbp8x4_int8::gemm_group`).
//!
//! Instruction budget per 32 K × 8 columns × 4 rows, 4-bit codes, block 32, symmetric (per SDOT: / 64): 64 SDOT;
//! 16 field extractions (`shl #4` / `and #0xF0` of 8 code vectors, shared by the 4 rows: 0.25); 4 LDP of codes +
//! 4 LDP of activations (0.125); per block 8 MOVI (zeroing), 8 SCVTF, 8 FMUL (column scales × the row's block
//! scale, by element: the per-block activation scale's cost), 8 FMLA (0.5; + 8 FMLA with zero points); the
//! block's scales: 1 load + FCVTL + FCVTL2, the group's 4 activation scales: 1 load (+ 1 load, SCVTF, FMUL of
//! the 4 Σq with zero points) (0.06); loop and addresses ~4 (0.06). Total ~2.0 per SDOT (~2.2 with zero points).
//! Measured (`scripts/aarch64/icount-kernel.sh`, 2048×2048, M = 32, qemu -cpu neoverse-n1): 2.08 per SDOT (2.26
//! with zero points; at block 128 1.69 / 1.75); the block-32 loop is 129 instructions per 64 SDOT (141 with zero
//! points), the rest (~250 per panel and row group: setup, zeroing, dispatch, the stores) 0.06. At blocks of 64
//! and more the chunk loop reloads one vector from the stack per chunk (2 of ~100 instructions). The row-major
//! `qsi8db` 4×8 tile this replaced: 2.13 (its zero-point loop 157 per 64 SDOT: 4 scalar loads each of scales and
//! Σq, 4 SCVTF + 4 FMUL per block). Against ORT 1.31.1's own kernel (KleidiAI, per-row activation scales: no
//! FMUL per accumulator, ~1.85 instructions per SDOT per Run): what is left is the per-block numerics' 8 FMUL
//! (0.125) and the field extraction (0.25), which a layout pairing two columns' fields in one byte (one AND and
//! one SUB per pair instead of two extractions) would halve.
//!
//! LHS: `qsi8dbp4x16` (int8 per block, rows in groups of 4, K in runs of 16; scale and Σq per row and block,
//! group-major). RHS: `qsnbp8x4_sf16_zpc`, bits 2/4/8, any block size 16 … 65536. Rows: whole groups of 4 from
//! the tile's start (padding rows of the last group computed from its zero padding, never stored); columns:
//! whole 8-column panels (the last one's padding computed, never stored). Features: neon, dotprod. No over-reads:
//! every load is inside a record or the tile's LHS groups.

use super::qsnbp8x4_int8::{MR, NR, gemm_group};
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon and dotprod; `args` satisfies the `RunArgs` contract with a `qsi8dbp4x16` LHS (the tile
/// starts at a row group) and a `qsnbp8x4` RHS (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn run(args: &RunArgs) {
    let a = args;
    for panel in 0..a.cols.div_ceil(NR) {
        for g in 0..a.rows.div_ceil(MR) {
            let rows = (a.rows - g * MR).min(MR);
            // SAFETY: row group g is the tile's (whole, padding rows zero), so are its scales, sums and the output
            // rows of its `rows` real rows (RunArgs contract); panel is the tile's; the CPU has dotprod.
            unsafe { crate::arch::dispatch!(gemm_group::<>(a, panel, g, rows); bits(a.bits)) }
        }
    }
}
