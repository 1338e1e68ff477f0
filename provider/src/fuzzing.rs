//! Kernel creation without ONNX Runtime, for the fuzz target `create` (`fuzz/fuzz_targets/create.rs`): a node
//! described by plain values ([`Node`]: attributes, and inputs as bytes with a type and a shape) goes through the
//! op core's own creation code ([`MatMulNBits::create`](crate::matmul_nbits::MatMulNBits), the code both
//! frontends call with ORT's kernel info), and, when it packs at prepack time, through the EP's hand-over of the
//! weights (`prepack`). Not part of the library's API (hidden from the docs).
#![deny(unsafe_code)]

use crate::api::{Tensor, not_an_int};
use crate::matmul_nbits::{MatMulNBits, NodeInfo};
use crate::status::Result;

pub use crate::api::Dtype;
pub use crate::matmul_nbits::{INPUT_COUNT, OpConfig, PackAt};
pub use crate::status::{Error, ErrorCode};

/// An attribute value as a model may hold it: only ints are valid for MatMulNBits.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Int(i64),
    Float(f32),
    String(String),
    Ints(Vec<i64>),
}

/// One input of the node: its element type, shape and little-endian bytes (exactly the shape's elements), and
/// whether it is a constant initializer (else a graph input).
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub dtype: Dtype,
    pub shape: Vec<i64>,
    pub data: Vec<u8>,
    pub constant: bool,
}

/// A MatMulNBits node: its attributes and its inputs in order (A, B, scales, zero_points, g_idx, bias; None is
/// an optional input given as an empty name).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    pub name: String,
    pub attrs: Vec<(String, Attr)>,
    pub inputs: Vec<Option<Input>>,
}

impl<'a> NodeInfo<'a> for &'a Node {
    fn node_name(&self) -> Result<String> {
        Ok(self.name.clone())
    }

    fn attr_i64(&self, name: &str) -> Result<Option<i64>> {
        match self.attrs.iter().rev().find(|(n, _)| n == name).map(|(_, a)| a) {
            None => Ok(None),
            Some(Attr::Int(v)) => Ok(Some(*v)),
            Some(Attr::Float(f)) => Err(not_an_int(name, &format!("float {f}"))),
            Some(Attr::String(_)) => Err(not_an_int(name, "string")),
            Some(Attr::Ints(_)) => Err(not_an_int(name, "a list of ints")),
        }
    }

    fn input_count(&self) -> Result<usize> {
        Ok(self.inputs.len())
    }

    fn has_input(&self, i: usize) -> Result<bool> {
        Ok(self.inputs.get(i).is_some_and(Option::is_some))
    }

    fn constant_input(&self, i: usize) -> Result<Option<Tensor<'a>>> {
        match self.inputs.get(i) {
            Some(Some(t)) if t.constant => Tensor::from_bytes(t.dtype, t.shape.clone(), &t.data).map(Some),
            _ => Ok(None),
        }
    }

    fn log_info(&self, _message: &str) -> Result<()> {
        Ok(())
    }
}

/// Creates the kernel of `node` for A of type `a` as the frontends do; with [`PackAt::PrePack`] then hands each
/// constant input over as the EP's `PrePackWeight` does (which packs the weights once all have arrived).
pub fn create(node: &Node, a: Dtype, config: &OpConfig, at: PackAt) -> Result<()> {
    let mut kernel = MatMulNBits::create(&node, a, config, at)?;
    if at == PackAt::PrePack {
        for (i, input) in node.inputs.iter().enumerate().skip(1) {
            if let Some(t) = input.as_ref().filter(|t| t.constant) {
                kernel.prepack(i, &Tensor::from_bytes(t.dtype, t.shape.clone(), &t.data)?)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nibble_kernels::ActQuant;

    fn input(dtype: Dtype, shape: &[i64], data: Vec<u8>) -> Option<Input> {
        Some(Input { dtype, shape: shape.to_vec(), data, constant: true })
    }

    /// K=32, N=2, 4 bits, blocks of 32: B [2, 1, 16], scales [2, 1].
    fn node() -> Node {
        let attrs = [("K", 32), ("N", 2), ("bits", 4), ("block_size", 32)];
        let scales: Vec<u8> = [0.5f32, -0.25].iter().flat_map(|s| s.to_le_bytes()).collect();
        Node {
            name: "n0".into(),
            attrs: attrs.iter().map(|&(n, v)| (n.to_string(), Attr::Int(v))).collect(),
            inputs: vec![
                Some(Input { dtype: Dtype::F32, shape: vec![1, 32], data: vec![], constant: false }),
                input(Dtype::U8, &[2, 1, 16], (0..32).collect()),
                input(Dtype::F32, &[2, 1], scales),
            ],
        }
    }

    const CONFIG: OpConfig = OpConfig { default_accuracy: 4, activation_quant: ActQuant::Block };

    #[test]
    fn a_plain_node_goes_through_kernel_creation() {
        for at in [PackAt::Create, PackAt::PrePack] {
            create(&node(), Dtype::F32, &CONFIG, at).unwrap();
        }
        let mut bad = node();
        bad.attrs[0].1 = Attr::Int(33);
        let e = create(&bad, Dtype::F32, &CONFIG, PackAt::Create).unwrap_err();
        assert!(e.message.starts_with("nibble [MatMulNBits] node 'n0': input B has shape [2, 1, 16]"), "{e}");
        bad.attrs[0].1 = Attr::Float(1.5);
        let e = create(&bad, Dtype::F32, &CONFIG, PackAt::Create).unwrap_err();
        assert!(e.message.ends_with("attribute K is float 1.5, but must be an int"), "{e}");
        let mut graph_input = node();
        graph_input.inputs[2].as_mut().unwrap().constant = false;
        let e = create(&graph_input, Dtype::F32, &CONFIG, PackAt::Create).unwrap_err();
        assert!(e.message.contains("input scales must be a constant initializer"), "{e}");
    }

    #[test]
    fn a_tensor_must_hold_exactly_its_shape() {
        let mut short = node();
        short.inputs[1].as_mut().unwrap().data.pop();
        let e = create(&short, Dtype::F32, &CONFIG, PackAt::Create).unwrap_err();
        assert!(e.message.contains("tensor of uint8 [2, 1, 16] needs 32 bytes, got 31"), "{e}");
        let e = Tensor::from_bytes(Dtype::F32, vec![-1, 4], &[]).unwrap_err();
        assert!(e.message.contains("invalid shape [-1, 4]"), "{e}");
    }
}
