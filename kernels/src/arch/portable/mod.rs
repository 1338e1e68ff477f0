//! Portable kernels: plain Rust, any CPU, any RHS layout (descriptor-driven: any nr, kr, code encoding, scale
//! type, zero-point storage), bits 2/4/8, any block size. The last rung of every ladder.
//!
//! Every kernel walks a tile panel by panel; per (panel, block) it decodes the block's codes once into a small
//! buffer and applies it to every row of the tile, so M > 1 amortises the unpacking. Two families use them
//! (the tables are in `registry.rs`):
//!
//! - `portable_{fp32,int8}_qunbp8x4`: the default. Unsigned codes, nr = 8, kr = 4, f32 scales and zero points;
//!   both kernels have a fast path for 4-bit codes in this layout.
//! - `portable_{fp32,int8}_qsnbp8x8`: signed codes, kr = 8 (the SMMLA operand shape), zero points folded into a
//!   per-block correction; on the int8 path f16 scales and block sums, a GEMV reading u8 activations (A + 128,
//!   the VNNI/USDOT operand) and a GEMM reading 4×8-interleaved activations (the SMMLA operand). They prove the
//!   interface carries what the SIMD families need, through the provider, on every CPU.

mod matmul_f32_f32_qnb_portable;
mod matmul_f32_qsi8db_qnb_portable;
pub(crate) mod matmul_f32_qsi8dbp4x8_qnb_portable;
mod matmul_f32_qsu8db_qnb_portable;

use crate::cpu::{Cpu, Features, Isa};
use crate::pack::{Codes, LhsFormat, RhsLayout, ZpStorage};
use crate::problem::ComputePath;
use crate::ukernel::{Geometry, RhsReads, RunArgs, UKernel};

pub static FP32: UKernel = UKernel {
    name: "matmul_f32_f32_qnb_portable",
    isa: Isa::Portable,
    requires: Features::NONE,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Fp32,
    lhs: LhsFormat::F32,
    rhs: RhsReads::Any,
    supports: supports_any,
    geometry: rows_of_one,
    run: matmul_f32_f32_qnb_portable::run,
};

pub static INT8: UKernel = UKernel {
    name: "matmul_f32_qsi8db_qnb_portable",
    isa: Isa::Portable,
    requires: Features::NONE,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Int8,
    lhs: LhsFormat::Qsi8Db,
    rhs: RhsReads::Any,
    supports: supports_any,
    geometry: rows_of_one,
    run: matmul_f32_qsi8db_qnb_portable::run,
};

/// GEMV on u8 activations (q + 128): needs the layout's block sums to take 128·Σv back out.
pub static INT8_U8: UKernel = UKernel {
    name: "matmul_f32_qsu8db_qnb_portable",
    isa: Isa::Portable,
    requires: Features::NONE,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Int8,
    lhs: LhsFormat::Qsu8Db,
    rhs: RhsReads::Where(|l| l.block_sums),
    supports: supports_any,
    geometry: |_, l| Geometry::new(1, l.nr, 3),
    run: matmul_f32_qsu8db_qnb_portable::run,
};

/// GEMM on 4×8-interleaved int8 activations, 4 rows per register tile.
pub static INT8_P4X8: UKernel = UKernel {
    name: "matmul_f32_qsi8dbp4x8_qnb_portable",
    isa: Isa::Portable,
    requires: Features::NONE,
    min_sve_vl: 0,
    sme_svl: 0,
    path: ComputePath::Int8,
    lhs: LhsFormat::Qsi8DbP { mr: 4, kr: 8 },
    rhs: RhsReads::Any,
    supports: supports_any,
    geometry: |_, l| Geometry::new(4, l.nr, 4),
    run: matmul_f32_qsi8dbp4x8_qnb_portable::run,
};

fn supports_any(bits: u32, bl: usize) -> bool {
    matches!(bits, 2 | 4 | 8) && bl >= 16 && bl.is_power_of_two() && bl <= crate::format::MAX_BLOCK_SIZE
}

/// One row per register tile, one panel per column step; the default hints; chosen as GEMV for M = 1.
fn rows_of_one(_: &Cpu, l: &RhsLayout) -> Geometry {
    Geometry::new(1, l.nr, 1)
}

/// A safe view of one tile's inputs, built from `RunArgs` once.
pub(crate) struct Tile<'a> {
    /// The LHS format (where a row's block scales are).
    pub lhs: LhsFormat,
    /// The tile's LHS: f32 values (F32) or int8/u8 bytes, rows (groups) from the tile's first one.
    pub lhs_f32: &'a [f32],
    pub lhs_bytes: &'a [u8],
    pub lhs_scale: &'a [f32],
    pub lhs_sum: &'a [i32],
    pub rhs: &'a [u8],
    pub bias: Option<&'a [f32]>,
    pub args: &'a RunArgs,
}

impl<'a> Tile<'a> {
    /// # Safety
    /// `args` satisfies the `RunArgs` contract for a kernel reading LHS format `lhs` (pointers valid for the
    /// sizes they describe; int8 formats: `rows` rounded up to the format's mr rows of bytes, scales and sums).
    pub unsafe fn new(args: &'a RunArgs, lhs: LhsFormat) -> Self {
        let a = args;
        let panels = a.cols.div_ceil(a.layout.nr);
        let (lhs_f32, lhs_bytes, lhs_scale, lhs_sum) = if lhs.is_f32() {
            // SAFETY: the caller guarantees rows × lhs_stride f32 values at `lhs`.
            let v = unsafe { std::slice::from_raw_parts(a.lhs.cast::<f32>(), a.rows * a.lhs_stride) };
            (v, &[][..], &[][..], &[][..])
        } else {
            let rows = a.rows.next_multiple_of(lhs.mr());
            // SAFETY: int8 formats: whole row groups of bytes, scales and sums, per the caller.
            unsafe {
                (
                    &[][..],
                    std::slice::from_raw_parts(a.lhs, rows * a.lhs_stride),
                    std::slice::from_raw_parts(a.lhs_scale, rows * a.blocks),
                    std::slice::from_raw_parts(a.lhs_sum, rows * a.blocks),
                )
            }
        };
        // SAFETY: the tile's panels are within the packed weights (the last may be partial in columns, never
        // in bytes: panels are padded to nr columns).
        let rhs = unsafe { std::slice::from_raw_parts(a.rhs, panels * a.rhs_panel_stride) };
        // SAFETY: bias, when non-null, has `cols` values for this tile.
        let bias = (!a.bias.is_null()).then(|| unsafe { std::slice::from_raw_parts(a.bias, a.cols) });
        Tile { lhs, lhs_f32, lhs_bytes, lhs_scale, lhs_sum, rhs, bias, args }
    }

    /// f32 LHS row r of the tile.
    pub fn row_f32(&self, r: usize) -> &'a [f32] {
        &self.lhs_f32[r * self.args.lhs_stride..][..self.args.lhs_stride]
    }

    /// Row-major byte LHS row r of the tile.
    pub fn row_bytes(&self, r: usize) -> &'a [u8] {
        &self.lhs_bytes[r * self.args.lhs_stride..][..self.args.lhs_stride]
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

    /// The record of (panel, block).
    pub fn record(&self, panel: usize, block: usize) -> Record<'a> {
        let a = self.args;
        let bytes = &self.rhs[panel * a.rhs_panel_stride + block * a.rhs_record..][..a.rhs_record];
        Record { bytes, args: self.args }
    }

    /// Walks the tile panel by panel: per panel, `block(panel, b, acc)` runs for every block with the panel's
    /// accumulators (`rows × nr`, row-major, zeroed per panel), which are then stored (+ bias) into its columns.
    pub fn for_each_panel_block(&self, mut block: impl FnMut(usize, usize, &mut [f32])) {
        let (nr, rows, cols) = (self.args.layout.nr, self.args.rows, self.args.cols);
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

    /// Activation scale and Σq of block `b` of tile row `r`, or None for an all-zero block (e.g. padding), which
    /// contributes nothing.
    pub fn block_activation(&self, r: usize, b: usize) -> Option<(f32, i32)> {
        let i = self.lhs.scale_index(self.args.blocks, r, b);
        let (sa, qsum) = (self.lhs_scale[i], self.lhs_sum[i]);
        (qsum != 0 || sa != 0.0).then_some((sa, qsum))
    }
}

/// One (panel, block) record, read through the layout descriptor.
pub(crate) struct Record<'a> {
    pub bytes: &'a [u8],
    args: &'a RunArgs,
}

/// How column j of a record dequantizes: `w = (v − zo)·s` when the zero point is known in code units, else
/// `w = v·s + c` (layouts storing the correction term); `c = −zo·s` either way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ColTerms {
    pub s: f32,
    pub zo: Option<f32>,
    pub c: f32,
}

impl Record<'_> {
    pub fn codes(&self) -> &[u8] {
        &self.bytes[..self.args.rhs_scales]
    }

    pub fn scale(&self, j: usize) -> f32 {
        let st = self.args.layout.scales;
        st.read(&self.bytes[self.args.rhs_scales + j * st.bytes()..])
    }

    fn f32_at(&self, off: usize) -> f32 {
        let b = &self.bytes[off..off + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Σv of column j (layouts with block sums).
    pub fn block_sum(&self, j: usize) -> i32 {
        let b = &self.bytes[self.args.rhs_sums + 4 * j..][..4];
        i32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    pub fn terms(&self, j: usize) -> ColTerms {
        let a = self.args;
        let s = self.scale(j);
        let m_v = a.layout.code_offset(a.bits as u32) as f32;
        let stored = (a.has_zp != 0).then(|| self.f32_at(a.rhs_zp + 4 * j));
        match (a.layout.zero_points, stored) {
            (ZpStorage::Correction, Some(c)) => ColTerms { s, zo: None, c },
            (_, z) => {
                let zo = z.unwrap_or(a.default_zp) - m_v;
                ColTerms { s, zo: Some(zo), c: -zo * s }
            }
        }
    }
}

/// Decodes one block's stored fields of a panel into values v at `out[o · nr + j]` (block offset o, panel
/// column j): the code q, or q − 2^(bits−1) for signed layouts.
pub(crate) fn decode_block(codes: &[u8], bits: usize, bl: usize, layout: &RhsLayout, out: &mut [i32]) {
    let (nr, kr) = (layout.nr, layout.kr);
    let chunk = RhsLayout::chunk(bl);
    let cpb = 8 / bits;
    let lane = chunk / cpb;
    let mask = ((1u32 << bits) - 1) as u8;
    let chunk_bytes = chunk * nr * bits / 8;
    let m = 1i32 << (bits - 1);
    let value = |f: u8| match layout.codes {
        Codes::Unsigned => f as i32,
        Codes::Signed => f as i32 - if f as i32 >= m { 2 * m } else { 0 },
    };
    for c in 0..bl / chunk {
        let cb = &codes[c * chunk_bytes..][..chunk_bytes];
        for g in 0..lane / kr {
            for j in 0..nr {
                for i in 0..kr {
                    let byte = cb[(g * nr + j) * kr + i];
                    let pos = c * chunk + g * kr + i;
                    for l in 0..cpb {
                        out[(pos + l * lane) * nr + j] = value((byte >> (l * bits)) & mask);
                    }
                }
            }
        }
    }
}

/// The int8 paths' shared walk: per (panel, block), decode the values once (transposed to [j][o]), then for each
/// row of the tile `dot(r, b, v_j)` gives Σ q·v of one column, and the block adds
/// `sa·(s·Σq·v − zo·s·Σq)` (or `sa·(s·Σq·v + c·Σq)` with a stored correction).
pub(crate) fn int8_walk(t: &Tile<'_>, mut dot: impl FnMut(usize, usize, &[i32], &Record<'_>, usize) -> i64) {
    let a = t.args;
    let (nr, bl) = (a.layout.nr, a.bl);
    let mut v = vec![0i32; bl * nr];
    let mut vt = vec![0i32; nr * bl];
    let mut terms = vec![ColTerms { s: 0.0, zo: None, c: 0.0 }; nr];
    t.for_each_panel_block(|panel, b, acc| {
        let rec = t.record(panel, b);
        decode_block(rec.codes(), a.bits, bl, &a.layout, &mut v);
        for j in 0..nr {
            for o in 0..bl {
                vt[j * bl + o] = v[o * nr + j];
            }
        }
        for (j, t) in terms.iter_mut().enumerate() {
            *t = rec.terms(j);
        }
        for (r, acc_r) in acc.chunks_exact_mut(nr).enumerate() {
            let Some((sa, qsum)) = t.block_activation(r, b) else { continue };
            for (j, acc_j) in acc_r.iter_mut().enumerate() {
                let isum = dot(r, b, &vt[j * bl..][..bl], &rec, j) as f32;
                let ct = terms[j];
                *acc_j += match ct.zo {
                    Some(zo) => sa * ct.s * (isum - zo * qsum as f32),
                    None => sa * (ct.s * isum + ct.c * qsum as f32),
                };
            }
        }
    });
}

/// Σ a·v, exact: i32 partial sums over 32 values (|Σ| ≤ 32·255·255 < 2^21), i64 across them.
pub(crate) fn dot_i32(a: impl Iterator<Item = i32>, v: &[i32]) -> i64 {
    let mut total = 0i64;
    let mut part = 0i32;
    for (i, (x, &y)) in a.zip(v).enumerate() {
        part += x * y;
        if i % 32 == 31 {
            total += part as i64;
            part = 0;
        }
    }
    total + part as i64
}
