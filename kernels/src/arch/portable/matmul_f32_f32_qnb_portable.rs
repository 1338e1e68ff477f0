//! fp32-accurate path, portable: Y = A · dequant(B)ᵀ with f32 A and f32 accumulation.
//!
//! Tile: any rows × any columns (whole panels of the packed layout, the last one clipped); m_step 1,
//! n_step nr. LHS: `f32` rows of `blocks · bl` values (zero past K). RHS: any layout (`pack::RhsLayout`), read
//! through its descriptor. Per (panel, block) the codes are dequantized, w = (q − z)·s (or v·s + c where the
//! layout stores the correction term), into an f32 `bl × nr` buffer that every row of the tile then
//! multiplies. No over-reads, no writes outside the tile.
//!
//! The default layout for 4-bit codes (`qunbp8x4_sf32_zpb`) has a faster path that keeps the record's byte
//! order: 32 lanes (8 columns × 4 K values), low nibbles at k and high nibbles at k + chunk/2, so every step
//! is a fixed-width lane-wise multiply-add the compiler vectorizes with the baseline ISA.

use super::{Tile, decode_block};
use crate::pack::{LhsFormat, RhsLayout};
use crate::ukernel::RunArgs;

/// # Safety
/// `args` satisfies the `RunArgs` contract with f32 LHS rows.
pub(crate) unsafe fn run(args: &RunArgs) {
    // SAFETY: forwarded from the caller.
    let t = unsafe { Tile::new(args, LhsFormat::F32) };
    if args.bits == 4 && args.layout == RhsLayout::plain(8, 4) {
        q4_qunbp8x4(&t, args);
    } else {
        generic(&t, args);
    }
}

/// Any layout, any bit width: decode to (block offset, column) order, dequantize, multiply.
fn generic(t: &Tile<'_>, args: &RunArgs) {
    let (nr, bl) = (args.layout.nr, args.bl);
    let mut v = vec![0i32; bl * nr];
    let mut w = vec![0f32; bl * nr];
    t.for_each_panel_block(|panel, b, acc| {
        let rec = t.record(panel, b);
        decode_block(rec.codes(), args.bits, bl, &args.layout, &mut v);
        for j in 0..nr {
            let ct = rec.terms(j);
            for o in 0..bl {
                let vv = v[o * nr + j] as f32;
                w[o * nr + j] = match ct.zo {
                    Some(zo) => (vv - zo) * ct.s,
                    None => vv * ct.s + ct.c,
                };
            }
        }
        for (r, acc_r) in acc.chunks_exact_mut(nr).enumerate() {
            let a = &t.row_f32(r)[b * bl..][..bl];
            for (o, &av) in a.iter().enumerate() {
                if av != 0.0 {
                    for (acc_j, &wj) in acc_r.iter_mut().zip(&w[o * nr..][..nr]) {
                        *acc_j += av * wj;
                    }
                }
            }
        }
    });
}

/// 4-bit codes in the plain nr = 8, kr = 4 layout.
fn q4_qunbp8x4(t: &Tile<'_>, args: &RunArgs) {
    const NR: usize = 8;
    const LANES: usize = 32; // NR columns × 4 K values
    let bl = args.bl;
    let (chunk, groups_per_chunk) = (bl.min(32), bl.min(32) / 8);
    // (q − zp) of one block, per 32-byte group: 32 low-nibble lanes then 32 high-nibble lanes.
    let mut wq = vec![0f32; bl * NR];
    t.for_each_panel_block(|panel, b, y| {
        let rec = t.record(panel, b);
        let zo: [f32; NR] = std::array::from_fn(|j| rec.terms(j).zo.expect("plain layout: zero points"));
        let zp: [f32; LANES] = std::array::from_fn(|l| zo[l / 4]);
        for (bytes, w) in rec.codes().chunks_exact(LANES).zip(wq.chunks_exact_mut(2 * LANES)) {
            let (lo, hi) = w.split_at_mut(LANES);
            for l in 0..LANES {
                lo[l] = (bytes[l] & 0x0F) as f32 - zp[l];
                hi[l] = (bytes[l] >> 4) as f32 - zp[l];
            }
        }
        for (r, y_r) in y.chunks_exact_mut(NR).enumerate() {
            let a = &t.row_f32(r)[b * bl..][..bl];
            let mut acc = [0f32; LANES];
            for (gi, w) in wq.chunks_exact(2 * LANES).enumerate() {
                let (c, g) = (gi / groups_per_chunk, gi % groups_per_chunk);
                let k0 = c * chunk + g * 4;
                let a_lo: [f32; 4] = a[k0..k0 + 4].try_into().expect("4 values");
                let a_hi: [f32; 4] = a[k0 + chunk / 2..k0 + chunk / 2 + 4].try_into().expect("4 values");
                let (lo, hi) = w.split_at(LANES);
                for l in 0..LANES {
                    acc[l] += lo[l] * a_lo[l & 3] + hi[l] * a_hi[l & 3];
                }
            }
            for (j, y_j) in y_r.iter_mut().enumerate() {
                let s = rec.scale(j);
                *y_j += s * (acc[4 * j] + acc[4 * j + 1] + acc[4 * j + 2] + acc[4 * j + 3]);
            }
        }
    });
}
