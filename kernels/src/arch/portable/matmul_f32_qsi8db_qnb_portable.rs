//! int8-activation path, portable: A quantized per block to int8 (`qsi8db`: symmetric, one scale per block of
//! `bl`), integer dot products with the unsigned codes, then per block
//! `y += sa · s · (Σ q_a·q_w − zp · Σ q_a)`.
//!
//! Tile: any rows × any columns (whole panels, the last one clipped). LHS: i8 rows of `blocks · bl` values
//! plus per-(row, block) scale and Σ q_a (`pack::PackedLhs::Int8`). RHS: any `qnb` layout. Integer sums are
//! exact (i32 per 32-value chunk, i64 per block), so any block size is safe. No over-reads, no writes outside
//! the tile.
//!
//! The default layout for 4-bit codes (nr = 8, kr = 4) has a faster path in the record's byte order: 32 i16
//! lanes (8 columns × 4 K values) multiply-accumulated per 32-value chunk (at most 8 products of 127·15 per
//! lane: no i16 overflow), widened to i32 per chunk.

use super::{Tile, decode_block};
use crate::pack::{RhsLayout, read_f32};
use crate::ukernel::RunArgs;

/// # Safety
/// `args` satisfies the `RunArgs` contract with i8 LHS rows and non-null scale/sum pointers.
pub(crate) unsafe fn run(args: &RunArgs) {
    // SAFETY: forwarded from the caller.
    let t: Tile<'_, i8> = unsafe { Tile::new(args) };
    if args.bits == 4 && args.nr == 8 && args.kr == 4 {
        q4_nr8_kr4(&t, args);
    } else {
        generic(&t, args);
    }
}

/// Any layout, any bit width: decode to (column, block offset) order, exact integer dot products.
fn generic(t: &Tile<'_, i8>, args: &RunArgs) {
    let (nr, bl) = (args.nr, args.bl);
    let layout = RhsLayout { nr, kr: args.kr };
    let mut codes = vec![0u8; bl * nr];
    // Codes transposed to [j][o] so each column's dot product runs over contiguous memory.
    let mut wt = vec![0i32; nr * bl];
    t.for_each_panel_block(|panel, b, acc| {
        let (code_bytes, scales, zps) = t.record(panel, b);
        decode_block(code_bytes, args.bits, bl, layout, &mut codes);
        for j in 0..nr {
            for o in 0..bl {
                wt[j * bl + o] = codes[o * nr + j] as i32;
            }
        }
        for (r, acc_r) in acc.chunks_exact_mut(nr).enumerate() {
            let Some((sa, qsum)) = block_activation(t, r, b) else { continue };
            let qa = &t.lhs_row(r)[b * bl..][..bl];
            for (j, acc_j) in acc_r.iter_mut().enumerate() {
                let isum = dot(qa, &wt[j * bl..][..bl]);
                let s = read_f32(&scales[4 * j..]);
                let corr = t.zero_point(zps, j) * qsum as f32;
                *acc_j += sa * s * (isum as f32 - corr);
            }
        }
    });
}

/// 4-bit codes in the nr = 8, kr = 4 layout.
fn q4_nr8_kr4(t: &Tile<'_, i8>, args: &RunArgs) {
    const NR: usize = 8;
    const LANES: usize = 32; // NR columns × 4 K values
    let bl = args.bl;
    let (chunk, groups_per_chunk) = (bl.min(32), bl.min(32) / 8);
    // Codes of one block, per 32-byte group: 32 low-nibble lanes then 32 high-nibble lanes.
    let mut wq = vec![0i16; bl * NR];
    t.for_each_panel_block(|panel, b, y| {
        let (codes, scales, zps) = t.record(panel, b);
        for (bytes, w) in codes.chunks_exact(LANES).zip(wq.chunks_exact_mut(2 * LANES)) {
            let (lo, hi) = w.split_at_mut(LANES);
            for l in 0..LANES {
                lo[l] = (bytes[l] & 0x0F) as i16;
                hi[l] = (bytes[l] >> 4) as i16;
            }
        }
        for (r, y_r) in y.chunks_exact_mut(NR).enumerate() {
            let Some((sa, qsum)) = block_activation(t, r, b) else { continue };
            let qa = &t.lhs_row(r)[b * bl..][..bl];
            let mut isum = [0i32; LANES];
            for (c, wc) in wq.chunks_exact(2 * LANES * groups_per_chunk).enumerate() {
                let mut acc = [0i16; LANES];
                for (g, w) in wc.chunks_exact(2 * LANES).enumerate() {
                    let k0 = c * chunk + g * 4;
                    let a_lo: [i16; 4] = std::array::from_fn(|i| qa[k0 + i] as i16);
                    let a_hi: [i16; 4] = std::array::from_fn(|i| qa[k0 + chunk / 2 + i] as i16);
                    let (lo, hi) = w.split_at(LANES);
                    for l in 0..LANES {
                        acc[l] += lo[l] * a_lo[l & 3] + hi[l] * a_hi[l & 3];
                    }
                }
                for l in 0..LANES {
                    isum[l] += acc[l] as i32;
                }
            }
            for (j, y_j) in y_r.iter_mut().enumerate() {
                let dot = isum[4 * j] + isum[4 * j + 1] + isum[4 * j + 2] + isum[4 * j + 3];
                let s = read_f32(&scales[4 * j..]);
                let corr = t.zero_point(zps, j) * qsum as f32;
                *y_j += sa * s * (dot as f32 - corr);
            }
        }
    });
}

/// Scale and Σ q of block `b` of tile row `r`, or None for an all-zero block (e.g. padding), which contributes
/// nothing.
fn block_activation(t: &Tile<'_, i8>, r: usize, b: usize) -> Option<(f32, i32)> {
    let i = r * t.args.blocks + b;
    let (sa, qsum) = (t.lhs_scale[i], t.lhs_sum[i]);
    (qsum != 0 || sa != 0.0).then_some((sa, qsum))
}

/// Σ a·w, exact: i32 partial sums over 32 values (|Σ| ≤ 32·127·255 < 2^20), i64 across them.
fn dot(a: &[i8], w: &[i32]) -> i64 {
    a.chunks(32)
        .zip(w.chunks(32))
        .map(|(ac, wc)| ac.iter().zip(wc).map(|(&x, &y)| x as i32 * y).sum::<i32>() as i64)
        .sum()
}
