//! `nibble-serve`: an OpenAI-compatible chat server on nibble's INT4 kernels.
//!
//! POST /v1/chat/completions (stream true: server-sent events in OpenAI's chunk format ending with `[DONE]`;
//! false: one JSON answer), GET /v1/models, GET /health, GET /metrics (Prometheus text). Each model has one
//! session and one generation thread (`engine`), which advances up to --parallel answers in turns; requests
//! beyond --parallel wait in a queue of --queue, and past that get 503 with Retry-After. The usage block carries
//! the chatbot metrics as extra fields (the driver's definitions, `nibble_llama::cli::METRICS_HELP`).
//!
//! Limits against misbehaving clients (each a flag): at most --max-connections open connections (more wait in the
//! listen backlog), request bodies of at most --max-body-bytes (413), request headers within --header-timeout
//! (else the connection is closed) and the body within --body-timeout after them (408).

mod engine;
mod text;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::header;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Parser;
use nibble_llama::chat::Message;
use nibble_llama::cli::{ActQuantArg, FrontendArg};
use nibble_llama::frontend;
use nibble_llama::generate::Generation;
use nibble_llama::metrics::{Metrics, StopReason, Timings};
use nibble_llama::model::{Llama, ModelConfig, ModelDir, SessionOptions};
use nibble_llama::sampling::{Sampler, SamplingParams};
use nibble_llama::{paths, prompt};
use serde_json::{Value, json};
use tokenizers::Tokenizer;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use engine::{Engine, Event, Job, Refused};
use nibble_serve::api::{ApiError, ChatRequest};
use text::TextStream;

/// Serves a Llama model directory (models/LLAMA_MODEL_DIR.md) over OpenAI's chat-completions API.
#[derive(Parser, Debug, Clone)]
#[command(name = "nibble-serve", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Model directory. Default: <workspace>/target/llama/smollm2-q4 (scripts/convert-smollm2.sh).
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// The id clients name the model by. Default: the model directory's name.
    #[arg(long)]
    model_id: Option<String>,
    /// Answers generated at once per model (advanced in turns, one token each); more wait in the queue.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    parallel: u32,
    /// Requests that may wait per model (at least 1); beyond that: 503 with Retry-After.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    queue: u32,
    /// max_tokens when a request gives none (capped by the context left after the prompt).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    default_max_tokens: u32,
    /// Price of the machine in US$ per hour, for the cost fields.
    #[arg(long, default_value_t = 1.0)]
    usd_per_hour: f64,
    /// ORT intra-op threads per session (default: ORT's own choice).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// Run without libnibble_ort.so (ORT's own kernels).
    #[arg(long, conflicts_with = "compare")]
    no_nibble: bool,
    /// Also serve, for the page's side-by-side: the same --model on ORT's built-in MatMulNBits (id `<id>-ort`)
    /// and the fp32 graph of --fp32-model. Every model is loaded once, at start.
    #[arg(long)]
    compare: bool,
    /// The fp32 model directory for --compare. Default: <workspace>/target/llama/smollm2-fp32.
    #[arg(long, value_name = "DIR", requires = "compare")]
    fp32_model: Option<PathBuf>,
    /// How ONNX Runtime loads nibble (as nibble-llama's --frontend).
    #[arg(long, value_enum, default_value_t = FrontendArg::Auto, conflicts_with = "no_nibble")]
    frontend: FrontendArg,
    /// nibble's int8 activation numerics (accuracy_level 4 nodes): `block` (the library's default) or `row` (per
    /// row: ORT-arm64's numerics, fewer instructions).
    #[arg(long, value_enum, conflicts_with = "no_nibble")]
    activation_quant: Option<ActQuantArg>,
    /// ONNX Runtime library (as nibble-llama's --ort-dylib).
    #[arg(long, value_name = "PATH")]
    ort_dylib: Option<PathBuf>,
    /// nibble's library (as nibble-llama's --lib).
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,
    /// Connections open at once (at least 1); more wait in the listen backlog until one closes.
    #[arg(long, default_value_t = 512, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Largest request body in bytes (at least 1); a bigger one (declared or sent) gets 413.
    #[arg(long, default_value_t = 2 << 20, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1..=(1 << 40)))]
    max_body_bytes: u64,
    /// Seconds a client has to send a request's headers, counted from when the server starts reading them (a
    /// new connection, or the end of the previous answer on a kept-alive one); past it the connection is closed.
    #[arg(long, default_value = "30", value_name = "SECONDS", value_parser = seconds)]
    header_timeout: Duration,
    /// Seconds a client has to send a request's body once its headers are in; past it: 408.
    #[arg(long, default_value = "30", value_name = "SECONDS", value_parser = seconds)]
    body_timeout: Duration,
    /// Shut down as on SIGTERM when standard input is closed (end of file). A supervisor that starts nibble-serve
    /// with a pipe as its standard input and keeps the other end takes the server with it when it ends, even by
    /// SIGKILL (examples/ray's replicas do).
    #[arg(long)]
    stop_on_stdin_eof: bool,
}

/// A duration flag's value: seconds, > 0 and at most a day (fractions allowed: `0.5`).
fn seconds(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("`{s}` is not a number of seconds > 0 and <= 86400")),
    }
}

/// One served model.
struct Served {
    id: String,
    engine: Engine,
    tok: Arc<Tokenizer>,
    config: ModelConfig,
    description: String,
    /// `nibble` or `ort` (whose MatMulNBits kernels run).
    kernels: &'static str,
    /// With --compare: `fp32`, `ort-int4` or `nibble-int4` (the page's side-by-side columns).
    compare_role: Option<&'static str>,
    created: u64,
    stats: Stats,
}

/// A model to load: its directory, the id clients use, whether nibble runs it, its --compare role.
struct ModelSpec {
    dir: ModelDir,
    id: String,
    nibble: bool,
    role: Option<&'static str>,
}

#[derive(Default)]
struct Stats {
    ok: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
    cancelled: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    /// Sums in microseconds, for means.
    ttft_us: AtomicU64,
    decode_us: AtomicU64,
}

struct AppState {
    models: Vec<Served>,
    ort_version: String,
    usd_per_hour: f64,
    default_max_tokens: usize,
    started: Instant,
    next_id: AtomicU64,
    /// Chat requests answered 4xx before reaching a model (unreadable, too large or late body, bad JSON or
    /// fields, unknown model, too long a conversation).
    invalid: AtomicU64,
    /// Connections open now, and accepted since the start.
    connections_open: AtomicU64,
    connections_total: AtomicU64,
    body_timeout: Duration,
    max_body_bytes: u64,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn run(args: Args) -> Result<()> {
    anyhow::ensure!(args.usd_per_hour.is_finite() && args.usd_per_hour >= 0.0, "--usd-per-hour must be >= 0");
    let llama_dir = paths::workspace().join("target").join("llama");
    let dir = args.model.clone().unwrap_or_else(|| llama_dir.join("smollm2-q4"));
    let model = ModelDir::open(&dir)?;
    let id = args.model_id.clone().unwrap_or_else(|| dir_name(&model.dir));
    let specs = if args.compare {
        let fp32_dir = args.fp32_model.clone().unwrap_or_else(|| llama_dir.join("smollm2-fp32"));
        let fp32 = ModelDir::open(&fp32_dir).context("--compare needs the fp32 model (--fp32-model DIR)")?;
        model.check_fp32_twin(&fp32)?;
        let fp32_id = dir_name(&fp32.dir);
        anyhow::ensure!(fp32_id != id && fp32_id != format!("{id}-ort"), "model ids clash: {id}, {fp32_id}");
        let mut specs = vec![ModelSpec { dir: model.clone(), id: id.clone(), nibble: true, role: Some("nibble-int4") }];
        if model.config.needs_nibble() {
            log(json!({"event": "note", "model": format!("{id}-ort"),
                       "note": "not served: the graph's MatMulNBits nodes are in domain nibble, ORT has no such op"}));
        } else {
            specs.push(ModelSpec { dir: model, id: format!("{id}-ort"), nibble: false, role: Some("ort-int4") });
        }
        specs.push(ModelSpec { dir: fp32, id: fp32_id, nibble: false, role: Some("fp32") });
        specs
    } else {
        vec![ModelSpec { dir: model, id, nibble: !args.no_nibble, role: None }]
    };
    let ort_dylib = paths::ort_dylib(args.ort_dylib.as_deref())?;
    let lib = if args.no_nibble { None } else { Some(paths::nibble_lib(args.lib.as_deref())?) };
    let (env, version, fe) = frontend::start(&ort_dylib, lib.as_deref(), args.frontend)?;
    let mut models = Vec::new();
    for spec in specs {
        let nibble = if spec.nibble { lib.as_deref().zip(fe) } else { None };
        let tok = Arc::new(spec.dir.load_tokenizer()?);
        let opts = SessionOptions {
            nibble,
            threads: args.threads,
            activation_quant: args.activation_quant.map(|a| a.value()),
        };
        let llama = Llama::load(&env, &spec.dir, &opts)
            .with_context(|| format!("loading model `{}` from {}", spec.id, spec.dir.dir.display()))?;
        let description = format!(
            "{}, {}",
            spec.dir.config.describe(),
            nibble.map_or("ORT's own kernels".to_string(), |(_, f)| format!("nibble ({})", f.name()))
        );
        log(json!({"event": "model_loaded", "model": spec.id, "description": description, "ort": version,
                   "session_create_s": llama.create_s}));
        let engine = Engine::start(&spec.id, llama, args.queue as usize, args.parallel as usize)
            .context("starting the generation thread")?;
        models.push(Served {
            id: spec.id,
            engine,
            tok,
            config: spec.dir.config,
            description,
            kernels: if nibble.is_some() { "nibble" } else { "ort" },
            compare_role: spec.role,
            created: unix_now(),
            stats: Stats::default(),
        });
    }
    let state = Arc::new(AppState {
        models,
        ort_version: version,
        usd_per_hour: args.usd_per_hour,
        default_max_tokens: args.default_max_tokens as usize,
        started: Instant::now(),
        next_id: AtomicU64::new(1),
        invalid: AtomicU64::new(0),
        connections_open: AtomicU64::new(0),
        connections_total: AtomicU64::new(0),
        body_timeout: args.body_timeout,
        max_body_bytes: args.max_body_bytes,
    });

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(serve(&args, state.clone()))?;
    // The listener is closed and every response finished: let the engines drain and stop.
    for m in &state.models {
        m.engine.shutdown();
    }
    // The final counts (what /metrics would have said last), for whoever checks them against a client's tally.
    let c = |a: &AtomicU64| a.load(Ordering::SeqCst);
    let models: serde_json::Map<String, Value> = state
        .models
        .iter()
        .map(|m| {
            let st = &m.stats;
            let v = json!({"ok": c(&st.ok), "failed": c(&st.failed), "refused": c(&st.refused),
                           "cancelled": c(&st.cancelled), "completion_tokens": c(&st.completion_tokens)});
            (m.id.clone(), v)
        })
        .collect();
    log(json!({"event": "stopped", "totals": {"models": models, "invalid": c(&state.invalid),
               "connections_total": c(&state.connections_total)}}));
    Ok(())
}

fn dir_name(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into())
}

async fn serve(args: &Args, state: Arc<AppState>) -> Result<()> {
    let app = Router::new()
        .route("/", get(page))
        .route("/v1/chat/completions", post(chat_completions).fallback(method_not_allowed))
        .route("/v1/models", get(list_models).fallback(method_not_allowed))
        .route("/health", get(health).fallback(method_not_allowed))
        .route("/metrics", get(metrics).fallback(method_not_allowed))
        .fallback(|| async { ApiError::not_found("no such endpoint", None, "not_found") })
        .layer(DefaultBodyLimit::max(usize::try_from(args.max_body_bytes).unwrap_or(usize::MAX)))
        .with_state(state.clone());
    let addr: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .map_err(|e| anyhow!("--host {} --port {}: {e}", args.host, args.port))?;
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))?;
    let local = listener.local_addr()?;
    log(json!({"event": "listening", "addr": local.to_string(), "url": format!("http://{local}/"),
               "limits": {"max_connections": args.max_connections, "max_body_bytes": args.max_body_bytes,
                          "header_timeout_s": args.header_timeout.as_secs_f64(),
                          "body_timeout_s": args.body_timeout.as_secs_f64()}}));
    accept_loop(listener, app, args, &state, shutdown_signal(Signals::new(args.stop_on_stdin_eof))).await;
    Ok(())
}

/// Serves connections (HTTP/1.1) until `shutdown` resolves, then stops accepting, lets each connection finish the
/// answer it is sending (a kept-alive one closes after it), and returns when every connection is closed.
/// At most --max-connections are open at once: the next is accepted only when one closes (until then it waits
/// in the kernel's listen backlog). Each connection must send a request's headers within --header-timeout.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    args: &Args,
    state: &Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let mut shutdown = std::pin::pin!(shutdown);
    let permits = Arc::new(tokio::sync::Semaphore::new(args.max_connections as usize));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(args.header_timeout);
    // Connection tasks watch `stop` (graceful shutdown) and hold a clone of `open` until they end.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (open_tx, mut open_rx) = tokio::sync::mpsc::channel::<()>(1);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: log it, give the others time to close, go on.
                    log(json!({"event": "accept_error", "error": e.to_string()}));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        state.connections_total.fetch_add(1, Ordering::Relaxed);
        let open = OpenConnection::new(state.clone());
        let conn =
            http.serve_connection(TokioIo::new(stream), hyper_util::service::TowerToHyperService::new(app.clone()));
        let (mut stop, still_open) = (stop_rx.clone(), open_tx.clone());
        tokio::spawn(async move {
            let _held = (permit, open, still_open);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = async { let _ = stop.wait_for(|s| *s).await; } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(open_tx);
    let _ = open_rx.recv().await; // None once every connection task has ended
}

/// Counts an open connection in `AppState::connections_open` while it lives.
struct OpenConnection(Arc<AppState>);

impl OpenConnection {
    fn new(s: Arc<AppState>) -> Self {
        s.connections_open.fetch_add(1, Ordering::Relaxed);
        Self(s)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// SIGINT and SIGTERM, each listened to once from the start: a signal is never lost between the first and the
/// second (a listener made after the first signal would miss a second one that came before it existed); and with
/// --stop-on-stdin-eof the end of standard input, once.
struct Signals {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
    stdin_closed: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Signals {
    fn new(stdin_eof: bool) -> Self {
        let stdin_closed = stdin_eof.then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            // A plain thread: reading stdin blocks. Input is read and dropped until the end of file (or an error:
            // a stdin that cannot be read can no longer tell that it was closed, so that ends it too).
            std::thread::Builder::new()
                .name("stdin-eof".into())
                .spawn(move || {
                    use std::io::Read;
                    let mut buf = [0u8; 512];
                    let mut stdin = std::io::stdin().lock();
                    loop {
                        match stdin.read(&mut buf) {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(_) => break,
                        }
                    }
                    let _ = tx.send(());
                })
                .map(|_| rx)
                .ok()
        });
        Signals {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
            stdin_closed: stdin_closed.flatten(),
        }
    }

    /// Resolves at the next SIGINT or SIGTERM, or when standard input ends (the first time only); names which.
    async fn next(&mut self) -> &'static str {
        async fn recv(s: &mut Option<Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        async fn closed(rx: &mut Option<tokio::sync::oneshot::Receiver<()>>) {
            match rx {
                Some(r) => {
                    let _ = r.await;
                    *rx = None;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.interrupt) => "SIGINT",
            () = recv(&mut self.terminate) => "SIGTERM",
            () = closed(&mut self.stdin_closed) => "standard input closed",
        }
    }
}

/// The first signal (or the end of standard input, with --stop-on-stdin-eof) starts the graceful shutdown; a
/// second signal, or the end of the grace period, ends the process.
async fn shutdown_signal(mut signals: Signals) {
    let cause = signals.next().await;
    log(json!({"event": "shutting_down", "cause": cause, "note": format!("in-flight answers finish (at most \
               {SHUTDOWN_GRACE_S} s); new connections are refused; a second Ctrl-C or SIGTERM ends the process now")}));
    tokio::spawn(async move {
        let grace = tokio::time::sleep(std::time::Duration::from_secs(SHUTDOWN_GRACE_S));
        let why = tokio::select! { _ = signals.next() => "a second signal", () = grace => "the grace period ended" };
        log(json!({"event": "stopped", "note": format!("{why}: answers still in flight were cut")}));
        std::process::exit(130);
    });
}

/// How long a shutdown waits for the answers in flight.
const SHUTDOWN_GRACE_S: u64 = 120;

/// One structured log line (JSON) on stderr.
fn log(mut v: Value) {
    v["ts"] = json!(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()));
    eprintln!("{v}");
}

/// The chat page: one self-contained file (no build step, nothing fetched from elsewhere).
async fn page() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")],
        include_str!("../static/index.html"),
    )
}

/// 200 with `"status": "ok"` while every model's generation thread runs; 503 with `"status": "failed"` once one
/// has ended (a supervisor, e.g. the Ray Serve replica of examples/ray, then replaces the server).
async fn health(State(s): State<Arc<AppState>>) -> impl IntoResponse {
    let models: Vec<_> = s
        .models
        .iter()
        .map(|m| {
            json!({"id": m.id, "generator": if m.engine.is_running() { "running" } else { "stopped" },
                "queued": m.engine.load.queued.load(Ordering::SeqCst),
                "active": m.engine.load.active.load(Ordering::SeqCst)})
        })
        .collect();
    let running = s.models.iter().all(|m| m.engine.is_running());
    let code = if running { axum::http::StatusCode::OK } else { axum::http::StatusCode::SERVICE_UNAVAILABLE };
    let body = json!({"status": if running { "ok" } else { "failed" }, "uptime_s": s.started.elapsed().as_secs_f64(),
        "ort_version": s.ort_version, "usd_per_hour": s.usd_per_hour, "models": models});
    (code, axum::Json(body))
}

async fn list_models(State(s): State<Arc<AppState>>) -> impl IntoResponse {
    axum::Json(json!({"object": "list", "data": s.models.iter().map(|m| json!({
        "id": m.id, "object": "model", "created": m.created, "owned_by": "nibble", "description": m.description,
        "context_length": m.config.context_length, "weights": m.config.describe_weights(), "kernels": m.kernels,
        "compare_role": m.compare_role})).collect::<Vec<_>>()}))
}

async fn metrics(State(s): State<Arc<AppState>>) -> impl IntoResponse {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, f: &dyn Fn(&Served) -> String| {
        out += &format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
        for m in &s.models {
            let id = m.id.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
            out += &format!("{name}{{model=\"{id}\"}} {}\n", f(m));
        }
    };
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
    family("nibble_requests_ok_total", "counter", "Answers completed.", &|m| c(&m.stats.ok));
    family("nibble_requests_failed_total", "counter", "Answers that failed after being accepted.", &|m| {
        c(&m.stats.failed)
    });
    family("nibble_requests_refused_total", "counter", "Requests refused because the queue was full.", &|m| {
        c(&m.stats.refused)
    });
    family("nibble_requests_cancelled_total", "counter", "Answers ended because the client went away.", &|m| {
        c(&m.stats.cancelled)
    });
    family("nibble_prompt_tokens_total", "counter", "Prompt tokens of completed answers.", &|m| {
        c(&m.stats.prompt_tokens)
    });
    family("nibble_completion_tokens_total", "counter", "Generated tokens of completed answers.", &|m| {
        c(&m.stats.completion_tokens)
    });
    family("nibble_ttft_seconds_total", "counter", "Sum of time to first token of completed answers.", &|m| {
        (m.stats.ttft_us.load(Ordering::Relaxed) as f64 / 1e6).to_string()
    });
    family("nibble_decode_seconds_total", "counter", "Sum of decode time of completed answers.", &|m| {
        (m.stats.decode_us.load(Ordering::Relaxed) as f64 / 1e6).to_string()
    });
    family("nibble_queue_depth", "gauge", "Requests waiting.", &|m| {
        m.engine.load.queued.load(Ordering::SeqCst).to_string()
    });
    family("nibble_active_generations", "gauge", "Answers being generated.", &|m| {
        m.engine.load.active.load(Ordering::SeqCst).to_string()
    });
    // Server-wide (no model label).
    for (name, kind, help, v) in [
        (
            "nibble_requests_invalid_total",
            "counter",
            "Chat requests answered 4xx before reaching a model (bad or late body, too large, bad fields, unknown model).",
            &s.invalid,
        ),
        ("nibble_connections_open", "gauge", "HTTP connections open now.", &s.connections_open),
        ("nibble_connections_total", "counter", "HTTP connections accepted.", &s.connections_total),
    ] {
        out += &format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}\n", c(v));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

/// A request accepted into a model's queue.
struct Accepted {
    id: String,
    model: usize,
    prompt_tokens: usize,
    events: UnboundedReceiver<Event>,
    text: TextStream,
    tokenize_s: f64,
    received: Instant,
    /// What the handler saw of the generation (for an answer cut by a stop sequence, which never gets the
    /// engine's own result): its start, the ids, the first and last token times.
    started: Option<Instant>,
    /// Seconds the job waited in the engine's queue (known once it starts).
    queue_s: f64,
    ids: Vec<u32>,
    first_at: Option<Instant>,
    last_at: Option<Instant>,
}

impl Accepted {
    /// The timings as seen here; prefill is taken as TTFT (the sampling of one token is not split off).
    fn timings_seen(&self) -> Timings {
        let secs = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        };
        let ttft_s = secs(self.started, self.first_at);
        Timings { prefill_s: ttft_s, ttft_s, decode_s: secs(self.first_at, self.last_at), ..Timings::default() }
    }
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let mut e = ApiError::invalid("method", format!("{method} is not allowed on {}", uri.path()));
    e.status = axum::http::StatusCode::METHOD_NOT_ALLOWED;
    e.into_response()
}

async fn chat_completions(State(s): State<Arc<AppState>>, request: Request) -> Response {
    let refused = |e: ApiError| {
        if e.status.is_client_error() {
            s.invalid.fetch_add(1, Ordering::Relaxed);
        }
        e.into_response()
    };
    // A body declared too large is refused before any of it is read (the DefaultBodyLimit layer below counts the
    // bytes as they come, so without this a client could hold the request until the body timeout).
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > s.max_body_bytes) {
        let mut e = ApiError::invalid(
            "body",
            format!("the request body is {n} bytes; the limit is {} (--max-body-bytes)", s.max_body_bytes),
        );
        e.status = axum::http::StatusCode::PAYLOAD_TOO_LARGE;
        return refused(e);
    }
    // The body, at most --max-body-bytes (the DefaultBodyLimit layer: 413), within --body-timeout (408).
    let body = match tokio::time::timeout(s.body_timeout, Bytes::from_request(request, &())).await {
        Ok(Ok(b)) => b,
        Ok(Err(r)) => {
            let mut e = ApiError::invalid("body", format!("the request body could not be read: {r}"));
            e.status = r.status();
            return refused(e);
        }
        Err(_) => {
            let mut e = ApiError::invalid(
                "body",
                format!("the request body did not arrive within {} s (--body-timeout)", s.body_timeout.as_secs_f64()),
            );
            e.status = axum::http::StatusCode::REQUEST_TIMEOUT;
            return refused(e);
        }
    };
    let req = match ChatRequest::parse(&body) {
        Ok(r) => r,
        Err(e) => return refused(e),
    };
    // The chat template and the tokenizer are CPU work (long histories take a while): not on an async worker.
    match tokio::task::block_in_place(|| accept(&s, &req)) {
        Ok(a) if req.stream => stream_answer(s, req, a).into_response(),
        Ok(a) => whole_answer(s, a).await,
        Err(e) => refused(e),
    }
}

fn accept(s: &AppState, req: &ChatRequest) -> Result<Accepted, ApiError> {
    let received = Instant::now();
    let Some(mi) = s.models.iter().position(|m| m.id == req.model) else {
        let ids: Vec<&str> = s.models.iter().map(|m| m.id.as_str()).collect();
        return Err(ApiError::not_found(
            format!("the model `{}` does not exist; this server has: {}", req.model, ids.join(", ")),
            Some("model"),
            "model_not_found",
        ));
    };
    let m = &s.models[mi];
    let cfg = &m.config;
    let messages: Vec<Message> = req.messages.iter().map(|x| Message::new(&x.role, &x.content)).collect();
    let text = prompt::render_chat(&m.tok, cfg, &messages)
        .map_err(|e| ApiError::invalid("messages", format!("{e:#}")))?
        .ok_or_else(|| ApiError::invalid("messages", format!("the model `{}` has no chat template", m.id)))?;
    let ids = prompt::encode(&m.tok, cfg, &text).map_err(|e| ApiError::invalid("messages", format!("{e:#}")))?;
    // The prompt plus at least one new token must fit.
    if ids.len() >= cfg.context_length {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "the conversation is {} tokens after the chat template; the model's context length is {} (room for \
                 at least one new token is needed): shorten the history",
                ids.len(),
                cfg.context_length
            ),
        )
        .with_code("context_length_exceeded"));
    }
    let room = cfg.context_length - ids.len();
    let max_tokens = req.max_tokens.unwrap_or(s.default_max_tokens).min(room);
    let params = SamplingParams { temperature: req.temperature, top_k: 0, top_p: req.top_p };
    let seed =
        req.seed.unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
    let sampler = Sampler::new(params, seed).map_err(|e| ApiError::invalid("temperature", format!("{e:#}")))?;
    let (tx, rx) = unbounded_channel();
    let prompt_tokens = ids.len();
    let job = Job { prompt: ids, max_tokens, sampler, events: tx, queued_at: Instant::now() };
    match m.engine.submit(job) {
        Ok(()) => {}
        Err(Refused::Busy) => {
            m.stats.refused.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::busy(format!("the model `{}` is busy: its queue is full; retry shortly", m.id), 1));
        }
        Err(Refused::Closed) => return Err(ApiError::busy("the server is shutting down", 5)),
    }
    let n = s.next_id.fetch_add(1, Ordering::Relaxed);
    Ok(Accepted {
        id: format!("chatcmpl-{:x}{n:06x}", unix_now()),
        model: mi,
        prompt_tokens,
        events: rx,
        text: TextStream::new(m.tok.clone(), req.stop.clone()),
        tokenize_s: received.elapsed().as_secs_f64(),
        received,
        started: None,
        queue_s: 0.0,
        ids: Vec::new(),
        first_at: None,
        last_at: None,
    })
}

/// How an answer ended, for the response and the log.
struct Finished {
    generation: Generation,
    /// A stop sequence ended it (generation was cut there).
    stopped_by_sequence: bool,
    queue_s: f64,
}

impl Finished {
    fn finish_reason(&self) -> &'static str {
        match (self.stopped_by_sequence, self.generation.stop) {
            (true, _) | (false, StopReason::Eos) => "stop",
            (false, _) => "length",
        }
    }
}

fn usage(s: &AppState, a: &Accepted, f: &Finished) -> Value {
    let g = &f.generation;
    let t = Timings { tokenize_s: a.tokenize_s, ..g.timings };
    let m = Metrics::new(&t, a.prompt_tokens, g.ids.len(), s.usd_per_hour);
    let total_tokens = a.prompt_tokens + g.ids.len();
    json!({
        "prompt_tokens": a.prompt_tokens,
        "completion_tokens": g.ids.len(),
        "total_tokens": total_tokens,
        "queue_s": f.queue_s,
        "ttft_s": t.ttft_s,
        "prefill_s": t.prefill_s,
        "prefill_tok_s": m.prefill_tok_s,
        "decode_s": t.decode_s,
        "decode_tok_s": m.decode_tok_s,
        "total_s": m.total_s,
        "usd_per_hour": s.usd_per_hour,
        "usd_per_million_output_tokens": m.usd_per_million_output_tokens,
        "usd_per_million_prompt_tokens": m.usd_per_million_prompt_tokens,
        "usd_cost": m.usd_total,
    })
}

fn record(s: &AppState, a: &Accepted, f: &Finished, stream: bool) {
    let st = &s.models[a.model].stats;
    let g = &f.generation;
    st.ok.fetch_add(1, Ordering::Relaxed);
    st.prompt_tokens.fetch_add(a.prompt_tokens as u64, Ordering::Relaxed);
    st.completion_tokens.fetch_add(g.ids.len() as u64, Ordering::Relaxed);
    st.ttft_us.fetch_add((g.timings.ttft_s * 1e6) as u64, Ordering::Relaxed);
    st.decode_us.fetch_add((g.timings.decode_s * 1e6) as u64, Ordering::Relaxed);
    log(json!({"event": "request", "id": a.id, "model": s.models[a.model].id, "stream": stream, "status": "ok",
        "finish_reason": f.finish_reason(), "prompt_tokens": a.prompt_tokens, "completion_tokens": g.ids.len(),
        "queue_s": f.queue_s, "ttft_s": g.timings.ttft_s, "decode_s": g.timings.decode_s,
        "wall_s": a.received.elapsed().as_secs_f64()}));
}

/// How an accepted answer ended without completing.
#[derive(Clone, Copy)]
enum Ended {
    Cancelled,
    Failed,
}

fn record_end(s: &AppState, a: &Accepted, ended: Ended, detail: &str, stream: bool) {
    log_end(s, a.model, &a.id, a.received, ended, detail, stream);
}

fn log_end(s: &AppState, model: usize, id: &str, received: Instant, ended: Ended, detail: &str, stream: bool) {
    let st = &s.models[model].stats;
    let (counter, status) = match ended {
        Ended::Cancelled => (&st.cancelled, "cancelled"),
        Ended::Failed => (&st.failed, "failed"),
    };
    counter.fetch_add(1, Ordering::Relaxed);
    log(json!({"event": "request", "id": id, "model": s.models[model].id, "stream": stream, "status": status,
        "detail": detail, "wall_s": received.elapsed().as_secs_f64()}));
}

/// A non-streamed answer's client that leaves before the answer makes axum drop the handler: this guard, dropped
/// with it, counts and logs that as cancelled (the engine drops the generation when the channel closes).
struct LeftEarly {
    s: Arc<AppState>,
    model: usize,
    id: String,
    received: Instant,
    armed: bool,
}

impl Drop for LeftEarly {
    fn drop(&mut self) {
        if self.armed {
            log_end(&self.s, self.model, &self.id, self.received, Ended::Cancelled, "client disconnected", false);
        }
    }
}

/// The next piece of an answer.
enum Step {
    /// New text (possibly empty).
    Text(String),
    /// The answer is complete; the text's remainder.
    End(String, Finished),
    Failed(String),
}

/// Waits for the next engine event of `a` and turns it into text.
async fn next_step(a: &mut Accepted) -> Step {
    loop {
        match a.events.recv().await {
            Some(Event::Started { queue_s }) => {
                a.queue_s = queue_s;
                a.started = Some(Instant::now());
            }
            Some(Event::Token(id)) => {
                let now = Instant::now();
                a.first_at.get_or_insert(now);
                a.last_at = Some(now);
                a.ids.push(id);
                match a.text.push(id) {
                    Ok((piece, false)) => return Step::Text(piece),
                    Ok((piece, true)) => {
                        // A stop sequence: cut here. Closing the channel makes the engine drop the generation.
                        a.events.close();
                        let generation =
                            Generation { ids: a.ids.clone(), stop: StopReason::Eos, timings: a.timings_seen() };
                        return Step::End(
                            piece,
                            Finished { generation, stopped_by_sequence: true, queue_s: a.queue_s },
                        );
                    }
                    Err(e) => return Step::Failed(format!("{e:#}")),
                }
            }
            Some(Event::Done(g)) => {
                return match a.text.finish() {
                    Ok((rest, cut)) => {
                        Step::End(rest, Finished { generation: g, stopped_by_sequence: cut, queue_s: a.queue_s })
                    }
                    Err(e) => Step::Failed(format!("{e:#}")),
                };
            }
            Some(Event::Failed(e)) => return Step::Failed(e),
            None => return Step::Failed("the generation thread stopped".into()),
        }
    }
}

async fn whole_answer(s: Arc<AppState>, mut a: Accepted) -> Response {
    let mut content = String::new();
    let mut guard = LeftEarly { s: s.clone(), model: a.model, id: a.id.clone(), received: a.received, armed: true };
    loop {
        let step = next_step(&mut a).await;
        // only a drop while waiting for the engine means the client left
        guard.armed = matches!(step, Step::Text(_));
        match step {
            Step::Text(t) => content += &t,
            Step::End(t, f) => {
                content += &t;
                record(&s, &a, &f, false);
                let m = &s.models[a.model];
                return axum::Json(json!({
                    "id": a.id, "object": "chat.completion", "created": unix_now(), "model": m.id,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "logprobs": null, "finish_reason": f.finish_reason()}],
                    "usage": usage(&s, &a, &f),
                }))
                .into_response();
            }
            Step::Failed(e) => {
                record_end(&s, &a, Ended::Failed, &e, false);
                return ApiError::internal(format!("generation failed: {e}")).into_response();
            }
        }
    }
}

fn stream_answer(s: Arc<AppState>, req: ChatRequest, mut a: Accepted) -> impl IntoResponse {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<SseEvent, std::convert::Infallible>>(64);
    tokio::spawn(async move {
        let model = s.models[a.model].id.clone();
        let created = unix_now();
        let id = a.id.clone();
        let chunk = |delta: Value, finish: Option<&str>| {
            json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
        };
        let send = |v: Value| SseEvent::default().data(v.to_string());
        if tx.send(Ok(send(chunk(json!({"role": "assistant", "content": ""}), None)))).await.is_err() {
            record_end(&s, &a, Ended::Cancelled, "client disconnected before the first token", true);
            return;
        }
        loop {
            // The client may leave while the answer is queued or in its prefill (no text to send yet): notice it
            // then too, so the engine drops the job instead of running it for nobody.
            let step = tokio::select! {
                step = next_step(&mut a) => step,
                () = tx.closed() => {
                    record_end(&s, &a, Ended::Cancelled, "client disconnected", true);
                    return; // dropping `a` closes the engine channel
                }
            };
            match step {
                Step::Text(t) => {
                    if !t.is_empty() && tx.send(Ok(send(chunk(json!({"content": t}), None)))).await.is_err() {
                        record_end(&s, &a, Ended::Cancelled, "client disconnected", true);
                        return; // dropping `a` closes the engine channel: generation stops
                    }
                }
                Step::End(t, f) => {
                    let mut events = Vec::new();
                    if !t.is_empty() {
                        events.push(send(chunk(json!({"content": t}), None)));
                    }
                    let mut last = chunk(json!({}), Some(f.finish_reason()));
                    let usage = usage(&s, &a, &f);
                    if req.include_usage {
                        events.push(send(last));
                        last = json!({"id": a.id, "object": "chat.completion.chunk", "created": created,
                                      "model": model, "choices": [], "usage": usage});
                    } else {
                        // Not in OpenAI's format, but the page wants the metrics: an extra field on the last chunk.
                        last["usage"] = usage;
                    }
                    events.push(send(last));
                    events.push(SseEvent::default().data("[DONE]"));
                    for e in events {
                        if tx.send(Ok(e)).await.is_err() {
                            record_end(&s, &a, Ended::Cancelled, "client disconnected before the end", true);
                            return;
                        }
                    }
                    record(&s, &a, &f, true);
                    return;
                }
                Step::Failed(e) => {
                    let err = ApiError::internal(format!("generation failed: {e}"));
                    let _ = tx.send(Ok(send(err.body()))).await;
                    let _ = tx.send(Ok(SseEvent::default().data("[DONE]"))).await;
                    record_end(&s, &a, Ended::Failed, &e, true);
                    return;
                }
            }
        }
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx)).keep_alive(KeepAlive::default())
}
