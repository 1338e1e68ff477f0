//! Fuzz target `kernels` (differential): an arbitrary small MatMulNBits problem (M, N, K, bits, block size,
//! zero-point kind, g_idx kind, bias, activation numerics, some weight bytes chosen by the fuzzer) through one of
//! the kernels this CPU runs (on one of the layouts it reads) or one of the families it runs (as selected, GEMV
//! or GEMM by M), chosen by the input, so that the fuzzer explores them all; against the reference oracle within
//! the tolerance of the compute path: `nibble_kernels::testing::check`, the kernel test suite's own check. A
//! mismatch panics (a finding).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use nibble_kernels::registry::{self, Ladder};
use nibble_kernels::testing::{Case, GIdx, Rng, ZpKind, case_for, check, layouts_of, runnable_kernels};
use nibble_kernels::{ActQuant, ComputePath, Cpu, Problem, Selected};
use std::sync::LazyLock;

/// One ladder per family this CPU runs (each selects only that family).
static LADDERS: LazyLock<Vec<Ladder>> = LazyLock::new(|| {
    registry::families().iter().filter_map(|f| registry::build_ladder(Cpu::get(), None, Some(f.name())).ok()).collect()
});

#[derive(Arbitrary, Debug)]
struct Input {
    /// Which kernel, or (past the kernels) which family and path.
    target: u8,
    layout: u8,
    seed: u64,
    m: u8,
    n: u8,
    k: u16,
    bits: u8,
    block_log: u8,
    zp: u8,
    g_idx: u8,
    bias: bool,
    row: bool,
    /// Overwrite the first bytes of B (the codes) with these: extremes the random generator rarely makes.
    codes: Vec<u8>,
}

fuzz_target!(|x: Input| {
    // M up to 16, sometimes past the GEMM tiles' row blocks; N past a few panels; K over several blocks.
    let m = if x.m >= 240 { 64 + x.m as usize % 8 } else { 1 + x.m as usize % 16 };
    let n = 1 + x.n as usize % 40;
    let k = 1 + x.k as usize % 300;
    let bits = [2u32, 4, 8][x.bits as usize % 3];
    let bl = 16usize << (x.block_log % 6);
    let zp = [ZpKind::None, ZpKind::Packed, ZpKind::Float][x.zp as usize % 3];
    let g = [GIdx::None, GIdx::Trivial, GIdx::Shuffled, GIdx::Random][x.g_idx as usize % 4];
    let act = if x.row { ActQuant::Row } else { ActQuant::Block };
    let mut rng = Rng::new(x.seed);
    let mut case = Case::random(&mut rng, k, n, bits, bl, zp, g, x.bias);
    for (dst, &src) in case.b.iter_mut().zip(&x.codes) {
        *dst = src;
    }
    let kernels = runnable_kernels();
    let t = x.target as usize % (kernels.len() + 2 * LADDERS.len());
    let sel = if let Some(&uk) = kernels.get(t) {
        let layouts = layouts_of(uk);
        let layout = layouts[x.layout as usize % layouts.len()];
        case = case_for(uk, &layout, case);
        Selected::single(uk, layout, &Problem::of(uk.path(), &case.weights())).ok()
    } else {
        let t = t - kernels.len();
        let path = [ComputePath::Int8, ComputePath::Fp32][t % 2];
        LADDERS[t / 2].select(&Problem::of(path, &case.weights())).ok()
    };
    // A kernel or family that cannot hold this problem (bits, block size) refuses it: nothing to compare.
    if let Some(sel) = sel {
        check(&sel.with_activation_quant(act), &case, m, &mut rng);
    }
});
