//! Test support, shared by the kernel test suite (`tests/ukernels.rs`) and the differential fuzz target
//! (`fuzz/fuzz_targets/kernels.rs`): a seeded generator of MatMulNBits weights and activations, the layouts each
//! kernel is tested on, and [`check`], a kernel's output against the references within the tolerance of its
//! compute path. Not part of the library's API (hidden from the docs); it panics on a mismatch, as tests do.

use crate::family::{Selected, matmul_serial};
use crate::format::{Params, Weights, ZeroPoints};
use crate::pack::{Codes, LhsSource, RhsLayout, ScaleType, ZpStorage};
use crate::problem::ComputePath;
use crate::ukernel::{RhsReads, UKernel};
use crate::{ActQuant, Cpu, reference, registry};

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

/// The bits of `uk`'s output (run serially, no bias) for `m` rows of activations `a` on `case`'s weights packed as
/// `layout`: what the bit-for-bit comparisons of one kernel against another take.
///
/// # Panics
/// If `uk` cannot run here on that layout, or `a` is not m × K.
pub fn serial_bits(uk: &'static UKernel, layout: RhsLayout, case: &Case, m: usize, a: &[f32]) -> Vec<u32> {
    let w = case.weights();
    let p = crate::Problem::of(uk.path(), &w);
    let sel = Selected::single(uk, layout, &p).unwrap();
    let rhs = sel.pack_rhs(&w).unwrap();
    let mut y = vec![0f32; m * w.params.n];
    matmul_serial(&sel, &rhs, LhsSource::F32(a), m, None, &mut y);
    y.iter().map(|v| v.to_bits()).collect()
}

pub fn activations(rng: &mut Rng, m: usize, k: usize) -> Vec<f32> {
    (0..m * k).map(|_| rng.f32(-1.0, 1.0)).collect()
}

/// Asserts |got − want| ≤ tol(i) for every element, naming the first bad one.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], tol: impl Fn(usize) -> f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        assert!(err <= tol(i), "{what}: element {i}: got {g}, want {w}, |err| {err:e} > tol {:e}", tol(i));
    }
}

/// Σ_k |a[i,k]·w[n,k]| for every output, from B dequantized (`wd`, row-major [N, K]): the scale against which
/// float rounding is judged.
pub fn magnitudes(a: &[f32], m: usize, wd: &[f64], n: usize, k: usize) -> Vec<f64> {
    abs_a_times(a, m, &wd.iter().map(|v| v.abs()).collect::<Vec<_>>(), n, k)
}

/// Σ_k |a[i,k]|·(|q| + |zp|)·|s| per output: the magnitude of the terms the int8 epilogue adds and cancels.
pub fn code_magnitudes(a: &[f32], m: usize, w: &Weights<'_>) -> Vec<f64> {
    let p = w.params;
    let t: Vec<f64> = (0..p.n)
        .flat_map(|n| {
            (0..p.k).map(move |k| {
                let blk = w.block_of(k);
                (w.code(n, k) as f64 + (w.zero_point(n, blk) as f64).abs()) * (w.scale(n, blk) as f64).abs()
            })
        })
        .collect();
    abs_a_times(a, m, &t, p.n, p.k)
}

/// Σ_k |a[i,k]|·c[n,k] for every output (a row-major [M, K], c row-major [N, K]).
fn abs_a_times(a: &[f32], m: usize, c: &[f64], n: usize, k: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        let row = &a[i * k..][..k];
        for j in 0..n {
            out[i * n + j] = row.iter().zip(&c[j * k..][..k]).map(|(&x, &w)| (x as f64).abs() * w).sum();
        }
    }
    out
}

/// Descriptors layout-generic kernels are run on, beside every family's layout: both code encodings, every
/// scale type and zero-point storage, block sums on and off, several panel geometries.
pub fn variety() -> Vec<RhsLayout> {
    let l =
        |nr, kr, codes, scales, zero_points, block_sums| RhsLayout { nr, kr, codes, scales, zero_points, block_sums };
    vec![
        RhsLayout::plain(8, 4),
        l(4, 8, Codes::Signed, ScaleType::F16, ZpStorage::Correction, true),
        l(16, 4, Codes::Unsigned, ScaleType::Bf16, ZpStorage::PerBlock, true),
        l(4, 4, Codes::Signed, ScaleType::F32, ZpStorage::PerBlock, false),
        l(8, 8, Codes::Unsigned, ScaleType::F32, ZpStorage::Correction, true),
        l(3, 2, Codes::Signed, ScaleType::Bf16, ZpStorage::None, true),
    ]
}

/// The kernels this CPU runs (the test suite adds its `NIBBLE_REQUIRE_ISAS` check and skip lines).
pub fn runnable_kernels() -> Vec<&'static UKernel> {
    let cpu = Cpu::get();
    registry::kernels().iter().copied().filter(|uk| uk.runs_on(cpu)).collect()
}

/// The layouts kernel `uk` is tested on.
pub fn layouts_of(uk: &UKernel) -> Vec<RhsLayout> {
    let cpu = Cpu::get();
    let mut v: Vec<RhsLayout> = match uk.rhs() {
        RhsReads::Only(f) => vec![f(cpu)],
        RhsReads::Any | RhsReads::Where(_) => {
            registry::families().iter().map(|f| f.layout(cpu)).chain(variety()).filter(|l| uk.reads(cpu, l)).collect()
        }
    };
    v.dedup();
    let mut seen = Vec::new();
    v.retain(|l| {
        let new = !seen.contains(l);
        seen.push(*l);
        new
    });
    v
}

/// `case` as kernel `uk` on `layout` sees it: an fp32-path kernel only takes lossy scale types for models whose
/// scales they hold exactly (f16 models), so those cases get such scales.
pub fn case_for(uk: &UKernel, layout: &RhsLayout, case: Case) -> Case {
    if uk.path() == ComputePath::Fp32 && layout.scales != ScaleType::F32 {
        case.with_scales(layout.scales)
    } else {
        case
    }
}

/// Runs `sel` on `case` with M rows, in its activation numerics, and checks it against the references.
/// Returns the max |error|.
pub fn check(sel: &Selected, case: &Case, m: usize, rng: &mut Rng) -> f64 {
    let w = case.weights();
    let p = w.params;
    let a = activations(rng, m, p.k);
    let rhs = sel.pack_rhs(&w).unwrap_or_else(|e| panic!("{}: {e}", sel.name()));
    let mut out = vec![f32::NAN; m * p.n];
    matmul_serial(sel, &rhs, LhsSource::F32(&a), m, case.bias.as_deref(), &mut out);
    let (kernel, _) = sel.kernel_for(m);
    let what = format!(
        "{} act={} layout={} M={m} N={} K={} bits={} bl={} zp={:?} g_idx={} bias={}",
        kernel.name(),
        sel.activation_quant(),
        sel.layout(),
        p.n,
        p.k,
        p.bits,
        p.block_size,
        case.zp,
        case.g_idx.is_some(),
        case.bias.is_some()
    );
    // The oracle computes with the scales as the layout stores them.
    let eff = case.with_scales(sel.layout().scales);
    let we = eff.weights();
    let wd = reference::dequantize(&we);
    let exact = reference::matmul_dequantized(&a, m, &wd, p.n, p.k, case.bias.as_deref());
    let mag = magnitudes(&a, m, &wd, p.n, p.k);
    let bias_mag = |i: usize| case.bias.as_ref().map_or(0.0, |b| b[i % p.n].abs() as f64);
    match sel.path() {
        ComputePath::Fp32 => {
            // f32 products and sums: a few ulps of the magnitude sum, far below any quantization effect.
            let cmag = code_magnitudes(&a, m, &we);
            assert_close(&what, &out, &exact, |i| 3e-6 * mag[i] + 1e-6 * cmag[i] + 1e-6 * bias_mag(i) + 1e-7);
        }
        ComputePath::Int8 if sel.activation_quant() == ActQuant::Row => {
            // Y = Σ q·w and the z·Σw it is corrected by are each up to 128·sa·Σ|w| in f32: their rounding. The
            // sums run over every packed position: those without a value (the K tail of the last block, g_idx
            // gaps) hold q = z and whatever codes the model left there (don't-care values), which cancel exactly
            // in integers but are rounded with the rest, so they count at up to (max code + zero point)·scale
            // each (found by the kernels fuzz target: K = 1 in a block of 512, 2-bit garbage codes in the tail).
            let pads = (p.k_padded() - p.k) as f64;
            let wabs: Vec<f64> = (0..p.n)
                .map(|n| {
                    let real: f64 = wd[n * p.k..][..p.k].iter().map(|v| v.abs()).sum();
                    let s_max = (0..p.k_blocks()).map(|b| we.scale(n, b).abs()).fold(0f32, f32::max) as f64;
                    let z_max = (0..p.k_blocks()).map(|b| we.zero_point(n, b).abs()).fold(0f32, f32::max) as f64;
                    real + pads * (p.max_code() as f64 + z_max) * s_max
                })
                .collect();
            let cmag = code_magnitudes(&a, m, &we);
            let sa: Vec<f64> =
                (0..m).map(|row| reference::quantize_asymmetric_int8(&a[row * p.k..][..p.k]).0 as f64).collect();
            let float_tol = |i: usize| {
                let (row, n) = (i / p.n, i % p.n);
                1e-5 * cmag[i] + 4e-5 * sa[row] * 128.0 * wabs[n] + 1e-6 * bias_mag(i) + 1e-7
            };
            if !we.has_reordering_g_idx() {
                let int_ref = reference::matmul_int8_row(&a, m, &we, case.bias.as_deref());
                assert_close(&format!("{what} vs int8 row reference"), &out, &int_ref, float_tol);
            }
            let bound = reference::int8_row_error_bounds(&a, m, &wd, p.n, p.k);
            assert_close(&format!("{what} vs exact"), &out, &exact, |i| bound[i] * 1.001 + float_tol(i));
        }
        ComputePath::Int8 => {
            let cmag = code_magnitudes(&a, m, &we);
            let float_tol = |i: usize| 1e-5 * cmag[i] + 1e-6 * bias_mag(i) + 1e-7;
            if !we.has_reordering_g_idx() {
                // Same integer numerics: only the f32 epilogue may differ.
                let int_ref = reference::matmul_int8(&a, m, &we, case.bias.as_deref());
                assert_close(&format!("{what} vs int8 reference"), &out, &int_ref, float_tol);
            }
            // Against exact arithmetic: at most half a quantization step per activation.
            // Activation blocks are the weight blocks, except with g_idx regrouping (then bound by the row).
            let a_block = if we.has_reordering_g_idx() { p.k } else { p.block_size };
            let bound = reference::int8_error_bounds(&a, m, &wd, p.n, p.k, a_block);
            assert_close(&format!("{what} vs exact"), &out, &exact, |i| bound[i] * 1.001 + float_tol(i));
        }
    }
    out.iter().zip(&exact).map(|(&g, &e)| (g as f64 - e).abs()).fold(0.0, f64::max)
}
