//! The row numerics' tile epilogue (`crate::arch::finish_row_tile`: y = sa·(Y − z·Σw) + bias per row and
//! column) in streaming SVE, for the SME2 family's tiles: per row and run of 4 streaming vectors of columns one
//! multi-vector load of Y, of Σw (and of the bias), 4 FMUL (z·Σw), 4 FSUB, 4 FMUL (sa), 4 FADD (bias) and one
//! multi-vector store, under a `whilelt … vlx4` counter predicate (no column tail apart): ~19 instructions per
//! 4 vectors, at SVL 512 ~0.3 a value against ~2.4 for the NEON loop the compiler makes of the shared one
//! (counted at M = 9, 2048 columns: 44 k instructions of a 567 k Run).
//!
//! The same separate roundings in the same order as the shared epilogue (z·Σw, then Y − it, then × sa, then
//! + bias; no fused multiply-add), so the results are bit for bit its own.
//!
//! Streaming mode only (`smstart sm` … `smstop sm`): ZA is not touched, so its lazy-save state stays as it is.
//! Features: sme, sme2 (multi-vector loads and stores, counter predicates).

use super::sve_asm::streaming_asm;
use crate::pack::RowQuant;
use crate::ukernel::RunArgs;
use core::mem::offset_of;

/// The asm for one bias mode (`bias` | `nobias`): rows × columns of the tile at `{y}` finished in place.
macro_rules! finish_asm {
    (@bias bias) => {
        concat!(
            "ld1w {{z8.s-z11.s}}, pn8/z, [{b}, {i}, lsl #2]\n",
            "fadd z0.s, z0.s, z8.s\n",
            "fadd z1.s, z1.s, z9.s\n",
            "fadd z2.s, z2.s, z10.s\n",
            "fadd z3.s, z3.s, z11.s\n",
        )
    };
    (@bias nobias) => {
        "// {b}\n"
    };
    ($bias:ident) => {
        concat!(
            ".arch_extension sme2\n",
            ".arch_extension sve\n",
            "smstart sm\n",
            "ptrue p0.s\n",
            "1:\n",
            // The row's z (as f32) in z30, sa in z31.
            "ld1rw {{z30.s}}, p0/z, [{rq}, #{zo}]\n",
            "scvtf z30.s, p0/m, z30.s\n",
            "ld1rw {{z31.s}}, p0/z, [{rq}, #{so}]\n",
            "mov {i}, #0\n",
            "2:\n",
            "whilelt pn8.s, {i}, {cols}, vlx4\n",
            "ld1w {{z0.s-z3.s}}, pn8/z, [{y}, {i}, lsl #2]\n",
            "ld1w {{z4.s-z7.s}}, pn8/z, [{w}, {i}, lsl #2]\n",
            "fmul z4.s, z4.s, z30.s\n",
            "fmul z5.s, z5.s, z30.s\n",
            "fmul z6.s, z6.s, z30.s\n",
            "fmul z7.s, z7.s, z30.s\n",
            "fsub z0.s, z0.s, z4.s\n",
            "fsub z1.s, z1.s, z5.s\n",
            "fsub z2.s, z2.s, z6.s\n",
            "fsub z3.s, z3.s, z7.s\n",
            "fmul z0.s, z0.s, z31.s\n",
            "fmul z1.s, z1.s, z31.s\n",
            "fmul z2.s, z2.s, z31.s\n",
            "fmul z3.s, z3.s, z31.s\n",
            finish_asm!(@bias $bias),
            "st1w {{z0.s-z3.s}}, pn8, [{y}, {i}, lsl #2]\n",
            "incw {i}, all, mul #4\n",
            "cmp {i}, {cols}\n",
            "b.lo 2b\n",
            "add {y}, {y}, {ystride}\n",
            "add {rq}, {rq}, #{rqsize}\n",
            "subs {n}, {n}, #1\n",
            "b.ne 1b\n",
            "smstop sm\n",
        )
    };
}

/// `crate::arch::finish_row_tile` in streaming mode (same arguments, same results bit for bit).
///
/// # Safety
/// As `crate::arch::finish_row_tile`, and the CPU has SME2.
pub(crate) unsafe fn finish_row_tile(args: &RunArgs, row: &[RowQuant], col_sums: &[f32], bias: Option<&[f32]>) {
    crate::arch::check_row_tile(args, row, col_sums, bias);
    if args.rows == 0 || args.cols == 0 {
        return;
    }
    // SAFETY: SME2 (the caller's guarantee); the asm reads `rows` RowQuant from `row`, `cols` values of
    // `col_sums` and `bias` (checked above), and reads and writes `cols` values of each of the tile's `rows` rows
    // `dst_stride` apart (the caller's guarantee), all under the `whilelt` predicate of columns below `cols`.
    unsafe { finish_rows_sme(args, row.as_ptr(), col_sums.as_ptr(), bias.map_or(core::ptr::null(), |b| b.as_ptr())) }
}

/// # Safety
/// As [`finish_row_tile`], with its checks done (rows, cols > 0; `bias` null or `cols` values).
unsafe fn finish_rows_sme(args: &RunArgs, rq: *const RowQuant, w: *const f32, b: *const f32) {
    macro_rules! run {
        ($bias:ident) => {
            // SAFETY: the caller's guarantee; `smstart sm` to `smstop sm` in this one block, every vector and
            // predicate register declared clobbered (`streaming_asm!`), ZA not used.
            unsafe {
                streaming_asm!(
                    finish_asm!($bias),
                    y = inout(reg) args.dst => _,
                    rq = inout(reg) rq => _,
                    n = inout(reg) args.rows => _,
                    i = out(reg) _,
                    w = in(reg) w,
                    b = in(reg) b,
                    cols = in(reg) args.cols,
                    ystride = in(reg) args.dst_stride * 4,
                    zo = const offset_of!(RowQuant, zero),
                    so = const offset_of!(RowQuant, scale),
                    rqsize = const size_of::<RowQuant>(),
                )
            }
        };
    }
    if b.is_null() { run!(nobias) } else { run!(bias) }
}

#[cfg(test)]
mod tests {
    use crate::cpu::{Cpu, Feature};
    use crate::pack::RowQuant;
    use crate::ukernel::RunArgs;
    use core::ptr::null;

    /// Bit for bit the shared epilogue: tiles of 1–11 rows, column counts around the vector multiples (tails in
    /// every lane position at SVL 128–512), rows `dst_stride` apart with values between them left alone, with and
    /// without bias, and rows of every kind (zero scale, an infinite scale, zero points at both ends).
    #[test]
    fn finish_bit_identical_to_the_shared_one() {
        if !Cpu::get().has(Feature::Sme2) {
            eprintln!("skipped: no SME2");
            return;
        }
        let mut seed = 0x9e37_79b9u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) * 8.0 - 4.0
        };
        let kinds = |r: usize, v: f32| match r % 5 {
            0 => RowQuant { scale: 0.0, inv: 0.0, zero: 0 },
            1 => RowQuant { scale: f32::INFINITY, inv: 0.0, zero: -128 },
            2 => RowQuant { scale: v.abs() * 0.01, inv: 1.0, zero: 127 },
            _ => RowQuant { scale: v.abs() * 0.03, inv: 1.0, zero: (v * 30.0) as i32 },
        };
        for rows in [1usize, 2, 5, 11] {
            for cols in [1usize, 3, 4, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 200] {
                for with_bias in [false, true] {
                    let stride = cols + 3;
                    let y: Vec<f32> = (0..rows * stride).map(|_| next() * 100.0).collect();
                    let w: Vec<f32> = (0..cols).map(|_| next()).collect();
                    let b: Vec<f32> = (0..cols).map(|_| next()).collect();
                    let rq: Vec<RowQuant> = (0..rows).map(|r| kinds(r, next())).collect();
                    let bias = with_bias.then_some(&b[..]);
                    let (mut want, mut got) = (y.clone(), y.clone());
                    let args = |dst: &mut Vec<f32>| RunArgs {
                        lhs: null(),
                        lhs_scale: null(),
                        lhs_sum: null(),
                        lhs_stride: 0,
                        rhs: null(),
                        rhs_panel_stride: 0,
                        rhs_record: 0,
                        rhs_scales: 0,
                        rhs_zp: 0,
                        rhs_sums: 0,
                        blocks: 0,
                        bl: 0,
                        bits: 4,
                        has_zp: 0,
                        default_zp: 0.0,
                        bias: null(),
                        dst: dst.as_mut_ptr(),
                        dst_stride: stride,
                        rows,
                        cols,
                        layout: crate::arch::aarch64::QSNBP64X4_SF16_ZPC,
                        row: 1,
                        lhs_pairs: null(),
                        lhs_pairs_stride: 0,
                        k_used: 0,
                    };
                    // SAFETY: rows × cols values `stride` apart inside each buffer; rq, w, b hold rows / cols.
                    unsafe {
                        crate::arch::finish_row_tile(&args(&mut want), &rq, &w, bias);
                        super::finish_row_tile(&args(&mut got), &rq, &w, bias);
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&want), bits(&got), "rows {rows} cols {cols} bias {with_bias}");
                }
            }
        }
    }
}
