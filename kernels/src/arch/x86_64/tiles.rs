//! The walk of a tile shared by the x86 kernels on 64-column panels: which (rows, columns) units a kernel's
//! register tile computes, in an order that keeps one unit's weights in L2 while the rows walk them.

use super::qunbp64x4_vnni::NR;
use crate::ukernel::RunArgs;

/// GEMV order: each row, each panel (whole 64-column panels, one unit each): `f(row, panel)`.
pub(crate) fn gemv(args: &RunArgs, mut f: impl FnMut(usize, usize)) {
    for r in 0..args.rows {
        for panel in 0..args.cols.div_ceil(NR) {
            f(r, panel);
        }
    }
}

/// GEMM order: each `unit_cols`-wide column unit of each panel, then the rows in blocks of `mr` (the last block
/// smaller): `f(panel, unit, first row, rows)`.
pub(crate) fn gemm(args: &RunArgs, unit_cols: usize, mr: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
    for panel in 0..args.cols.div_ceil(NR) {
        for unit in 0..NR / unit_cols {
            if panel * NR + unit * unit_cols >= args.cols {
                break;
            }
            let mut r0 = 0;
            while r0 < args.rows {
                let rows = (args.rows - r0).min(mr);
                f(panel, unit, r0, rows);
                r0 += rows;
            }
        }
    }
}
