//! Command-line arguments.

use std::path::PathBuf;

use clap::Parser;

/// The metric definitions, shown by `--help` (and repeated in README.md / `metrics.rs`).
pub const METRICS_HELP: &str = "\
Metrics (all wall-clock, one request, batch 1):
  session create s  building the ORT session: graph load, optimisation and, with nibble, packing every
                    MatMulNBits weight into kernel layout (once per session, not per request)
  tokenize s        chat template + tokenizer (not part of TTFT)
  TTFT s            time to first token: from the start of the prefill run to the first sampled token
  prefill s         the prefill run alone (all prompt tokens through the graph, P = 0)
  prefill tok/s     prompt tokens / prefill s
  decode s          from the first sampled token to the last one (includes streaming the text)
  decode tok/s      (generated tokens - 1) / decode s    (undefined for fewer than 2 tokens)
  total s           TTFT + decode s (session creation and tokenization excluded)
  peak RSS          the process's peak resident memory so far (VmHWM): weights, caches, ORT's arenas
  cost              at --usd-per-hour (default $1/h, i.e. a machine rented at that price, fully used):
                    total $ = usd_per_hour * total s / 3600
                    $/M output tokens = usd_per_hour / 3600 / decode tok/s * 1e6
                    $/M prompt tokens = usd_per_hour / 3600 / prefill tok/s * 1e6
Generated tokens include the stop (EOS) token when one was produced; the text leaves special tokens out.
Ctrl-C during an answer ends it there (the metrics are still printed); a second Ctrl-C, or one at the -i prompt,
exits.";

/// Runs a quantized Llama decoder (a model directory written by models/gguf_to_onnx.py, see
/// models/LLAMA_MODEL_DIR.md) on ONNX Runtime with nibble's MatMulNBits kernels, streams the answer and reports
/// time to first token, tokens/s and cost.
#[derive(Parser, Debug, Clone)]
#[command(name = "nibble-llama", version, after_long_help = METRICS_HELP, after_help = "See --help for the metric definitions.")]
pub struct Args {
    /// Model directory (model.onnx, tokenizer.json, model_config.json), or the path of its model.onnx.
    #[arg(short = 'm', long, value_name = "DIR")]
    pub model: PathBuf,

    /// The user message (or, with --raw, the whole prompt text). Default: "What is the capital of France, and why
    /// is it famous?"; with -i: none (the first message is read from the terminal).
    #[arg(short = 'p', long)]
    pub prompt: Option<String>,

    /// Interactive chat: read messages from stdin, one per line, and answer each with the conversation so far
    /// (its metrics after each answer). Empty line: skipped; /reset: new conversation; /exit or end of input: quit.
    #[arg(short = 'i', long, conflicts_with_all = ["raw", "compare"])]
    pub interactive: bool,

    /// Optional system message (chat mode only; without it the template's default applies).
    #[arg(long)]
    pub system: Option<String>,

    /// No chat template: tokenize --prompt as is (BOS prepended only if model_config.json says add_bos_token).
    #[arg(long)]
    pub raw: bool,

    /// Generate at most this many tokens (generation also stops at an EOS token and at the context length).
    #[arg(short = 'n', long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_new_tokens: u32,

    /// Sampling temperature; 0 = greedy (argmax, ties to the lowest token id).
    #[arg(long, visible_alias = "temp", default_value_t = 0.0)]
    pub temperature: f32,

    /// Keep only the K most likely tokens before sampling (0 = all). Ignored when greedy.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,

    /// Nucleus sampling: keep the smallest set of most likely tokens whose probability reaches P (1 = all).
    /// Ignored when greedy.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,

    /// Repetition penalty: each distinct token among the last --repeat-last-n ids (prompt and answer) has its
    /// logit divided by this when positive, multiplied when negative (as llama.cpp). 1 = off; 1.1 stops most loops
    /// in long answers.
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,

    /// How many of the latest ids --repeat-penalty looks back over.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,

    /// Seed of the sampler's PRNG (same seed, same settings -> same tokens). Default: from the clock.
    #[arg(short = 's', long)]
    pub seed: Option<u64>,

    /// ORT intra-op threads (default: ORT's own choice, one per physical core).
    #[arg(short = 't', long, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,

    /// Price of the machine in US$ per hour, for the cost figures.
    #[arg(long, default_value_t = 1.0)]
    pub usd_per_hour: f64,

    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Do not stream the generated text; print the metrics only.
    #[arg(long)]
    pub quiet: bool,

    /// Run without libnibble_ort.so: ORT's own kernels (com.microsoft::MatMulNBits built in).
    #[arg(long, conflicts_with = "compare")]
    pub no_nibble: bool,

    /// How ONNX Runtime loads nibble: `ep` = execution-provider plugin (ORT >= 1.24; ORT frees the original
    /// weights once nibble has packed them, so the session holds one copy), `custom-op` = custom-op library (every
    /// supported ORT; ORT keeps its copy of the weights beside nibble's), `auto` = `ep` when the runtime supports
    /// it, else `custom-op`.
    #[arg(long, value_enum, default_value_t = FrontendArg::Auto, conflicts_with = "no_nibble")]
    pub frontend: FrontendArg,

    /// nibble's int8 activation numerics (accuracy_level 4 nodes): `block` (the library's default: per block,
    /// more accurate) or `row` (per row: ORT-arm64's numerics, fewer instructions per block).
    #[arg(long, value_enum, conflicts_with = "no_nibble")]
    pub activation_quant: Option<ActQuantArg>,

    /// Compare, on the same prompt and sampling settings (greedy by default): the fp32 graph (--fp32-model), the INT4 --model on ORT's
    /// built-in MatMulNBits, and the INT4 --model on nibble. Prints one table.
    #[arg(long, requires = "fp32_model")]
    pub compare: bool,

    /// The fp32 model directory (plain MatMul) for --compare.
    #[arg(long, value_name = "DIR")]
    pub fp32_model: Option<PathBuf>,

    /// ONNX Runtime library. Default: $NIBBLE_ORT_DYLIB, else $ORT_DYLIB_PATH, else
    /// <workspace>/.cache/ort/1.31.1/libonnxruntime.so.1.31.1 (scripts/setup.sh puts it there).
    #[arg(long, value_name = "PATH")]
    pub ort_dylib: Option<PathBuf>,

    /// Mark the prefill and the decode steps for qemu's instruction counter (scripts/aarch64/icount-llama.sh;
    /// src/icount.rs): a seek on /dev/null at each boundary, nothing else.
    #[arg(long, hide = true)]
    pub icount_marks: bool,

    /// nibble's custom-op library. Default: $NIBBLE_LIB, else $CARGO_TARGET_DIR/release/libnibble_ort.so, else
    /// <workspace>/target/release/libnibble_ort.so (cargo build --release -p nibble-ort).
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
}

/// The question asked when --prompt is not given (and not -i).
pub const DEFAULT_PROMPT: &str = "What is the capital of France, and why is it famous?";

impl Args {
    /// --repeat-penalty over --repeat-last-n.
    pub fn penalty(&self) -> crate::sampling::RepeatPenalty {
        crate::sampling::RepeatPenalty { penalty: self.repeat_penalty, last_n: self.repeat_last_n }
    }

    /// --prompt, or the default question outside -i.
    pub fn prompt(&self) -> Option<&str> {
        match (&self.prompt, self.interactive) {
            (Some(p), _) => Some(p),
            (None, false) => Some(DEFAULT_PROMPT),
            (None, true) => None,
        }
    }
}

/// `--activation-quant`: nibble's int8 activation numerics (session config `nibble.activation_quant`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActQuantArg {
    /// Per block of the weights' block size (nibble's default; more accurate).
    Block,
    /// Per row, asymmetric (ORT-arm64's numerics; fewer instructions).
    Row,
}

impl ActQuantArg {
    /// The setting's value.
    pub fn value(self) -> &'static str {
        match self {
            ActQuantArg::Block => "block",
            ActQuantArg::Row => "row",
        }
    }
}

/// `--frontend`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontendArg {
    Auto,
    Ep,
    CustomOp,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_is_well_formed() {
        Args::command().debug_assert();
    }

    #[test]
    fn compare_requires_fp32_model() {
        assert!(Args::try_parse_from(["nibble-llama", "--model", "m", "--compare"]).is_err());
        let a = Args::try_parse_from(["nibble-llama", "--model", "m", "--compare", "--fp32-model", "f"]).unwrap();
        assert!(a.compare);
        assert_eq!(a.max_new_tokens, 128);
        assert_eq!(a.temperature, 0.0);
    }

    #[test]
    fn frontend_values() {
        let parse = |v: &str| Args::try_parse_from(["nibble-llama", "--model", "m", "--frontend", v]);
        assert_eq!(parse("ep").unwrap().frontend, FrontendArg::Ep);
        assert_eq!(parse("custom-op").unwrap().frontend, FrontendArg::CustomOp);
        assert!(parse("plugin").is_err());
        assert_eq!(Args::try_parse_from(["nibble-llama", "--model", "m"]).unwrap().frontend, FrontendArg::Auto);
        assert!(Args::try_parse_from(["nibble-llama", "--model", "m", "--frontend", "ep", "--no-nibble"]).is_err());
        let act = |v: &str| Args::try_parse_from(["nibble-llama", "--model", "m", "--activation-quant", v]);
        assert_eq!(act("row").unwrap().activation_quant, Some(ActQuantArg::Row));
        assert!(act("per-row").is_err());
    }

    #[test]
    fn short_flags_as_llama_cli() {
        let a = Args::try_parse_from([
            "nibble-llama",
            "-m",
            "m",
            "-p",
            "hi",
            "-n",
            "7",
            "-t",
            "2",
            "-s",
            "9",
            "--temp",
            "0.5",
            "--repeat-penalty",
            "1.1",
        ])
        .unwrap();
        assert_eq!((a.model.to_str(), a.prompt(), a.max_new_tokens), (Some("m"), Some("hi"), 7));
        assert_eq!((a.threads, a.seed, a.temperature, a.repeat_penalty), (Some(2), Some(9), 0.5, 1.1));
        assert_eq!(a.repeat_last_n, 64);
        let i = Args::try_parse_from(["nibble-llama", "-m", "m", "-i"]).unwrap();
        assert!(i.interactive && i.prompt().is_none());
        assert_eq!(Args::try_parse_from(["nibble-llama", "-m", "m"]).unwrap().prompt(), Some(DEFAULT_PROMPT));
        assert!(Args::try_parse_from(["nibble-llama", "-m", "m", "-i", "--raw"]).is_err());
        assert!(Args::try_parse_from(["nibble-llama", "-m", "m", "-i", "--compare", "--fp32-model", "f"]).is_err());
    }

    #[test]
    fn max_new_tokens_must_be_positive() {
        assert!(Args::try_parse_from(["nibble-llama", "--model", "m", "--max-new-tokens", "0"]).is_err());
    }
}
