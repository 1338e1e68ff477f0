//! `nibble-llama`: runs a quantized Llama decoder graph (models/LLAMA_MODEL_DIR.md) on ONNX Runtime with nibble's
//! MatMulNBits kernels, streams the answer and reports chatbot metrics (see `cli::METRICS_HELP`).
//!
//! Output: the generated text on stdout (streamed), progress and the metrics on stderr; with --compare the table
//! on stdout.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, ensure};
use clap::Parser;
use ort::environment::Environment;
use tokenizers::Tokenizer;

use nibble_llama::chat::Message;
use nibble_llama::cli::Args;
use nibble_llama::frontend::Frontend;
use nibble_llama::generate::{self, Step};
use nibble_llama::icount::Marker;
use nibble_llama::metrics::{self, Metrics, Row, RunReport, Timings};
use nibble_llama::model::{Llama, ModelDir, SessionOptions};
use nibble_llama::sampling::{Sampler, SamplingParams};
use nibble_llama::stream::StreamDecoder;
use nibble_llama::{chat, frontend, paths, prompt};

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// Ctrl-C: during an answer, the first one ends it (at its next graph run) and the metrics are printed; a second
/// one, or one outside an answer, exits with 130.
static GENERATING: AtomicBool = AtomicBool::new(false);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn install_ctrl_c() -> Result<()> {
    ctrlc::set_handler(|| {
        if GENERATING.load(Ordering::SeqCst) && !INTERRUPTED.swap(true, Ordering::SeqCst) {
            return;
        }
        eprintln!();
        std::process::exit(130);
    })
    .context("installing the Ctrl-C handler")
}

fn run(args: &Args) -> Result<()> {
    let params = SamplingParams { temperature: args.temperature, top_k: args.top_k, top_p: args.top_p };
    params.validate()?;
    args.penalty().validate()?;
    if let (Some(t), Ok(cores)) = (args.threads, std::thread::available_parallelism())
        && t as usize > cores.get()
    {
        eprintln!(
            "warning: --threads {t} is more than the {cores} CPUs this process may use: ORT's threads will take turns \
             on them (slower, not faster)"
        );
    }
    install_ctrl_c()?;
    ensure!(
        args.usd_per_hour.is_finite() && args.usd_per_hour >= 0.0,
        "--usd-per-hour {} must be >= 0",
        args.usd_per_hour
    );
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    });
    if args.compare {
        compare(args, params, seed)
    } else if args.interactive {
        interactive(args, params, seed)
    } else {
        single(args, params, seed)
    }
}

/// The prompt's token ids and the time it took to build them.
struct Prompt {
    ids: Vec<u32>,
    tokenize_s: f64,
}

/// Chat template (unless --raw) + tokenizer. Special tokens in the rendered template (e.g. `<|im_start|>`) are
/// matched as such; BOS is prepended when model_config.json says add_bos_token and the text does not start with it.
fn tokenize_prompt(args: &Args, model: &ModelDir, tok: &Tokenizer) -> Result<Prompt> {
    let start = Instant::now();
    let cfg = &model.config;
    let text = args.prompt().context("no --prompt")?;
    let rendered = if args.raw {
        None
    } else {
        let r = prompt::render_chat(tok, cfg, &chat::messages(args.system.as_deref(), text))
            .with_context(|| format!("chat template of {}", model.dir.join("model_config.json").display()))?;
        if r.is_none() {
            eprintln!("note: {} has no chat_template: using the prompt as is (--raw)", model.dir.display());
        }
        r
    };
    let ids = prompt::encode(tok, cfg, rendered.as_deref().unwrap_or(text))?;
    Ok(Prompt { ids, tokenize_s: start.elapsed().as_secs_f64() })
}

/// Warns when --max-new-tokens goes beyond what the context leaves after the prompt.
fn warn_room(args: &Args, cfg: &nibble_llama::model::ModelConfig, prompt_tokens: usize) {
    let room = cfg.context_length.saturating_sub(prompt_tokens);
    if args.max_new_tokens as usize > room {
        eprintln!(
            "warning: --max-new-tokens {} is beyond the context: {prompt_tokens} prompt tokens leave room for {room} \
             new tokens (context length {}); generation stops there",
            args.max_new_tokens, cfg.context_length
        );
    }
}

/// The question as the user gave it (before the chat template), for the log.
fn asked(args: &Args) -> String {
    let p = args.prompt().unwrap_or_default();
    match (&args.system, args.raw) {
        (_, true) => format!("prompt (raw): {p:?}"),
        (Some(sys), false) => format!("system: {sys:?}; question: {p:?}"),
        (None, false) => format!("question: {p:?}"),
    }
}

/// What one run needs besides the model.
struct RunSpec<'a> {
    label: Option<String>,
    params: SamplingParams,
    seed: u64,
    nibble: Option<Nibble<'a>>,
    stream: bool,
}

/// nibble's library and how ORT loads it.
type Nibble<'a> = (&'a Path, Frontend);

/// Creates the session, generates, and measures.
fn run_once(
    args: &Args,
    env: &Environment,
    model: &ModelDir,
    tok: &Tokenizer,
    prompt: &Prompt,
    spec: &RunSpec,
) -> Result<RunReport> {
    let opts = SessionOptions {
        nibble: spec.nibble,
        threads: args.threads,
        activation_quant: args.activation_quant.map(|a| a.value()),
    };
    let mut llama = Llama::load(env, model, &opts)?;
    answer(args, &mut llama, model, tok, prompt, spec)
}

/// One answer on a loaded session: generates (streaming the text to stdout when `spec.stream`, the prefill's
/// progress to stderr for a prompt long enough to run in chunks), and measures. Ctrl-C ends it early.
fn answer(
    args: &Args,
    llama: &mut Llama,
    model: &ModelDir,
    tok: &Tokenizer,
    prompt: &Prompt,
    spec: &RunSpec,
) -> Result<RunReport> {
    let (params, seed) = (spec.params, spec.seed);
    let sampler = Sampler::new(params, seed)?.with_repeat_penalty(args.penalty())?;
    let mut dec = StreamDecoder::new();
    let mut stdout = std::io::stdout().lock();
    let tty = std::io::stderr().is_terminal();
    let mut progress = false;
    let mut marker = args.icount_marks.then(Marker::generation).transpose()?;
    INTERRUPTED.store(false, Ordering::SeqCst);
    GENERATING.store(true, Ordering::SeqCst);
    let gen_result = generate::generate(llama, &prompt.ids, args.max_new_tokens as usize, sampler, |step| {
        if let (Some(m), Step::Token(_)) = (marker.as_mut(), &step) {
            m.token()?;
        }
        match step {
            Step::Prefill { done, total } => {
                progress = true;
                if tty {
                    eprint!("\r[prefill] {done}/{total} prompt tokens");
                } else {
                    eprintln!("[prefill] {done}/{total} prompt tokens");
                }
            }
            Step::Token(id) => {
                if progress {
                    progress = false;
                    eprintln!("{}[prefill] done", if tty { "\r" } else { "" });
                }
                if spec.stream {
                    let piece = dec.push(tok, id)?;
                    if !piece.is_empty() {
                        stdout.write_all(piece.as_bytes()).and_then(|_| stdout.flush()).context("writing to stdout")?;
                    }
                }
            }
        }
        Ok(!INTERRUPTED.load(Ordering::SeqCst))
    });
    GENERATING.store(false, Ordering::SeqCst);
    let gen_result = gen_result?;
    if let Some(m) = marker.as_mut() {
        m.finish()?;
    }
    if spec.stream {
        let rest = dec.finish(tok)?;
        writeln!(stdout, "{rest}").and_then(|_| stdout.flush()).context("writing to stdout")?;
    }
    let timings = Timings { session_create_s: llama.create_s, tokenize_s: prompt.tokenize_s, ..gen_result.timings };
    let m = Metrics::new(&timings, prompt.ids.len(), gen_result.ids.len(), args.usd_per_hour);
    let text = tok.decode(&gen_result.ids, true).map_err(|e| anyhow!("decoding the generated ids: {e}"))?;
    Ok(RunReport {
        label: spec.label.clone(),
        model: model.dir.display().to_string(),
        weights: model.config.describe_weights(),
        nibble: spec.nibble.is_some(),
        frontend: spec.nibble.map(|(_, f)| f.name()),
        threads: args.threads,
        temperature: params.temperature,
        top_k: params.top_k,
        top_p: params.top_p,
        repeat_penalty: args.repeat_penalty,
        repeat_last_n: args.repeat_last_n,
        seed,
        prompt_tokens: prompt.ids.len(),
        prompt_token_ids: prompt.ids.clone(),
        generated_tokens: gen_result.ids.len(),
        generated_token_ids: gen_result.ids,
        stop_reason: gen_result.stop,
        text,
        session_create_s: timings.session_create_s,
        tokenize_s: timings.tokenize_s,
        ttft_s: timings.ttft_s,
        prefill_s: timings.prefill_s,
        prefill_tok_s: m.prefill_tok_s,
        decode_s: timings.decode_s,
        decode_tok_s: m.decode_tok_s,
        total_s: m.total_s,
        usd_per_hour: args.usd_per_hour,
        usd_total: m.usd_total,
        usd_per_million_output_tokens: m.usd_per_million_output_tokens,
        usd_per_million_prompt_tokens: m.usd_per_million_prompt_tokens,
        peak_rss_mib: metrics::peak_rss_mib(),
        vs_fp32: None,
        same_prefix_as_fp32: None,
    })
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// The libraries: ORT always, nibble's unless `without_nibble`.
fn libraries(args: &Args, without_nibble: bool) -> Result<(PathBuf, Option<PathBuf>)> {
    let ort = paths::ort_dylib(args.ort_dylib.as_deref())?;
    let lib = if without_nibble { None } else { Some(paths::nibble_lib(args.lib.as_deref())?) };
    Ok((ort, lib))
}

/// The ORT environment, and nibble's frontend on it (`frontend::start`).
fn start_ort(args: &Args, ort_dylib: &Path, lib: Option<&Path>) -> Result<(Environment, String, Option<Frontend>)> {
    frontend::start(ort_dylib, lib, args.frontend)
}

fn single(args: &Args, params: SamplingParams, seed: u64) -> Result<()> {
    let model = ModelDir::open(&args.model)?;
    let (ort_dylib, lib) = libraries(args, args.no_nibble)?;
    let tok = model.load_tokenizer()?;
    let prompt = tokenize_prompt(args, &model, &tok)?;
    let (env, version, frontend) = start_ort(args, &ort_dylib, lib.as_deref())?;
    let nibble = lib.as_deref().zip(frontend);
    eprintln!(
        "[nibble-llama] {}, {} prompt tokens; ONNX Runtime {version} ({}); {}",
        model.config.describe(),
        prompt.ids.len(),
        ort_dylib.display(),
        describe_nibble(nibble)
    );
    eprintln!("[nibble-llama] {}", asked(args));
    warn_room(args, &model.config, prompt.ids.len());
    let spec = RunSpec { label: None, params, seed, nibble, stream: !args.quiet };
    let report = run_once(args, &env, &model, &tok, &prompt, &spec)?;
    eprintln!("\n--- metrics ---\n{}", report.summary());
    if let Some(path) = &args.json {
        write_json(path, &serde_json::to_value(&report)?)?;
    }
    Ok(())
}

fn describe_nibble(nibble: Option<Nibble>) -> String {
    nibble.map_or("ORT built-in kernels (--no-nibble)".to_string(), |(l, f)| {
        format!(
            "nibble {} as {}",
            l.display(),
            if f == Frontend::Ep { "execution provider" } else { "custom-op library" }
        )
    })
}

/// -i: one session, a conversation read from stdin line by line; each answer streams, then its metrics line.
fn interactive(args: &Args, params: SamplingParams, seed: u64) -> Result<()> {
    let model = ModelDir::open(&args.model)?;
    ensure!(
        model.config.chat_template.is_some(),
        "-i needs a chat model: {} has no chat_template",
        model.dir.join("model_config.json").display()
    );
    let (ort_dylib, lib) = libraries(args, args.no_nibble)?;
    let tok = model.load_tokenizer()?;
    let (env, version, frontend) = start_ort(args, &ort_dylib, lib.as_deref())?;
    let nibble = lib.as_deref().zip(frontend);
    eprintln!(
        "[nibble-llama] {}; ONNX Runtime {version} ({}); {}",
        model.config.describe(),
        ort_dylib.display(),
        describe_nibble(nibble)
    );
    let opts =
        SessionOptions { nibble, threads: args.threads, activation_quant: args.activation_quant.map(|a| a.value()) };
    let mut llama = Llama::load(&env, &model, &opts)?;
    eprintln!(
        "[nibble-llama] session ready in {:.2} s. Chat: type a message and Enter; /reset starts a new conversation, \
         /exit or Ctrl-D quits, Ctrl-C ends an answer.",
        llama.create_s
    );
    let base: Vec<Message> = args.system.iter().map(|s| Message::new("system", s)).collect();
    let mut history = base.clone();
    let mut first = args.prompt().map(str::to_string);
    let mut reports = Vec::new();
    let mut stdin = std::io::stdin().lock();
    loop {
        let line = match first.take() {
            Some(p) => {
                eprintln!("> {p}");
                p
            }
            None => {
                eprint!("> ");
                let mut line = String::new();
                if stdin.read_line(&mut line).context("reading stdin")? == 0 {
                    eprintln!();
                    break;
                }
                line.trim().to_string()
            }
        };
        match line.as_str() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                history.clone_from(&base);
                eprintln!("[new conversation]");
                continue;
            }
            _ => {}
        }
        history.push(Message::new("user", &line));
        let start = Instant::now();
        let rendered = prompt::render_chat(&tok, &model.config, &history)?.context("chat template")?;
        let ids = prompt::encode(&tok, &model.config, &rendered)?;
        if ids.len() >= model.config.context_length {
            eprintln!(
                "error: the conversation is {} tokens, the context length {}: /reset to start over",
                ids.len(),
                model.config.context_length
            );
            history.pop();
            continue;
        }
        warn_room(args, &model.config, ids.len());
        let prompt = Prompt { ids, tokenize_s: start.elapsed().as_secs_f64() };
        // one seed per answer, reproducible from --seed
        let spec = RunSpec { label: None, params, seed: seed.wrapping_add(reports.len() as u64), nibble, stream: true };
        let r = answer(args, &mut llama, &model, &tok, &prompt, &spec)?;
        eprintln!("[{}]", r.one_line());
        history.push(Message::new("assistant", &r.text));
        reports.push(r);
    }
    if let Some(path) = &args.json {
        write_json(path, &serde_json::to_value(&reports)?)?;
    }
    Ok(())
}

fn compare(args: &Args, params: SamplingParams, seed: u64) -> Result<()> {
    let fp32_path = args.fp32_model.as_deref().context("--compare needs --fp32-model DIR")?;
    let fp32 = ModelDir::open(fp32_path)?;
    let q = ModelDir::open(&args.model)?;
    let (ort_dylib, lib) = libraries(args, false)?;
    let lib = lib.context("nibble library")?;
    q.check_fp32_twin(&fp32)?;
    let tok = q.load_tokenizer()?;
    let prompt = tokenize_prompt(args, &q, &tok)?;
    let (env, version, frontend) = start_ort(args, &ort_dylib, Some(&lib))?;
    let frontend = frontend.context("nibble's frontend")?;
    eprintln!(
        "[compare] {} prompt tokens, up to {} new tokens, {}; ONNX Runtime {version} ({}); nibble as {}",
        prompt.ids.len(),
        args.max_new_tokens,
        if params.is_greedy() { "greedy".to_string() } else { format!("sampling with seed {seed}") },
        ort_dylib.display(),
        frontend.name()
    );

    eprintln!("[compare] {}", asked(args));
    let q_weights = q.config.describe_weights();
    let q_short = match &q.config.quantization {
        Some(qz) => format!("int{}", qz.bits.unwrap_or(4)),
        None => "model".into(),
    };
    let runs: [(String, &ModelDir, Option<Nibble>); 3] = [
        ("fp32 ORT MatMul".to_string(), &fp32, None),
        (format!("{q_short} ORT built-in"), &q, None),
        (format!("{q_short} nibble"), &q, Some((lib.as_path(), frontend))),
    ];
    let mut rows = Vec::new();
    let mut fp32_ids: Option<Vec<u32>> = None;
    for (label, model, nib) in runs {
        if nib.is_none() && model.config.needs_nibble() {
            let note = "domain-nibble graph: ORT has no such op".to_string();
            eprintln!("[compare] {label}: skipped ({note})");
            rows.push(Row::Skipped { label, note });
            continue;
        }
        eprintln!("[compare] {label}: {} ...", model.dir.display());
        let spec = RunSpec { label: Some(label.clone()), params, seed, nibble: nib, stream: false };
        let mut r =
            run_once(args, &env, model, &tok, &prompt, &spec).with_context(|| format!("--compare run \"{label}\""))?;
        match &fp32_ids {
            None => {
                r.vs_fp32 = Some("(reference)".into());
                fp32_ids = Some(r.generated_token_ids.clone());
            }
            Some(reference) => {
                r.vs_fp32 = Some(metrics::compare_ids(&r.generated_token_ids, reference));
                r.same_prefix_as_fp32 = Some(metrics::same_prefix(&r.generated_token_ids, reference));
            }
        }
        eprintln!(
            "[compare] {label}: session {:.2} s, {} tokens in {:.2} s",
            r.session_create_s, r.generated_tokens, r.total_s
        );
        rows.push(Row::Ran(Box::new(r)));
    }

    println!("\n{} vs fp32; weights {q_weights}", q_short);
    print!("{}", metrics::table(&rows, args.usd_per_hour));
    for r in &rows {
        if let Row::Ran(r) = r {
            println!("{}: {:?}", r.label.as_deref().unwrap_or(""), r.text);
        }
    }
    if let Some(path) = &args.json {
        let rows_json: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| match r {
                Row::Ran(r) => serde_json::to_value(r).map_err(anyhow::Error::from),
                Row::Skipped { label, note } => Ok(serde_json::json!({ "label": label, "skipped": note })),
            })
            .collect::<Result<_>>()?;
        let doc = serde_json::json!({
            "prompt_tokens": prompt.ids.len(),
            "max_new_tokens": args.max_new_tokens,
            "usd_per_hour": args.usd_per_hour,
            "rows": rows_json,
        });
        write_json(path, &doc)?;
    }
    Ok(())
}
