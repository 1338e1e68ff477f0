//! fp32-accurate GEMV, AVX2 + FMA: codes become f32 in registers, 1 row × 32 columns per register tile (the family's kernel for M = 1). Features: avx2, fma.
//!
//! LHS: `f32`. RHS: `qunbp64x4_sf32_zpc` (see `qunbp64x4_avx2` for the inner loop), bits 2/4/8, any block
//! size 16 … 65536. No over-reads; padding columns of the last panel are computed, never stored.

use super::qunbp64x4_avx2::unit_fma;
use super::tiles;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has the kernel's features (its `UKernel::requires`); `args` satisfies the `RunArgs` contract with a
/// `f32` LHS and a `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    tiles::gemv(args, |r, panel| {
        // SAFETY: row r < rows of the tile: its LHS and output rows are inside the buffers the contract describes;
        // the features are the caller's guarantee.
        unsafe {
            let (l, d) = (args.lhs.cast::<f32>().add(r * args.lhs_stride), args.dst.add(r * args.dst_stride));
            for unit in 0..2 {
                if panel * 64 + unit * 32 >= args.cols {
                    break;
                }
                match args.bits {
                    2 => unit_fma::<1, 4, 2>(args, panel, unit, l, d),
                    4 => unit_fma::<1, 4, 4>(args, panel, unit, l, d),
                    _ => unit_fma::<1, 4, 8>(args, panel, unit, l, d),
                }
            }
        }
    });
}
