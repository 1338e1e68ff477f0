//! Runs one MatMulNBits model a given number of times in one session: the workload of the aarch64 instruction
//! counts (scripts/aarch64/icount-matmul.sh counts two run counts and takes the difference, so that session
//! creation and start-up cancel out).
//!
//! ```text
//! run_matmul --ort-dylib libonnxruntime.so.1.31.1 --model mm.onnx --m 1 --runs 5 [--lib libnibble_ort.so]
//! ```
//! Without `--lib` ORT's built-in op runs. One intra-op thread; A is a fixed pseudo-random matrix [M, K] (K read
//! from the model's input A).

use anyhow::{Context, Result, anyhow, bail};
use ort::session::Session;
use ort::value::TensorRef;
use std::path::PathBuf;

struct Args {
    ort_dylib: PathBuf,
    model: PathBuf,
    lib: Option<PathBuf>,
    m: usize,
    runs: usize,
}

fn args() -> Result<Args> {
    let mut it = std::env::args().skip(1);
    let (mut ort_dylib, mut model, mut lib, mut m, mut runs) = (None, None, None, 1, 1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--ort-dylib" => ort_dylib = Some(PathBuf::from(value()?)),
            "--model" => model = Some(PathBuf::from(value()?)),
            "--lib" => lib = Some(PathBuf::from(value()?)),
            "--m" => m = value()?.parse().context("--m")?,
            "--runs" => runs = value()?.parse().context("--runs")?,
            other => bail!("unknown argument {other} (see the doc comment of provider/examples/run_matmul.rs)"),
        }
    }
    Ok(Args {
        ort_dylib: ort_dylib.context("--ort-dylib is required")?,
        model: model.context("--model is required")?,
        lib,
        m,
        runs,
    })
}

fn main() -> Result<()> {
    let a = args()?;
    let env = ort::init_from(&a.ort_dylib)
        .with_context(|| format!("loading {}", a.ort_dylib.display()))?
        .with_name("run_matmul")
        .build()?;
    let mut b = Session::builder(&env)?
        .with_intra_threads(1)
        .map_err(|e| anyhow!("{e}"))?
        .with_inter_threads(1)
        .map_err(|e| anyhow!("{e}"))?;
    if let Some(lib) = &a.lib {
        b = b.with_operator_library(lib).map_err(|e| anyhow!("{e}"))?;
    }
    let mut sess = b
        .commit_from_file(&a.model)
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("loading {}", a.model.display()))?;
    let k = sess.inputs()[0]
        .dtype()
        .tensor_shape()
        .and_then(|s| s.last().copied())
        .filter(|&k| k > 0)
        .context("the model's input A needs a fixed K")? as usize;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let data: Vec<f32> = (0..a.m * k)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect();
    let mut sum = 0f64;
    for _ in 0..a.runs {
        let input = TensorRef::from_array_view(([a.m, k], data.as_slice()))?;
        let out = sess.run(ort::inputs!["A" => input])?;
        let (_, y) = out["Y"].try_extract_tensor::<f32>()?;
        sum += y.iter().map(|&v| v as f64).sum::<f64>();
    }
    println!("runs {} M {} K {k}: checksum {sum:.6e}", a.runs, a.m);
    Ok(())
}
