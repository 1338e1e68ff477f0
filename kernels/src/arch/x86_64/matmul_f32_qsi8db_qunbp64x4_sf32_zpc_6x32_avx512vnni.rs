//! int8-activation GEMM, AVX-512 VNNI: Y = A·dequant(B)ᵀ for prefill (the family's kernel for M > 1).
//!
//! Tile: 6 rows × 32 columns per register tile (12 int32 accumulators reset per block, 12 f32 accumulators for
//! all of K); the tile's rows in blocks of 6 (the rest as one smaller block), columns in 32-column units, each
//! unit's weights (K·16 bytes at 4 bits) kept in L2 while the row blocks walk it. Codes are shifted down to plain
//! u8 values once per 64 bytes and shared by the 6 rows. LHS: `qsi8db`. RHS: `qunbp64x4_sf32_zpc`, bits 2/4/8,
//! any block size 16 … 65536. Features: avx512f, avx512bw, avx512vnni. No over-reads; padding columns of the last
//! panel are computed, never stored.

use super::qunbp64x4_vnni::unit;
use super::tiles;
use crate::ukernel::RunArgs;

/// # Safety
/// The CPU has avx512f, avx512bw and avx512vnni; `args` satisfies the `RunArgs` contract with a `qsi8db` LHS and
/// a `qunbp64x4_sf32_zpc` RHS of `args.bits` ∈ {2, 4, 8}.
pub(crate) unsafe fn run(args: &RunArgs) {
    tiles::gemm(args, 32, 6, |panel, half, r0, rows| {
        // SAFETY: rows r0..r0+rows are inside the tile: their LHS rows, scales, sums and output rows are inside
        // the buffers the contract describes; the features are the caller's guarantee.
        unsafe {
            let (l, s, q, d) = (
                args.lhs.cast::<i8>().add(r0 * args.lhs_stride),
                args.lhs_scale.add(r0 * args.blocks),
                args.lhs_sum.add(r0 * args.blocks),
                args.dst.add(r0 * args.dst_stride),
            );
            macro_rules! go {
                ($r:literal) => {
                    match args.bits {
                        2 => unit::<$r, 2, 2>(args, panel, half, l, s, q, d),
                        4 => unit::<$r, 2, 4>(args, panel, half, l, s, q, d),
                        _ => unit::<$r, 2, 8>(args, panel, half, l, s, q, d),
                    }
                };
            }
            match rows {
                6 => go!(6),
                5 => go!(5),
                4 => go!(4),
                3 => go!(3),
                2 => go!(2),
                _ => go!(1),
            }
        }
    });
}
