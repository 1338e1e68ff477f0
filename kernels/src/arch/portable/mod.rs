//! Portable kernels: plain Rust, any CPU, any `qnb` RHS layout (any nr, kr), bits 2/4/8, any block size.
//! The last rung of every ladder, and the fallback for shapes a SIMD kernel does not take.
//!
//! Both kernels walk a tile panel by panel; per (panel, block) they decode the block's codes once into a small
//! buffer and apply it to every row of the tile, so M > 1 amortises the unpacking.

mod matmul_f32_f32_qnb_portable;
mod matmul_f32_qsi8db_qnb_portable;

use crate::cpu::Isa;
use crate::pack::{ComputePath, RhsLayout, read_f32};
use crate::ukernel::{Role, RunArgs, UKernel};

pub static FP32: UKernel = UKernel {
    name: "matmul_f32_f32_qnb_portable",
    isa: Isa::Portable,
    path: ComputePath::Fp32,
    role: Role::Any,
    rhs: None,
    m_step: 1,
    supports: supports_any,
    run: matmul_f32_f32_qnb_portable::run,
};

pub static INT8: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qnb_portable",
    isa: Isa::Portable,
    path: ComputePath::Int8,
    role: Role::Any,
    rhs: None,
    m_step: 1,
    supports: supports_any,
    run: matmul_f32_qsi8db_qnb_portable::run,
};

fn supports_any(bits: u32, bl: usize) -> bool {
    matches!(bits, 2 | 4 | 8) && bl >= 16 && bl.is_power_of_two()
}

/// A safe view of one tile's inputs, built from `RunArgs` once.
pub(crate) struct Tile<'a, L> {
    pub lhs: &'a [L],
    pub lhs_scale: &'a [f32],
    pub lhs_sum: &'a [i32],
    pub rhs: &'a [u8],
    pub bias: Option<&'a [f32]>,
    pub args: &'a RunArgs,
}

impl<'a, L> Tile<'a, L> {
    /// # Safety
    /// `args` satisfies the `RunArgs` contract (pointers valid for the sizes they describe, `lhs` pointing to
    /// values of type `L`); `lhs_scale`/`lhs_sum` may be null only if `L` is not the int8 type.
    pub unsafe fn new(args: &'a RunArgs) -> Self {
        let a = args;
        let panels = a.cols.div_ceil(a.nr);
        // SAFETY: the caller guarantees rows × lhs_stride values of L at `lhs`.
        let lhs = unsafe { std::slice::from_raw_parts(a.lhs.cast::<L>(), a.rows * a.lhs_stride) };
        let (lhs_scale, lhs_sum) = if a.lhs_scale.is_null() {
            (&[][..], &[][..])
        } else {
            // SAFETY: int8 path: rows × blocks scales and sums, per the caller.
            unsafe {
                (
                    std::slice::from_raw_parts(a.lhs_scale, a.rows * a.blocks),
                    std::slice::from_raw_parts(a.lhs_sum, a.rows * a.blocks),
                )
            }
        };
        // SAFETY: the tile's panels are within the packed weights (the last may be partial in columns, never
        // in bytes: panels are padded to nr columns).
        let rhs = unsafe { std::slice::from_raw_parts(a.rhs, panels * a.rhs_panel_stride) };
        // SAFETY: bias, when non-null, has `cols` values for this tile.
        let bias = (!a.bias.is_null()).then(|| unsafe { std::slice::from_raw_parts(a.bias, a.cols) });
        Tile { lhs, lhs_scale, lhs_sum, rhs, bias, args }
    }

    /// LHS row r of the tile.
    pub fn lhs_row(&self, r: usize) -> &'a [L] {
        &self.lhs[r * self.args.lhs_stride..][..self.args.lhs_stride]
    }

    /// Writes `vals[j]` (+ bias) to columns `c0 .. c0 + vals.len()` of tile row r.
    pub fn store(&self, r: usize, c0: usize, vals: &[f32]) {
        let a = self.args;
        debug_assert!(r < a.rows && c0 + vals.len() <= a.cols);
        // SAFETY: (r, c0..c0+len) is inside this tile (debug-asserted; callers clip to `cols`), and the tile was
        // claimed exclusively by `Selected::run_tile`, so no other thread touches these elements. The slice
        // covers only this row segment, never other tiles' elements.
        let dst = unsafe { std::slice::from_raw_parts_mut(a.dst.add(r * a.dst_stride + c0), vals.len()) };
        for (j, (d, &v)) in dst.iter_mut().zip(vals).enumerate() {
            *d = v + self.bias.map_or(0.0, |b| b[c0 + j]);
        }
    }

    /// The record of (panel, block), split into codes, scales and zero points (empty if none).
    pub fn record(&self, panel: usize, block: usize) -> (&'a [u8], &'a [u8], &'a [u8]) {
        let a = self.args;
        let rec = &self.rhs[panel * a.rhs_panel_stride + block * a.rhs_record..][..a.rhs_record];
        let (codes, rest) = rec.split_at(a.rhs_code_bytes);
        let (scales, zps) = rest.split_at(4 * a.nr);
        (codes, scales, if a.has_zp != 0 { zps } else { &[] })
    }

    /// Walks the tile panel by panel: per panel, `block(panel, b, acc)` runs for every block with the panel's
    /// accumulators (`rows × nr`, row-major, zeroed per panel), which are then stored (+ bias) into its columns.
    pub fn for_each_panel_block(&self, mut block: impl FnMut(usize, usize, &mut [f32])) {
        let (nr, rows, cols) = (self.args.nr, self.args.rows, self.args.cols);
        let mut acc = vec![0f32; rows * nr];
        for panel in 0..cols.div_ceil(nr) {
            acc.fill(0.0);
            for b in 0..self.args.blocks {
                block(panel, b, &mut acc);
            }
            let c0 = panel * nr;
            let width = nr.min(cols - c0);
            for (r, acc_r) in acc.chunks_exact(nr).enumerate() {
                self.store(r, c0, &acc_r[..width]);
            }
        }
    }

    /// Zero point of column j from a record's zero-point bytes.
    pub fn zero_point(&self, zps: &[u8], j: usize) -> f32 {
        if zps.is_empty() { self.args.default_zp } else { read_f32(&zps[4 * j..]) }
    }
}

/// Decodes one block's codes of a panel into `out[o · nr + j]` (block offset o, panel column j).
pub(crate) fn decode_block(codes: &[u8], bits: usize, bl: usize, layout: RhsLayout, out: &mut [u8]) {
    let (nr, kr) = (layout.nr, layout.kr);
    let chunk = RhsLayout::chunk(bl);
    let cpb = 8 / bits;
    let lane = chunk / cpb;
    let mask = ((1u32 << bits) - 1) as u8;
    let chunk_bytes = chunk * nr * bits / 8;
    for c in 0..bl / chunk {
        let cb = &codes[c * chunk_bytes..][..chunk_bytes];
        for g in 0..lane / kr {
            for j in 0..nr {
                for i in 0..kr {
                    let byte = cb[(g * nr + j) * kr + i];
                    let pos = c * chunk + g * kr + i;
                    for l in 0..cpb {
                        out[(pos + l * lane) * nr + j] = (byte >> (l * bits)) & mask;
                    }
                }
            }
        }
    }
}
