//! End-to-end tests of the `nibble-llama` binary on real model directories (models/LLAMA_MODEL_DIR.md).
//!
//! Environment:
//! - `NIBBLE_LLAMA_Q4_DIR`: the INT4 (com.microsoft MatMulNBits) model; default `<workspace>/target/llama/smollm2-q4`.
//! - `NIBBLE_LLAMA_FP32_DIR`: the fp32 model for --compare; default `<workspace>/target/llama/smollm2-fp32`.
//!   A missing directory fails the tests, saying how to make it.
//! - The binary finds ONNX Runtime and libnibble_ort.so itself (`NIBBLE_ORT_DYLIB`/`ORT_DYLIB_PATH`, `NIBBLE_LIB`,
//!   else the workspace defaults; see `nibble-llama --help`).
//! - `NIBBLE_SKIP_ORT_TESTS=1` skips the tests that need ONNX Runtime (as in provider/tests).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn workspace() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..");
    std::fs::canonicalize(&p).unwrap_or(p)
}

fn skipped(test: &str) -> bool {
    let skip = std::env::var("NIBBLE_SKIP_ORT_TESTS").is_ok_and(|v| v == "1");
    if skip {
        eprintln!("{test}: SKIPPED (NIBBLE_SKIP_ORT_TESTS=1)");
    }
    skip
}

fn model_dir(var: &str, default: &str, how: &str) -> PathBuf {
    let dir = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target").join("llama").join(default));
    assert!(
        dir.join("model.onnx").is_file() && dir.join("model_config.json").is_file(),
        "no model directory at {} ({var}): create it with `.venv/bin/python models/gguf_to_onnx.py --out {} {how}` \
         (see models/LLAMA_MODEL_DIR.md), or point {var} at one",
        dir.display(),
        dir.display()
    );
    dir
}

fn q4_dir() -> PathBuf {
    model_dir(
        "NIBBLE_LLAMA_Q4_DIR",
        "smollm2-q4",
        "--bits 4 --block-size 32 --asymmetric --accuracy-level 4 --lm-head quantized",
    )
}

fn fp32_dir() -> PathBuf {
    model_dir("NIBBLE_LLAMA_FP32_DIR", "smollm2-fp32", "--bits 0")
}

fn run(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_nibble-llama")).args(args).output().expect("spawn nibble-llama");
    eprintln!(
        "$ nibble-llama {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn run_ok(args: &[&str]) -> Output {
    let out = run(args);
    assert!(out.status.success(), "nibble-llama {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    out
}

fn tmp_json(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nibble-llama-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read --json output")).expect("parse --json output")
}

fn ids(v: &Value) -> Vec<u64> {
    v["generated_token_ids"].as_array().expect("generated_token_ids").iter().map(|x| x.as_u64().unwrap()).collect()
}

fn eos_ids(dir: &Path) -> Vec<u64> {
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("model_config.json")).unwrap()).unwrap();
    cfg["eos_token_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

/// 8 greedy tokens, or fewer ending in EOS.
fn check_eight(v: &Value, eos: &[u64]) {
    let got = ids(v);
    assert!(
        got.len() == 8 || (!got.is_empty() && got.len() < 8 && eos.contains(got.last().unwrap())),
        "expected 8 ids (or fewer ending in EOS {eos:?}), got {got:?}"
    );
    assert_eq!(v["generated_tokens"].as_u64(), Some(got.len() as u64));
    assert!(v["prompt_tokens"].as_u64().unwrap() > 0);
    for k in ["session_create_s", "ttft_s", "prefill_s", "prefill_tok_s", "total_s", "usd_total"] {
        assert!(v[k].as_f64().is_some_and(|x| x >= 0.0), "{k} = {}", v[k]);
    }
    if got.len() >= 2 {
        assert!(v["decode_tok_s"].as_f64().is_some_and(|x| x > 0.0));
    }
}

#[test]
fn greedy_raw_json_with_and_without_nibble() {
    if skipped("greedy_raw_json_with_and_without_nibble") {
        return;
    }
    let dir = q4_dir();
    let eos = eos_ids(&dir);
    let model = dir.to_str().unwrap();
    let mut results = Vec::new();
    let runs: [(&str, &[&str]); 3] =
        [("custom-op", &["--frontend", "custom-op"]), ("ep", &["--frontend", "ep"]), ("builtin", &["--no-nibble"])];
    for (tag, extra) in runs {
        let json = tmp_json(&format!("raw-{tag}.json"));
        let mut args = vec![
            "--model",
            model,
            "--raw",
            "--prompt",
            "The capital of France is",
            "--max-new-tokens",
            "8",
            "--threads",
            "1",
            "--json",
            json.to_str().unwrap(),
        ];
        args.extend(extra);
        let out = run_ok(&args);
        let v = read_json(&json);
        check_eight(&v, &eos);
        assert_eq!(v["nibble"].as_bool(), Some(tag != "builtin"));
        assert_eq!(v["frontend"].as_str(), (tag != "builtin").then_some(tag), "{tag}");
        assert_eq!(v["threads"].as_u64(), Some(1));
        // the streamed text is the decoded text
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), v["text"].as_str().unwrap().trim_end());
        results.push(ids(&v));
    }
    eprintln!("custom-op {:?}\nep {:?}\nbuiltin {:?}", results[0], results[1], results[2]);
    assert_eq!(results[0], results[1], "the same kernels behind both frontends: the same greedy tokens");
}

/// `--frontend auto` is the EP on ORT >= 1.24 and the custom-op library before; `--frontend ep` on an older
/// runtime names the version it needs. Runs on the pinned 1.24.4 and 1.23.2 (scripts/setup.sh fetches them).
#[test]
fn frontend_follows_the_runtime() {
    if skipped("frontend_follows_the_runtime") {
        return;
    }
    let dir = q4_dir();
    let model = dir.to_str().unwrap();
    let ort = |v: &str| {
        let p = workspace().join(format!(".cache/ort/{v}/libonnxruntime.so.{v}"));
        assert!(p.is_file(), "{} missing: run scripts/setup.sh", p.display());
        p.to_str().unwrap().to_string()
    };
    for (version, want) in [("1.24.4", "ep"), ("1.23.2", "custom-op")] {
        let json = tmp_json(&format!("auto-{version}.json"));
        let lib = ort(version);
        run_ok(&[
            "--model",
            model,
            "--raw",
            "--prompt",
            "Hello",
            "--max-new-tokens",
            "2",
            "--quiet",
            "--ort-dylib",
            &lib,
            "--json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(read_json(&json)["frontend"].as_str(), Some(want), "ORT {version}");
    }
    let old = ort("1.23.2");
    let out = run(&["--model", model, "--raw", "--prompt", "Hello", "--frontend", "ep", "--ort-dylib", &old]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(">= 1.24") && err.contains("1.23.2"), "{err}");
}

#[test]
fn chat_prompt_streams_the_decoded_text() {
    if skipped("chat_prompt_streams_the_decoded_text") {
        return;
    }
    let dir = q4_dir();
    let json = tmp_json("chat.json");
    let out = run_ok(&[
        "--model",
        dir.join("model.onnx").to_str().unwrap(), // the model.onnx path works as well as the directory
        "--prompt",
        "Say hello in French.",
        "--max-new-tokens",
        "12",
        "--no-nibble",
        "--json",
        json.to_str().unwrap(),
    ]);
    let v = read_json(&json);
    // the chat template adds the system and assistant turns: many more tokens than the user text
    assert!(v["prompt_tokens"].as_u64().unwrap() > 15, "{}", v["prompt_tokens"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), v["text"].as_str().unwrap().trim_end());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for label in ["TTFT", "prefill", "decode", "per million output tokens", "$1/hour"] {
        assert!(stderr.contains(label), "metrics lack {label:?}");
    }
}

#[test]
fn sampling_is_deterministic_per_seed() {
    if skipped("sampling_is_deterministic_per_seed") {
        return;
    }
    let dir = q4_dir();
    let model = dir.to_str().unwrap();
    let mut got = Vec::new();
    for i in 0..2 {
        let json = tmp_json(&format!("seed-{i}.json"));
        run_ok(&[
            "--model",
            model,
            "--raw",
            "--prompt",
            "Once upon a time",
            "--max-new-tokens",
            "10",
            "--temperature",
            "0.9",
            "--top-k",
            "40",
            "--top-p",
            "0.95",
            "--seed",
            "1234",
            "--no-nibble",
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ]);
        let v = read_json(&json);
        assert_eq!(v["seed"].as_u64(), Some(1234));
        got.push(ids(&v));
    }
    assert_eq!(got[0], got[1], "same seed, different tokens");
}

#[test]
fn compare_prints_three_rows() {
    if skipped("compare_prints_three_rows") {
        return;
    }
    let (q4, fp32) = (q4_dir(), fp32_dir());
    let json = tmp_json("compare.json");
    let out = run_ok(&[
        "--model",
        q4.to_str().unwrap(),
        "--fp32-model",
        fp32.to_str().unwrap(),
        "--compare",
        "--raw",
        "--prompt",
        "The capital of France is",
        "--max-new-tokens",
        "6",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            l.starts_with("fp32 ORT MatMul ") || l.starts_with("int4 ORT built-in ") || l.starts_with("int4 nibble ")
        })
        .collect();
    assert_eq!(rows.len(), 3, "expected three table rows in:\n{stdout}");
    assert!(rows[0].contains("(reference)"));
    for r in &rows[1..] {
        assert!(r.contains("same as fp32") || r.contains("diff") || r.contains("same prefix"), "{r}");
    }
    assert!(stdout.contains("decode tok/s") && stdout.contains("$/M out"));
    let v = read_json(&json);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3);
    let eos = eos_ids(&q4);
    let labels: Vec<&str> = rows.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["fp32 ORT MatMul", "int4 ORT built-in", "int4 nibble"]);
    for (r, nibble) in rows.iter().zip([false, false, true]) {
        assert_eq!(r["nibble"].as_bool(), Some(nibble));
        let n = ids(r);
        assert!(n.len() == 6 || eos.contains(n.last().unwrap()), "{n:?}");
    }
}

#[test]
fn bad_model_path_is_a_clear_error() {
    let bad = workspace().join("target").join("llama").join("no-such-model-dir");
    let out = run(&["--model", bad.to_str().unwrap(), "--max-new-tokens", "1"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-model-dir") && stderr.contains("does not exist"), "{stderr}");
    assert!(stderr.contains("gguf_to_onnx.py"), "{stderr}");

    // a directory that exists but is not a model directory names the missing file
    let empty = tmp_json("not-a-model");
    std::fs::create_dir_all(&empty).unwrap();
    let out = run(&["--model", empty.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("model.onnx") && stderr.contains("not-a-model"), "{stderr}");
}

/// A model whose config says its MatMulNBits nodes are in domain `nibble` (the graph is symlinked, the config
/// edited): --no-nibble refuses it, --compare skips the ORT built-in row with a note.
#[test]
fn nibble_domain_model_needs_nibble() {
    if skipped("nibble_domain_model_needs_nibble") {
        return;
    }
    let (q4, fp32) = (q4_dir(), fp32_dir());
    let dir = tmp_json("nibble-domain");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["model.onnx", "tokenizer.json"] {
        let link = dir.join(f);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(std::fs::canonicalize(q4.join(f)).unwrap(), &link).unwrap();
    }
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(q4.join("model_config.json")).unwrap()).unwrap();
    cfg["quantization"]["op_domain"] = Value::from("nibble");
    std::fs::write(dir.join("model_config.json"), cfg.to_string()).unwrap();
    let model = dir.to_str().unwrap();

    let out = run(&["--model", model, "--no-nibble", "--max-new-tokens", "1"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("domain \"nibble\"") && stderr.contains("model.onnx"), "{stderr}");

    let json = tmp_json("nibble-domain-compare.json");
    let out = run_ok(&[
        "--model",
        model,
        "--fp32-model",
        fp32.to_str().unwrap(),
        "--compare",
        "--raw",
        "--prompt",
        "Hello",
        "--max-new-tokens",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let skipped_row = stdout.lines().find(|l| l.starts_with("int4 ORT built-in")).expect("built-in row");
    assert!(skipped_row.contains("skipped"), "{skipped_row}");
    let v = read_json(&json);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows[1]["skipped"].is_string() && rows[1].get("generated_token_ids").is_none());
    assert_eq!(ids(&rows[2]).len(), 2);
}

/// Runs nibble-llama with `stdin` as its standard input.
fn run_with_stdin(args: &[&str], stdin: &str) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_nibble-llama"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn nibble-llama");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "$ nibble-llama {} <<< {stdin:?}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "nibble-llama {} failed", args.join(" "));
    out
}

#[test]
fn interactive_chat_keeps_the_conversation() {
    if skipped("interactive_chat_keeps_the_conversation") {
        return;
    }
    let dir = q4_dir();
    let json = tmp_json("interactive.json");
    let args = ["-m", dir.to_str().unwrap(), "-i", "-n", "8", "-t", "1", "--json", json.to_str().unwrap()];
    let out = run_with_stdin(&args, "What is the capital of France?\n\nAnd of Italy?\n/exit\nnot read\n");
    let turns = read_json(&json);
    let turns = turns.as_array().expect("-i --json writes one report per answer");
    assert_eq!(turns.len(), 2, "an empty line is skipped, /exit ends");
    let (p1, p2) = (turns[0]["prompt_tokens"].as_u64().unwrap(), turns[1]["prompt_tokens"].as_u64().unwrap());
    // the second prompt carries question 1, answer 1 and question 2
    assert!(p2 > p1 + turns[0]["generated_tokens"].as_u64().unwrap(), "{p1} then {p2}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for t in turns {
        assert!(stdout.contains(t["text"].as_str().unwrap().trim()), "answer not streamed: {}", t["text"]);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches(", TTFT ").count(), 2, "a metrics line after each answer");
    assert!(stderr.contains("peak RSS"));

    // /reset: the same question again gives the same prompt and (greedy) the same answer; end of input quits
    let out = run_with_stdin(&args, "What is the capital of France?\n/reset\nWhat is the capital of France?\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("[new conversation]"));
    let turns = read_json(&json);
    let turns = turns.as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["prompt_token_ids"], turns[1]["prompt_token_ids"]);
    assert_eq!(turns[0]["generated_token_ids"], turns[1]["generated_token_ids"]);
}

#[test]
fn ctrl_c_ends_the_answer_and_prints_the_metrics() {
    if skipped("ctrl_c_ends_the_answer_and_prints_the_metrics") {
        return;
    }
    use std::io::Read as _;
    let dir = q4_dir();
    let json = tmp_json("ctrl-c.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nibble-llama"))
        .args(["-m", dir.to_str().unwrap(), "-p", "Write a very long story about a cat.", "-n", "4000"])
        .args(["--repeat-penalty", "1.1", "-t", "1", "--json", json.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn nibble-llama");
    // wait for streamed text, then Ctrl-C
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while seen.len() < 40 {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "nibble-llama ended before Ctrl-C: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    stdout.read_to_end(&mut seen).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "Ctrl-C during an answer must end it, not the program: {stderr}");
    assert!(stderr.contains("interrupted (Ctrl-C)") && stderr.contains("decode"), "{stderr}");
    let v = read_json(&json);
    assert_eq!(v["stop_reason"], "interrupted");
    let n = v["generated_tokens"].as_u64().unwrap();
    assert!(n > 5 && n < 4000, "{n} tokens");
}

#[test]
fn warnings_long_prompt_progress_and_no_packing_without_nibble() {
    if skipped("warnings_long_prompt_progress_and_no_packing_without_nibble") {
        return;
    }
    let dir = q4_dir();
    let cores = std::thread::available_parallelism().unwrap().get();
    let json = tmp_json("warnings.json");
    let threads = (cores + 1).to_string();
    // a chat question (it ends at EOS long before the context does)
    let out =
        run_ok(&["-m", dir.to_str().unwrap(), "-p", "What is the capital of France?", "-n", "9000", "-t", &threads]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("warning: --threads {threads} is more than the {cores} CPUs")), "{stderr}");
    assert!(stderr.contains("warning: --max-new-tokens 9000 is beyond the context"), "{stderr}");
    assert!(stderr.contains("weight packing"), "{stderr}");
    let long = "word ".repeat(700);
    let out = run_ok(&[
        "-m",
        dir.to_str().unwrap(),
        "--raw",
        "-p",
        &long,
        "-n",
        "2",
        "--no-nibble",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    // 700+ prompt tokens prefill in chunks of 512: one progress line, then done
    assert!(stderr.contains("[prefill] 512/") && stderr.contains("[prefill] done"), "{stderr}");
    assert!(!stderr.contains("packing"), "no weight packing without nibble: {stderr}");
    let v = read_json(&json);
    assert!(v["prompt_tokens"].as_u64().unwrap() > 512);
    assert!(v["peak_rss_mib"].as_f64().is_some_and(|m| m > 50.0), "{}", v["peak_rss_mib"]);
}
