//! Shared test helpers: a seeded generator of MatMulNBits weights and activations, and tolerance checks.
#![allow(dead_code)]

use nibble_kernels::format::{Params, Weights, ZeroPoints};
use nibble_kernels::pack::ScaleType;
use nibble_kernels::reference;

/// xorshift64*: small, seeded, reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// A generator for one kernel: seeded from `seed` and the kernel's name, so each kernel gets the same cases on
    /// every machine, whichever other kernels that machine's CPU runs (the list differs by CPU).
    pub fn for_kernel(seed: u64, name: &str) -> Self {
        let fnv = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        Rng::new(seed ^ fnv)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Uniform in [lo, hi).
    pub fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZpKind {
    None,
    Packed,
    Float,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GIdx {
    None,
    /// The plain mapping k / block_size, given explicitly.
    Trivial,
    /// Act-order: a random permutation of the plain mapping (equal-size groups).
    Shuffled,
    /// Random block per row (uneven, possibly empty groups).
    Random,
}

/// Owned test data for one weight matrix.
#[derive(Clone)]
pub struct Case {
    pub params: Params,
    pub b: Vec<u8>,
    pub scales: Vec<f32>,
    pub zp_packed: Vec<u8>,
    pub zp_float: Vec<f32>,
    pub zp: ZpKind,
    pub g_idx: Option<Vec<i32>>,
    pub bias: Option<Vec<f32>>,
}

impl Case {
    #[allow(clippy::too_many_arguments)]
    /// Random codes everywhere, including the don't-care pad positions of the last block, scales of both
    /// signs, zero points over the full code range.
    pub fn random(rng: &mut Rng, k: usize, n: usize, bits: u32, bl: usize, zp: ZpKind, g: GIdx, bias: bool) -> Case {
        let params = Params::new(k as i64, n as i64, bits as i64, bl as i64).unwrap();
        let kb = params.k_blocks();
        let b = (0..n * kb * params.blob_size()).map(|_| rng.below(256) as u8).collect();
        let scales = (0..n * kb)
            .map(|_| {
                let s = rng.f32(0.002, 0.05);
                if rng.below(4) == 0 { -s } else { s }
            })
            .collect();
        let zp_packed = (0..n * params.zp_row_bytes()).map(|_| rng.below(256) as u8).collect();
        let max = params.max_code() as f32;
        let zp_float = (0..n * kb).map(|_| rng.f32(0.0, max)).collect();
        let g_idx = match g {
            GIdx::None => None,
            GIdx::Trivial => Some((0..k).map(|i| (i / bl) as i32).collect()),
            GIdx::Shuffled => {
                let mut v: Vec<i32> = (0..k).map(|i| (i / bl) as i32).collect();
                for i in (1..v.len()).rev() {
                    v.swap(i, rng.below(i as u64 + 1) as usize);
                }
                Some(v)
            }
            GIdx::Random => Some((0..k).map(|_| rng.below(kb as u64) as i32).collect()),
        };
        let bias = bias.then(|| (0..n).map(|_| rng.f32(-1.0, 1.0)).collect());
        Case { params, b, scales, zp_packed, zp_float, zp, g_idx, bias }
    }

    /// The same weights with every scale rounded as `st` stores it: what a kernel reading that layout computes
    /// with (the rounding itself is checked by the pack/unpack tests).
    pub fn with_scales(&self, st: ScaleType) -> Case {
        let mut c = self.clone();
        for s in &mut c.scales {
            *s = st.round(*s);
        }
        c
    }

    pub fn weights(&self) -> Weights<'_> {
        let zp = match self.zp {
            ZpKind::None => ZeroPoints::Default,
            ZpKind::Packed => ZeroPoints::Packed(&self.zp_packed),
            ZpKind::Float => ZeroPoints::Float(&self.zp_float),
        };
        Weights::new(self.params, &self.b, &self.scales, zp, self.g_idx.as_deref()).unwrap()
    }
}

pub fn activations(rng: &mut Rng, m: usize, k: usize) -> Vec<f32> {
    (0..m * k).map(|_| rng.f32(-1.0, 1.0)).collect()
}

/// Σ_k |a[i,k]·w[n,k]| for every output: the scale against which float rounding is judged.
pub fn magnitudes(a: &[f32], m: usize, w: &Weights<'_>) -> Vec<f64> {
    let p = w.params;
    let wd = reference::dequantize(w);
    let mut out = vec![0f64; m * p.n];
    for i in 0..m {
        for n in 0..p.n {
            out[i * p.n + n] = (0..p.k).map(|k| (a[i * p.k + k] as f64 * wd[n * p.k + k]).abs()).sum();
        }
    }
    out
}

/// Asserts |got − want| ≤ tol(i) for every element, naming the first bad one.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], tol: impl Fn(usize) -> f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        assert!(err <= tol(i), "{what}: element {i}: got {g}, want {w}, |err| {err:e} > tol {:e}", tol(i));
    }
}

/// Σ_k |a[i,k]|·(|q| + |zp|)·|s| per output: the magnitude of the terms the int8 epilogue adds and cancels.
pub fn code_magnitudes(a: &[f32], m: usize, w: &Weights<'_>) -> Vec<f64> {
    let p = w.params;
    let mut out = vec![0f64; m * p.n];
    for i in 0..m {
        for n in 0..p.n {
            out[i * p.n + n] = (0..p.k)
                .map(|k| {
                    let blk = w.block_of(k);
                    let t = w.code(n, k) as f64 + (w.zero_point(n, blk) as f64).abs();
                    (a[i * p.k + k] as f64).abs() * t * (w.scale(n, blk) as f64).abs()
                })
                .sum();
        }
    }
    out
}
