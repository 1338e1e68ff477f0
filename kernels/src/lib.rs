//! nibble-kernels: the MatMulNBits weight format, packing into kernel layouts, reference implementations, and
//! matmul kernels chosen at run time for the CPU. No ONNX Runtime dependency.
//!
//! The walk of a node: [`format::Params`]/[`format::Weights`] validate what the model holds →
//! [`Problem::of`] says what the node asks (path, bits, block size, zero points, scales) →
//! [`registry::select`] picks the best-ranked [`Family`] (GEMV kernel, GEMM kernel, one packed layout) this CPU
//! runs (the CPU probed once per process) → [`Selected::pack_rhs`] packs the weights once → per call
//! [`Selected::matmul`] packs A once in the format of the kernel that runs for this M, plans tiles from that
//! kernel's geometry and runs them on the caller's parallel-for, each through [`Selected::run_tile`], the one
//! safe → unsafe bridge into an arch kernel.

pub mod arch;
pub mod cpu;
pub mod family;
pub mod format;
pub mod pack;
pub mod plan;
pub mod problem;
pub mod reference;
pub mod registry;
#[doc(hidden)]
pub mod testing;
pub mod ukernel;
pub mod versus_ort;

pub use cpu::{Cpu, Feature, Features, Isa};
pub use family::{Family, Selected, matmul_serial};
pub use format::{FormatError, Params, Weights, ZeroPoints};
pub use pack::{ActQuant, LhsFormat, LhsSource, PackedLhs, PackedRhs, RhsLayout};
pub use plan::{OutTiles, TilePlan};
pub use problem::{ComputePath, Problem};
pub use registry::{SelectError, select};
pub use ukernel::{Geometry, UKernel};
