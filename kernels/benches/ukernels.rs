//! Per-kernel micro-benchmarks: every kernel this CPU runs, on its own layout (the first it reads: for layout-
//! generic kernels, the layout of the best family that uses it), over decode (M = 1) and prefill (M = 16, 128)
//! shapes of SmolLM2-135M and Llama-3-8B projections. Bench id `<kernel>/<layout>/<M>x<N>x<K>`, so
//! `cargo bench -p nibble-kernels -- matmul_f32_qsi8db` runs one kernel. Only the tiles are timed (activations are
//! packed once outside the loop, as the provider does once per call); throughput is weight bytes for M = 1
//! (memory-bound) and multiply-adds for M > 1 (compute-bound).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nibble_kernels::format::{Params, Weights, ZeroPoints};
use nibble_kernels::pack::LhsSource;
use nibble_kernels::ukernel::RhsReads;
use nibble_kernels::{ComputePath, Cpu, OutTiles, Problem, RhsLayout, Selected, UKernel, registry};
use std::hint::black_box;

/// (N, K) of decoder projections: SmolLM2-135M q/o, up/gate, down; Llama-3-8B q/o.
const SHAPES: [(usize, usize); 4] = [(576, 576), (1536, 576), (576, 1536), (4096, 4096)];

/// The layout `uk` is benchmarked on.
fn layout_of(uk: &UKernel, cpu: &Cpu) -> Option<RhsLayout> {
    match uk.rhs() {
        RhsReads::Only(f) => Some(f(cpu)),
        _ => registry::families()
            .iter()
            .find(|f| std::ptr::eq(f.gemv(), uk) || std::ptr::eq(f.gemm(), uk))
            .map(|f| f.layout(cpu))
            .filter(|l| uk.reads(cpu, l)),
    }
}

fn bench(c: &mut Criterion) {
    let cpu = Cpu::get();
    for &uk in registry::kernels() {
        if !uk.runs_on(cpu) {
            eprintln!("SKIP {}: needs {}", uk.name(), uk.requires().missing_from(cpu.features()));
            continue;
        }
        let Some(layout) = layout_of(uk, cpu) else { continue };
        let mut g = c.benchmark_group(format!("{}/{}", uk.name(), layout));
        g.sample_size(10);
        for (n, k) in SHAPES {
            let (bits, bl) = (4u32, 32usize);
            let p = Params::new(k as i64, n as i64, bits as i64, bl as i64).expect("valid shape");
            let b: Vec<u8> = (0..n * p.k_blocks() * p.blob_size()).map(|i| (i * 131 % 251) as u8).collect();
            let scales: Vec<f32> = (0..n * p.k_blocks()).map(|i| 0.01 + (i % 7) as f32 * 1e-3).collect();
            let w = Weights::new(p, &b, &scales, ZeroPoints::Default, None).expect("valid weights");
            let path = uk.path();
            let Ok(sel) = Selected::single(uk, layout, &Problem::of(path, &w)) else { continue };
            let rhs = sel.pack_rhs(&w).expect("packs");
            for m in [1usize, 16, 128] {
                if m > 1 && n * k > 1 << 22 && path == ComputePath::Fp32 {
                    continue; // the portable fp32 GEMM at 8B sizes takes minutes per sample
                }
                let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
                let lhs = sel.pack_lhs(LhsSource::F32(&a), m, &rhs);
                let plan = sel.plan(m, &rhs);
                let mut out = vec![0f32; m * n];
                g.throughput(if m == 1 {
                    Throughput::Bytes(rhs.bytes().len() as u64)
                } else {
                    Throughput::Elements((m * n * k) as u64)
                });
                g.bench_function(BenchmarkId::from_parameter(format!("{m}x{n}x{k}")), |bch| {
                    bch.iter(|| {
                        let tiles = OutTiles::new(&mut out, plan);
                        for t in 0..plan.count() {
                            sel.run_tile(&lhs, &rhs, None, &tiles, t);
                        }
                    });
                    black_box(&out);
                });
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
