//! kernel_icount: one kernel's tiles (and the activation packing) over one shape, for instruction counts under
//! qemu (`scripts/aarch64/icount-kernel.sh` counts inside the kernel's and the packer's functions by symbol), and
//! the per-kernel instruction budgets written in the kernels' module docs.
//!
//! kernel_icount --kernel NAME [--m 32] [--n 2048] [--k 2048] [--bits 4] [--bs 32] [--zp none|uint8] [--runs 1]
//!               [--act block|row]
//!
//! Weights are fixed pseudo-random codes; the kernel runs on its own layout (as `benches/ukernels.rs`). Each run
//! packs A once and runs every tile on this thread. Runs 2 ..= `runs` are marked for the counters
//! (`scripts/aarch64/aarch64-icount.sh`: "icount marked total", a seek on /dev/null to 0x4e49424c0001 / 0002), so
//! that with `--runs 1 + R` the marked count / R is one call's packing and tiles without the set-up.

use nibble_kernels::format::{Params, Weights, ZeroPoints};
use nibble_kernels::pack::LhsSource;
use nibble_kernels::ukernel::RhsReads;
use nibble_kernels::{ActQuant, Cpu, OutTiles, Problem, Selected, registry};
use std::fs::File;
use std::hint::black_box;
use std::io::{Seek, SeekFrom};

/// The counters' region marks (`provider/examples/run_matmul.rs` has the same): 1 opens, 2 closes.
fn mark(null: &mut File, code: u64) -> Result<(), String> {
    null.seek(SeekFrom::Start(0x4e49_424c_0000 | code)).map(drop).map_err(|e| format!("icount marker: {e}"))
}

fn main() -> Result<(), String> {
    let (mut kernel, mut m, mut n, mut k, mut bits, mut bs, mut zp, mut runs) =
        (String::new(), 32usize, 2048usize, 2048usize, 4u32, 32usize, "none".to_string(), 1usize);
    let mut act = ActQuant::Block;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let num = || value.parse::<usize>().map_err(|e| format!("{flag} {value}: {e}"));
        match flag.as_str() {
            "--kernel" => kernel = value.clone(),
            "--m" => m = num()?,
            "--n" => n = num()?,
            "--k" => k = num()?,
            "--bits" => bits = num()? as u32,
            "--bs" => bs = num()?,
            "--zp" => zp = value.clone(),
            "--runs" => runs = num()?,
            "--act" => act = ActQuant::parse(&value).ok_or(format!("--act {value}: block or row"))?,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    let cpu = Cpu::get();
    let uk = *registry::kernels()
        .iter()
        .find(|uk| uk.name() == kernel)
        .ok_or(format!("no kernel {kernel:?} (registry::kernels() names them)"))?;
    if !uk.runs_on(cpu) {
        return Err(format!("{kernel} needs {}", uk.requires().missing_from(cpu.features())));
    }
    let RhsReads::Only(layout) = uk.rhs() else { return Err(format!("{kernel} reads any layout: name a SIMD kernel")) };
    let layout = layout(cpu);
    let p = Params::new(k as i64, n as i64, bits as i64, bs as i64).map_err(|e| e.to_string())?;
    let b: Vec<u8> = (0..n * p.k_blocks() * p.blob_size()).map(|i| (i * 131 % 251) as u8).collect();
    let scales: Vec<f32> = (0..n * p.k_blocks()).map(|i| 0.01 + (i % 7) as f32 * 1e-3).collect();
    let zps: Vec<u8> = (0..n * p.k_blocks().div_ceil(8 / bits as usize)).map(|i| (i * 7 % 256) as u8).collect();
    let zero_points = match zp.as_str() {
        "none" => ZeroPoints::Default,
        "uint8" => ZeroPoints::Packed(&zps),
        _ => return Err(format!("--zp {zp}: none or uint8")),
    };
    let w = Weights::new(p, &b, &scales, zero_points, None).map_err(|e| e.to_string())?;
    let sel = Selected::single(uk, layout, &Problem::of(uk.path(), &w))?.with_activation_quant(act);
    let rhs = sel.pack_rhs(&w).map_err(|e| e.to_string())?;
    if act == ActQuant::Row {
        // The row numerics' one-time work (one GEMV pass over the weights): icount-kernel.sh counts it with the
        // call; it is kept with the packed weights, so a session pays it once.
        sel.col_sums(&rhs);
    }
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
    let mut out = vec![0f32; m * n];
    let mut null = File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
    for run in 0..runs {
        if run == 1 {
            mark(&mut null, 1)?;
        }
        let lhs = sel.pack_lhs(LhsSource::F32(&a), m, &rhs);
        let plan = sel.plan(m, &rhs);
        let tiles = OutTiles::new(&mut out, plan);
        for t in 0..plan.count() {
            sel.run_tile(&lhs, &rhs, None, &tiles, t);
        }
    }
    if runs > 1 {
        mark(&mut null, 2)?;
    }
    println!(
        "{kernel} M={m} N={n} K={k} bits={bits} bs={bs} zp={zp} act={act} runs={runs}: y[0]={}",
        black_box(out[0])
    );
    Ok(())
}
