//! End-to-end tests: `libnibble_ort.so` loaded into a real ONNX Runtime through the `ort` crate.
//!
//! Environment:
//! - `NIBBLE_ORT_DYLIB` (required): path of the ONNX Runtime library to test against, e.g.
//!   `.cache/ort/1.31.1/libonnxruntime.so.1.31.1` (scripts/setup.sh puts the versions of scripts/ort-versions.txt there).
//!   Unset → every test fails, unless `NIBBLE_SKIP_ORT_TESTS=1` (then every test passes without running).
//! - `NIBBLE_ORT_VERSION` (optional): the version that library must report (guards against testing the wrong one).
//! - `NIBBLE_LIB` (optional): our library; default `<workspace>/target/release/libnibble_ort.so`.
//! - `NIBBLE_FIXTURES` (optional): models + golden data from `tests/fixtures/make_fixtures.py`;
//!   default `<workspace>/target/fixtures`.
//! - `NIBBLE_FRONTEND` (optional): `custom-op` (default: `with_operator_library`) or `ep` (ORT >= 1.24: the library
//!   registered once as an execution-provider library, then appended to each session through
//!   `nibble_ort::host`, the C API calls a Rust host makes when its `ort` must also run on older runtimes).
//!
//! What is checked:
//! - every fixture case, node in domain `nibble` and in `com.microsoft` (our override), against the float64 numpy
//!   reference and, where ORT's own kernel is right for the case, against ORT's kernel in a session without our
//!   library: abs 0.1 / rel 0.02 for accuracy_level 4 and for 0 (unset: nibble's default is its int8 path),
//!   abs 1e-4 / rel 1e-4 for accuracy_level 1, and for 0 with `nibble.accuracy_level_default=1`;
//! - concurrency: several threads calling `Run` on ONE session (see `concurrent_runs_share_one_session`);
//! - malformed models fail with an error naming `[MatMulNBits]`;
//! - the session config `nibble.override_com_microsoft=0` hands com.microsoft nodes back to ORT.

mod common;

use common::{env_path, nibble_lib, workspace};
use std::ffi::{CStr, c_char};
use std::path::{Path, PathBuf};
use std::ptr::{null, null_mut};
use std::sync::{Mutex, OnceLock};

use anyhow::{Context, Result, anyhow, bail, ensure};
use ort::AsPointer;
use ort::environment::Environment;
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::{Tensor, TensorRef};

// ------------------------------------------------------------------------------------------------ set-up

/// Progress line written straight to the process's stderr. libtest captures `eprintln!` per test and prints it only
/// for failed tests; a crash inside ORT kills the process before that, so progress must not be captured: the last
/// line then names the model that crashed.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!("[session] {}\n", format_args!($($arg)*));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}

/// `ort`'s builder errors (`Error<SessionBuilder>`) are not `Send + Sync`: keep their message only.
trait OrtResultExt<T> {
    fn ax(self) -> Result<T>;
}
impl<T, E: std::fmt::Display> OrtResultExt<T> for std::result::Result<T, E> {
    fn ax(self) -> Result<T> {
        self.map_err(|e| anyhow!("{e}"))
    }
}

/// `true` when `NIBBLE_SKIP_ORT_TESTS=1`: the caller returns without testing anything.
fn skipped(test: &str) -> bool {
    let skip = std::env::var("NIBBLE_SKIP_ORT_TESTS").is_ok_and(|v| v == "1");
    if skip {
        say!("{test}: SKIPPED (NIBBLE_SKIP_ORT_TESTS=1)");
    }
    skip
}

/// The process-wide ORT environment, loaded once from `NIBBLE_ORT_DYLIB`.
fn ort_env() -> &'static Environment {
    static ENV: OnceLock<std::result::Result<Environment, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| {
        let dylib = env_path("NIBBLE_ORT_DYLIB").ok_or_else(|| {
            "NIBBLE_ORT_DYLIB is not set: point it at an ONNX Runtime library, e.g. \
             NIBBLE_ORT_DYLIB=.cache/ort/1.31.1/libonnxruntime.so.1.31.1 (scripts/setup.sh fetches it; \
             scripts/test.sh sets it), or set NIBBLE_SKIP_ORT_TESTS=1 to skip these tests"
                .to_string()
        })?;
        if !dylib.is_file() {
            return Err(format!("NIBBLE_ORT_DYLIB={} does not exist (run scripts/setup.sh)", dylib.display()));
        }
        let env = ort::init_from(&dylib)
            .map_err(|e| format!("loading {}: {e}", dylib.display()))?
            .with_name("nibble-session-tests")
            .build()
            .map_err(|e| format!("creating the ORT environment from {}: {e}", dylib.display()))?;
        let version = nibble_ort::host::runtime_version(&dylib).map_err(|e| format!("{}: {e}", dylib.display()))?;
        say!("ONNX Runtime {version} loaded from {} ({})", dylib.display(), ort::info());
        if let Ok(want) = std::env::var("NIBBLE_ORT_VERSION")
            && version != want
        {
            return Err(format!("NIBBLE_ORT_VERSION={want} but {} is ONNX Runtime {version}", dylib.display()));
        }
        Ok(env)
    });
    match env {
        Ok(env) => env,
        Err(msg) => panic!("{msg}"),
    }
}

fn fixtures() -> PathBuf {
    let dir = env_path("NIBBLE_FIXTURES").unwrap_or_else(|| workspace().join("target").join("fixtures"));
    assert!(
        dir.join("manifest.txt").is_file(),
        "no fixtures in {}: run .venv/bin/python tests/fixtures/make_fixtures.py (scripts/test.sh does)",
        dir.display()
    );
    dir
}

/// How a session is made.
#[derive(Clone, Copy)]
struct Opts<'a> {
    /// Register libnibble_ort.so.
    nibble: bool,
    /// Extra session config entries, set before the library is registered.
    config: &'a [(&'a str, &'a str)],
    opt_level: GraphOptimizationLevel,
    intra_threads: usize,
}

const OURS: Opts<'static> =
    Opts { nibble: true, config: &[], opt_level: GraphOptimizationLevel::Disable, intra_threads: 2 };
const BUILTIN: Opts<'static> = Opts { nibble: false, ..OURS };

/// Creates a session. Creation is serialised across the test threads: ORT 1.20.1 registers custom-op domains in a
/// process-global, unsynchronised table, and two sessions registering domain "nibble" at the same moment fail with
/// "Trying to add a domain to DomainToVersion map, but the domain is already exist" (seen with a minimal op library
/// too, so it is ORT's race, not ours). Running a session concurrently is tested separately, and is fine.
fn session(model: &Path, o: Opts) -> Result<Session> {
    static CREATE: Mutex<()> = Mutex::new(());
    let _guard = CREATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut b = Session::builder(ort_env())
        .ax()?
        .with_optimization_level(o.opt_level)
        .ax()?
        .with_intra_threads(o.intra_threads)
        .ax()?;
    for (k, v) in o.config {
        b = b.with_config_entry(*k, *v).ax()?;
    }
    if o.nibble {
        if frontend_is_ep() {
            let (api, env) = (ort::api(), ort_env().ptr().cast_mut());
            ep_registered()?;
            // SAFETY: `api` and `env` are the loaded ORT's (≥ 1.24: ep_registered checked), `b` its live options.
            unsafe {
                let devices = nibble_ort::host::ep_devices(api, env).map_err(|e| anyhow!(e))?;
                nibble_ort::host::append_ep(api, b.ptr_mut(), env, &devices, &[]).map_err(|e| anyhow!(e))?;
            }
        } else {
            b = b.with_operator_library(nibble_lib()).ax()?;
        }
    }
    b.commit_from_file(model).ax()
}

/// `NIBBLE_FRONTEND=ep`.
fn frontend_is_ep() -> bool {
    match std::env::var("NIBBLE_FRONTEND").as_deref() {
        Ok("ep") => true,
        Ok("custom-op") | Err(_) => false,
        Ok(other) => panic!("NIBBLE_FRONTEND={other:?}: use custom-op or ep"),
    }
}

/// The loaded runtime's version string.
fn runtime_version() -> &'static str {
    static V: OnceLock<String> = OnceLock::new();
    V.get_or_init(|| {
        let dylib = env_path("NIBBLE_ORT_DYLIB").expect("NIBBLE_ORT_DYLIB");
        let _ = ort_env();
        nibble_ort::host::runtime_version(&dylib).expect("version")
    })
}

/// Registers libnibble_ort.so as execution-provider library "nibble" in the test environment (once).
fn ep_registered() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        // SAFETY: ort's table and environment, and the version string of that same library.
        unsafe {
            nibble_ort::host::register_ep_library(
                ort::api(),
                runtime_version(),
                ort_env().ptr().cast_mut(),
                "nibble",
                &nibble_lib(),
            )
        }
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// One inference through `ort`'s safe API: input "A" → output "Y" (shape, data).
fn run(sess: &mut Session, shape: &[i64], a: &[f32]) -> Result<(Vec<i64>, Vec<f32>)> {
    let input = TensorRef::from_array_view((shape.to_vec(), a)).ax()?;
    let out = sess.run(ort::inputs!["A" => input]).ax()?;
    let (s, y) = out["Y"].try_extract_tensor::<f32>().ax()?;
    Ok((s.to_vec(), y.to_vec()))
}

// ------------------------------------------------------------------------------------------------ fixtures

/// One `key=value ...` record of manifest.txt.
struct Record(Vec<(String, String)>);

impl Record {
    fn get(&self, key: &str) -> &str {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("manifest: no {key}"))
    }
    fn shape(&self, key: &str) -> Vec<i64> {
        self.get(key).split('x').map(|d| d.parse().expect("manifest: bad shape")).collect()
    }
}

fn manifest(kind: &str) -> Vec<Record> {
    let text = std::fs::read_to_string(fixtures().join("manifest.txt")).expect("read manifest.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            Record(
                l.split_whitespace()
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("manifest: key=value");
                        (k.to_string(), v.to_string())
                    })
                    .collect(),
            )
        })
        .filter(|r| r.get("kind") == kind)
        .collect()
}

fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Tolerance |got − want| ≤ abs + rel·|want| (numpy.allclose).
#[derive(Clone, Copy, Debug)]
struct Tol {
    abs: f32,
    rel: f32,
}
const LOOSE: Tol = Tol { abs: 0.1, rel: 0.02 }; // accuracy_level 4 (ORT's own test tolerance)
const TIGHT: Tol = Tol { abs: 1e-4, rel: 1e-4 }; // fp32 accumulation (ORT's kernel vs numpy: < 2e-5 here)

/// `None` if `got` matches `want` within `tol`; otherwise a one-line description of the worst element.
fn compare(got: &[f32], want: &[f32], tol: Tol) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} values, expected {}", got.len(), want.len()));
    }
    let mut bad = 0;
    let mut worst: Option<(usize, f32)> = None;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let excess = (g - w).abs() - (tol.abs + tol.rel * w.abs());
        if excess > 0.0 || excess.is_nan() {
            bad += 1;
            if worst.is_none_or(|(_, e)| excess > e || excess.is_nan()) {
                worst = Some((i, excess));
            }
        }
    }
    worst.map(|(i, _)| {
        format!(
            "{bad}/{} outside {tol:?}; worst at {i}: got {} want {} (|diff| {:.3e})",
            got.len(),
            got[i],
            want[i],
            (got[i] - want[i]).abs()
        )
    })
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

// ------------------------------------------------------------------------------------------------ tests

/// Every fixture case: ours (domain nibble, and com.microsoft override) vs numpy and vs ORT's kernel.
#[test]
fn matches_reference_and_builtin() {
    if skipped("matches_reference_and_builtin") {
        return;
    }
    let dir = fixtures();
    let mut failures = Vec::new();
    let mut checked = 0;
    for r in manifest("case") {
        let label = format!("{} A={}", r.get("name"), r.get("a_shape"));
        say!("...  {label}"); // if ORT crashes, this names the case
        match check_case(&dir, &r) {
            Ok(notes) => {
                checked += 1;
                say!("ok   {label}{notes}");
            }
            Err(e) => {
                say!("FAIL {label}: {e:#}");
                failures.push(format!("{label}: {e:#}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n  {}",
        failures.len(),
        checked + failures.len(),
        failures.join("\n  ")
    );
    assert!(checked > 0, "manifest has no cases");
}

/// Why ORT's own kernel, not nibble's, runs the `com.microsoft` node of case `r` with the default settings on this
/// machine (`nibble_kernels::versus_ort`: the EP decides node by node, the custom-op frontend for the whole domain),
/// or None where nibble runs it (always with NIBBLE_FAMILIES).
fn ort_owns_com(r: &Record) -> Option<String> {
    if std::env::var("NIBBLE_FAMILIES").is_ok_and(|v| !v.trim().is_empty()) {
        return None;
    }
    let (cpu, minor) = (nibble_kernels::Cpu::get(), runtime_minor());
    if !frontend_is_ep() {
        return nibble_kernels::versus_ort::ort_faster_somewhere(cpu, minor);
    }
    let name = r.get("name");
    let field = |key: &str| -> i64 { r.get(key).parse().unwrap_or_else(|_| panic!("manifest {name}: {key}")) };
    let k = name.split("_k").nth(1).and_then(|t| t.split('_').next()).and_then(|t| t.parse().ok());
    let traits = nibble_kernels::versus_ort::NodeTraits {
        bits: field("bits"),
        block_size: field("block_size"),
        k: k.unwrap_or_else(|| panic!("manifest {name}: no _k<K>_ in the name")),
        accuracy_level: field("acc"),
        zero_points: name.contains("_zp_"),
    };
    nibble_kernels::versus_ort::ort_faster(cpu, &traits, minor)
}

/// The loaded runtime's minor version (1.MINOR).
fn runtime_minor() -> u32 {
    runtime_version().split('.').nth(1).and_then(|m| m.parse().ok()).unwrap()
}

fn check_case(dir: &Path, r: &Record) -> Result<String> {
    let tol = if r.get("tol") == "loose" { LOOSE } else { TIGHT };
    let a_shape = r.shape("a_shape");
    let y_shape = r.shape("y_shape");
    let a = read_f32(&dir.join(r.get("a")));
    let want = read_f32(&dir.join(r.get("y")));
    let mut notes = String::new();

    // Ours: domain nibble (no graph optimisation) and the com.microsoft override (full optimisation: ORT may fuse
    // or rewrite around the node, our kernel must still get it).
    let mut ours: Vec<Vec<f32>> = Vec::new();
    let ort_owns = ort_owns_com(r);
    if let Some(why) = &ort_owns
        && !frontend_is_ep()
    {
        // The custom-op frontend leaves the whole com.microsoft domain to ORT on this machine: the com model must
        // behave exactly as without nibble (same output, or the same refusal), whatever ORT's kernel gets right.
        let with = session(&dir.join(r.get("com")), OURS).and_then(|mut s| run(&mut s, &a_shape, &a));
        let without = session(&dir.join(r.get("com")), BUILTIN).and_then(|mut s| run(&mut s, &a_shape, &a));
        match (with, without) {
            (Ok((_, y)), Ok((_, y_ort))) => {
                ensure!(y == y_ort, "com.microsoft left to ORT ({why}) but not ORT's output")
            }
            (Err(e), Err(e_ort)) => {
                ensure!(format!("{e:#}") == format!("{e_ort:#}"), "refused otherwise than ORT: {e:#}")
            }
            (with, _) => {
                bail!("com.microsoft left to ORT ({why}): with nibble loaded {:?}, ORT alone differs", with.is_ok())
            }
        }
        notes += " (com.microsoft: ORT's own kernel on this machine, identical to a session without nibble)";
    }
    for (tag, model, opt) in [
        ("nibble", r.get("nibble"), GraphOptimizationLevel::Disable),
        ("com.microsoft", r.get("com"), GraphOptimizationLevel::All),
    ] {
        if tag == "com.microsoft" && ort_owns.is_some() && !frontend_is_ep() {
            ours.push(ours[0].clone());
            continue;
        }
        let mut s =
            session(&dir.join(model), Opts { opt_level: opt, ..OURS }).with_context(|| format!("{tag}: session"))?;
        let (shape, y) = run(&mut s, &a_shape, &a).with_context(|| format!("{tag}: run"))?;
        ensure!(shape == y_shape, "{tag}: output shape {shape:?}, expected {y_shape:?}");
        if let Some(msg) = compare(&y, &want, tol) {
            bail!("{tag} vs numpy reference: {msg}");
        }
        ours.push(y);
    }
    // Same library, same kernel: both domains must agree to rounding (they differ only in registration), unless
    // ORT's own kernel runs the com.microsoft node on this machine (then it must match ORT's kernel, below).
    let d = max_abs_diff(&ours[0], &ours[1]);
    let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    if ort_owns.is_none() {
        ensure!(d <= 1e-5 * scale, "domain nibble and com.microsoft outputs differ by {d:.3e}");
    } else {
        notes += " (com.microsoft: ORT's own kernel on this machine)";
    }

    // ORT's own kernel (a session without our library), where it is a valid oracle.
    let builtin = r.get("builtin");
    if builtin != "none" {
        match session(&dir.join(r.get("com")), BUILTIN).and_then(|mut s| run(&mut s, &a_shape, &a)) {
            Ok((_, y_ort)) => {
                if let Some(msg) = compare(&ours[0], &y_ort, tol) {
                    bail!("vs ORT's built-in MatMulNBits: {msg}");
                }
                if let Some(why) = ort_owns.as_ref().filter(|_| frontend_is_ep()) {
                    let d = max_abs_diff(&ours[1], &y_ort);
                    ensure!(d <= 1e-5 * scale, "com.microsoft left to ORT ({why}) but differs from ORT's by {d:.3e}");
                }
                notes += &format!(
                    " (max |ours − ORT| {:.2e}, |ours − numpy| {:.2e})",
                    max_abs_diff(&ours[0], &y_ort),
                    max_abs_diff(&ours[0], &want)
                );
            }
            Err(e) if builtin == "optional" => {
                let msg = e.to_string();
                let reason = msg.lines().next().unwrap_or("").rsplit(']').next().unwrap_or("").trim().to_string();
                notes += &format!(" (ORT's own kernel refuses this case on this version: \"{reason}\"; numpy only)");
            }
            Err(e) => return Err(e.context("ORT's built-in kernel (no nibble library)")),
        }
    } else {
        notes += &format!(" (numpy only: |ours − numpy| {:.2e})", max_abs_diff(&ours[0], &want));
    }
    Ok(notes)
}

/// accuracy_level unset (0): nibble's int8 path by default (checked loosely above); with the session config
/// `nibble.accuracy_level_default=1` the fp32 path, which must then match the reference tightly, like ORT's.
#[test]
fn accuracy_level_default_config() {
    if skipped("accuracy_level_default_config") {
        return;
    }
    const FP32: &[(&str, &str)] = &[("nibble.accuracy_level_default", "1")];
    let dir = fixtures();
    let records: Vec<Record> = manifest("case").into_iter().filter(|r| r.get("acc") == "0").collect();
    assert!(!records.is_empty(), "manifest has no case without accuracy_level");
    for r in records {
        let (a_shape, a, want) = (r.shape("a_shape"), read_f32(&dir.join(r.get("a"))), read_f32(&dir.join(r.get("y"))));
        for model in [r.get("nibble"), r.get("com")] {
            let mut s = session(&dir.join(model), Opts { config: FP32, ..OURS }).expect("session");
            let (_, y) = run(&mut s, &a_shape, &a).expect("run");
            if let Some(m) = compare(&y, &want, TIGHT) {
                panic!("{model} with nibble.accuracy_level_default=1: {m}");
            }
            say!("ok   {model} with nibble.accuracy_level_default=1: |ours − numpy| {:.2e}", max_abs_diff(&y, &want));
        }
    }
}

/// Deterministic pseudo-random floats in [-1, 1) (no rand crate needed).
fn lcg_f32(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `OrtApi::Run` on a shared session, straight through the C API.
///
/// `ort` 2.0.0-rc.15 makes `Session::run` take `&mut self` (its authors distrust ORT's thread safety), so the safe
/// API cannot express what ONNX Runtime documents and every real server does: many threads calling `Run` on one
/// `OrtSession`. That is exactly what must be tested here, because all those calls share ONE kernel instance (and
/// its packed weights): `Compute` must be reentrant. So this calls the C function with the session pointer.
fn raw_run(sess: &Session, shape: &[i64], a: &[f32]) -> Result<Vec<f32>> {
    let api = ort::api();
    let input = Tensor::from_array((shape.to_vec(), a.to_vec())).ax()?;
    let inputs = [input.ptr()];
    let in_names: [*const c_char; 1] = [c"A".as_ptr()];
    let out_names: [*const c_char; 1] = [c"Y".as_ptr()];
    let mut out: *mut ort::sys::OrtValue = null_mut();
    let inner = sess.inner();
    // SAFETY: valid session, one named input value, one output slot; ORT allocates the output value.
    let status = unsafe {
        (api.Run)(
            inner.ptr().cast_mut(),
            null(),
            in_names.as_ptr(),
            inputs.as_ptr(),
            1,
            out_names.as_ptr(),
            1,
            &mut out,
        )
    };
    check(status)?;
    ensure!(!out.is_null(), "Run returned no output");
    // SAFETY: `out` is a float tensor owned by us until ReleaseValue.
    unsafe {
        let mut info = null_mut();
        let st = (api.GetTensorTypeAndShape)(out, &mut info);
        let mut n = 0usize;
        let res = check(st).and_then(|_| {
            let st = (api.GetTensorShapeElementCount)(info, &mut n);
            (api.ReleaseTensorTypeAndShapeInfo)(info);
            check(st)?;
            let mut data: *mut std::ffi::c_void = null_mut();
            check((api.GetTensorMutableData)(out, &mut data))?;
            Ok(std::slice::from_raw_parts(data as *const f32, n).to_vec())
        });
        (api.ReleaseValue)(out);
        res
    }
}

fn check(status: ort::sys::OrtStatusPtr) -> Result<()> {
    if status.0.is_null() {
        return Ok(());
    }
    let api = ort::api();
    // SAFETY: non-null status from ORT; released once after reading the message.
    let msg = unsafe {
        let m = CStr::from_ptr((api.GetErrorMessage)(status.0)).to_string_lossy().into_owned();
        (api.ReleaseStatus)(status.0);
        m
    };
    bail!("{msg}")
}

/// Several threads call `Run` concurrently on ONE session (shared kernel, shared packed weights), with different
/// inputs and row counts (GEMV M=1 and GEMM M>1 paths at once); each result must equal the single-threaded one.
#[test]
fn concurrent_runs_share_one_session() {
    if skipped("concurrent_runs_share_one_session") {
        return;
    }
    const THREADS: usize = 4;
    const ITERS: usize = 12;
    let dir = fixtures();
    let rec = manifest("case")
        .into_iter()
        .find(|r| r.get("name").starts_with("acc4_conc_"))
        .expect("manifest: no acc4_conc_ case");
    let k = rec.shape("a_shape")[1];
    for (tag, model) in [("nibble", rec.get("nibble")), ("com.microsoft", rec.get("com"))] {
        let sess = session(&dir.join(model), OURS).expect("session");
        // Inputs with M = 1, 2, 3, 5, 8, 1, 4, 7 rows, and their single-threaded results.
        let inputs: Vec<(Vec<i64>, Vec<f32>)> = [1i64, 2, 3, 5, 8, 1, 4, 7]
            .iter()
            .enumerate()
            .map(|(i, &m)| (vec![m, k], lcg_f32(i as u64 + 1, (m * k) as usize)))
            .collect();
        let expected: Vec<Vec<f32>> = inputs.iter().map(|(s, a)| raw_run(&sess, s, a).expect("serial run")).collect();
        let errors: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (sess, inputs, expected) = (&sess, &inputs, &expected);
                    scope.spawn(move || {
                        let mut errs = Vec::new();
                        for it in 0..ITERS {
                            let j = (t * 3 + it) % inputs.len();
                            match raw_run(sess, &inputs[j].0, &inputs[j].1) {
                                Ok(y) => {
                                    if let Some(m) = compare(&y, &expected[j], Tol { abs: 1e-5, rel: 1e-5 }) {
                                        errs.push(format!("thread {t} iter {it} input {j}: {m}"));
                                    }
                                }
                                Err(e) => errs.push(format!("thread {t} iter {it}: {e:#}")),
                            }
                        }
                        errs
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().expect("thread panicked")).collect()
        });
        assert!(errors.is_empty(), "{tag}: concurrent runs disagree with serial runs:\n  {}", errors.join("\n  "));
        say!("ok   {tag}: {THREADS} threads x {ITERS} runs on one session match the serial results");
    }
}

/// Models only the kernel can find wrong (bad attributes, initializer shapes) fail with "[MatMulNBits]" in the error,
/// at session creation or at the first run.
#[test]
fn malformed_models_fail_with_op_name() {
    if skipped("malformed_models_fail_with_op_name") {
        return;
    }
    let dir = fixtures();
    let mut failures = Vec::new();
    for r in manifest("malformed") {
        let name = r.get("name");
        let outcome: Result<()> = session(&dir.join(r.get("model")), OURS).and_then(|mut s| {
            run(&mut s, &[1, 64], &[0.5; 64])?;
            bail!("session creation and run both succeeded")
        });
        let msg = format!("{:#}", outcome.expect_err("always Err: bail! above"));
        // Where ORT's own kernel is faster for some nodes on this machine, a com.microsoft model may be ORT's to
        // refuse (in its own words, naming the bad value).
        let ort_may_own = name.ends_with(".com")
            && !std::env::var("NIBBLE_FAMILIES").is_ok_and(|v| !v.trim().is_empty())
            && nibble_kernels::versus_ort::ort_faster_somewhere(nibble_kernels::Cpu::get(), runtime_minor()).is_some();
        if msg.contains("[MatMulNBits]") {
            say!("ok   malformed {name}: {}", msg.lines().next().unwrap_or(""));
        } else if ort_may_own && msg.contains("MatMulNBits") {
            say!(
                "ok   malformed {name}: refused by ORT's own kernel on this machine: {}",
                msg.lines().next().unwrap_or("")
            );
        } else {
            say!("FAIL malformed {name} ({}): {msg}", r.get("why"));
            failures.push(format!("{name} ({}): {msg}", r.get("why")));
        }
    }
    assert!(failures.is_empty(), "errors without [MatMulNBits]:\n  {}", failures.join("\n  "));
}

/// `nibble.override_com_microsoft=0` (set before the library is registered) leaves com.microsoft::MatMulNBits to
/// ORT's kernel, while domain nibble keeps working.
#[test]
fn override_switch_off_restores_builtin() {
    if skipped("override_switch_off_restores_builtin") {
        return;
    }
    const OFF: &[(&str, &str)] = &[("nibble.override_com_microsoft", "0")];
    let dir = fixtures();
    let off = Opts { config: OFF, ..OURS };

    // 1. A valid com.microsoft model gives bit-for-bit ORT's own result.
    let rec = manifest("case")
        .into_iter()
        .find(|r| r.get("name").starts_with("acc4_zp_"))
        .expect("manifest: no acc4_zp_ case");
    let (a_shape, a) = (rec.shape("a_shape"), read_f32(&dir.join(rec.get("a"))));
    let com = dir.join(rec.get("com"));
    let (_, y_builtin) = run(&mut session(&com, BUILTIN).unwrap(), &a_shape, &a).unwrap();
    let (_, y_off) = run(&mut session(&com, off).unwrap(), &a_shape, &a).unwrap();
    assert_eq!(y_off, y_builtin, "override off: com.microsoft node did not run ORT's kernel");

    // 2. Domain nibble still runs ours.
    let want = read_f32(&dir.join(rec.get("y")));
    let (_, y_nib) = run(&mut session(&dir.join(rec.get("nibble")), off).unwrap(), &a_shape, &a).unwrap();
    if let Some(m) = compare(&y_nib, &want, LOOSE) {
        panic!("override off: domain nibble: {m}");
    }

    // 3. A com.microsoft model our kernel rejects (block_size 24) is no longer ours to reject: ORT accepts it
    //    (1.20.1) or refuses it in its own words (1.31.1) — either way without "[MatMulNBits]".
    let bad = dir.join("malformed_block_size_24.com.onnx");
    let on = Opts { config: &[("nibble.override_com_microsoft", "1")], ..OURS };
    let on_err = session(&bad, on)
        .and_then(|mut s| run(&mut s, &[1, 64], &[0.5; 64]))
        .expect_err("override on must reject block_size 24");
    assert!(format!("{on_err:#}").contains("[MatMulNBits]"), "override on: {on_err:#}");
    match session(&bad, off) {
        Ok(_) => say!("ok   override off: ORT's kernel accepted block_size 24"),
        Err(e) => {
            let msg = format!("{e:#}");
            assert!(!msg.contains("[MatMulNBits]"), "override off but our kernel still handled the node: {msg}");
            say!("ok   override off: ORT's kernel refused block_size 24 itself: {}", msg.lines().next().unwrap_or(""));
        }
    }
    say!("ok   override switch");
}

/// Never slower than ORT: on a CPU where ORT's own kernel is faster for a `com.microsoft` node
/// (`nibble_kernels::versus_ort`: SME2 CPUs whose streaming vector is not 256 or 512 bits, 4-bit accuracy_level-4
/// nodes ORT runs with KleidiAI's SME2 kernels),
/// nibble leaves that node to ORT by default (the EP declines it; the custom-op frontend leaves the domain), and
/// runs it with `nibble.override_com_microsoft=1` or in domain nibble; every other node is nibble's. Which kernel
/// ran is read from the output: nibble's int8 numerics (activations per block) are not ORT's (per row on Arm),
/// and each kernel gives the same bits on every run.
#[test]
fn ort_keeps_the_nodes_its_kernel_runs_faster() {
    if skipped("ort_keeps_the_nodes_its_kernel_runs_faster") {
        return;
    }
    const FORCED: &[(&str, &str)] = &[("nibble.override_com_microsoft", "1")];
    let dir = fixtures();
    let (cpu, minor) = (nibble_kernels::Cpu::get(), runtime_minor());
    // Symmetric and with zero points (KleidiAI's on SME2 since 1.22 / 1.28), 8-bit (never).
    let names = ["acc4_conc_k1024_n256_bs32", "acc4_zp_k256_n64_bs32", "acc4_bits8_k256_n32_bs64"];
    let (mut declined, mut claimed, mut told_apart) = (0, 0, 0);
    for name in names {
        let recs: Vec<Record> = manifest("case").into_iter().filter(|r| r.get("name") == name).collect();
        assert!(!recs.is_empty(), "manifest: no case {name}");
        for r in &recs {
            let (a_shape, a) = (r.shape("a_shape"), read_f32(&dir.join(r.get("a"))));
            let (com, nib) = (dir.join(r.get("com")), dir.join(r.get("nibble")));
            let label = format!("{name} A={}", r.get("a_shape"));
            let (_, y_default) = run(&mut session(&com, OURS).unwrap(), &a_shape, &a).unwrap();
            let (_, y_nibble) = run(&mut session(&nib, OURS).unwrap(), &a_shape, &a).unwrap();
            match ort_owns_com(r) {
                Some(why) => {
                    let (_, y_ort) = run(&mut session(&com, BUILTIN).unwrap(), &a_shape, &a).unwrap();
                    assert_eq!(y_default, y_ort, "{label}: ORT's kernel should have run it ({why})");
                    let forced = Opts { config: FORCED, ..OURS };
                    let (_, y_forced) = run(&mut session(&com, forced).unwrap(), &a_shape, &a).unwrap();
                    assert_eq!(y_forced, y_nibble, "{label}: override_com_microsoft=1 must run nibble");
                    told_apart += usize::from(y_nibble != y_ort);
                    declined += 1;
                }
                None => {
                    assert_eq!(y_default, y_nibble, "{label}: nibble should have run the com.microsoft node");
                    claimed += 1;
                }
            }
        }
    }
    // The outputs tell the kernels apart only where the numerics differ: at least once (4-bit: per row vs block).
    assert!(declined == 0 || told_apart > 0, "no declined run where nibble's and ORT's outputs differ");
    say!(
        "ok   ORT 1.{minor} on {cpu}: {declined} runs left to ORT's kernel ({told_apart} told apart), {claimed} run by nibble"
    );
}

/// On every runtime: ORT >= 1.24 loads the library as an execution provider and lists its CPU device; older ones
/// refuse it with a message naming the version the EP needs (1.22/1.23 through our CreateEpFactories, older ones
/// have no EP libraries at all, which `nibble_ort::host` says), and the custom-op frontend keeps working there.
#[test]
fn ep_library_on_this_runtime() {
    if skipped("ep_library_on_this_runtime") {
        return;
    }
    let version = runtime_version();
    let minor = runtime_minor();
    match ep_registered() {
        Ok(()) => {
            assert!(minor >= 24, "ORT {version} accepted the EP library");
            // SAFETY: as in `session`.
            let devices = unsafe { nibble_ort::host::ep_devices(ort::api(), ort_env().ptr().cast_mut()) }.unwrap();
            assert_eq!(devices.len(), 1, "one CPU device");
            say!("ok   ORT {version}: EP library registered, one NibbleExecutionProvider device");
        }
        Err(e) => {
            let msg = format!("{e:#}");
            assert!(minor < 24, "ORT {version} refused the EP library: {msg}");
            let want =
                if minor >= 22 { "needs ONNX Runtime >= 1.24" } else { "cannot load execution-provider libraries" };
            assert!(msg.contains(want) && msg.contains("custom-op"), "ORT {version}: {msg}");
            say!("ok   ORT {version}: EP library refused: {msg}");
        }
    }
}
