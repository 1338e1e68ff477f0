//! int8-activation GEMM for CPUs without dotprod: 2 rows × 8 columns per register tile (8 int32 pair accumulators,
//! 4 f32 sums; a 3-row tile measured 12% more instructions).
//!
//! Instruction budget per 32 K × 8 columns × 2 rows, 4-bit codes, block 32, symmetric: 512 multiply-adds, i.e. 32
//! "SDOT equivalents" of 16. Per field pair (two fields of one code vector, 32 multiply-adds per row):
//! SMULL + SMLAL (low halves) and SMULL2 + SMLAL2 (high), the two products of a lane summed in int16, then one
//! SADALP per half into the int32 pairs (the block's first: SADDLP, no zeroing): 3 per 16 multiply-adds (96;
//! without the pairing 4: 128); 16 DUP (the activation element per row and field, shared by both column
//! quads: 0.5); 16 field extractions (0.5); 4 LDP of codes, 2 of activations (0.19); per block 4 ADDP (folding
//! the pairs), 4 SCVTF, 4 FMUL, 4 FMLA, the 8 scales: 1 LDR + FCVTL + FCVTL2, 2 LDR of activation scales
//! (~0.7); loop and addresses ~6 (0.2). Total ~5.1 per SDOT equivalent.
//! Measured (`scripts/aarch64/icount-kernel.sh`, 2048×2048, M = 32, qemu -cpu cortex-a72): 43.51 M instructions
//! per call, 5.19 per SDOT equivalent (45.88 M, 5.47 with zero points); the block-32 loop is 164 instructions per
//! block, two of them one vector stored to and reloaded from the stack (register pressure of the pairing: the
//! loop without it, 205 instructions, had no stack access).
//!
//! LHS: `qsi8db` (int8 per block, row-major, scale and Σq per block). RHS: `qsnbp8x4_sf16_zpc`, bits 2/4/8, any
//! block size 16 … 65536. Columns: whole 8-column panels from the tile's start (the last one's padding computed,
//! never stored). Features: neon. The body is `super::qsnbp8x4_int8`. No over-reads: every load is inside a
//! record or an LHS block.

use super::qsnbp8x4_int8::{NR, SMULL, unit_smull};
use super::walk_panels;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and a `qsnbp8x4` RHS
/// (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn run(args: &RunArgs) {
    if args.bits == 4 {
        walk_panels!(args, unit_smull, SMULL, nr = NR, rows = [4, 3, 2, 1], panels = [2]);
    } else {
        walk_panels!(args, unit_smull, SMULL, nr = NR, rows = [2, 1], panels = [2]);
    }
}
