//! Fuzz target `create`: MatMulNBits kernel creation from arbitrary attributes and constant inputs, through the op
//! core's own creation code (`nibble_ort::fuzzing::create`, which both ORT frontends' code path shares), packing at
//! creation (custom-op frontend) or at the EP's weight hand-over. Only errors may come out: a panic (the harness
//! aborts on one even where the op catches it), an arithmetic overflow (debug assertions are on), an abort or an
//! allocation past libFuzzer's -malloc_limit_mb is a finding. Each input tensor holds at most 1 MiB, so nothing
//! the op allocates may be much larger.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use nibble_kernels::ActQuant;
use nibble_ort::fuzzing::{Attr, Dtype, ErrorCode, Input, Node, OpConfig, PackAt, create};

/// The largest tensor the harness builds (ORT would hand over any size; the op must refuse wrong ones by shape).
const MAX_TENSOR_BYTES: usize = 1 << 20;

/// An attribute: mostly a plausible value (`small` mapped per attribute), sometimes any int, absent or of the
/// wrong type.
#[derive(Arbitrary, Debug)]
struct AttrArb {
    kind: u8,
    small: u16,
    raw: i64,
}

impl AttrArb {
    fn value(&self, plausible: impl Fn(u16) -> i64) -> Option<Attr> {
        match self.kind {
            0..=199 => Some(Attr::Int(plausible(self.small))),
            200..=219 => Some(Attr::Int(self.raw)),
            220..=234 => None,
            235..=244 => Some(Attr::Float(self.raw as f32 / 3.0)),
            245..=249 => Some(Attr::String("4".into())),
            _ => Some(Attr::Ints(vec![self.raw])),
        }
    }
}

/// A shape: mostly the one the attributes require (`kind` < 180), else its 1-D (legacy) form, one dimension off
/// by `delta`, a dimension of 1 added in front, or any small shape.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct ShapeArb {
    kind: u8,
    axis: u8,
    delta: i8,
    a: u16,
    b: u8,
}

/// An element type: mostly the one expected (`kind` < 220), else float, float16, uint8, int32 or any ONNX type.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct TypeArb {
    kind: u8,
    code: u8,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct TensorArb {
    ty: TypeArb,
    shape: ShapeArb,
    /// Above 200: values from the fuzzer's bytes as they are (NaN, infinities, subnormals, any g_idx); else
    /// mapped into the range a quantizer produces.
    raw: u8,
    /// 0 (1 in 256): a graph input rather than a constant initializer.
    input: u8,
}

#[derive(Arbitrary, Debug)]
struct Case {
    k: AttrArb,
    n: AttrArb,
    bits: AttrArb,
    block_size: AttrArb,
    accuracy_level: AttrArb,
    /// The attribute weight_prepacked (only 0 is valid): present when the first is 240 or more.
    weight_prepacked: (u8, i8),
    a_f16: bool,
    default_int8: bool,
    act_row: bool,
    prepack: bool,
    b: TensorArb,
    scales: TensorArb,
    zero_points: Option<(TensorArb, bool)>,
    g_idx: Option<TensorArb>,
    bias: Option<TensorArb>,
    /// Inputs cut after this many (a node with fewer than 3 inputs is malformed).
    cut: u8,
    bytes: Vec<u8>,
}

/// What the attributes imply (with the harness's own arithmetic: garbage in, some shape out).
struct Dims {
    k: i64,
    n: i64,
    k_blocks: i64,
    blob: i64,
    zp_row: i64,
    bs: i64,
}

fn dims(node: &Node) -> Dims {
    let get = |name: &str, d: i64| match node.attrs.iter().find(|(n, _)| n == name) {
        Some((_, Attr::Int(v))) => *v,
        _ => d,
    };
    let (k, n, bits, bs) = (get("K", 1), get("N", 1), get("bits", 4), get("block_size", 32));
    let bs_c = bs.clamp(1, 1 << 40);
    let k_blocks = (k.clamp(0, 1 << 40) + bs_c - 1) / bs_c;
    Dims {
        k,
        n,
        k_blocks,
        blob: bs_c.saturating_mul(bits.clamp(0, 64)) / 8,
        zp_row: (k_blocks.saturating_mul(bits.clamp(0, 64)) + 7) / 8,
        bs: bs_c,
    }
}

fn shape_of(expected: &[i64], s: ShapeArb) -> Vec<i64> {
    let (a, b) = (s.a as i64, s.b as i64);
    match s.kind {
        0..=179 => expected.to_vec(),
        180..=209 => vec![expected.iter().fold(1i64, |a, &d| a.saturating_mul(d))],
        210..=229 => {
            let mut v = expected.to_vec();
            let i = s.axis as usize % v.len();
            v[i] = v[i].saturating_add(s.delta as i64);
            v
        }
        230..=239 => [1].iter().chain(expected).copied().collect(),
        _ => match s.axis % 4 {
            0 => vec![],
            1 => vec![a],
            2 => vec![a, b],
            _ => vec![b, a % 64, b % 8],
        },
    }
}

/// Builds one input, or None when its data would exceed the harness's size cap (or a dimension is negative:
/// no real tensor has one).
fn tensor(t: &TensorArb, want: Dtype, expected: &[i64], bytes: &[u8], what: &Dims, is_g_idx: bool) -> Option<Input> {
    let dtype = match (t.ty.kind, t.ty.code % 16) {
        (0..=219, _) => want,
        (_, 1) => Dtype::F32,
        (_, 2) => Dtype::U8,
        (_, 6) => Dtype::I32,
        (_, 10) => Dtype::F16,
        (_, c) => Dtype::Other(c as i32),
    };
    let shape = shape_of(expected, t.shape);
    let size = match dtype {
        Dtype::F32 | Dtype::I32 => 4,
        Dtype::F16 => 2,
        Dtype::U8 => 1,
        _ => 0,
    };
    let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(usize::try_from(d).ok()?))?;
    let len = count.checked_mul(size).filter(|&l| l <= MAX_TENSOR_BYTES)?;
    let byte = |i: usize| if bytes.is_empty() { 0 } else { bytes[i % bytes.len()] };
    let mut data = Vec::with_capacity(len);
    for i in 0..count.min(len) {
        let b = byte(i);
        match dtype {
            Dtype::U8 => data.push(b),
            Dtype::F32 | Dtype::F16 => {
                let v = if t.raw > 200 {
                    f32::from_le_bytes([b, byte(i + 1), byte(i + 2), byte(i + 3)])
                } else {
                    (b as f32 - 100.0) / 512.0
                };
                if dtype == Dtype::F32 {
                    data.extend_from_slice(&v.to_le_bytes());
                } else {
                    data.extend_from_slice(&half::f16::from_f32(v).to_le_bytes());
                }
            }
            Dtype::I32 => {
                let v = if t.raw > 200 {
                    i32::from_le_bytes([b, byte(i + 1), byte(i + 2), byte(i + 3)])
                } else if is_g_idx && b < 128 {
                    (i as i64 / what.bs) as i32
                } else {
                    (b as i64 % what.k_blocks.max(1)) as i32
                };
                data.extend_from_slice(&v.to_le_bytes());
            }
            _ => {}
        }
    }
    Some(Input { dtype, shape, data, constant: t.input != 0 })
}

fuzz_target!(|case: Case| {
    let mut node = Node { name: "fuzz".into(), ..Node::default() };
    type Plausible = fn(u16) -> i64;
    let attrs: [(&str, &AttrArb, Plausible); 5] = [
        ("K", &case.k, |s| 1 + (s % 300) as i64),
        ("N", &case.n, |s| 1 + (s % 40) as i64),
        ("bits", &case.bits, |s| [2, 4, 8, 4][(s % 4) as usize]),
        ("block_size", &case.block_size, |s| 16 << (s % 6)),
        ("accuracy_level", &case.accuracy_level, |s| (s % 5) as i64),
    ];
    for (name, a, plausible) in attrs {
        if let Some(v) = a.value(plausible) {
            node.attrs.push((name.into(), v));
        }
    }
    if case.weight_prepacked.0 >= 240 {
        node.attrs.push(("weight_prepacked".into(), Attr::Int(case.weight_prepacked.1 as i64)));
    }
    let d = dims(&node);
    let a_type = if case.a_f16 { Dtype::F16 } else { Dtype::F32 };
    let bytes = &case.bytes;
    let a = Input { dtype: a_type, shape: vec![1, d.k.clamp(0, 1 << 20)], data: Vec::new(), constant: false };
    let Some(b) = tensor(&case.b, Dtype::U8, &[d.n, d.k_blocks, d.blob], bytes, &d, false) else { return };
    let Some(scales) = tensor(&case.scales, a_type, &[d.n, d.k_blocks], bytes, &d, false) else { return };
    let zp = match &case.zero_points {
        None => None,
        Some((t, packed)) => {
            let (ty, cols) = if *packed { (Dtype::U8, d.zp_row) } else { (a_type, d.k_blocks) };
            let Some(z) = tensor(t, ty, &[d.n, cols], bytes, &d, false) else { return };
            Some(z)
        }
    };
    let g_idx = match &case.g_idx {
        None => None,
        Some(t) => {
            let Some(g) = tensor(t, Dtype::I32, &[d.k], bytes, &d, true) else { return };
            Some(g)
        }
    };
    let bias = match &case.bias {
        None => None,
        Some(t) => {
            let Some(x) = tensor(t, a_type, &[d.n], bytes, &d, false) else { return };
            Some(x)
        }
    };
    node.inputs = vec![Some(a), Some(b), Some(scales), zp, g_idx, bias];
    while node.inputs.len() > 3 && node.inputs.last().is_some_and(Option::is_none) {
        node.inputs.pop();
    }
    if case.cut < 16 {
        node.inputs.truncate(case.cut as usize % 7);
    }
    let config = OpConfig {
        default_accuracy: if case.default_int8 { 4 } else { 1 },
        activation_quant: if case.act_row { ActQuant::Row } else { ActQuant::Block },
    };
    let at = if case.prepack { PackAt::PrePack } else { PackAt::Create };
    if let Err(e) = create(&node, a_type, &config, at) {
        // An error names the op and the node, and is a model error or an internal failure, never a panic.
        assert!(e.message.starts_with("nibble [MatMulNBits] node 'fuzz'"), "{e:?}");
        assert!(!e.message.contains("(panic)"), "{e:?}");
        assert!(matches!(e.code, ErrorCode::InvalidArgument | ErrorCode::Fail));
    }
});
