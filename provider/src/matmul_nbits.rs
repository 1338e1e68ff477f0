//! The MatMulNBits kernel: reads attributes and constant initializers at session creation, validates them,
//! selects kernels and packs the weights once; at each call packs A once, cuts the output into tiles and runs
//! them on ORT's intra-op thread pool. No unsafe code and no SIMD here: FFI is in `api`, math in
//! `nibble_kernels`.
#![deny(unsafe_code)]

use crate::OP_PREFIX;
use crate::api::{Dtype, KernelContext, KernelInfo, Output, ShapeInfer, Tensor};
use crate::shared;
use crate::status::{Error, Result};
use nibble_kernels::format::fmt_shape;
use nibble_kernels::{ActQuant, ComputePath, LhsSource, PackedRhs, Params, Problem, Selected, Weights, ZeroPoints};
use std::sync::Arc;

/// Inputs: A, B, scales, zero_points?, g_idx?, bias?
pub const INPUT_COUNT: usize = 6;
const IN_A: usize = 0;
const IN_B: usize = 1;
const IN_SCALES: usize = 2;
const IN_ZP: usize = 3;
const IN_G_IDX: usize = 4;
const IN_BIAS: usize = 5;

/// Declared input types of the variant for A's type `dtype`. Only A is typed (it picks the variant); the
/// others are declared "any" so that a wrong type gets our error, which names the input, rather than ORT's
/// "could not find an implementation".
pub fn input_type(dtype: Dtype, i: usize) -> Dtype {
    if i == IN_A { dtype } else { Dtype::Any }
}

pub fn input_is_optional(i: usize) -> bool {
    i >= IN_ZP
}

/// Settings that come from the session config at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpConfig {
    /// What accuracy_level 0 (unset) means: 4 = int8 path, 1..3 = fp32 path.
    pub default_accuracy: i64,
    /// The int8 path's activation numerics (`nibble.activation_quant`).
    pub activation_quant: ActQuant,
}

/// When a node's weights are packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackAt {
    /// At kernel creation, from the constant initializers (custom-op frontend; EP with prepacking disabled).
    Create,
    /// When ORT hands each weight input to the kernel (the EP's `PrePackWeight`): the kernel keeps a copy of
    /// what arrives until B, scales and the zero points / g_idx it has are all in, packs, drops the copies, and
    /// ORT frees the initializers.
    PrePack,
}

/// One node's kernel: immutable once its weights are packed, so concurrent Compute calls share it freely.
#[derive(Debug)]
pub struct MatMulNBits {
    node: String,
    params: Params,
    dtype: Dtype,
    sel: Selected,
    rhs: Rhs,
    bias: Bias,
}

#[derive(Debug)]
enum Rhs {
    Packed(Arc<PackedRhs>),
    /// Waiting for the weight inputs (`PackAt::PrePack`).
    Awaiting(Box<Pending>),
}

/// The weight inputs of a node as they arrive through `prepack`, and what each must look like (checked at
/// kernel creation).
#[derive(Debug)]
struct Pending {
    b: Slot<Vec<u8>>,
    scales: Slot<Vec<f32>>,
    zero_points: Option<Slot<ZpOwned>>,
    g_idx: Option<Slot<Vec<i32>>>,
}

#[derive(Debug)]
struct Slot<T> {
    dtype: Dtype,
    shape: Vec<i64>,
    value: Option<T>,
}

impl<T> Slot<T> {
    fn expect(t: &Tensor<'_>) -> Self {
        Slot { dtype: t.dtype, shape: t.shape.clone(), value: None }
    }

    /// Stores `t` converted by `f`, after checking it is the tensor validated at creation.
    fn fill(&mut self, name: &str, t: &Tensor<'_>, f: impl FnOnce(&Tensor<'_>) -> T) -> Result<()> {
        if t.dtype != self.dtype || t.shape != self.shape {
            return Err(Error::fail(format!(
                "ORT handed over input {name} as {} {} but the node was created with {} {}",
                t.dtype.name(),
                fmt_shape(&t.shape),
                self.dtype.name(),
                fmt_shape(&self.shape)
            )));
        }
        self.value = Some(f(t));
        Ok(())
    }
}

#[derive(Debug)]
enum ZpOwned {
    Packed(Vec<u8>),
    Float(Vec<f32>),
}

#[derive(Debug)]
enum Bias {
    None,
    Constant(Vec<f32>),
    /// A graph input: read at each call.
    PerCall,
}

/// What kernel creation reads from a node: its name, int attributes, inputs and constant initializers, and a
/// logger. ORT's [`KernelInfo`] in both frontends; a plain description of a node (`crate::fuzzing::Node`) in the
/// fuzz target, so that it drives this same creation code without ORT.
pub trait NodeInfo<'a> {
    fn node_name(&self) -> Result<String>;
    /// An int attribute, None if the node does not have it, or an error naming the type it has instead.
    fn attr_i64(&self, name: &str) -> Result<Option<i64>>;
    fn input_count(&self) -> Result<usize>;
    /// Whether input `i` exists (optional inputs may be absent or given as an empty name).
    fn has_input(&self, i: usize) -> Result<bool>;
    /// Input `i` if it is a constant initializer (one a graph input cannot override), else None.
    fn constant_input(&self, i: usize) -> Result<Option<Tensor<'a>>>;
    /// Logs at INFO severity (ORT filters by the session's level).
    fn log_info(&self, message: &str) -> Result<()>;
}

impl<'a> NodeInfo<'a> for KernelInfo<'a> {
    fn node_name(&self) -> Result<String> {
        KernelInfo::node_name(self)
    }
    fn attr_i64(&self, name: &str) -> Result<Option<i64>> {
        KernelInfo::attr_i64(self, name)
    }
    fn input_count(&self) -> Result<usize> {
        KernelInfo::input_count(self)
    }
    fn has_input(&self, i: usize) -> Result<bool> {
        KernelInfo::has_input(self, i)
    }
    fn constant_input(&self, i: usize) -> Result<Option<Tensor<'a>>> {
        KernelInfo::constant_input(self, i)
    }
    fn log_info(&self, message: &str) -> Result<()> {
        KernelInfo::log_info(self, message)
    }
}

fn required_attr<'a>(info: &impl NodeInfo<'a>, name: &str) -> Result<i64> {
    info.attr_i64(name)?.ok_or_else(|| Error::invalid(format!("required attribute {name} is missing")))
}

/// A constant initializer input, or an error saying why it must be one.
fn constant<'a>(info: &impl NodeInfo<'a>, i: usize, name: &str) -> Result<Tensor<'a>> {
    info.constant_input(i)?.ok_or_else(|| {
        Error::invalid(format!(
            "input {name} must be a constant initializer, but it is a graph input (or an initializer that a graph \
             input can override); nibble packs the weights once, at session creation"
        ))
    })
}

fn expect_type(t: &Tensor<'_>, name: &str, want: Dtype, why: &str) -> Result<()> {
    if t.dtype != want {
        return Err(Error::invalid(format!(
            "input {name} has type {} but must be {}{why}",
            t.dtype.name(),
            want.name()
        )));
    }
    Ok(())
}

impl MatMulNBits {
    /// Kernel creation (session creation time). Every error names the node. `dtype` is A's type (the custom-op
    /// variant's, or the node's input type for the EP).
    pub fn create<'a>(info: &impl NodeInfo<'a>, dtype: Dtype, config: &OpConfig, at: PackAt) -> Result<Self> {
        let node = info.node_name()?;
        in_node(&node, "create", || Self::create_in(info, dtype, config, at, node.clone()))
    }

    fn create_in<'a>(
        info: &impl NodeInfo<'a>,
        dtype: Dtype,
        config: &OpConfig,
        at: PackAt,
        node: String,
    ) -> Result<Self> {
        if !matches!(dtype, Dtype::F32 | Dtype::F16) {
            return Err(Error::invalid(format!("input A has type {} but must be float or float16", dtype.name())));
        }
        let params = Params::new(
            required_attr(info, "K")?,
            required_attr(info, "N")?,
            info.attr_i64("bits")?.unwrap_or(4),
            required_attr(info, "block_size")?,
        )?;
        let accuracy = info.attr_i64("accuracy_level")?.unwrap_or(0);
        let effective = match accuracy {
            0 => config.default_accuracy,
            1..=4 => accuracy,
            _ => {
                return Err(Error::invalid(format!(
                    "attribute accuracy_level={accuracy} is invalid (0 unset, 1 fp32, 2 fp16, 3 bf16, 4 int8)"
                )));
            }
        };
        let path = if effective == 4 { ComputePath::Int8 } else { ComputePath::Fp32 };
        if let Some(w) = info.attr_i64("weight_prepacked")?.filter(|&w| w != 0) {
            return Err(Error::invalid(format!(
                "attribute weight_prepacked={w} is not supported (CUDA-only layouts); only 0"
            )));
        }
        let n_inputs = info.input_count()?;
        if n_inputs < 3 {
            return Err(Error::invalid(format!("has {n_inputs} inputs; A, B and scales are required")));
        }
        let a_type = format!(" (the type of A, {})", dtype.name());

        let b = constant(info, IN_B, "B")?;
        expect_type(&b, "B", Dtype::U8, "")?;
        params.check_b_shape(&b.shape)?;

        let scales_t = constant(info, IN_SCALES, "scales")?;
        expect_type(&scales_t, "scales", dtype, &a_type)?;
        params.check_scales_shape(&scales_t.shape)?;
        let scales = scales_t.to_f32_vec();

        let zp_t = if info.has_input(IN_ZP)? { Some(constant(info, IN_ZP, "zero_points")?) } else { None };
        let zp_f32;
        let zero_points = match &zp_t {
            None => ZeroPoints::Default,
            Some(t) if t.dtype == Dtype::U8 => {
                params.check_zero_points_shape(&t.shape, true)?;
                ZeroPoints::Packed(t.u8s())
            }
            Some(t) if t.dtype == dtype => {
                params.check_zero_points_shape(&t.shape, false)?;
                zp_f32 = t.to_f32_vec();
                ZeroPoints::Float(&zp_f32)
            }
            Some(t) => {
                return Err(Error::invalid(format!(
                    "input zero_points has type {} but must be uint8 (packed) or {}",
                    t.dtype.name(),
                    dtype.name()
                )));
            }
        };

        let g_idx_t = if info.has_input(IN_G_IDX)? { Some(constant(info, IN_G_IDX, "g_idx")?) } else { None };
        if let Some(t) = &g_idx_t {
            expect_type(t, "g_idx", Dtype::I32, "")?;
            params.check_g_idx_shape(&t.shape)?;
        }
        let g_idx = g_idx_t.as_ref().map(|t| t.i32s());

        let bias = if !info.has_input(IN_BIAS)? {
            Bias::None
        } else {
            match info.constant_input(IN_BIAS)? {
                Some(t) => {
                    expect_type(&t, "bias", dtype, &a_type)?;
                    params.check_bias_shape(&t.shape)?;
                    Bias::Constant(t.to_f32_vec())
                }
                None => Bias::PerCall,
            }
        };

        let weights = Weights::new(params, b.u8s(), &scales, zero_points, g_idx.as_deref())?;
        let sel = nibble_kernels::select(&Problem::of(path, &weights))?.with_activation_quant(config.activation_quant);
        let (rhs, packed) = match at {
            PackAt::Create => {
                let (rhs, origin) = shared::packed(&sel, &weights)?;
                let how = match origin {
                    shared::Origin::Packed => format!("packed {} bytes", rhs.bytes().len()),
                    shared::Origin::Shared => format!("shares {} packed bytes with an earlier node", rhs.bytes().len()),
                };
                (Rhs::Packed(rhs), how)
            }
            PackAt::PrePack => {
                let pending = Pending {
                    b: Slot::expect(&b),
                    scales: Slot::expect(&scales_t),
                    zero_points: zp_t.as_ref().map(Slot::expect),
                    g_idx: g_idx_t.as_ref().map(Slot::expect),
                };
                (Rhs::Awaiting(Box::new(pending)), "packs as ORT hands over the weights (PrePackWeight)".to_string())
            }
        };
        let zp_kind = match zero_points {
            ZeroPoints::Default => "none",
            ZeroPoints::Packed(_) => "uint8",
            ZeroPoints::Float(_) => "float",
        };
        let bias_kind = match bias {
            Bias::None => "none",
            Bias::Constant(_) => "constant",
            Bias::PerCall => "per-call",
        };
        let g_idx_kind = if weights.has_reordering_g_idx() {
            "reordering"
        } else if g_idx.is_some() {
            "plain"
        } else {
            "none"
        };
        // A logging failure must not fail the session: the line is informational.
        let _ = info.log_info(&format!(
            "{OP_PREFIX} node '{node}': K={} N={} bits={} block_size={} accuracy_level={accuracy} -> {} path{}, \
             family {}: GEMV {} (M<={}), GEMM {} (M>{}), layout {}, {packed}, zero_points={zp_kind}, \
             g_idx={g_idx_kind}, bias={bias_kind}, A={}",
            params.k,
            params.n,
            params.bits,
            params.block_size,
            path.name(),
            match path {
                ComputePath::Int8 => format!(" (activations quantized per {})", sel.activation_quant()),
                ComputePath::Fp32 => String::new(),
            },
            sel.name(),
            sel.gemv().name(),
            sel.gemv_max_m(),
            sel.gemm().name(),
            sel.gemv_max_m(),
            sel.layout(),
            dtype.name(),
        ));
        Ok(MatMulNBits { node, params, dtype, sel, rhs, bias })
    }

    /// ORT hands over constant input `index` (`PackAt::PrePack`). Returns whether the kernel took it over, so
    /// that ORT may free the initializer: the weight inputs (kept until the set is complete, then packed) and a
    /// constant bias (copied at creation). Called once per constant input, before any Compute.
    pub fn prepack(&mut self, index: usize, t: &Tensor<'_>) -> Result<bool> {
        let node = self.node.clone();
        in_node(&node, "prepack", || self.prepack_in(index, t))
    }

    fn prepack_in(&mut self, index: usize, t: &Tensor<'_>) -> Result<bool> {
        if index == IN_BIAS {
            return Ok(matches!(self.bias, Bias::Constant(_)));
        }
        let Rhs::Awaiting(p) = &mut self.rhs else {
            // Packed at creation (or already complete): the weight inputs are no longer needed either way.
            return Ok(matches!(index, IN_B | IN_SCALES | IN_ZP | IN_G_IDX));
        };
        match index {
            IN_B => p.b.fill("B", t, |t| t.u8s().to_vec())?,
            IN_SCALES => p.scales.fill("scales", t, |t| t.to_f32_vec())?,
            IN_ZP => match &mut p.zero_points {
                Some(slot) => slot.fill("zero_points", t, |t| match t.dtype {
                    Dtype::U8 => ZpOwned::Packed(t.u8s().to_vec()),
                    _ => ZpOwned::Float(t.to_f32_vec()),
                })?,
                None => return Err(Error::fail("ORT handed over a zero_points input the node did not have")),
            },
            IN_G_IDX => match &mut p.g_idx {
                Some(slot) => slot.fill("g_idx", t, |t| t.i32s().into_owned())?,
                None => return Err(Error::fail("ORT handed over a g_idx input the node did not have")),
            },
            _ => return Ok(false),
        }
        if let Some(rhs) = self.pack_if_complete()? {
            self.rhs = Rhs::Packed(rhs);
        }
        Ok(true)
    }

    /// Packs once every weight input the node has arrived (through the process-wide cache).
    fn pack_if_complete(&self) -> Result<Option<Arc<PackedRhs>>> {
        let Rhs::Awaiting(p) = &self.rhs else { return Ok(None) };
        let (Some(b), Some(scales)) = (&p.b.value, &p.scales.value) else { return Ok(None) };
        let zero_points = match &p.zero_points {
            None => ZeroPoints::Default,
            Some(Slot { value: None, .. }) => return Ok(None),
            Some(Slot { value: Some(ZpOwned::Packed(z)), .. }) => ZeroPoints::Packed(z),
            Some(Slot { value: Some(ZpOwned::Float(z)), .. }) => ZeroPoints::Float(z),
        };
        let g_idx = match &p.g_idx {
            None => None,
            Some(Slot { value: None, .. }) => return Ok(None),
            Some(Slot { value: Some(g), .. }) => Some(g.as_slice()),
        };
        let weights = Weights::new(self.params, b, scales, zero_points, g_idx)?;
        Ok(Some(shared::packed(&self.sel, &weights)?.0))
    }

    /// The packed weights, or an error if ORT never handed over all weight inputs.
    fn rhs(&self) -> Result<&PackedRhs> {
        match &self.rhs {
            Rhs::Packed(r) => Ok(r),
            Rhs::Awaiting(p) => {
                let missing: Vec<&str> = [
                    ("B", p.b.value.is_none()),
                    ("scales", p.scales.value.is_none()),
                    ("zero_points", p.zero_points.as_ref().is_some_and(|s| s.value.is_none())),
                    ("g_idx", p.g_idx.as_ref().is_some_and(|s| s.value.is_none())),
                ]
                .into_iter()
                .filter_map(|(n, m)| m.then_some(n))
                .collect();
                Err(Error::fail(format!(
                    "weights not packed: ORT never handed over input(s) {} through PrePackWeight (is \
                     session.disable_prepacking set after the execution provider was created?)",
                    missing.join(", ")
                )))
            }
        }
    }

    /// One call. Reentrant: only reads `self`.
    pub fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        in_node(&self.node, "compute", || self.compute_in(ctx))
    }

    fn compute_in(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let p = self.params;
        let rhs = self.rhs()?;
        let a = ctx.input(IN_A)?.ok_or_else(|| Error::invalid("input A is missing"))?;
        if a.dtype != self.dtype {
            return Err(Error::invalid(format!("input A has type {}, expected {}", a.dtype.name(), self.dtype.name())));
        }
        let Some((&k_a, lead)) = a.shape.split_last() else {
            return Err(Error::invalid(format!("input A has shape {} but must have rank >= 1", fmt_shape(&a.shape))));
        };
        if k_a != p.k as i64 {
            return Err(Error::invalid(format!(
                "input A has shape {} whose last dimension {k_a} does not match attribute K={}",
                fmt_shape(&a.shape),
                p.k
            )));
        }
        let m: usize = lead.iter().map(|&d| d as usize).product();
        let out_shape: Vec<i64> = lead.iter().copied().chain([p.n as i64]).collect();

        let per_call_bias;
        let bias = match &self.bias {
            Bias::None => None,
            Bias::Constant(b) => Some(b.as_slice()),
            Bias::PerCall => match ctx.input(IN_BIAS)? {
                None => None,
                Some(t) => {
                    expect_type(&t, "bias", self.dtype, " (the type of A)")?;
                    p.check_bias_shape(&t.shape)?;
                    per_call_bias = t.to_f32_vec();
                    Some(per_call_bias.as_slice())
                }
            },
        };

        let out = ctx.output(0, &out_shape, self.dtype)?;
        if m == 0 {
            return Ok(());
        }
        let a_f32;
        let a_f16;
        let src = match self.dtype {
            Dtype::F16 => {
                a_f16 = a.f16s();
                LhsSource::F16(&a_f16)
            }
            _ => {
                a_f32 = a.f32s();
                LhsSource::F32(&a_f32)
            }
        };
        let par = |tasks: usize, f: &(dyn Fn(usize) + Sync)| ctx.parallel_for(tasks, f);
        match out {
            Output::F32(y) => self.sel.matmul(rhs, src, m, bias, y, par),
            Output::F16(y16) => self.sel.matmul_f16(rhs, src, m, bias, y16, par),
        }
    }
}

/// Runs `f` for node `node`: its error, or a panic inside it (a bug), comes out naming the op and the node.
fn in_node<T>(node: &str, what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|p| Err(Error::panic(what, p)))
        .map_err(|e| e.in_node(node))
}

/// Output type and shape: Y = A.shape[:-1] + [N], A's type. Also rejects a static A whose last dimension
/// contradicts K. ORT builds one schema for all same-named variants and may call any variant's function, so
/// the type comes from A, not from the variant. A bad or missing N leaves the shape unknown: kernel creation
/// then reports it with the node's name, which this context does not know.
pub fn infer_shape(ctx: &ShapeInfer, variant: Dtype) -> Result<()> {
    let (a_type, dims, names) = ctx.input(IN_A)?;
    let dtype = if matches!(a_type, Dtype::F32 | Dtype::F16) { a_type } else { variant };
    let Some(n) = ctx.attr_i64("N").filter(|&n| n >= 1) else {
        return Ok(());
    };
    let Some(&last) = dims.last() else {
        // Rank 0 or unknown rank: leave the shape to ORT's type inference; Compute checks the rank.
        return Ok(());
    };
    if let Some(k) = ctx.attr_i64("K")
        && last >= 0
        && last != k
    {
        return Err(Error::invalid(format!(
            "{OP_PREFIX} input A has shape {} whose last dimension {last} does not match attribute K={k}",
            fmt_shape(&dims)
        )));
    }
    let mut out_dims = dims[..dims.len() - 1].to_vec();
    out_dims.push(n);
    let mut out_names = names.get(..dims.len() - 1).map(<[String]>::to_vec).unwrap_or_default();
    out_names.resize(dims.len() - 1, String::new());
    out_names.push(String::new());
    ctx.set_output(0, dtype, &out_dims, &out_names)
}
