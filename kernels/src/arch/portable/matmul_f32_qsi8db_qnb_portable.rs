//! int8-activation path, portable: A quantized per block to int8 (`qsi8db`: symmetric, one scale per block of
//! `bl`), integer dot products with the unsigned codes, then per block
//! `y += sa · s · (Σ q_a·q_w − zp · Σ q_a)`.
//!
//! Tile: any rows × any columns (whole panels, the last one clipped). LHS: i8 rows of `blocks · bl` values
//! plus per-(row, block) scale and Σ q_a (`pack::PackedLhs::Int8`). RHS: any `qnb` layout. Integer sums are
//! exact (i32 per 32-value chunk, i64 per block), so any block size is safe. No over-reads, no writes outside
//! the tile.

use super::{Tile, decode_block};
use crate::pack::{RhsLayout, read_f32};
use crate::ukernel::RunArgs;

/// # Safety
/// `args` satisfies the `RunArgs` contract with i8 LHS rows and non-null scale/sum pointers.
pub(crate) unsafe fn run(args: &RunArgs) {
    // SAFETY: forwarded from the caller.
    let t: Tile<'_, i8> = unsafe { Tile::new(args) };
    let (nr, bl, blocks) = (args.nr, args.bl, args.blocks);
    let layout = RhsLayout { nr, kr: args.kr };
    let mut codes = vec![0u8; bl * nr];
    // Codes transposed to [j][o] so each column's dot product runs over contiguous memory.
    let mut wt = vec![0i32; nr * bl];
    let mut acc = vec![0f32; args.rows * nr];
    for panel in 0..args.cols.div_ceil(nr) {
        acc.fill(0.0);
        for b in 0..blocks {
            let (code_bytes, scales, zps) = t.record(panel, b);
            decode_block(code_bytes, args.bits, bl, layout, &mut codes);
            for j in 0..nr {
                for o in 0..bl {
                    wt[j * bl + o] = codes[o * nr + j] as i32;
                }
            }
            for r in 0..args.rows {
                let (sa, qsum) = (t.lhs_scale[r * blocks + b], t.lhs_sum[r * blocks + b]);
                if qsum == 0 && sa == 0.0 {
                    continue; // an all-zero block of A (e.g. padding) contributes nothing
                }
                let qa = &t.lhs_row(r)[b * bl..][..bl];
                for j in 0..nr {
                    let isum = dot(qa, &wt[j * bl..][..bl]);
                    let s = read_f32(&scales[4 * j..]);
                    let corr = t.zero_point(zps, j) * qsum as f32;
                    acc[r * nr + j] += sa * s * (isum as f32 - corr);
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

/// Σ a·w, exact: i32 partial sums over 32 values (|Σ| ≤ 32·127·255 < 2^20), i64 across them.
fn dot(a: &[i8], w: &[i32]) -> i64 {
    a.chunks(32)
        .zip(w.chunks(32))
        .map(|(ac, wc)| ac.iter().zip(wc).map(|(&x, &y)| x as i32 * y).sum::<i32>() as i64)
        .sum()
}
