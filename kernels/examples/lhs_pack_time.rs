//! lhs_pack_time: per-call time of the activation packing (`Selected::pack_lhs`) for the families that pack int8
//! activations on this CPU, over M × K, serially (and, with `--threads 2`, in 2 tasks on this thread and a
//! spawned one; the cost of the spawn and join alone is printed first). Prints one markdown row per (family, K, M): µs per call, the best of 5 batches.
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
    if threads > 1 {
        let t = Instant::now();
        (0..2000).for_each(|_| {
            fork(threads, threads, &|t| {
                black_box(t);
            })
        });
        println!("empty fork-join on {threads} threads: {:.2} µs", t.elapsed().as_secs_f64() / 2000.0 * 1e6);
    }
    let names: Vec<String> = if families.is_empty() {
        // The best int8 family here (row-major qsi8db on x86) and the portable one (qsi8dbp4x8, qsu8db for M <= 3).
        let best = registry::select(&probe(bs)).map_err(|e| e.to_string())?;
        vec![best.name().to_string(), "portable_int8_qsnbp8x8_sf16_zpc_bsum".to_string()]
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
    let r: Result<_, ()> = if threads == 1 {
        Ok(sel.pack_lhs(LhsSource::F32(a), m, rhs))
    } else {
        sel.pack_lhs_tasks(LhsSource::F32(a), m, rhs, threads, |n, f| {
            fork(threads, n, f);
            Ok(())
        })
    };
    r.expect("packs").rows()
}

/// `f(0..n)` on this thread and `threads - 1` spawned ones (a spawn and join per call: ORT's pool, whose threads
/// spin between sections, hands work out faster; `--empty` measures this cost to subtract).
fn fork(threads: usize, n: usize, f: &(dyn Fn(usize) + Sync)) {
    std::thread::scope(|s| {
        for i in 1..threads {
            s.spawn(move || (i..n).step_by(threads).for_each(f));
        }
        (0..n).step_by(threads).for_each(f);
    });
}
