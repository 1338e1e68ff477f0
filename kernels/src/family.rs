//! Kernel families and the one orchestration entry point.
//!
//! A [`Family`] is (GEMV kernel, GEMM kernel, one packed layout) for one compute path: the weights are packed
//! once in the family's layout and both kernels read them, the GEMV for M up to its `max_m` (decode), the GEMM
//! beyond (prefill). The registry ranks families explicitly. [`Selected`] is a family resolved for this CPU
//! (layout and geometry asked at run time) and one node's problem; holding one proves the CPU has every
//! feature of both kernels and that they take the node's bits and block size. [`Selected::matmul`] is the walk
//! of one call: pack A once in the format of the kernel that runs for this M, plan tiles from its geometry,
//! run the tiles on the caller's parallel-for. [`Selected::run_tile`] is the single safe → unsafe bridge.

use crate::cpu::Cpu;
use crate::format::{FormatError, Weights};
use crate::pack::{ActQuant, LhsSource, PAIR_ROW_F32, PackedLhs, PackedRhs, QuantizeBlocks, RhsLayout, Runs};
use crate::plan::{OutTiles, TilePlan};
use crate::problem::{ComputePath, Problem};
use crate::ukernel::{Geometry, RunArgs, UKernel};
use half::f16;

/// One row of the family table.
#[derive(Debug)]
pub struct Family {
    pub(crate) name: &'static str,
    /// Higher is preferred; ties are a registry bug (tested).
    pub(crate) rank: u32,
    /// Whether the family takes its rank for a problem on this CPU when nothing names it (`NIBBLE_FAMILIES`): where
    /// it runs but was not measured faster than what ranks below it and ORT's own kernel (e.g. a streaming vector
    /// length or a bit width its asm does not cover), the default ladder passes it over.
    pub(crate) ranked_for: fn(&Cpu, &Problem) -> bool,
    pub(crate) path: ComputePath,
    pub(crate) gemv: &'static UKernel,
    pub(crate) gemm: &'static UKernel,
    /// The packed layout on this CPU (SVE/SME families size it by vector length).
    pub(crate) layout: fn(&Cpu) -> RhsLayout,
}

impl Family {
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Whether the default ladder (nothing named) offers this family for `p` on `cpu` (see `ranked_for`).
    pub fn ranked_for(&self, cpu: &Cpu, p: &Problem) -> bool {
        (self.ranked_for)(cpu, p)
    }

    pub fn path(&self) -> ComputePath {
        self.path
    }

    pub fn gemv(&self) -> &'static UKernel {
        self.gemv
    }

    pub fn gemm(&self) -> &'static UKernel {
        self.gemm
    }

    pub fn layout(&self, cpu: &Cpu) -> RhsLayout {
        (self.layout)(cpu)
    }

    /// Why this family cannot serve `p` on `cpu`, or None if it can.
    pub fn why_not(&self, cpu: &Cpu, p: &Problem) -> Option<String> {
        if self.path != p.path {
            return Some(format!("{} is a {} family", self.name, self.path.name()));
        }
        let layout = self.layout(cpu);
        [self.gemv, self.gemm].into_iter().find_map(|k| kernel_why_not(k, cpu, p, &layout))
    }
}

/// Why kernel `k` cannot compute `p` from weights packed in `layout` on `cpu`, or None if it can: the one check
/// behind every `Selected`.
fn kernel_why_not(k: &UKernel, cpu: &Cpu, p: &Problem, layout: &RhsLayout) -> Option<String> {
    if let Some(why) = k.why_not_on(cpu) {
        return Some(why);
    }
    if k.path != p.path || !k.supports(p.bits, p.block_size) {
        return Some(format!("{} does not take {p}", k.name));
    }
    if let Some(why) = layout.why_not(p) {
        return Some(why);
    }
    (!k.reads(cpu, layout)).then(|| format!("{} does not read {layout}", k.name))
}

/// A family resolved for this process's CPU and one node's problem.
#[derive(Debug, Clone, Copy)]
pub struct Selected {
    name: &'static str,
    path: ComputePath,
    layout: RhsLayout,
    gemv: &'static UKernel,
    gemm: &'static UKernel,
    gemv_geometry: Geometry,
    gemm_geometry: Geometry,
    /// The activation quantizer for the CPU this was resolved for (same numbers on every CPU).
    quantize: QuantizeBlocks,
    /// The int8 path's activation numerics (the fp32 path has none: always `Block` there).
    act: ActQuant,
}

impl Selected {
    /// `family` for `p` on `cpu` (the capped CPU the registry chose for), checked against this process's real
    /// CPU as well: a table built for another CPU can never hand out a kernel this one cannot run.
    pub(crate) fn new(family: &'static Family, cpu: &Cpu, p: &Problem) -> Result<Selected, String> {
        let real = Cpu::get();
        if let Some(why) = family.why_not(cpu, p).or_else(|| family.why_not(real, p)) {
            return Err(why);
        }
        Self::build(family.name, family.path, family.layout(cpu), family.gemv, family.gemm, cpu)
    }

    /// One kernel in both roles reading `layout`, on this process's CPU: for tests and benchmarks that
    /// exercise one kernel. Err says why not (CPU lacks a feature, kernel or layout cannot take `p`).
    pub fn single(uk: &'static UKernel, layout: RhsLayout, p: &Problem) -> Result<Selected, String> {
        let cpu = Cpu::get();
        if let Some(why) = kernel_why_not(uk, cpu, p, &layout) {
            return Err(why);
        }
        Self::build(uk.name, uk.path, layout, uk, uk, cpu)
    }

    fn build(
        name: &'static str,
        path: ComputePath,
        layout: RhsLayout,
        gemv: &'static UKernel,
        gemm: &'static UKernel,
        cpu: &Cpu,
    ) -> Result<Selected, String> {
        let (gv, gm) = (gemv.geometry(cpu, &layout), gemm.geometry(cpu, &layout));
        for (k, g) in [(gemv, gv), (gemm, gm)] {
            // The planner relies on these: tiles of whole panels and whole LHS row groups.
            if g.m_step == 0 || g.n_step == 0 || !g.n_step.is_multiple_of(layout.nr) {
                return Err(format!("{}: n_step {} is not a multiple of nr {}", k.name, g.n_step, layout.nr));
            }
            if !g.m_step.is_multiple_of(k.lhs.mr()) {
                return Err(format!("{}: m_step {} is not a multiple of mr {}", k.name, g.m_step, k.lhs.mr()));
            }
        }
        let quantize = crate::arch::quantize_block_for(cpu);
        Ok(Selected {
            name,
            path,
            layout,
            gemv,
            gemm,
            gemv_geometry: gv,
            gemm_geometry: gm,
            quantize,
            act: ActQuant::Block,
        })
    }

    /// This selection with the int8 path's activations quantized in `act` (per session; `Block` is the
    /// default). The fp32 path has no activation numerics: it stays `Block` whatever `act` says.
    pub fn with_activation_quant(mut self, act: ActQuant) -> Selected {
        self.act = if self.path == ComputePath::Int8 { act } else { ActQuant::Block };
        self
    }

    /// The activation numerics calls run in.
    pub fn activation_quant(&self) -> ActQuant {
        self.act
    }

    /// The family's name (the kernel's, for [`Selected::single`]).
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn path(&self) -> ComputePath {
        self.path
    }

    pub fn layout(&self) -> RhsLayout {
        self.layout
    }

    pub fn gemv(&self) -> &'static UKernel {
        self.gemv
    }

    pub fn gemm(&self) -> &'static UKernel {
        self.gemm
    }

    /// The largest M the GEMV takes.
    pub fn gemv_max_m(&self) -> usize {
        self.gemv_geometry.max_m
    }

    /// The kernel that runs for M rows, and its geometry.
    pub fn kernel_for(&self, m: usize) -> (&'static UKernel, Geometry) {
        if m <= self.gemv_geometry.max_m { (self.gemv, self.gemv_geometry) } else { (self.gemm, self.gemm_geometry) }
    }

    /// Packs weights for this family (once, at session creation). Errors if the layout cannot hold them
    /// (zero points, scale precision, block geometry) or a kernel does not take their bits / block size.
    pub fn pack_rhs(&self, w: &Weights<'_>) -> Result<PackedRhs, FormatError> {
        self.check_weights(w)?;
        PackedRhs::pack(w, self.layout)
    }

    /// [`Selected::pack_rhs`] into a caller's buffer of [`PackedRhs::packed_len`] bytes (same checks, same bytes);
    /// read it back with [`Selected::borrow_rhs`].
    pub fn pack_rhs_into(&self, w: &Weights<'_>, out: &mut [u8]) -> Result<(), FormatError> {
        self.check_weights(w)?;
        PackedRhs::pack_into(w, self.layout, out)
    }

    /// Packed weights read in place from `bytes`, which [`Selected::pack_rhs_into`] filled for `w` (same checks).
    pub fn borrow_rhs(
        &self,
        w: &Weights<'_>,
        bytes: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>,
    ) -> Result<PackedRhs, FormatError> {
        self.check_weights(w)?;
        PackedRhs::borrowed(w, self.layout, bytes)
    }

    /// Refuses weights this family's layout cannot hold (zero points, scale precision, block geometry) or whose
    /// bits / block size a kernel does not take.
    fn check_weights(&self, w: &Weights<'_>) -> Result<(), FormatError> {
        let p = Problem::of(self.path, w);
        if let Some(why) = self.layout.why_not(&p) {
            return Err(FormatError(why));
        }
        if let Some(k) = [self.gemv, self.gemm].into_iter().find(|k| !k.supports(p.bits, p.block_size)) {
            return Err(FormatError(format!("{} does not take bits={} block_size={}", k.name, p.bits, p.block_size)));
        }
        Ok(())
    }

    /// Packs one call's activations in the format of the kernel that runs for `m` rows, on this thread.
    pub fn pack_lhs<'a>(&self, a: LhsSource<'a>, m: usize, rhs: &PackedRhs) -> PackedLhs<'a> {
        PackedLhs::pack_as(a, m, rhs, self.kernel_for(m).0.lhs, self.quantize, self.act)
    }

    /// [`Selected::pack_lhs`] through the parallel-for `par` (as in [`Selected::matmul`]) when M·K is large enough
    /// to pay for it ([`LHS_PACK_PARALLEL_MIN`]), else on this thread without calling `par`. The same result.
    pub fn pack_lhs_par<'a, E>(
        &self,
        a: LhsSource<'a>,
        m: usize,
        rhs: &PackedRhs,
        par: impl FnOnce(usize, &(dyn Fn(usize) + Sync)) -> Result<(), E>,
    ) -> Result<PackedLhs<'a>, E> {
        self.pack_lhs_tasks(a, m, rhs, lhs_pack_tasks(m, rhs.params.k), par)
    }

    /// [`Selected::pack_lhs`] in up to `tasks` chunks of whole row groups through `par` (benchmarks, tests).
    pub fn pack_lhs_tasks<'a, E>(
        &self,
        a: LhsSource<'a>,
        m: usize,
        rhs: &PackedRhs,
        tasks: usize,
        par: impl FnOnce(usize, &(dyn Fn(usize) + Sync)) -> Result<(), E>,
    ) -> Result<PackedLhs<'a>, E> {
        PackedLhs::pack_par(a, m, rhs, self.kernel_for(m).0.lhs, self.quantize, self.act, tasks, par)
    }

    /// The tile grid for an M×N output.
    pub fn plan(&self, m: usize, rhs: &PackedRhs) -> TilePlan {
        TilePlan::new(m, rhs.params.n, rhs.k_packed(), &self.kernel_for(m).1)
    }

    /// One whole call: Y = A·Bᵀ (+ bias) into `out` (M×N). A is packed once (in chunks of rows through `par` when
    /// M·K is large enough, see [`LHS_PACK_PARALLEL_MIN`]); then the tiles run through `par`, a parallel-for
    /// (`par(tasks, f)` must call `f(t)` exactly once for each `t < tasks`, on any threads, and return when all
    /// are done; it may stop early with an error, which is returned).
    ///
    /// # Panics
    /// If `a` is not M·K values, `out` not M·N, `bias` not N, or `rhs` was packed for another family.
    pub fn matmul<E>(
        &self,
        rhs: &PackedRhs,
        a: LhsSource<'_>,
        m: usize,
        bias: Option<&[f32]>,
        out: &mut [f32],
        par: impl FnMut(usize, &(dyn Fn(usize) + Sync)) -> Result<(), E>,
    ) -> Result<(), E> {
        self.matmul_into(rhs, a, m, bias, out, None, par)
    }

    /// [`Selected::matmul`], each tile also rounded into `f16_out` (M·N) right after it is computed.
    #[allow(clippy::too_many_arguments)]
    fn matmul_into<E>(
        &self,
        rhs: &PackedRhs,
        a: LhsSource<'_>,
        m: usize,
        bias: Option<&[f32]>,
        out: &mut [f32],
        f16_out: Option<&mut [f16]>,
        mut par: impl FnMut(usize, &(dyn Fn(usize) + Sync)) -> Result<(), E>,
    ) -> Result<(), E> {
        assert_eq!(rhs.layout, self.layout, "weights were packed for another kernel family");
        if m == 0 {
            return Ok(());
        }
        let lhs = self.pack_lhs_par(a, m, rhs, &mut par)?;
        if lhs.act == ActQuant::Row {
            self.col_sums(rhs); // made once per packed weights, before the tiles wait on it
        }
        let plan = self.plan(m, rhs);
        let tiles = OutTiles::new(out, plan);
        let out16 = f16_out.map(|o| OutTiles::new(o, plan));
        let call = self.tile_call(&lhs, rhs, bias, &tiles);
        par(plan.count(), &|t| {
            call.run(t);
            if let Some(o) = &out16 {
                tiles.narrow_tile(t, o);
            }
        })
    }

    /// [`Selected::matmul`] into an f16 output (A of type f16): the tiles write f32 sums into this thread's
    /// output scratch, and each task rounds its tile into `out` right after computing it
    /// ([`OutTiles::narrow_tile`]: in parallel, from the core's cache). The scratch is kept between calls (up to
    /// 4 Mi values): a fresh M·N buffer each call page-faulted ~0.1 ms at 128 × 1536, a fifth of the whole call;
    /// and one serial conversion at the end read half the sums from the other core's cache (f16 calls 18% slower
    /// than f32 ones there, 2 threads).
    ///
    /// # Panics
    /// As [`Selected::matmul`].
    pub fn matmul_f16<E>(
        &self,
        rhs: &PackedRhs,
        a: LhsSource<'_>,
        m: usize,
        bias: Option<&[f32]>,
        out: &mut [f16],
        par: impl FnMut(usize, &(dyn Fn(usize) + Sync)) -> Result<(), E>,
    ) -> Result<(), E> {
        thread_local! {
            static Y: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
        }
        const KEEP: usize = 4 << 20;
        let mut y = Y.take();
        // Stale values are fine: every tile writes all its elements before they are read.
        y.resize(out.len(), 0.0);
        let r = self.matmul_into(rhs, a, m, bias, &mut y, Some(out), par);
        if y.capacity() <= KEEP {
            Y.set(y);
        }
        r
    }

    /// Σ_k w[n, k] per column over every packed K position, as this family's GEMV computes with the weights
    /// (the `Row` numerics' zero-point term): the GEMV run once on activations whose every packed value is 1
    /// (scale 1, Σq = the block size), so K tails, g_idx gaps and zero-point corrections are counted exactly as
    /// the kernels count them. Kept with the packed weights after the first call.
    pub fn col_sums<'r>(&self, rhs: &'r PackedRhs) -> &'r [f32] {
        rhs.col_sums.get_or_init(|| {
            let (k, n) = (rhs.params.k, rhs.params.n);
            let zeros = vec![0f32; k];
            let ones = PackedLhs::pack_as(LhsSource::F32(&zeros), 1, rhs, self.gemv.lhs, ones, ActQuant::Block);
            let mut out = vec![0f32; n];
            let plan = self.plan(1, rhs);
            let tiles = OutTiles::new(&mut out, plan);
            for t in 0..plan.count() {
                self.run_tile(&ones, rhs, None, &tiles, t);
            }
            drop(tiles);
            out
        })
    }

    /// Computes tile `t` of `out`: Y = A·Bᵀ (+ bias) for its rows and columns.
    ///
    /// # Panics
    /// If the buffers do not belong together (sizes, layout, LHS format, plan), the kernel does not take the
    /// weights' bits / block size, the tile is out of range, or it was already computed through this `out`.
    pub fn run_tile(&self, lhs: &PackedLhs<'_>, rhs: &PackedRhs, bias: Option<&[f32]>, out: &OutTiles<'_>, t: usize) {
        self.tile_call(lhs, rhs, bias, out).run(t);
    }

    /// The checks of [`Selected::run_tile`] that do not depend on the tile, made once per call: a call's tiles
    /// then cost only their offsets (a decode call is cut into up to 32 tiles, and the checks were ~300
    /// instructions each).
    ///
    /// # Panics
    /// As [`Selected::run_tile`], but for the tile's range and claim (checked by [`TileCall::run`]).
    fn tile_call<'c>(
        &self,
        lhs: &'c PackedLhs<'_>,
        rhs: &'c PackedRhs,
        bias: Option<&'c [f32]>,
        out: &'c OutTiles<'_>,
    ) -> TileCall<'c> {
        let plan = out.plan;
        let p = rhs.params;
        let (uk, g) = self.kernel_for(plan.m);
        assert_eq!(rhs.layout, self.layout, "weights were packed for another kernel family");
        assert!(uk.supports(p.bits, p.block_size), "{} does not take bits={} bl={}", uk.name, p.bits, p.block_size);
        assert_eq!(
            lhs.format,
            uk.lhs,
            "activations packed as {}, {} reads {}",
            lhs.format.name(),
            uk.name,
            uk.lhs.name()
        );
        assert_eq!(plan.n, p.n, "plan has N={}, weights N={}", plan.n, p.n);
        assert!(
            (plan.m_step, plan.n_step) == (g.m_step, g.n_step)
                && plan.m_tile.is_multiple_of(g.m_step)
                && plan.n_tile.is_multiple_of(g.n_step),
            "plan was made for another kernel's geometry"
        );
        // One slice for the check and the pointer: a borrowed buffer's `as_ref` is the caller's code and need not
        // return the same slice twice.
        let rhs_bytes = rhs.bytes();
        assert_eq!(rhs_bytes.len(), rhs.panels() * rhs.panel_bytes(), "packed weights truncated");
        if let Some(b) = bias {
            assert_eq!(b.len(), p.n, "bias has {} values, N = {}", b.len(), p.n);
        }
        let kp = rhs.k_packed();
        assert!(
            lhs.m == plan.m && lhs.k_packed == kp && lhs.blocks == rhs.blocks,
            "activations packed for another shape"
        );
        // The LHS must hold the plan's rows (int8 formats: rounded up to whole row groups).
        let f32_stride = lhs.f32_stride;
        let (lhs_ptr, lhs_scale, lhs_sum): (*const u8, *const f32, *const i32) = if lhs.format.is_f32() {
            assert_eq!(
                lhs.f32s.len(),
                plan.m * f32_stride,
                "activations hold {} values, plan needs {}x{f32_stride}",
                lhs.f32s.len(),
                plan.m
            );
            (lhs.f32s.as_ptr().cast(), std::ptr::null(), std::ptr::null())
        } else {
            let padded = plan.m.next_multiple_of(lhs.format.mr());
            let stride = lhs.int8_stride();
            assert_eq!(
                lhs.bytes.len(),
                padded * stride,
                "activations hold {} values, plan needs {padded}x{stride}",
                lhs.bytes.len()
            );
            let nb = rhs.blocks;
            assert!(
                lhs.scale.len() == padded * nb && lhs.sum.len() == padded * nb,
                "activations hold {} scales and {} sums, plan needs {padded}x{nb}",
                lhs.scale.len(),
                lhs.sum.len()
            );
            (lhs.bytes.as_ptr(), lhs.scale.as_ptr(), lhs.sum.as_ptr())
        };
        let (lhs_pairs, lhs_pairs_stride) = if lhs.pairs.is_empty() {
            (std::ptr::null(), 0)
        } else {
            let groups = plan.m.div_ceil(4);
            assert_eq!(lhs.pairs.len(), groups * rhs.blocks * PAIR_ROW_F32, "activations' row pairs for another shape");
            (lhs.pairs.as_ptr(), groups * PAIR_ROW_F32 * 4)
        };
        let row = lhs.act == ActQuant::Row;
        let col_sums = if row { self.col_sums(rhs) } else { &[][..] };
        let rec = rhs.record;
        let lhs_stride = if lhs.format.is_f32() { f32_stride } else { lhs.int8_stride() };
        let args = RunArgs {
            lhs: lhs_ptr,
            lhs_scale,
            lhs_sum,
            lhs_stride,
            rhs: rhs_bytes.as_ptr(),
            rhs_panel_stride: rhs.panel_bytes(),
            rhs_record: rec.bytes,
            rhs_scales: rec.scales,
            rhs_zp: rec.zp,
            rhs_sums: rec.sums,
            blocks: rhs.blocks,
            bl: p.block_size,
            bits: p.bits as usize,
            has_zp: rec.has_zp as usize,
            default_zp: p.default_zero_point() as f32,
            bias: if row { std::ptr::null() } else { bias.map_or(std::ptr::null(), |b| b.as_ptr()) },
            dst: out.ptr,
            dst_stride: p.n,
            rows: 0,
            cols: 0,
            layout: self.layout,
            row: row as usize,
            lhs_pairs,
            lhs_pairs_stride,
            k_used: if rhs.k_map.is_some() { kp } else { p.k },
        };
        let scale_rows = if lhs.format.is_f32() { 0 } else { rhs.blocks };
        let finish_row = crate::arch::finish_row_for(uk);
        TileCall { uk, lhs, _rhs: rhs, bias, out, col_sums, args, scale_rows, finish_row }
    }
}

/// `p + n`, or null for a null `p` (the kernels test optional pointers for null).
fn offset<T>(p: *const T, n: usize) -> *const T {
    if p.is_null() { p } else { p.wrapping_add(n) }
}

/// One call's tiles after [`Selected::tile_call`]'s checks: `args` describes the whole output (rows and columns
/// 0, the pointers at row 0 and column 0); [`TileCall::run`] moves them to a tile.
struct TileCall<'c> {
    uk: &'static UKernel,
    lhs: &'c PackedLhs<'c>,
    /// The packed weights `args.rhs` points into, borrowed as long as the call.
    _rhs: &'c PackedRhs,
    bias: Option<&'c [f32]>,
    out: &'c OutTiles<'c>,
    col_sums: &'c [f32],
    args: RunArgs,
    /// Per-row entries of the LHS scales and Σq (the blocks; 0 for f32 activations, which have none).
    scale_rows: usize,
    /// The row numerics' epilogue for `uk`'s tiles.
    finish_row: crate::arch::FinishRow,
}

// SAFETY: the raw pointers in `args` point into buffers that the borrowed `lhs`, `rhs`, `bias` and `out` keep
// alive and that the tiles only read, but for the output, which `out` hands out tile by tile through an atomic
// claim (disjoint elements per worker), as `OutTiles` itself is Sync.
unsafe impl Sync for TileCall<'_> {}

impl TileCall<'_> {
    /// Computes tile `t`.
    ///
    /// # Panics
    /// If the tile is out of range or was already computed through this output.
    fn run(&self, t: usize) {
        let plan = self.out.plan;
        assert!(t < plan.count(), "tile {t} out of range ({} tiles)", plan.count());
        let (m0, rows, n0, cols) = plan.tile(t);
        assert!(self.out.claim(t), "tile {t} computed twice into the same output");
        let a = &self.args;
        let nr = a.layout.nr;
        let args = RunArgs {
            // Offsets inside the buffers `tile_call` checked against the plan: rows m0.. of the LHS (its scales
            // and Σq row-major or group-major, `scale_index` of a group's first row either way: m0 is a
            // multiple of the kernel's m_step, whole row groups), its row pairs (m0 / 4 groups), panel n0 / nr.
            lhs: a.lhs.wrapping_add(m0 * a.lhs_stride * if self.lhs.format.is_f32() { 4 } else { 1 }),
            lhs_scale: a.lhs_scale.wrapping_add(m0 * self.scale_rows),
            lhs_sum: a.lhs_sum.wrapping_add(m0 * self.scale_rows),
            lhs_pairs: offset(a.lhs_pairs, (m0 / 4) * PAIR_ROW_F32),
            rhs: a.rhs.wrapping_add((n0 / nr) * a.rhs_panel_stride),
            bias: offset(a.bias, n0),
            // SAFETY: (m0, n0) is inside the M×N buffer `out` borrows (tile from the plan it was built with).
            dst: unsafe { self.out.ptr.add(m0 * a.dst_stride + n0) },
            rows,
            cols,
            ..*a
        };
        // SAFETY: `uk` runs on this CPU (a `Selected` is only built after checking its feature set against
        // `Cpu::get()`), reads this layout and takes these bits/block size (checked when built, and in
        // `tile_call`); `tile_call`'s checks tie LHS format and sizes, RHS and bias sizes to the plan, whose
        // tiles start at multiples of the kernel's steps; the tile was claimed exactly once, so no other worker
        // writes its elements, and `out` holds the exclusive borrow of the output.
        unsafe { (self.uk.run)(&args) }
        if a.row != 0 {
            // SAFETY: the kernel has written the tile's rows × cols through `args.dst`, which this call claimed;
            // `lhs.row` holds the plan's M rows (from m0: the tile's), the sums and bias N columns (from n0);
            // `finish_row` is `uk`'s, whose features this CPU has (as for `uk.run`).
            unsafe { (self.finish_row)(&args, &self.lhs.row[m0..], &self.col_sums[n0..], self.bias.map(|b| &b[n0..])) }
        }
    }
}

/// The [`QuantizeBlocks`] of [`Selected::col_sums`]: every value's code is 1, each block's scale 1 and Σq its
/// length.
fn ones(a: &[f32], bl: usize, dst: &mut [u8], runs: Runs, out: &mut [(f32, i32)]) {
    crate::pack::for_each_block(a, bl, dst, runs, out, |a, dst| {
        for i in 0..a.len() {
            dst[runs.at(i)] = 1 ^ runs.flip;
        }
        (1.0, a.len() as i32)
    });
}

/// M·K (activation values) from which [`Selected::matmul`] packs A in parallel, measured through ORT's intra-op
/// pool on this repository's shared x86 box (2 cores, AVX-512 quantizer, ~1 core busy with other work;
/// `bench/bench_matmulnbits.py --shapes 576x128,2048x128,4096x128 --m 4,16,64,128,512,1024,2048 --threads 2
/// --bs 32 --zp sym --acc 4 --library libnibble_ort.so --domain nibble`, NIBBLE_LHS_PACK_PARALLEL_MIN=1 vs never):
/// the extra parallel section costs ~30 µs there, so packing in parallel lost ~30 µs per call up to M·K = 1M
/// (K 2048, M 512: 1238 → 1354 µs), broke even at 2M (K 4096, M 512: 5889 → 5903 µs) and won from 4M
/// (K 4096, M 1024: 10896 → 10349 µs; M 2048: 18003 → 15986 µs). Serial packing runs at ~0.4 ns per value.
/// `NIBBLE_LHS_PACK_PARALLEL_MIN` overrides it (read once; for measuring it on another machine).
pub const LHS_PACK_PARALLEL_MIN: usize = 1 << 21;

fn lhs_pack_parallel_min() -> usize {
    static MIN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| {
        std::env::var("NIBBLE_LHS_PACK_PARALLEL_MIN").ok().and_then(|v| v.parse().ok()).unwrap_or(LHS_PACK_PARALLEL_MIN)
    })
}

/// How many tasks to pack M rows of K values in: 1 below the threshold ([`LHS_PACK_PARALLEL_MIN`]), else one per
/// half the threshold (so the smallest parallel pack has two), at least 2, at most 4 per core.
fn lhs_pack_tasks(m: usize, k: usize) -> usize {
    let (values, min) = (m.saturating_mul(k), lhs_pack_parallel_min());
    if values < min {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (values / (min / 2).max(1)).clamp(2, 4 * cores.max(1))
}

/// [`Selected::matmul`] on the calling thread (tests, benchmarks, callers without a thread pool).
pub fn matmul_serial(
    sel: &Selected,
    rhs: &PackedRhs,
    a: LhsSource<'_>,
    m: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let r: Result<(), std::convert::Infallible> = sel.matmul(rhs, a, m, bias, out, |n, f| {
        (0..n).for_each(f);
        Ok(())
    });
    let Ok(()) = r;
}
