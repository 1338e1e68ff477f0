//! The walk of a tile shared by the x86 kernels on 64-column panels: which (rows, columns) units a kernel's
//! register tile computes, in an order that keeps one unit's weights in L2 while the rows walk them.

use super::qunbp64x4_vnni::NR;
use crate::ukernel::RunArgs;

/// GEMV order: each panel (whole 64-column panels), each row: `f(row, panel)`. The rows after a panel's first
/// read its weights from L2 (or L3 where a panel's K is longer), so a GEMV of a few rows streams the weights from
/// DRAM once, not once per row.
pub(crate) fn gemv(args: &RunArgs, mut f: impl FnMut(usize, usize)) {
    for panel in 0..args.cols.div_ceil(NR) {
        for r in 0..args.rows {
            f(r, panel);
        }
    }
}

/// GEMM order: each `unit_cols`-wide column unit of each panel, then the rows in blocks of `mr` (the last block
/// smaller): `f(panel, unit, first row, rows)`.
pub(crate) fn gemm(args: &RunArgs, unit_cols: usize, mr: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
    gemm_per_unit(args, unit_cols, mr, |_, _| (), |_, panel, unit, r0, rows| f(panel, unit, r0, rows))
}

/// [`gemm`]'s order with state per unit: `prepare(panel, unit)` before its rows, which every row block of the
/// unit then gets, in order: `f(&mut state, panel, unit, first row, rows)`.
pub(crate) fn gemm_per_unit<U>(
    args: &RunArgs,
    unit_cols: usize,
    mr: usize,
    mut prepare: impl FnMut(usize, usize) -> U,
    mut f: impl FnMut(&mut U, usize, usize, usize, usize),
) {
    for panel in 0..args.cols.div_ceil(NR) {
        for unit in 0..NR / unit_cols {
            if panel * NR + unit * unit_cols >= args.cols {
                break;
            }
            let mut prepared = prepare(panel, unit);
            let mut r0 = 0;
            while r0 < args.rows {
                let rows = (args.rows - r0).min(mr);
                f(&mut prepared, panel, unit, r0, rows);
                r0 += rows;
            }
        }
    }
}

/// The body of a kernel's `run` on `qunbp64x4` panels: walks the tile (GEMV: each row, each panel, `$units`
/// units of `$unit_cols` columns; GEMM: `$unit_cols`-column units, rows in blocks of up to `$mr`) and calls the
/// shared body `$body::<R, G, BITS>` with the unit's row pointers, dispatching the row count (GEMM) and the bit
/// width (2, 4, 8: `crate::arch::dispatch!`) to constants. `$lhs` is `int8` (LHS, scales, sums, output) or `f32` (LHS, output).
/// `per_unit = |panel, unit| expr` (int8 GEMM): `expr` makes the unit's state once per unit, and the body gets it
/// (`&mut`) as its last argument in each of the unit's row blocks, in row order.
macro_rules! run_units {
    (gemv, $lhs:ident, $args:ident, $body:ident, g = $g:literal, units = $units:literal, unit_cols = $unit_cols:literal) => {
        $crate::arch::x86_64::tiles::gemv($args, |r, panel| {
            for unit in 0..$units {
                if panel * $crate::arch::x86_64::qunbp64x4_vnni::NR + unit * $unit_cols >= $args.cols {
                    break;
                }
                $crate::arch::x86_64::tiles::run_units!(@bits $lhs, $args, $body, 1, $g, panel, unit, r);
            }
        })
    };
    (gemm, $lhs:ident, $args:ident, $body:ident, g = $g:literal, mr = [$($r:literal),+], unit_cols = $unit_cols:literal) => {
        $crate::arch::x86_64::tiles::gemm($args, $unit_cols, [$($r),+][0], |panel, unit, r0, rows| {
            match rows {
                $($r => $crate::arch::x86_64::tiles::run_units!(@bits $lhs, $args, $body, $r, $g, panel, unit, r0),)+
                _ => unreachable!("row blocks are at most the first listed size"),
            }
        })
    };
    (gemm, int8, $args:ident, $body:ident, g = $g:literal, mr = [$($r:literal),+], unit_cols = $unit_cols:literal, per_unit = |$p:ident, $u:ident| $prepare:expr) => {
        $crate::arch::x86_64::tiles::gemm_per_unit($args, $unit_cols, [$($r),+][0], |$p, $u| $prepare, |prepared, panel, unit, r0, rows| {
            match rows {
                $($r => {
                    // SAFETY: as in `@bits`; `prepared` is what the body's contract asks of this unit.
                    unsafe {
                        $crate::arch::dispatch!($body::<$r, $g>(
                            $args,
                            panel,
                            unit,
                            $args.lhs.cast::<i8>().add(r0 * $args.lhs_stride),
                            $args.lhs_scale.add(r0 * $args.blocks),
                            $args.lhs_sum.add(r0 * $args.blocks),
                            $args.dst.add(r0 * $args.dst_stride),
                            prepared,
                        ); bits($args.bits))
                    }
                })+
                _ => unreachable!("row blocks are at most the first listed size"),
            }
        })
    };
    (@bits $lhs:ident, $args:ident, $body:ident, $r:literal, $g:literal, $panel:ident, $unit:ident, $row:ident) => {
        // SAFETY: row `$row` and the rows after it up to the block size are inside the tile: their LHS rows (and
        // scales, sums) and output rows are inside the buffers the RunArgs contract describes; the CPU has the
        // kernel's features (the caller's guarantee).
        unsafe { $crate::arch::x86_64::tiles::run_units!(@call $lhs, $args, $body, $r, $g, $panel, $unit, $row) }
    };
    (@call int8, $args:ident, $body:ident, $r:literal, $g:literal, $panel:ident, $unit:ident, $row:ident) => {
        $crate::arch::dispatch!($body::<$r, $g>(
            $args,
            $panel,
            $unit,
            $args.lhs.cast::<i8>().add($row * $args.lhs_stride),
            $args.lhs_scale.add($row * $args.blocks),
            $args.lhs_sum.add($row * $args.blocks),
            $args.dst.add($row * $args.dst_stride),
        ); bits($args.bits))
    };
    (@call f32, $args:ident, $body:ident, $r:literal, $g:literal, $panel:ident, $unit:ident, $row:ident) => {
        $crate::arch::dispatch!($body::<$r, $g>(
            $args,
            $panel,
            $unit,
            $args.lhs.cast::<f32>().add($row * $args.lhs_stride),
            $args.dst.add($row * $args.dst_stride),
        ); bits($args.bits))
    };
}
pub(crate) use run_units;
