//! nibble-kernels: the MatMulNBits weight format, packing into kernel layouts, reference implementations, and
//! matmul kernels chosen at run time for the CPU. No ONNX Runtime dependency.
//!
//! The walk of a node: [`format::Params`]/[`format::Weights`] validate what the model holds →
//! [`registry::select`] picks the kernels (once per process for the CPU, per node for bits/block size) →
//! [`ukernel::Selected::pack_rhs`] packs the weights once → per call [`ukernel::Selected::pack_lhs`] packs A
//! once, [`ukernel::Selected::plan`] cuts the output into tiles, and [`ukernel::Selected::run_tile`] computes
//! each tile (the caller runs tiles on its thread pool).

pub mod arch;
pub mod cpu;
pub mod format;
pub mod pack;
pub mod reference;
pub mod registry;
pub mod ukernel;

pub use cpu::{Cpu, Isa};
pub use format::{FormatError, Params, Weights, ZeroPoints};
pub use pack::{ComputePath, LhsSource, PackedLhs, PackedRhs, RhsLayout};
pub use registry::{SelectError, select};
pub use ukernel::{OutTiles, Selected, TilePlan, UKernel};

/// Runs a whole matmul on the calling thread: pack A, then every tile in order. Convenience for tests,
/// benchmarks and callers without a thread pool.
pub fn matmul_serial(
    sel: &Selected,
    rhs: &PackedRhs,
    a: LhsSource<'_>,
    m: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let lhs = sel.pack_lhs(a, m, rhs);
    let plan = sel.plan(m, rhs);
    let tiles = OutTiles::new(out, plan);
    for t in 0..plan.count() {
        sel.run_tile(&lhs, rhs, bias, &tiles, t);
    }
}
