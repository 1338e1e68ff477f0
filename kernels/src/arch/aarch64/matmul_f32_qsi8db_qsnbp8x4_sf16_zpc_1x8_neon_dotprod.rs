//! int8-activation GEMV for decode (the dotprod family's kernel for M = 1..3): up to 3 rows share each panel's
//! code loads and unpacking; 8 columns per step (one row: four panels per pass while four remain, then two,
//! sharing the activation loads, the block's activation scale and the loop), one SDOT-by-element accumulator per
//! 4 columns and row.
//!
//! Instruction budget per 32 K × 8 columns (one panel-block), one row, 4-bit codes, block 32, symmetric (per
//! SDOT: / 16): 16 SDOT; 16 field extractions (`shl #4` / `and #0xF0`, one per SDOT: the layout pairs K with K +
//! 16 in a byte, so each SDOT needs its own operand; 1.0); 4 LDP of codes (0.25); per block 2 MOVI, 2 SCVTF,
//! 2 FMUL (scale × the block's activation scale), 2 FMLA, the 8 scales: 1 LDR + FCVTL + FCVTL2 (0.69); shared by
//! the 4 panels: 1 LDP of activations, 1 LD1R of the activation scale, ~7 loop and address instructions
//! (0.14). Total ~3.1 per SDOT. Measured (`scripts/aarch64/icount-kernel.sh`, M = 1, qemu -cpu neoverse-n1):
//! 3.11 per SDOT at 4096×4096 (3.15 at 2048×2048; 3.43 / 3.47 with zero points), the loop 197 instructions per
//! 64 SDOT, no stack access; two panels per pass measured 3.16. The field extraction (1.0) is what keeps this
//! above the ~2.6–2.7 that 0.6× ORT's GEMV needs: with the two fields of a byte belonging to two columns at the same
//! K (a layout change), the raw byte and its `and #0x0F` would feed the two SDOTs and one SUB per 4 columns and
//! block would separate them (~2.67 modelled).
//!
//! LHS: `qsi8db` (int8 per block, row-major, scale and Σq per block). RHS: `qsnbp8x4_sf16_zpc`, bits 2/4/8, any
//! block size 16 … 65536. Columns: whole 8-column panels from the tile's start (the last one's padding computed,
//! never stored). Features: neon,dotprod. The body is `super::qsnbp8x4_int8`. No over-reads: every load is inside a
//! record or an LHS block.

use super::qsnbp8x4_int8::{NR, SDOT, unit};
use super::walk_panels;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has neon,dotprod; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and a `qsnbp8x4` RHS
/// (f16 scales) of `args.bits` ∈ {2, 4, 8}.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn run(args: &RunArgs) {
    walk_panels!(args, unit, SDOT, nr = NR, rows = [3, 2, 1], panels = [4, 2]);
}
