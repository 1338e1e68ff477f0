//! int8-activation path, portable: A quantized per block to int8 (`qsi8db`: symmetric, one scale per block of
//! `bl`, row-major), integer dot products with the stored values v, then per block
//! `y += sa · (s · Σ q_a·v − zo · s · Σ q_a)` (or `+ c · Σ q_a` where the layout stores the correction).
//!
//! Tile: any rows × any columns (whole panels, the last one clipped); m_step 1, n_step nr. LHS: `qsi8db`
//! (`pack::LhsFormat::Qsi8Db`). RHS: any layout, read through its descriptor. Integer sums are exact (i32 per
//! 32-value chunk, i64 per block), so any block size is safe. No over-reads, no writes outside the tile.
//!
//! The default layout for 4-bit codes (`qunbp8x4_sf32_zpb`) has a faster path in the record's byte order: 32
//! i16 lanes (8 columns × 4 K values) multiply-accumulated per 32-value chunk (at most 8 products of 127·15 per
//! lane: no i16 overflow), widened to i32 per chunk.

use super::{Tile, dot_i32, int8_walk};
use crate::pack::{LhsFormat, RhsLayout};
use crate::ukernel::RunArgs;

/// # Safety
/// `args` satisfies the `RunArgs` contract with `qsi8db` LHS rows and non-null scale/sum pointers.
pub(crate) unsafe fn run(args: &RunArgs) {
    // SAFETY: forwarded from the caller.
    let t = unsafe { Tile::new(args, LhsFormat::Qsi8Db) };
    if args.bits == 4 && args.layout == RhsLayout::plain(8, 4) {
        q4_qunbp8x4(&t, args);
    } else {
        let bl = args.bl;
        int8_walk(&t, |r, b, v, _, _| dot_i32(t.row_bytes(r)[b * bl..][..bl].iter().map(|&q| q as i8 as i32), v));
    }
}

/// 4-bit codes in the plain nr = 8, kr = 4 layout.
fn q4_qunbp8x4(t: &Tile<'_>, args: &RunArgs) {
    const NR: usize = 8;
    const LANES: usize = 32; // NR columns × 4 K values
    let bl = args.bl;
    let (chunk, groups_per_chunk) = (bl.min(32), bl.min(32) / 8);
    // Codes of one block, per 32-byte group: 32 low-nibble lanes then 32 high-nibble lanes.
    let mut wq = vec![0i16; bl * NR];
    t.for_each_panel_block(|panel, b, y| {
        let rec = t.record(panel, b);
        for (bytes, w) in rec.codes().chunks_exact(LANES).zip(wq.chunks_exact_mut(2 * LANES)) {
            let (lo, hi) = w.split_at_mut(LANES);
            for l in 0..LANES {
                lo[l] = (bytes[l] & 0x0F) as i16;
                hi[l] = (bytes[l] >> 4) as i16;
            }
        }
        let terms: [_; NR] = std::array::from_fn(|j| rec.terms(j));
        for (r, y_r) in y.chunks_exact_mut(NR).enumerate() {
            let Some((sa, qsum)) = t.block_activation(r, b) else { continue };
            let qa = &t.row_bytes(r)[b * bl..][..bl];
            let mut isum = [0i32; LANES];
            for (c, wc) in wq.chunks_exact(2 * LANES * groups_per_chunk).enumerate() {
                let mut acc = [0i16; LANES];
                for (g, w) in wc.chunks_exact(2 * LANES).enumerate() {
                    let k0 = c * chunk + g * 4;
                    let a_lo: [i16; 4] = std::array::from_fn(|i| qa[k0 + i] as i8 as i16);
                    let a_hi: [i16; 4] = std::array::from_fn(|i| qa[k0 + chunk / 2 + i] as i8 as i16);
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
                let ct = terms[j];
                let zo = ct.zo.expect("plain layout: zero points");
                *y_j += sa * ct.s * (dot as f32 - zo * qsum as f32);
            }
        }
    });
}
