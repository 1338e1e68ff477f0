//! Cutting one call's M×N output into tiles (tasks for the caller's thread pool), from the geometry of the
//! kernel that runs, and handing the output out tile by tile.

use crate::ukernel::Geometry;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

/// How one call's M×N output is cut into tiles (row-major tile index: `mt · n_tiles + nt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TilePlan {
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) m_tile: usize,
    pub(crate) n_tile: usize,
    /// The steps of the kernel this plan was made for (tiles are whole multiples of them).
    pub(crate) m_step: usize,
    pub(crate) n_step: usize,
}

impl TilePlan {
    /// Most tasks per call: enough to feed a thread pool whose size we are not told, few enough that each is
    /// worth scheduling.
    pub const TARGET_TILES: usize = 32;

    /// Fewest tasks a call is cut into where the rows allow: tiles of 128 rows or more are halved (not below 64)
    /// until there are this many or a multiple of 4, so that a pool of a few threads gets an even share (9 column
    /// tiles of one 128-row tile leave 2 threads 5 and 4 tasks) without cutting tiles smaller than that needs
    /// (each tile dequantizes its weights again: 512 × 576→192 in 12 tiles of 132 rows measured 5% faster than
    /// in 24 of 66, one thread).
    pub const MIN_TILES: usize = 16;

    /// Most rows a task takes through a geometry's `task_lhs_bytes` budget.
    pub const TALL_ROWS: usize = 128;

    /// The most rows per task for `g` at depth `k`: `max_task_rows`, or more within the activation budget.
    fn max_rows(g: &Geometry, k: usize) -> usize {
        let floor = g.max_task_rows.max(1);
        if g.task_lhs_bytes == 0 {
            return floor;
        }
        (g.task_lhs_bytes / k.max(1)).clamp(floor, Self::TALL_ROWS.max(floor))
    }

    /// Tiles of whole register tiles (`m_step × n_step`), at most `max_task_rows` rows (rounded up to m_step),
    /// at least `min_task_macs` multiply-adds where the matrix allows, and up to [`Self::TARGET_TILES`] of them.
    pub fn new(m: usize, n: usize, k: usize, g: &Geometry) -> Self {
        let (m_step, n_step) = (g.m_step.max(1), g.n_step.max(1));
        let units = n.div_ceil(n_step);
        let mut m_tile = m.clamp(1, Self::max_rows(g, k)).next_multiple_of(m_step);
        while m_tile >= 128
            && m.div_ceil(m_tile) * units < Self::MIN_TILES
            && !(m.div_ceil(m_tile) * units).is_multiple_of(4)
        {
            m_tile = (m_tile / 2).next_multiple_of(m_step);
        }
        let m_tiles = m.div_ceil(m_tile).max(1);
        let want_n_tiles = (Self::TARGET_TILES / m_tiles).max(1);
        let min_units =
            g.min_task_macs.div_ceil(m_tile.min(m.max(1)) * n_step * k.max(1)).max(g.min_task_cols.div_ceil(n_step));
        let units_per_tile = units.div_ceil(want_n_tiles).max(min_units).clamp(1, units.max(1));
        TilePlan { m, n, m_tile, n_tile: units_per_tile * n_step, m_step, n_step }
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
/// two workers never write the same element; the borrow of the output lasts as long as this value. `T`: the
/// output's element (the kernels write f32; an f16 output is filled tile by tile from an f32 one,
/// [`OutTiles::narrow_tile`]).
pub struct OutTiles<'a, T = f32> {
    pub(crate) ptr: *mut T,
    pub(crate) plan: TilePlan,
    claimed: Vec<AtomicBool>,
    _out: PhantomData<&'a mut [T]>,
}

// SAFETY: the raw pointer is only dereferenced for tiles claimed through an atomic flag, so concurrent users
// write disjoint elements; the PhantomData keeps the exclusive borrow of the buffer alive. T is plain data (f32,
// f16): sending it between threads is sound.
unsafe impl<T: Send> Send for OutTiles<'_, T> {}
// SAFETY: as above: shared access only hands out disjoint, claimed tiles.
unsafe impl<T: Send> Sync for OutTiles<'_, T> {}

impl<'a, T> OutTiles<'a, T> {
    /// # Panics
    /// If `out` is not M·N long.
    pub fn new(out: &'a mut [T], plan: TilePlan) -> Self {
        assert_eq!(out.len(), plan.m * plan.n, "output holds {} values, plan needs {}x{}", out.len(), plan.m, plan.n);
        let claimed = (0..plan.count()).map(|_| AtomicBool::new(false)).collect();
        OutTiles { ptr: out.as_mut_ptr(), plan, claimed, _out: PhantomData }
    }

    pub fn plan(&self) -> TilePlan {
        self.plan
    }

    /// Claims tile `t` for writing; false if it was claimed before.
    pub(crate) fn claim(&self, t: usize) -> bool {
        !self.claimed[t].swap(true, Ordering::AcqRel)
    }
}

impl OutTiles<'_, f32> {
    /// Rounds tile `t` of this output into the same tile of `dst` (f16, same plan), claiming it there. The
    /// caller has just computed tile `t` through this output on this thread (`TileCall::run`): its claim is the
    /// caller's, so no one else writes the values read here.
    ///
    /// # Panics
    /// If the plans differ, tile `t` was not claimed here, or it was claimed in `dst` before.
    pub(crate) fn narrow_tile(&self, t: usize, dst: &OutTiles<'_, half::f16>) {
        assert_eq!(self.plan, dst.plan, "f16 output cut by another plan");
        assert!(self.claimed[t].load(Ordering::Acquire), "tile {t} narrowed before it was computed");
        assert!(dst.claim(t), "tile {t} narrowed twice into the same output");
        let (m0, rows, n0, cols) = self.plan.tile(t);
        for r in m0..m0 + rows {
            let at = r * self.plan.n + n0;
            // SAFETY: row r's columns n0..n0 + cols of tile t lie inside both M×N buffers (the plan's tile); tile
            // t is this caller's in `self` (computed by it, per this function's contract) and was just claimed in
            // `dst`, so nothing else reads or writes these elements meanwhile.
            let (src, out) = unsafe {
                (
                    std::slice::from_raw_parts(self.ptr.add(at), cols),
                    std::slice::from_raw_parts_mut(dst.ptr.add(at), cols),
                )
            };
            crate::pack::narrow_f16(src, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_are_whole_steps_and_cover_the_output() {
        for (m, n, k) in [(1, 4096, 4096), (1, 5, 93), (7, 300, 288), (100, 1027, 1031), (512, 576, 576)] {
            for g in [Geometry::new(1, 8, 1), Geometry::new(4, 16, 3), Geometry::new(6, 64, 1)] {
                let p = TilePlan::new(m, n, k, &g);
                assert_eq!(p.m_tile % g.m_step, 0);
                assert_eq!(p.n_tile % g.n_step, 0);
                assert!(p.count() <= TilePlan::TARGET_TILES * 2, "{m}x{n}: {} tiles", p.count());
                let mut covered = vec![0u8; m * n];
                for t in 0..p.count() {
                    let (m0, rows, n0, cols) = p.tile(t);
                    for r in m0..m0 + rows {
                        for c in n0..n0 + cols {
                            covered[r * n + c] += 1;
                        }
                    }
                }
                assert!(covered.iter().all(|&c| c == 1));
            }
        }
        // Tall tiles are halved until the call has MIN_TILES tasks or a multiple of 4: 128 rows × 9 column steps
        // → 2 × 9; 512 rows × 3 → 4 × 3.
        let tall = Geometry { max_task_rows: 256, ..Geometry::new(6, 64, usize::MAX) };
        assert_eq!(TilePlan::new(128, 576, 576, &tall).tile_shape().0, 66);
        assert_eq!(TilePlan::new(128, 576, 576, &tall).count(), 18);
        assert_eq!(TilePlan::new(512, 576, 576, &tall).tile_shape().0, 258);
        assert_eq!(TilePlan::new(512, 1536, 576, &tall).count(), 2 * 12);
        assert_eq!(TilePlan::new(512, 192, 576, &tall).tile_shape().0, 132);
        assert_eq!(TilePlan::new(512, 192, 576, &tall).count(), 12);
        // An activation budget: 256 KiB of int8 rows per task, from 32 rows up to TALL_ROWS.
        let budget = Geometry { task_lhs_bytes: 256 << 10, ..Geometry::new(4, 8, usize::MAX) };
        assert_eq!(TilePlan::new(128, 2048, 2048, &budget).tile_shape().0, 128);
        assert_eq!(TilePlan::new(128, 4096, 4096, &budget).tile_shape().0, 64);
        assert_eq!(TilePlan::new(128, 14336, 14336, &budget).tile_shape().0, 32);
        assert_eq!(TilePlan::new(512, 192, 576, &budget).tile_shape().0, 128);
        assert_eq!(TilePlan::new(128, 2048, 2048, &Geometry::new(4, 8, usize::MAX)).tile_shape().0, 32);
        // Decode shapes are split along N into many tasks; a tiny matrix stays one task.
        assert!(TilePlan::new(1, 4096, 4096, &Geometry::new(1, 8, 1)).count() >= 16);
        assert_eq!(TilePlan::new(1, 5, 93, &Geometry::new(1, 8, 1)).count(), 1);
    }
}
