//! fp32-accurate GEMM, AVX2 + FMA: codes become f32 in registers once per K value for 3 rows, 3 rows × 16 columns per register tile (the family's kernel for M > 1). Features: avx2, fma.
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
    tiles::gemm(args, 16, 3, |panel, unit, r0, rows| {
        // SAFETY: rows r0..r0+rows are inside the tile: their LHS and output rows (and scales, sums) are inside
        // the buffers the contract describes; the features are the caller's guarantee.
        unsafe {
            let (l, d) = (args.lhs.cast::<f32>().add(r0 * args.lhs_stride), args.dst.add(r0 * args.dst_stride));
            macro_rules! go {
                ($r:literal) => {
                    match args.bits {
                        2 => unit_fma::<$r, 2, 2>(args, panel, unit, l, d),
                        4 => unit_fma::<$r, 2, 4>(args, panel, unit, l, d),
                        _ => unit_fma::<$r, 2, 8>(args, panel, unit, l, d),
                    }
                };
            }
            match rows {
                3 => go!(3),
                2 => go!(2),
                _ => go!(1),
            }
        }
    });
}
