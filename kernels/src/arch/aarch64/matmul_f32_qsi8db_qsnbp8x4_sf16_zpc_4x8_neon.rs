//! int8-activation GEMM for CPUs without dotprod (Cortex-A72 / A53 class): 4-bit codes with blocks of 32·k run
//! 4 rows × 8 columns per register tile (`super::qsnbp8x4_int8::unit_q4`: each field taken as its code q, 4
//! activations broadcast by LD1R, a 32-K chunk's products summed in 16 int16 accumulators, the chunk one `asm!`
//! block); 2- and 8-bit codes and blocks of 16 run 2 rows × 8 columns (`unit`: 2^(8−bits)-scaled fields, two
//! products per int16 lane, then SADALP).
//!
//! Instruction budget of the 4 × 8 tile per 32 K (one chunk: 4 × 8 × 32 = 1024 multiply-adds, i.e. 64 "SDOT
//! equivalents" of 16), 4-bit codes, block 32, symmetric: 128 SMULL / SMULL2 / SMLAL / SMLAL2 (2 per 16
//! multiply-adds: each int16 lane sums the chunk's 8 products of |q·v| ≤ 1024, no widening per step: 2.0); 32 LD1R
//! (one per row and 4 K, shared by both column quads: 0.5); 8 LDP of codes (each group's once per field: 0.13);
//! 24 field extractions (the high field SSHR, the low one SHL + SSHR: 0.38); per block 8 ADDP + 8 SADDLP (the
//! int16 lanes folded to 4 columns and widened: 0.25), 8 SCVTF, 8 FMUL, 8 FMLA (0.38), the 8 scales (LDR, FCVTL,
//! FCVTL2) and the 4 rows' activation scales (0.1); loop and addresses (~0.1). Total ~3.85 per SDOT equivalent.
//! Measured (`scripts/aarch64/icount-kernel.sh`, 2048×2048, qemu -cpu cortex-a72, the whole kernel): 33.38 M
//! instructions per call at M = 32 = 3.98 per SDOT equivalent (3.98 at M = 128; the Row numerics 3.94, uint8
//! zero points 4.28, block 128 3.75). The 2 × 8 paired body it replaces for these codes: 43.51 M (5.19), 45.88 M
//! with zero points (5.47), and +13–16% in the Row numerics (whose −128 activations forbid its pairing). As
//! intrinsics the 4 × 8 chunk spilled (LLVM hoisted every field extraction: 47.45 M), and a broadcast made by
//! DUP from a scalar load let LLVM turn each SMLAL2 into EXT + SMLAL: hence the asm and the asm LD1R.
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
    // 4-bit codes: 4-row tiles for every block size. Blocks of 16 run the intrinsic 4-row body there (not the
    // 32-K asm chunk), which still counts fewer instructions than 2-row tiles (icount-kernel.sh, cortex-a72,
    // 2048², bs 16: M = 32 46.7 M against 49.3 M, M = 4 5.85 M against 6.17 M).
    if args.bits == 4 {
        walk_panels!(args, unit_smull, SMULL, nr = NR, rows = [4, 3, 2, 1], panels = [2]);
    } else {
        walk_panels!(args, unit_smull, SMULL, nr = NR, rows = [2, 1], panels = [2]);
    }
}
