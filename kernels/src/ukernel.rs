//! Kernel descriptors and the one safe → unsafe bridge.
//!
//! A [`UKernel`] is a row of the registry: data, not a trait object. [`Selected`] is the pair (M = 1 kernel,
//! M > 1 kernel) chosen for one node, sharing one packed weight layout; only the registry constructs it, so
//! holding one proves the CPU has the ISA. [`Selected::run_tile`] checks every buffer and range, then makes
//! the single `unsafe` call into the arch kernel.

use crate::cpu::Isa;
use crate::pack::{ComputePath, PackedLhs, PackedRhs, RhsLayout};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a kernel is meant for one row (decode) or many (prefill).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Gemv,
    Gemm,
    /// Both (the portable kernels).
    Any,
}

/// One row of the registry. `name` is the kernel's file stem, its test and bench id, and what the log says.
/// Only this crate builds them (fields are crate-private), so safe code cannot pair a `run` with the wrong
/// formats or ISA.
#[derive(Debug)]
pub struct UKernel {
    pub(crate) name: &'static str,
    pub(crate) isa: Isa,
    pub(crate) path: ComputePath,
    pub(crate) role: Role,
    /// The RHS layout the kernel reads; `None` for kernels that read any `qnb` layout (portable).
    pub(crate) rhs: Option<RhsLayout>,
    /// Rows per register tile: tiles are split on multiples of it.
    pub(crate) m_step: usize,
    /// Whether the kernel handles this bit width and block size.
    pub(crate) supports: fn(bits: u32, bl: usize) -> bool,
    /// # Safety
    /// The CPU has `isa`; `RunArgs` describes live buffers as documented there.
    pub(crate) run: unsafe fn(&RunArgs),
}

impl UKernel {
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn path(&self) -> ComputePath {
        self.path
    }

    pub fn role(&self) -> Role {
        self.role
    }
}

/// Arguments of one tile, by raw pointer so that asm kernels can read them at fixed offsets.
/// Pointers are already offset to the tile: `lhs*` at row 0 of the tile, `rhs` at its first panel, `dst` at
/// (row 0, column 0) of the tile, `bias` at column 0 of the tile.
#[repr(C)]
#[derive(Debug)]
pub struct RunArgs {
    /// f32 (fp32 path) or i8 (int8 path) rows of `lhs_stride` values.
    pub lhs: *const u8,
    /// int8 path: per (row, block) activation scale, `blocks` per row; null on the fp32 path.
    pub lhs_scale: *const f32,
    /// int8 path: per (row, block) Σ q_a; null on the fp32 path.
    pub lhs_sum: *const i32,
    /// Values per LHS row (= blocks · bl).
    pub lhs_stride: usize,
    pub rhs: *const u8,
    pub rhs_panel_stride: usize,
    pub rhs_record: usize,
    pub rhs_code_bytes: usize,
    pub blocks: usize,
    pub bl: usize,
    pub bits: usize,
    pub nr: usize,
    pub kr: usize,
    /// 1 if records carry zero points, else `default_zp` applies.
    pub has_zp: usize,
    pub default_zp: f32,
    /// `cols` values, or null.
    pub bias: *const f32,
    pub dst: *mut f32,
    /// f32 values per dst row.
    pub dst_stride: usize,
    pub rows: usize,
    pub cols: usize,
}

const _: () = {
    assert!(core::mem::offset_of!(RunArgs, lhs) == 0x00);
    assert!(core::mem::offset_of!(RunArgs, rhs) == 0x20);
    assert!(core::mem::offset_of!(RunArgs, blocks) == 0x40);
    assert!(core::mem::offset_of!(RunArgs, default_zp) == 0x70);
    assert!(core::mem::offset_of!(RunArgs, dst) == 0x80);
    assert!(core::mem::offset_of!(RunArgs, cols) == 0x98);
};

/// How one call's M×N output is cut into tiles (row-major tile index: `mt · n_tiles + nt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TilePlan {
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) m_tile: usize,
    pub(crate) n_tile: usize,
}

impl TilePlan {
    /// Tiles big enough to amortise a task (≥ ~64k multiply-adds) and numerous enough (up to ~32) to feed a
    /// thread pool whose size we are not told.
    pub fn new(m: usize, n: usize, k: usize, nr: usize, m_step: usize) -> Self {
        const TARGET_TILES: usize = 32;
        const MIN_MACS: usize = 1 << 16;
        let m_tile = m.clamp(1, 32).next_multiple_of(m_step.max(1));
        let m_tiles = m.div_ceil(m_tile).max(1);
        let panels = n.div_ceil(nr);
        let want_n_tiles = (TARGET_TILES / m_tiles).max(1);
        let min_panels = MIN_MACS.div_ceil(m_tile.min(m.max(1)) * nr * k.max(1));
        let panels_per_tile = panels.div_ceil(want_n_tiles).max(min_panels).clamp(1, panels.max(1));
        TilePlan { m, n, m_tile, n_tile: panels_per_tile * nr }
    }

    /// Rows and columns of the output.
    pub fn shape(&self) -> (usize, usize) {
        (self.m, self.n)
    }

    /// Rows and columns of a (full) tile.
    pub fn tile_shape(&self) -> (usize, usize) {
        (self.m_tile, self.n_tile)
    }

    pub fn m_tiles(&self) -> usize {
        self.m.div_ceil(self.m_tile)
    }

    pub fn n_tiles(&self) -> usize {
        self.n.div_ceil(self.n_tile)
    }

    pub fn count(&self) -> usize {
        self.m_tiles() * self.n_tiles()
    }

    /// (first row, rows, first column, columns) of tile `t`.
    pub fn tile(&self, t: usize) -> (usize, usize, usize, usize) {
        let (mt, nt) = (t / self.n_tiles(), t % self.n_tiles());
        let (m0, n0) = (mt * self.m_tile, nt * self.n_tile);
        (m0, self.m_tile.min(self.m - m0), n0, self.n_tile.min(self.n - n0))
    }
}

/// The output of one call, handed out tile by tile to concurrent workers. Each tile can be claimed once, so
/// two workers never write the same element; the borrow of the output lasts as long as this value.
pub struct OutTiles<'a> {
    ptr: *mut f32,
    plan: TilePlan,
    claimed: Vec<AtomicBool>,
    _out: PhantomData<&'a mut [f32]>,
}

// SAFETY: the raw pointer is only dereferenced for tiles claimed through an atomic flag, so concurrent users
// write disjoint elements; the PhantomData keeps the exclusive borrow of the buffer alive.
unsafe impl Send for OutTiles<'_> {}
// SAFETY: as above: shared access only hands out disjoint, claimed tiles.
unsafe impl Sync for OutTiles<'_> {}

impl<'a> OutTiles<'a> {
    /// # Panics
    /// If `out` is not M·N long.
    pub fn new(out: &'a mut [f32], plan: TilePlan) -> Self {
        assert_eq!(out.len(), plan.m * plan.n, "output holds {} values, plan needs {}x{}", out.len(), plan.m, plan.n);
        let claimed = (0..plan.count()).map(|_| AtomicBool::new(false)).collect();
        OutTiles { ptr: out.as_mut_ptr(), plan, claimed, _out: PhantomData }
    }

    pub fn plan(&self) -> TilePlan {
        self.plan
    }
}

/// The kernels chosen for one node: one for M = 1, one for M > 1, reading the same packed weights.
#[derive(Debug, Clone, Copy)]
pub struct Selected {
    pub(crate) gemv: &'static UKernel,
    pub(crate) gemm: &'static UKernel,
    pub(crate) layout: RhsLayout,
    pub(crate) path: ComputePath,
}

impl Selected {
    /// One kernel in both roles, reading `layout` (default: the kernel's own, or the registry default).
    /// For tests and benchmarks that exercise a specific kernel. None if this process's CPU lacks the kernel's
    /// ISA or the kernel cannot read that layout or block size.
    pub fn single(uk: &'static UKernel, layout: Option<RhsLayout>, bits: u32, bl: usize) -> Option<Selected> {
        let cpu = crate::Cpu::get();
        let layout = match (uk.rhs, layout) {
            (Some(own), Some(l)) if own != l => return None,
            (Some(own), _) => own,
            (None, l) => l.unwrap_or(crate::registry::DEFAULT_LAYOUT),
        };
        (cpu.has(uk.isa) && (uk.supports)(bits, bl) && layout.supports(bits, bl)).then_some(Selected {
            gemv: uk,
            gemm: uk,
            layout,
            path: uk.path,
        })
    }

    pub fn path(&self) -> ComputePath {
        self.path
    }

    pub fn layout(&self) -> RhsLayout {
        self.layout
    }

    pub fn gemv_name(&self) -> &'static str {
        self.gemv.name
    }

    pub fn gemm_name(&self) -> &'static str {
        self.gemm.name
    }

    /// Packs weights for these kernels (once, at session creation).
    pub fn pack_rhs(&self, w: &crate::format::Weights<'_>) -> PackedRhs {
        PackedRhs::pack(w, self.layout)
    }

    /// Packs one call's activations (once per call, before the tiles run).
    pub fn pack_lhs(&self, a: crate::pack::LhsSource<'_>, m: usize, rhs: &PackedRhs) -> PackedLhs {
        PackedLhs::pack(a, m, rhs, self.path)
    }

    /// The tile grid for an M×N output.
    pub fn plan(&self, m: usize, rhs: &PackedRhs) -> TilePlan {
        let uk = self.kernel_for(m);
        TilePlan::new(m, rhs.params.n, rhs.k_packed(), self.layout.nr, uk.m_step)
    }

    fn kernel_for(&self, m: usize) -> &'static UKernel {
        if m == 1 { self.gemv } else { self.gemm }
    }

    /// Computes tile `t` of `out`: Y = A·Bᵀ (+ bias) for its rows and columns.
    ///
    /// # Panics
    /// If the buffers do not belong together (sizes, layout, path), the tile is out of range, or it was
    /// already computed through this `out`.
    pub fn run_tile(&self, lhs: &PackedLhs, rhs: &PackedRhs, bias: Option<&[f32]>, out: &OutTiles<'_>, t: usize) {
        let plan = out.plan;
        let p = rhs.params;
        assert_eq!(rhs.layout, self.layout, "weights were packed for another kernel family");
        assert_eq!(lhs.path(), self.path, "activations were packed for another compute path");
        assert_eq!(plan.n, p.n, "plan has N={}, weights N={}", plan.n, p.n);
        assert_eq!(plan.n_tile % self.layout.nr, 0, "column tiles must be whole panels");
        assert!(t < plan.count(), "tile {t} out of range ({} tiles)", plan.count());
        assert_eq!(rhs.bytes().len(), rhs.panels() * rhs.blocks * rhs.record_bytes(), "packed weights truncated");
        if let Some(b) = bias {
            assert_eq!(b.len(), p.n, "bias has {} values, N = {}", b.len(), p.n);
        }
        let (m0, rows, n0, cols) = plan.tile(t);
        let kp = rhs.k_packed();
        // The LHS must hold exactly the plan's rows: the kernel reads `rows` full rows from row m0.
        let (lhs_ptr, lhs_scale, lhs_sum): (*const u8, *const f32, *const i32) = match lhs {
            PackedLhs::F32 { data, .. } => {
                assert_eq!(
                    data.len(),
                    plan.m * kp,
                    "activations hold {} values, plan needs {}x{kp}",
                    data.len(),
                    plan.m
                );
                (data[m0 * kp..].as_ptr().cast(), std::ptr::null(), std::ptr::null())
            }
            PackedLhs::Int8 { blocks, q, scale, sum, .. } => {
                assert_eq!(*blocks, rhs.blocks, "activations packed for another K");
                assert_eq!(q.len(), plan.m * kp, "activations hold {} values, plan needs {}x{kp}", q.len(), plan.m);
                assert!(scale.len() == plan.m * rhs.blocks && sum.len() == plan.m * rhs.blocks, "activation scales");
                (q[m0 * kp..].as_ptr().cast(), scale[m0 * blocks..].as_ptr(), sum[m0 * blocks..].as_ptr())
            }
        };
        let uk = self.kernel_for(plan.m);
        assert_eq!(plan.m_tile % uk.m_step, 0, "row tiles must be whole register tiles of {}", uk.m_step);
        assert!(!out.claimed[t].swap(true, Ordering::AcqRel), "tile {t} computed twice into the same output");
        let panel_stride = rhs.blocks * rhs.record_bytes();
        let args = RunArgs {
            lhs: lhs_ptr,
            lhs_scale,
            lhs_sum,
            lhs_stride: kp,
            rhs: rhs.bytes()[(n0 / self.layout.nr) * panel_stride..].as_ptr(),
            rhs_panel_stride: panel_stride,
            rhs_record: rhs.record_bytes(),
            rhs_code_bytes: rhs.code_bytes(),
            blocks: rhs.blocks,
            bl: p.block_size,
            bits: p.bits as usize,
            nr: self.layout.nr,
            kr: self.layout.kr,
            has_zp: rhs.has_zp as usize,
            default_zp: p.default_zero_point() as f32,
            bias: bias.map_or(std::ptr::null(), |b| b[n0..].as_ptr()),
            // SAFETY: (m0, n0) is inside the M×N buffer `out` borrows (tile from the plan it was built with).
            dst: unsafe { out.ptr.add(m0 * p.n + n0) },
            dst_stride: p.n,
            rows,
            cols,
        };
        // SAFETY: `uk` comes from the registry filtered by this CPU's features (only `select` builds a
        // `Selected`); the checks above tie lhs/rhs/bias sizes to the plan; the tile was claimed exactly once,
        // so no other worker writes its elements, and `out` holds the exclusive borrow of the output.
        unsafe { (uk.run)(&args) }
    }
}
