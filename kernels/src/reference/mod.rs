//! Slow, obviously-correct implementations used as test oracles. Never tuned and never used by the provider: each
//! is written the plain way, with only what does not depend on the row (B's codes, dequantized B) computed once
//! per call instead of once per row, so the suites under qemu spend their time in the kernels they test.

use crate::format::Weights;

/// Dequantizes B to f64, row-major [N, K]: w[n, k] = (code − zp) · scale of the block k belongs to.
pub fn dequantize(w: &Weights<'_>) -> Vec<f64> {
    let p = w.params;
    let mut out = vec![0f64; p.n * p.k];
    for n in 0..p.n {
        for k in 0..p.k {
            let blk = w.block_of(k);
            let q = w.code(n, k) as f64;
            out[n * p.k + k] = (q - w.zero_point(n, blk) as f64) * w.scale(n, blk) as f64;
        }
    }
    out
}

/// Every code of B, row-major [N, K], unpacked once (the int8 references read each one M times).
fn codes(w: &Weights<'_>) -> Vec<u8> {
    let p = w.params;
    (0..p.n).flat_map(|n| (0..p.k).map(move |k| w.code(n, k))).collect()
}

/// Y[m, n] = Σ_k A[m, k] · w[n, k] (+ bias[n]) in f64. `a` is row-major [M, K].
pub fn matmul(a: &[f32], m: usize, w: &Weights<'_>, bias: Option<&[f32]>) -> Vec<f64> {
    matmul_dequantized(a, m, &dequantize(w), w.params.n, w.params.k, bias)
}

/// [`matmul`] from B already dequantized ([`dequantize`]: row-major [N, K]).
pub fn matmul_dequantized(a: &[f32], m: usize, wd: &[f64], n: usize, k: usize, bias: Option<&[f32]>) -> Vec<f64> {
    let mut y = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|kk| a[i * k + kk] as f64 * wd[j * k + kk]).sum();
            y[i * n + j] = dot + bias.map_or(0.0, |b| b[j] as f64);
        }
    }
    y
}

/// The int8-activation numerics without g_idx reordering: A quantized per block of block_size (zero-padded
/// past K), integer dot products with the codes, then Σ_b sa·s·(Σ q_a·q_w − zp·Σ q_a). f64 epilogue.
///
/// # Panics
/// If `w` has a reordering g_idx (the int8 path regroups K first; compare those against [`matmul`] with the
/// quantization error bound instead).
pub fn matmul_int8(a: &[f32], m: usize, w: &Weights<'_>, bias: Option<&[f32]>) -> Vec<f64> {
    assert!(!w.has_reordering_g_idx(), "matmul_int8 does not model g_idx regrouping");
    let p = w.params;
    let bl = p.block_size;
    let mut y = vec![0f64; m * p.n];
    let mut row = vec![0f32; bl];
    let mut q = vec![0i8; bl];
    let codes = codes(w);
    for i in 0..m {
        for b in 0..p.k_blocks() {
            for (o, r) in row.iter_mut().enumerate() {
                let k = b * bl + o;
                *r = if k < p.k { a[i * p.k + k] } else { 0.0 };
            }
            let (sa, qsum) = quantize_symmetric_int8(&row, &mut q);
            for n in 0..p.n {
                let isum: i64 =
                    (0..bl.min(p.k - b * bl)).map(|o| q[o] as i64 * codes[n * p.k + b * bl + o] as i64).sum();
                let corr = w.zero_point(n, b) as f64 * qsum as f64;
                y[i * p.n + n] += sa as f64 * w.scale(n, b) as f64 * (isum as f64 - corr);
            }
        }
        if let Some(bias) = bias {
            for n in 0..p.n {
                y[i * p.n + n] += bias[n] as f64;
            }
        }
    }
    y
}

/// The documented activation quantization, written out independently of `pack::quantize_block`: per block,
/// amax = max |a|, scale = amax / 127, q = round-half-even(a · (127 / amax)) clamped to ±127 (0 for an all-zero
/// block). Returns (scale, Σ q).
fn quantize_symmetric_int8(a: &[f32], q: &mut [i8]) -> (f32, i32) {
    let mut amax = 0f32;
    for &x in a {
        if x.abs() > amax {
            amax = x.abs();
        }
    }
    if amax == 0.0 {
        q.fill(0);
        return (0.0, 0);
    }
    let inv = 127.0 / amax;
    let mut sum = 0;
    for (qi, &x) in q.iter_mut().zip(a) {
        let r = (x * inv).round_ties_even();
        *qi = r.clamp(-127.0, 127.0) as i8;
        sum += *qi as i32;
    }
    (amax / 127.0, sum)
}

/// The `row` int8 numerics (ORT-arm64's, KleidiAI's `qai8dxp`), without g_idx reordering: each row of A
/// quantized asymmetrically over its K values ([`quantize_asymmetric_int8`]), integer sums of (q − z)·code and
/// (q − z) per block, then Σ_b sa·s·(…). f64 epilogue.
///
/// # Panics
/// As [`matmul_int8`].
pub fn matmul_int8_row(a: &[f32], m: usize, w: &Weights<'_>, bias: Option<&[f32]>) -> Vec<f64> {
    assert!(!w.has_reordering_g_idx(), "matmul_int8_row does not model g_idx regrouping");
    let p = w.params;
    let bl = p.block_size;
    let mut y = vec![0f64; m * p.n];
    let codes = codes(w);
    for i in 0..m {
        let (sa, z, q) = quantize_asymmetric_int8(&a[i * p.k..][..p.k]);
        for n in 0..p.n {
            let mut acc = 0f64;
            for b in 0..p.k_blocks() {
                let ks = b * bl..((b + 1) * bl).min(p.k);
                let isum: i64 = ks.clone().map(|k| (q[k] - z) as i64 * codes[n * p.k + k] as i64).sum();
                let qsum: i64 = ks.map(|k| (q[k] - z) as i64).sum();
                acc += w.scale(n, b) as f64 * (isum as f64 - w.zero_point(n, b) as f64 * qsum as f64);
            }
            y[i * p.n + n] = sa as f64 * acc + bias.map_or(0.0, |b| b[n] as f64);
        }
    }
    y
}

/// The documented per-row quantization, written out independently of `pack::row_quant`: lo = min(0, min a),
/// hi = max(0, max a), scale = (hi − lo)/255, z = round-half-even(−128 − lo·255/(hi − lo)) in −128..127,
/// q = round-half-even(a·255/(hi − lo)) + z clamped to −128..127 (scale 0, z 0, q 0 for an all-zero row).
/// Returns (scale, z, q).
pub fn quantize_asymmetric_int8(a: &[f32]) -> (f32, i32, Vec<i32>) {
    let mut lo = 0f32;
    let mut hi = 0f32;
    for &x in a {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if hi == lo {
        return (0.0, 0, vec![0; a.len()]);
    }
    let inv = 255.0 / (hi - lo);
    let z = (-128.0 - lo * inv).round_ties_even().clamp(-128.0, 127.0) as i32;
    let q = a.iter().map(|&x| ((x * inv).round_ties_even() + z as f32).clamp(-128.0, 127.0) as i32).collect();
    ((hi - lo) / 255.0, z, q)
}

/// [`int8_error_bounds`] for the `row` numerics: each activation moves by at most half a step of its row,
/// (max(0, max a) − min(0, min a)) / 510, so the error of output (i, n) is ≤ that · Σ_k |w[n, k]|. `a` is
/// row-major [M, K], `wd` B dequantized ([`dequantize`]); one bound per output, row-major [M, N].
pub fn int8_row_error_bounds(a: &[f32], m: usize, wd: &[f64], n: usize, k: usize) -> Vec<f64> {
    let half_step: Vec<f64> = (0..m)
        .map(|i| {
            let (lo, hi) = a[i * k..][..k].iter().fold((0f32, 0f32), |(l, h), &x| (l.min(x), h.max(x)));
            (hi - lo) as f64 / 510.0
        })
        .collect();
    let w_abs: Vec<f64> = (0..n).map(|j| wd[j * k..][..k].iter().map(|v| v.abs()).sum()).collect();
    (0..m * n).map(|o| half_step[o / n] * w_abs[o % n]).collect()
}

/// A rigorous bound on |int8 path − exact| for every output: each activation moves by at most half a
/// quantization step of its block (amax_block / 254), so the error of output (i, n) is
/// ≤ Σ_blocks amax_block(a[i])/254 · Σ_k∈block |w[n, k]|. `block` = the length of the activation blocks along K (the
/// whole row for g_idx-regrouped weights, whose activation blocks are not contiguous in K). `a` is row-major
/// [M, K], `wd` B dequantized ([`dequantize`]); one bound per output, row-major [M, N].
pub fn int8_error_bounds(a: &[f32], m: usize, wd: &[f64], n: usize, k: usize, block: usize) -> Vec<f64> {
    let kb = k.div_ceil(block);
    let half_steps: Vec<f64> = (0..m)
        .flat_map(|i| a[i * k..][..k].chunks(block).map(|c| c.iter().fold(0f32, |m, &x| m.max(x.abs())) as f64 / 254.0))
        .collect();
    let w_abs: Vec<f64> =
        (0..n).flat_map(|j| wd[j * k..][..k].chunks(block).map(|c| c.iter().map(|v| v.abs()).sum::<f64>())).collect();
    (0..m * n).map(|o| (0..kb).map(|b| half_steps[o / n * kb + b] * w_abs[o % n * kb + b]).sum()).collect()
}
