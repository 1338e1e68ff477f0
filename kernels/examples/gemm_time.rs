//! gemm_time: GFLOP/s of one kernel's tiles alone (activations packed once outside the loop, one thread), over
//! M and (N, K), the best of 11 batches of ~50 ms, and the time of one activation packing (f32 rows). Prints one
//! markdown row per (kernel, M, N, K).
//!
//! gemm_time --kernels a,b [--m 128,512] [--shapes 1536x576,576x1536] [--bs 32] [--zp none|u8]
//!
//! `--zp u8`: 4-bit uint8 zero points (varied per column and block), as asymmetric models carry.
//!
//! Shapes are N×K. Kernels with one weight layout only (e.g. the x86 fp32 GEMMs). On a shared VM run variants
//! in turns and compare the best of each (other guests' load comes and goes).

use nibble_kernels::format::{Params, Weights, ZeroPoints};
use nibble_kernels::pack::LhsSource;
use nibble_kernels::{Cpu, OutTiles, Problem, Selected, registry};
use std::hint::black_box;
use std::time::Instant;

fn list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>, String> {
    s.split(',').map(|v| v.parse().map_err(|_| format!("bad value {v}"))).collect()
}

fn main() -> Result<(), String> {
    let (mut kernels, mut ms, mut shapes, mut bs) = (String::new(), vec![128usize, 512], String::new(), 32usize);
    let mut zp_u8 = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--kernels" => kernels = value,
            "--m" => ms = list(&value)?,
            "--shapes" => shapes = value,
            "--bs" => bs = value.parse().map_err(|e| format!("{value}: {e}"))?,
            "--zp" => {
                zp_u8 = match value.as_str() {
                    "none" => false,
                    "u8" => true,
                    _ => return Err(format!("--zp {value}: expected none or u8")),
                }
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if shapes.is_empty() {
        shapes = "1536x576,576x1536,576x576".into();
    }
    let cpu = Cpu::get();
    println!("| kernel | M | N×K | GFLOP/s | time |");
    println!("|---|---|---|---|---|");
    for name in kernels.split(',') {
        let uk = registry::kernels().iter().find(|k| k.name() == name).ok_or(format!("no kernel {name}"))?;
        for shape in shapes.split(',') {
            let (n, k) = shape.split_once('x').ok_or(format!("bad shape {shape}"))?;
            let (n, k): (usize, usize) = (n.parse().map_err(|_| "n")?, k.parse().map_err(|_| "k")?);
            let p = Params::new(k as i64, n as i64, 4, bs as i64).map_err(|e| e.to_string())?;
            let b: Vec<u8> = (0..n * p.k_blocks() * p.blob_size()).map(|i| (i * 131 % 251) as u8).collect();
            let scales: Vec<f32> = (0..n * p.k_blocks()).map(|i| 0.01 + (i % 7) as f32 * 1e-3).collect();
            let zp: Vec<u8> = (0..n * (p.k_blocks() * 4).div_ceil(8)).map(|i| (i * 29 % 256) as u8).collect();
            let zps = if zp_u8 { ZeroPoints::Packed(&zp) } else { ZeroPoints::Default };
            let w = Weights::new(p, &b, &scales, zps, None).map_err(|e| e.to_string())?;
            let layout = match uk.rhs() {
                nibble_kernels::ukernel::RhsReads::Only(f) => f(cpu),
                _ => return Err(format!("{name}: give a kernel with one layout")),
            };
            let sel = Selected::single(uk, layout, &Problem::of(uk.path(), &w)).map_err(|e| e.to_string())?;
            let rhs = sel.pack_rhs(&w).map_err(|e| e.to_string())?;
            for &m in &ms {
                let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
                let lhs = sel.pack_lhs(LhsSource::F32(&a), m, &rhs);
                let t = Instant::now();
                for _ in 0..20 {
                    black_box(sel.pack_lhs(LhsSource::F32(&a), m, &rhs));
                }
                let pack_us = t.elapsed().as_secs_f64() / 20.0 * 1e6;
                let plan = sel.plan(m, &rhs);
                let mut out = vec![0f32; m * n];
                let mut once = || {
                    let tiles = OutTiles::new(&mut out, plan);
                    for t in 0..plan.count() {
                        sel.run_tile(&lhs, &rhs, None, &tiles, t);
                    }
                };
                let t0 = Instant::now();
                once();
                let reps = ((0.05 / t0.elapsed().as_secs_f64().max(1e-7)) as usize).clamp(1, 10000);
                let best = (0..11)
                    .map(|_| {
                        let t = Instant::now();
                        (0..reps).for_each(|_| once());
                        t.elapsed().as_secs_f64() / reps as f64
                    })
                    .fold(f64::MAX, f64::min);
                black_box(&out);
                println!(
                    "| {name} | {m} | {n}×{k} | {:.1} | {:.0} µs tiles, {pack_us:.0} µs pack |",
                    2.0 * (m * n * k) as f64 / best / 1e9,
                    best * 1e6
                );
            }
        }
    }
    Ok(())
}
