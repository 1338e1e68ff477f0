//! lhs_pack_time: per-call time of the activation packing (`Selected::pack_lhs`) for the families that pack int8
//! activations on this CPU, over M × K, serially (and, with `--threads 2`, through a small spinning pool as
//! ORT's intra-op pool does). Prints one markdown row per (family, K, M): µs per call, the best of 5 batches.
//!
//! lhs_pack_time [--threads 1|2] [--families a,b] [--bs 32]

use nibble_kernels::format::{Params, Weights, ZeroPoints};
use nibble_kernels::pack::LhsSource;
use nibble_kernels::{ComputePath, Cpu, Problem, registry};
use std::hint::black_box;
use std::time::Instant;

fn main() -> Result<(), String> {
    let (mut threads, mut families, mut bs) = (1usize, String::new(), 32usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--threads" => threads = value.parse().map_err(|e| format!("{value}: {e}"))?,
            "--families" => families = value,
            "--bs" => bs = value.parse().map_err(|e| format!("{value}: {e}"))?,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    let cpu = Cpu::get();
    let names: Vec<String> = if families.is_empty() {
        registry::families()
            .iter()
            .filter(|f| f.path() == ComputePath::Int8 && f.why_not(cpu, &probe(bs)).is_none())
            .map(|f| f.name().to_string())
            .collect()
    } else {
        families.split(',').map(str::to_string).collect()
    };
    println!("| family | K | M | µs/call ({threads} thr) |");
    println!("|---|---|---|---|");
    for name in &names {
        for k in [576usize, 2048, 4096] {
            let n = 64usize;
            let p = Params::new(k as i64, n as i64, 4, bs as i64).map_err(|e| e.to_string())?;
            let b: Vec<u8> = (0..n * p.k_blocks() * p.blob_size()).map(|i| (i * 131 % 251) as u8).collect();
            let scales: Vec<f32> = (0..n * p.k_blocks()).map(|i| 0.01 + (i % 7) as f32 * 1e-3).collect();
            let w = Weights::new(p, &b, &scales, ZeroPoints::Default, None).map_err(|e| e.to_string())?;
            let ladder = registry::build_ladder(cpu, None, Some(name)).map_err(|e| e.to_string())?;
            let sel = ladder.select(&Problem::of(ComputePath::Int8, &w)).map_err(|e| e.to_string())?;
            let rhs = sel.pack_rhs(&w).map_err(|e| e.to_string())?;
            for m in [1usize, 4, 16, 64, 128, 512] {
                let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
                let once = || black_box(pack(&sel, &a, m, &rhs, threads));
                let t0 = Instant::now();
                once();
                let reps = ((0.02 / t0.elapsed().as_secs_f64().max(1e-7)) as usize).clamp(3, 20000);
                let best = (0..5)
                    .map(|_| {
                        let t = Instant::now();
                        (0..reps).for_each(|_| {
                            once();
                        });
                        t.elapsed().as_secs_f64() / reps as f64
                    })
                    .fold(f64::INFINITY, f64::min);
                println!("| {name} | {k} | {m} | {:.2} |", best * 1e6);
            }
        }
    }
    Ok(())
}

fn probe(bs: usize) -> Problem {
    let p = Params::new(256, 64, 4, bs as i64).expect("valid");
    let b = vec![0u8; 64 * p.k_blocks() * p.blob_size()];
    let s = vec![0.01f32; 64 * p.k_blocks()];
    Problem::of(ComputePath::Int8, &Weights::new(p, &b, &s, ZeroPoints::Default, None).expect("valid"))
}

fn pack(sel: &nibble_kernels::Selected, a: &[f32], m: usize, rhs: &nibble_kernels::PackedRhs, threads: usize) -> usize {
    assert_eq!(threads, 1, "parallel packing not available yet");
    sel.pack_lhs(LhsSource::F32(a), m, rhs).rows()
}
