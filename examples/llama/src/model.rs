//! The model directory (models/LLAMA_MODEL_DIR.md), its config, and the ORT session over its graph.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail, ensure};
use ort::environment::Environment;
use ort::session::Session;
use ort::value::{TensorElementType, ValueType};
use serde::Deserialize;

use crate::frontend::{self, Frontend};

/// `ort`'s errors (the builder's carry the builder, which is not `Send`): keep their message.
pub trait OrtResultExt<T> {
    fn ax(self) -> Result<T>;
}
impl<T, E: std::fmt::Display> OrtResultExt<T> for std::result::Result<T, E> {
    fn ax(self) -> Result<T> {
        self.map_err(|e| anyhow!("{e}"))
    }
}

/// How to make a model directory, for error messages.
const HOW_TO_MAKE: &str = "write one with `.venv/bin/python models/gguf_to_onnx.py --out DIR ...` \
                           (see models/LLAMA_MODEL_DIR.md)";

/// The `quantization` object of model_config.json (null for the fp32 graph).
#[derive(Debug, Clone, Deserialize)]
pub struct Quantization {
    /// `com.microsoft` or `nibble`: the domain of the MatMulNBits nodes.
    pub op_domain: String,
    pub bits: Option<u32>,
    pub block_size: Option<u32>,
    pub symmetric: Option<bool>,
    pub accuracy_level: Option<u32>,
}

/// model_config.json: only the fields the driver uses (the others are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct ModelConfig {
    pub format: String,
    #[serde(default)]
    pub name: Option<String>,
    pub num_layers: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    #[serde(default)]
    pub eos_token_ids: Vec<u32>,
    #[serde(default)]
    pub add_bos_token: bool,
    #[serde(default)]
    pub chat_template: Option<String>,
    #[serde(default)]
    pub quantization: Option<Quantization>,
}

impl ModelConfig {
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let cfg: ModelConfig = serde_json::from_str(text).with_context(|| format!("parsing {}", path.display()))?;
        ensure!(
            cfg.format.starts_with("nibble-llama/1"),
            "{}: format \"{}\" is not nibble-llama/1 (see models/LLAMA_MODEL_DIR.md)",
            path.display(),
            cfg.format
        );
        ensure!(
            cfg.num_layers > 0 && cfg.num_kv_heads > 0 && cfg.head_dim > 0 && cfg.vocab_size > 0,
            "{}: num_layers, num_kv_heads, head_dim and vocab_size must be positive",
            path.display()
        );
        ensure!(cfg.context_length > 0, "{}: context_length must be positive", path.display());
        Ok(cfg)
    }

    /// `true` when the graph's MatMulNBits nodes are in domain `nibble` (ORT alone cannot run it).
    pub fn needs_nibble(&self) -> bool {
        self.quantization.as_ref().is_some_and(|q| q.op_domain == "nibble")
    }

    /// The model's name and its weights, e.g. `SmolLM2-135M-Instruct (int4 bs32 asym acc4 (com.microsoft))`.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.name.as_deref().unwrap_or("model"), self.describe_weights())
    }

    /// A one-line description of the weights, e.g. `int4 bs32 asym acc4 (com.microsoft)` or `fp32`.
    pub fn describe_weights(&self) -> String {
        match &self.quantization {
            None => "fp32".into(),
            Some(q) => {
                let mut s = String::new();
                if let Some(b) = q.bits {
                    s += &format!("int{b}");
                }
                if let Some(bs) = q.block_size {
                    s += &format!(" bs{bs}");
                }
                if let Some(sym) = q.symmetric {
                    s += if sym { " sym" } else { " asym" };
                }
                if let Some(a) = q.accuracy_level {
                    s += &format!(" acc{a}");
                }
                format!("{} ({})", s.trim(), q.op_domain)
            }
        }
    }
}

/// A model directory: the three files of models/LLAMA_MODEL_DIR.md.
#[derive(Debug, Clone)]
pub struct ModelDir {
    pub dir: PathBuf,
    pub onnx: PathBuf,
    pub tokenizer: PathBuf,
    pub config: ModelConfig,
}

impl ModelDir {
    /// Opens `path`: the directory, or the path of its model.onnx.
    pub fn open(path: &Path) -> Result<Self> {
        if !path.exists() {
            bail!("model {} does not exist: {HOW_TO_MAKE}", path.display());
        }
        let dir =
            if path.is_file() { path.parent().unwrap_or(Path::new(".")).to_path_buf() } else { path.to_path_buf() };
        let onnx = if path.is_file() { path.to_path_buf() } else { dir.join("model.onnx") };
        let tokenizer = dir.join("tokenizer.json");
        let config_path = dir.join("model_config.json");
        for f in [&onnx, &tokenizer, &config_path] {
            ensure!(f.is_file(), "{} does not exist: not a model directory; {HOW_TO_MAKE}", f.display());
        }
        let text =
            std::fs::read_to_string(&config_path).with_context(|| format!("reading {}", config_path.display()))?;
        let config = ModelConfig::parse(&text, &config_path)?;
        Ok(Self { dir, onnx, tokenizer, config })
    }

    /// Checks that `fp32` is the fp32 graph of the same model as this quantized one (for side-by-side runs).
    pub fn check_fp32_twin(&self, fp32: &ModelDir) -> Result<()> {
        anyhow::ensure!(
            fp32.config.quantization.is_none() && self.config.quantization.is_some(),
            "the comparison needs an fp32 --fp32-model and a quantized --model; got {} ({}) and {} ({})",
            fp32.dir.display(),
            fp32.config.describe_weights(),
            self.dir.display(),
            self.config.describe_weights()
        );
        anyhow::ensure!(
            fp32.config.vocab_size == self.config.vocab_size,
            "--fp32-model {} has vocab_size {}, --model {} has {}: not the same model",
            fp32.dir.display(),
            fp32.config.vocab_size,
            self.dir.display(),
            self.config.vocab_size
        );
        Ok(())
    }

    pub fn load_tokenizer(&self) -> Result<tokenizers::Tokenizer> {
        tokenizers::Tokenizer::from_file(&self.tokenizer)
            .map_err(|e| anyhow!("loading the tokenizer {}: {e}", self.tokenizer.display()))
    }
}

/// How to build a session.
#[derive(Debug, Clone)]
pub struct SessionOptions<'a> {
    /// nibble's library and how ORT loads it (for `Frontend::Ep`, already registered in the environment), or
    /// `None` for ORT's own kernels.
    pub nibble: Option<(&'a Path, Frontend)>,
    /// intra-op threads; `None` = ORT's default.
    pub threads: Option<u32>,
    /// nibble's int8 activation numerics (`nibble.activation_quant`: "block" or "row"); `None` = the library's
    /// default.
    pub activation_quant: Option<&'static str>,
}

/// The process-wide ORT environment (`ort` allows one per process).
pub fn init_ort(dylib: &Path) -> Result<Environment> {
    ort::init_from(dylib)
        .map_err(|e| anyhow!("loading ONNX Runtime from {}: {e}", dylib.display()))?
        .with_name("nibble-llama")
        .build()
        .map_err(|e| anyhow!("creating the ONNX Runtime environment ({}): {e}", dylib.display()))
}

/// A decoder session and the names of its cache inputs/outputs.
pub struct Llama {
    pub session: Session,
    pub config: ModelConfig,
    /// `past_key_values.{i}.key`, `past_key_values.{i}.value` for i = 0 … num_layers−1 (key, value interleaved).
    pub past_names: Vec<String>,
    /// `present.{i}.key`, `present.{i}.value`, in the same order.
    pub present_names: Vec<String>,
    /// Seconds spent creating the session (graph load + optimisation + nibble packing).
    pub create_s: f64,
}

impl Llama {
    /// Creates the session for `model` and checks its inputs and outputs against the contract.
    pub fn load(env: &Environment, model: &ModelDir, opts: &SessionOptions) -> Result<Self> {
        if opts.nibble.is_none() && model.config.needs_nibble() {
            bail!(
                "{}: the MatMulNBits nodes are in domain \"nibble\", which ONNX Runtime has no kernel for: run it \
                 with nibble (without --no-nibble), or convert it with models/rewrite_matmulnbits.py",
                model.onnx.display()
            );
        }
        let start = Instant::now();
        let mut b = Session::builder(env).ax()?;
        if let Some(n) = opts.threads {
            b = b.with_intra_threads(n as usize).ax()?;
        }
        if let (Some(act), Some(_)) = (opts.activation_quant, opts.nibble) {
            // A session key both frontends read (the EP after its provider options), set before registering.
            b = b.with_config_entry("nibble.activation_quant", act).ax()?;
        }
        match opts.nibble {
            Some((lib, Frontend::CustomOp)) => {
                b = b.with_operator_library(lib).map_err(|e| anyhow!("registering {}: {e}", lib.display()))?;
            }
            Some((_, Frontend::Ep)) => frontend::append_ep(env, &mut b)?,
            None => {}
        }
        let session = b
            .commit_from_file(&model.onnx)
            .map_err(|e| anyhow!("creating an ONNX Runtime session for {}: {e}", model.onnx.display()))?;
        let create_s = start.elapsed().as_secs_f64();

        let cfg = &model.config;
        let mut past_names = Vec::with_capacity(2 * cfg.num_layers);
        let mut present_names = Vec::with_capacity(2 * cfg.num_layers);
        for i in 0..cfg.num_layers {
            for kv in ["key", "value"] {
                past_names.push(format!("past_key_values.{i}.{kv}"));
                present_names.push(format!("present.{i}.{kv}"));
            }
        }
        let has = |outlets: &[ort::value::Outlet], name: &str| -> Option<ValueType> {
            outlets.iter().find(|o| o.name() == name).map(|o| o.dtype().clone())
        };
        let want_f32 = |ty: Option<ValueType>, name: &str, what: &str| -> Result<()> {
            match ty {
                None => {
                    bail!("{}: the graph has no {what} `{name}` (see models/LLAMA_MODEL_DIR.md)", model.onnx.display())
                }
                Some(ValueType::Tensor { ty: TensorElementType::Float32, .. }) => Ok(()),
                Some(t) => bail!("{}: {what} `{name}` is {t}, expected a float32 tensor", model.onnx.display()),
            }
        };
        match has(session.inputs(), "input_ids") {
            Some(ValueType::Tensor { ty: TensorElementType::Int64, .. }) => {}
            Some(t) => bail!("{}: input `input_ids` is {t}, expected an int64 tensor", model.onnx.display()),
            None => bail!("{}: the graph has no input `input_ids`", model.onnx.display()),
        }
        want_f32(has(session.outputs(), "logits"), "logits", "output")?;
        for (p, q) in past_names.iter().zip(&present_names) {
            want_f32(has(session.inputs(), p), p, "input")?;
            want_f32(has(session.outputs(), q), q, "output")?;
        }
        let expected_inputs = 1 + past_names.len();
        ensure!(
            session.inputs().len() == expected_inputs,
            "{}: the graph has {} inputs, expected {expected_inputs} (input_ids + 2 × num_layers={} past tensors); \
             does model_config.json match the graph?",
            model.onnx.display(),
            session.inputs().len(),
            cfg.num_layers
        );
        Ok(Self { session, config: cfg.clone(), past_names, present_names, create_s })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2: &str = r#"{
      "format": "nibble-llama/1", "name": "SmolLM2-135M-Instruct", "source": "x",
      "num_layers": 30, "hidden_size": 576, "intermediate_size": 1536,
      "num_heads": 9, "num_kv_heads": 3, "head_dim": 64, "vocab_size": 49152,
      "context_length": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-05, "tied_embeddings": true,
      "bos_token_id": 1, "eos_token_ids": [2], "pad_token_id": 2, "add_bos_token": false,
      "chat_template": "{{ x }}",
      "quantization": {"op_domain": "com.microsoft", "bits": 4, "block_size": 32, "symmetric": false,
                       "accuracy_level": 4, "embedding": "fp32", "lm_head": "fp32"}
    }"#;

    #[test]
    fn parses_the_documented_config() {
        let c = ModelConfig::parse(SMOLLM2, Path::new("model_config.json")).unwrap();
        assert_eq!((c.num_layers, c.num_kv_heads, c.head_dim, c.vocab_size), (30, 3, 64, 49152));
        assert_eq!(c.eos_token_ids, vec![2]);
        assert!(!c.add_bos_token);
        assert!(!c.needs_nibble());
        assert_eq!(c.describe_weights(), "int4 bs32 asym acc4 (com.microsoft)");
    }

    #[test]
    fn fp32_and_nibble_domain() {
        let fp32 = SMOLLM2.replace(
            r#"{"op_domain": "com.microsoft", "bits": 4, "block_size": 32, "symmetric": false,
                       "accuracy_level": 4, "embedding": "fp32", "lm_head": "fp32"}"#,
            "null",
        );
        let c = ModelConfig::parse(&fp32, Path::new("m")).unwrap();
        assert!(c.quantization.is_none());
        assert_eq!(c.describe_weights(), "fp32");
        let nib = SMOLLM2.replace("\"com.microsoft\"", "\"nibble\"");
        assert!(ModelConfig::parse(&nib, Path::new("m")).unwrap().needs_nibble());
    }

    #[test]
    fn wrong_format_is_an_error_naming_the_file() {
        let bad = SMOLLM2.replace("nibble-llama/1", "other/2");
        let e = ModelConfig::parse(&bad, Path::new("/x/model_config.json")).unwrap_err().to_string();
        assert!(e.contains("/x/model_config.json") && e.contains("other/2"), "{e}");
    }

    #[test]
    fn missing_dir_names_the_path() {
        let e = ModelDir::open(Path::new("/nonexistent/llama-dir")).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/llama-dir") && e.contains("gguf_to_onnx.py"), "{e}");
    }
}
