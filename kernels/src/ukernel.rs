//! Kernel descriptors ([`UKernel`]: data, not trait objects) and the arguments of one tile ([`RunArgs`]).
//!
//! A kernel says what it computes (path), what it reads (an LHS format, and either one RHS layout or any),
//! which CPU features it needs (a set), which (bits, block size) it takes, and — asked at run time, so that
//! SVE/SME kernels can answer from the vector length — its tile geometry. Families pair kernels
//! (`crate::family`); only [`crate::family::Selected`] calls `run`, after checking every buffer.

use crate::cpu::{Cpu, Features, Isa};
use crate::pack::{LhsFormat, RhsLayout};
use crate::problem::ComputePath;

/// What RHS layouts a kernel reads.
#[derive(Debug, Clone, Copy)]
pub enum RhsReads {
    /// Any layout (descriptor-driven readers: the portable kernels).
    Any,
    /// Any layout with this property (descriptor-driven readers that need e.g. block sums).
    Where(fn(&RhsLayout) -> bool),
    /// Exactly the layout this function returns for the CPU (SIMD kernels; SVE/SME ones size it by VL).
    Only(fn(&Cpu) -> RhsLayout),
}

/// Tile geometry of a kernel for one CPU and layout, asked at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Rows per register tile: row ranges given to the kernel start at multiples of it (a multiple of the LHS
    /// format's mr).
    pub m_step: usize,
    /// Columns per register tile: column ranges start at multiples of it (a multiple of the layout's nr).
    pub n_step: usize,
    /// As a family's GEMV: the largest M it is chosen for (the GEMM takes larger M).
    pub max_m: usize,
    /// Tile hints for the planner: the fewest multiply-adds worth a task, and the most rows per task (cache
    /// blocking: one task's rows of A should stay in L1/L2 while it walks its weight panels).
    pub min_task_macs: usize,
    pub max_task_rows: usize,
    /// With a nonzero budget, tasks take more rows than `max_task_rows` where their packed int8 activations
    /// (rows × K bytes) stay within it, up to [`TilePlan::TALL_ROWS`](crate::plan::TilePlan::TALL_ROWS): fewer
    /// tasks per call repeat the column-side work each task does per panel (the row numerics' column weights) and
    /// leave fewer short tiles.
    pub task_lhs_bytes: usize,
    /// The fewest columns per task where the matrix has them (0: no floor): for kernels whose per-task set-up
    /// grows with the task's rows × K (the SME2 fp32 GEMM lays its rows out K-major per task), so that it is
    /// shared by that many columns.
    pub min_task_cols: usize,
}

impl Geometry {
    /// A geometry with the planner's default hints.
    pub const fn new(m_step: usize, n_step: usize, max_m: usize) -> Geometry {
        Geometry {
            m_step,
            n_step,
            max_m,
            min_task_macs: 1 << 16,
            max_task_rows: 32,
            task_lhs_bytes: 0,
            min_task_cols: 0,
        }
    }
}

/// One row of the registry. `name` is the kernel's file stem, its test and bench id, and what the log says.
/// Only this crate builds them (fields are crate-private), so safe code cannot pair a `run` with the wrong
/// formats or features.
#[derive(Debug)]
pub struct UKernel {
    pub(crate) name: &'static str,
    /// The rung the kernel belongs to (its name's suffix; `NIBBLE_ISA` caps by its features).
    pub(crate) isa: Isa,
    /// Every CPU feature `run` uses.
    pub(crate) requires: Features,
    /// The shortest SVE vector length (bytes) `run` is written for; 0 for kernels without SVE. SVE kernels that
    /// use a fixed part of the vector (e.g. 256 bits) state it here: a shorter vector cannot run them.
    pub(crate) min_sve_vl: usize,
    /// The streaming (SME) vector length (bytes) `run`'s streaming code is written for; 0 for any (or none).
    /// Selection takes the kernel only at this length; `run` still checks it per call.
    pub(crate) sme_svl: usize,
    pub(crate) path: ComputePath,
    pub(crate) lhs: LhsFormat,
    pub(crate) rhs: RhsReads,
    /// Whether the kernel handles this bit width and block size.
    pub(crate) supports: fn(bits: u32, bl: usize) -> bool,
    /// Tile geometry on this CPU for this layout.
    pub(crate) geometry: fn(&Cpu, &RhsLayout) -> Geometry,
    /// # Safety
    /// The CPU has every feature of `requires`; `RunArgs` describes live buffers as documented there, in this
    /// kernel's LHS format and a layout it reads; the row and column ranges start at multiples of the geometry's
    /// steps.
    pub(crate) run: unsafe fn(&RunArgs),
}

impl UKernel {
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn requires(&self) -> Features {
        self.requires
    }

    pub fn path(&self) -> ComputePath {
        self.path
    }

    pub fn lhs(&self) -> LhsFormat {
        self.lhs
    }

    pub fn rhs(&self) -> RhsReads {
        self.rhs
    }

    pub fn supports(&self, bits: u32, bl: usize) -> bool {
        (self.supports)(bits, bl)
    }

    pub fn geometry(&self, cpu: &Cpu, layout: &RhsLayout) -> Geometry {
        (self.geometry)(cpu, layout)
    }

    /// Whether the kernel reads `layout` on `cpu`.
    pub fn reads(&self, cpu: &Cpu, layout: &RhsLayout) -> bool {
        match self.rhs {
            RhsReads::Any => true,
            RhsReads::Where(f) => f(layout),
            RhsReads::Only(f) => f(cpu) == *layout,
        }
    }

    /// Whether `cpu` can run the kernel.
    pub fn runs_on(&self, cpu: &Cpu) -> bool {
        self.why_not_on(cpu).is_none()
    }

    /// Why `cpu` cannot run the kernel (the features it lacks, or its SVE vector length), or None if it can.
    pub fn why_not_on(&self, cpu: &Cpu) -> Option<String> {
        if !cpu.supports(self.requires) {
            return Some(format!("{} needs {}", self.name, self.requires.missing_from(cpu.features())));
        }
        let vl = cpu.sve_vl().unwrap_or(0);
        if vl < self.min_sve_vl {
            return Some(format!(
                "{} needs an SVE vector length of at least {} bytes (this CPU: {vl})",
                self.name, self.min_sve_vl
            ));
        }
        let svl = cpu.sme_svl().unwrap_or(0);
        (self.sme_svl != 0 && svl != self.sme_svl).then(|| {
            format!("{} is written for a streaming vector of {} bytes (this CPU: {svl})", self.name, self.sme_svl)
        })
    }
}

/// Arguments of one tile, by raw pointer so that asm kernels can read them at fixed offsets (checked below).
/// Pointers are already offset to the tile: `lhs` at the tile's first row (group), `lhs_scale`/`lhs_sum` at its
/// first row, `rhs` at its first panel, `dst` at (row 0, column 0) of the tile, `bias` at column 0 of the tile.
#[repr(C)]
#[derive(Debug)]
pub struct RunArgs {
    /// f32 values (F32) or bytes (int8 formats) in the kernel's LHS format.
    pub lhs: *const u8,
    /// int8 formats: per (row, block) activation scale, `blocks` per row, rows rounded up to the format's mr
    /// (`LhsFormat::scale_index`: row-major, or group-major in Qsi8DbP); null for F32.
    pub lhs_scale: *const f32,
    /// int8 formats: per (row, block) Σ q, laid out as `lhs_scale`; null for F32.
    pub lhs_sum: *const i32,
    /// Values per packed LHS row (= blocks · bl); an interleaved group holds mr rows of it.
    pub lhs_stride: usize,
    pub rhs: *const u8,
    /// Bytes per panel (all its records) and per record.
    pub rhs_panel_stride: usize,
    pub rhs_record: usize,
    /// Byte offsets inside a record: scales, zero points / corrections (if `has_zp`), block sums (if the
    /// layout has them).
    pub rhs_scales: usize,
    pub rhs_zp: usize,
    pub rhs_sums: usize,
    pub blocks: usize,
    pub bl: usize,
    pub bits: usize,
    /// 1 if records carry zero points or corrections, else every block has z = `default_zp`.
    pub has_zp: usize,
    pub default_zp: f32,
    /// `cols` values, or null.
    pub bias: *const f32,
    pub dst: *mut f32,
    /// f32 values per dst row.
    pub dst_stride: usize,
    pub rows: usize,
    pub cols: usize,
    /// The whole descriptor, for descriptor-driven (portable) kernels; fixed-layout kernels know theirs.
    pub layout: RhsLayout,
    /// 1 for the `ActQuant::Row` numerics: every `lhs_scale` is 1 (a kernel may skip the multiply by it, its
    /// result is the same bit for bit) and `bias` is null (the tile's row epilogue adds it after the kernel).
    pub row: usize,
    /// `qsi8dbp4x8`: the tile's first row group's block-0 record in the call's `PackedLhs::pairs` (the row factors
    /// in SMMLA's lane order, laid out once per call), and the bytes from one block's records to the next; null
    /// and 0 for other formats.
    pub lhs_pairs: *const f32,
    pub lhs_pairs_stride: usize,
    /// K values with a source: K when the weights have no K map (the values past it, up to blocks·bl, are zero
    /// padding a kernel may skip), else blocks·bl.
    pub k_used: usize,
}

const _: () = {
    assert!(core::mem::offset_of!(RunArgs, lhs) == 0x00);
    assert!(core::mem::offset_of!(RunArgs, rhs) == 0x20);
    assert!(core::mem::offset_of!(RunArgs, rhs_scales) == 0x38);
    assert!(core::mem::offset_of!(RunArgs, blocks) == 0x50);
    assert!(core::mem::offset_of!(RunArgs, default_zp) == 0x70);
    assert!(core::mem::offset_of!(RunArgs, dst) == 0x80);
    assert!(core::mem::offset_of!(RunArgs, cols) == 0x98);
    assert!(core::mem::offset_of!(RunArgs, layout) == 0xa0);
};
