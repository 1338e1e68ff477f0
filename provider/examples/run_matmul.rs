//! Runs one MatMulNBits model a given number of times in one session: the workload of the aarch64 instruction
//! counts (scripts/aarch64/icount-matmul.sh).
//!
//! ```text
//! run_matmul --ort-dylib libonnxruntime.so.1.31.1 --model mm.onnx --m 1 --runs 5 [--lib libnibble_ort.so]
//!            [--config key=value]...
//! ```
//! Without `--lib` ORT's built-in op runs. `--config` adds a session config entry before the library is
//! registered (e.g. `nibble.activation_quant=row`). One intra-op thread, no spinning; A is a fixed pseudo-random matrix
//! [M, K] (K read from the model's input A).
//!
//! Runs 2 ..= R are bracketed by instruction-count markers (see [`Marker`]): the counting plugin reports the
//! instructions between them, R − 1 Runs without session creation, weight packing, the first Run's one-time work
//! or process exit, all of which stay in the whole-process total.

use anyhow::{Context, Result, anyhow, bail};
use ort::session::Session;
use ort::value::TensorRef;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::PathBuf;

/// Marks the start and end of the measured region for scripts/aarch64/qemu-icount-plugin.c: a seek on /dev/null
/// to offset `ICOUNT_MARK | code` (code 1 start, 2 end), which the plugin recognises by its arguments. Without the
/// plugin it is a harmless seek.
struct Marker(File);

impl Marker {
    const ICOUNT_MARK: u64 = 0x4e49_424c_0000;

    fn new() -> Result<Self> {
        Ok(Self(File::open("/dev/null").context("opening /dev/null for the icount markers")?))
    }

    fn mark(&mut self, code: u64) -> Result<()> {
        self.0.seek(SeekFrom::Start(Self::ICOUNT_MARK | code)).context("icount marker")?;
        Ok(())
    }
}

struct Args {
    ort_dylib: PathBuf,
    model: PathBuf,
    lib: Option<PathBuf>,
    m: usize,
    runs: usize,
    config: Vec<(String, String)>,
}

fn args() -> Result<Args> {
    let mut it = std::env::args().skip(1);
    let (mut ort_dylib, mut model, mut lib, mut m, mut runs) = (None, None, None, 1, 1);
    let mut config = Vec::new();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--ort-dylib" => ort_dylib = Some(PathBuf::from(value()?)),
            "--model" => model = Some(PathBuf::from(value()?)),
            "--lib" => lib = Some(PathBuf::from(value()?)),
            "--m" => m = value()?.parse().context("--m")?,
            "--runs" => runs = value()?.parse().context("--runs")?,
            "--config" => {
                let kv = value()?;
                let (k, v) = kv.split_once('=').with_context(|| format!("--config {kv}: expected key=value"))?;
                config.push((k.to_string(), v.to_string()));
            }
            other => bail!("unknown argument {other} (see the doc comment of provider/examples/run_matmul.rs)"),
        }
    }
    Ok(Args {
        ort_dylib: ort_dylib.context("--ort-dylib is required")?,
        model: model.context("--model is required")?,
        lib,
        m,
        runs,
        config,
    })
}

fn main() -> Result<()> {
    let a = args()?;
    let env = ort::init_from(&a.ort_dylib)
        .with_context(|| format!("loading {}", a.ort_dylib.display()))?
        .with_name("run_matmul")
        .build()?;
    // No thread pool threads, and none that would spin (so nothing the count sees depends on timing).
    let mut b = Session::builder(&env)?
        .with_intra_threads(1)
        .map_err(|e| anyhow!("{e}"))?
        .with_inter_threads(1)
        .map_err(|e| anyhow!("{e}"))?
        .with_intra_op_spinning(false)
        .map_err(|e| anyhow!("{e}"))?
        .with_inter_op_spinning(false)
        .map_err(|e| anyhow!("{e}"))?;
    for (k, v) in &a.config {
        b = b.with_config_entry(k, v).map_err(|e| anyhow!("{e}"))?;
    }
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
    let mut marker = Marker::new()?;
    let mut sum = 0f64;
    for run in 0..a.runs {
        if run == 1 {
            marker.mark(1)?;
        }
        let input = TensorRef::from_array_view(([a.m, k], data.as_slice()))?;
        let out = sess.run(ort::inputs!["A" => input])?;
        let (_, y) = out["Y"].try_extract_tensor::<f32>()?;
        sum += y.iter().map(|&v| v as f64).sum::<f64>();
    }
    if a.runs >= 2 {
        marker.mark(2)?;
    }
    println!("runs {} M {} K {k}: checksum {sum:.6e}", a.runs, a.m);
    Ok(())
}
