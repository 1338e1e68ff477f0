//! Packed layouts: the weights (RHS, packed once at session creation, in the layout a kernel family reads:
//! [`layout`], [`rhs`]) and the activations (LHS, packed once per call in the format of the kernel that runs
//! for that M: [`lhs`]).

pub mod layout;
pub mod lhs;
pub mod rhs;

pub use layout::{Codes, RecordLayout, RhsLayout, ScaleType, ZpStorage, code_position};
#[cfg(test)]
pub(crate) use lhs::assert_quantizer_matches_scalar;
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) use lhs::assert_row_quantizer_matches_scalar;
pub use lhs::{
    ActQuant, LhsFormat, LhsSource, MinMax, NarrowF16, PAIR_ROW_F32, PackedLhs, QuantizeBlocks, QuantizeRow, RowQuant,
    Runs, WidenF16, f32_in_place, f32_row_stride, for_each_block, min_max, narrow_f16, narrow_f16_portable,
    quantize_block, quantize_block_row, quantize_block_runs, row_quant, widen_f16, widen_f16_portable,
};
pub use rhs::{NO_SOURCE, PackedRhs, RhsBytes};
