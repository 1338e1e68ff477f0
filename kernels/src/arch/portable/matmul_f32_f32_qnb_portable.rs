//! fp32-accurate path, portable: Y = A · dequant(B)ᵀ with f32 A and f32 accumulation.
//!
//! Tile: any rows × any columns (whole panels of the packed layout, the last one clipped). LHS: f32 rows of
//! `blocks · bl` values (zero past K). RHS: any `qnb` layout (`pack::PackedRhs`). Per (panel, block) the
//! codes are dequantized exactly as the spec says, w = (q − zp) · scale, into an f32 `bl × nr` buffer that
//! every row of the tile then multiplies. No over-reads, no writes outside the tile.

use super::{Tile, decode_block};
use crate::pack::{RhsLayout, read_f32};
use crate::ukernel::RunArgs;

/// # Safety
/// `args` satisfies the `RunArgs` contract with f32 LHS rows.
pub(crate) unsafe fn run(args: &RunArgs) {
    // SAFETY: forwarded from the caller.
    let t: Tile<'_, f32> = unsafe { Tile::new(args) };
    let (nr, bl) = (args.nr, args.bl);
    let layout = RhsLayout { nr, kr: args.kr };
    let mut codes = vec![0u8; bl * nr];
    let mut w = vec![0f32; bl * nr];
    let mut acc = vec![0f32; args.rows * nr];
    for panel in 0..args.cols.div_ceil(nr) {
        acc.fill(0.0);
        for b in 0..args.blocks {
            let (code_bytes, scales, zps) = t.record(panel, b);
            decode_block(code_bytes, args.bits, bl, layout, &mut codes);
            for j in 0..nr {
                let (s, z) = (read_f32(&scales[4 * j..]), t.zero_point(zps, j));
                for o in 0..bl {
                    w[o * nr + j] = (codes[o * nr + j] as f32 - z) * s;
                }
            }
            for r in 0..args.rows {
                let a = &t.lhs_row(r)[b * bl..][..bl];
                let acc_r = &mut acc[r * nr..][..nr];
                for (o, &av) in a.iter().enumerate() {
                    if av != 0.0 {
                        for (acc_j, &wj) in acc_r.iter_mut().zip(&w[o * nr..][..nr]) {
                            *acc_j += av * wj;
                        }
                    }
                }
            }
        }
        let c0 = panel * nr;
        let width = nr.min(args.cols - c0);
        for r in 0..args.rows {
            t.store(r, c0, &acc[r * nr..][..width]);
        }
    }
}
