//! The generation core, shared by the command-line driver and the server: the prefill (the whole prompt in one
//! run, past tensors with P = 0, or in chunks of at most `prefill_chunk` tokens, each chunk's keys and values
//! becoming the next chunk's past), then one run per new token, feeding each run's `present.*` outputs back as
//! the next run's `past_key_values.*` inputs (the same ORT values, not copies).

use std::borrow::Cow;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use ort::session::SessionInputValue;
use ort::value::{DynValue, Tensor};

use crate::metrics::{StopReason, Timings};
use crate::model::{Llama, OrtResultExt};
use crate::sampling::Sampler;

/// What one generation produced.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The generated ids, including the EOS token if one stopped generation.
    pub ids: Vec<u32>,
    pub stop: StopReason,
    /// prefill_s, ttft_s and decode_s (the caller fills in session creation and tokenization).
    pub timings: Timings,
}

/// What one [`Generator::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A prefill chunk ran (no token yet): `done` of `total` prompt tokens are in the cache.
    Prefill { done: usize, total: usize },
    /// A token was sampled.
    Token(u32),
}

/// The default prefill chunk: prompts up to this length run in one graph run (the fastest TTFT); longer ones in
/// chunks of this size, so a caller can show progress (the driver) or let other generations take turns between
/// chunks (the server).
pub const PREFILL_CHUNK: usize = 512;

/// One generation, one graph run at a time: the first [`Generator::step`]s run the prefill (one, or one per
/// chunk), each later one a decode step. The state (KV cache, sampler, timings) lives here, the session in
/// [`Llama`], so one session can advance several generations in turns (a server interleaving its users' answers) or one to the end
/// ([`generate`]). Timings are wall-clock from the first step: time spent between steps (streaming the text,
/// other generations' steps) counts towards this generation's decode time, as the user waits through it.
pub struct Generator {
    prompt_len: usize,
    max_new_tokens: usize,
    context_length: usize,
    eos: Vec<u32>,
    sampler: Sampler,
    /// Prompt and generated ids (the repetition penalty looks back over them).
    history: Vec<u32>,
    /// Prompt tokens already in the cache.
    prefilled: usize,
    prefill_chunk: usize,
    /// The caches of the next run (empty before the prefill: [1, kv_heads, 0, head_dim]).
    past: Vec<DynValue>,
    ids: Vec<u32>,
    timings: Timings,
    start: Option<Instant>,
    first_token_at: Option<Instant>,
    last_token_at: Option<Instant>,
    stop: Option<StopReason>,
}

impl Generator {
    /// Checks `prompt` against `llama`'s model and prepares empty caches; no graph run yet.
    pub fn new(llama: &Llama, prompt: &[u32], max_new_tokens: usize, sampler: Sampler) -> Result<Self> {
        let cfg = &llama.config;
        ensure!(!prompt.is_empty(), "the prompt has no tokens");
        ensure!(
            prompt.len() <= cfg.context_length,
            "the prompt has {} tokens, more than the model's context_length {}",
            prompt.len(),
            cfg.context_length
        );
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            bail!("prompt token id {bad} is outside the vocabulary (vocab_size {})", cfg.vocab_size);
        }
        ensure!(max_new_tokens > 0, "max_new_tokens must be at least 1");
        let mut past: Vec<DynValue> = Vec::with_capacity(llama.past_names.len());
        for _ in &llama.past_names {
            let empty =
                Tensor::<f32>::from_array(([1usize, cfg.num_kv_heads, 0, cfg.head_dim], Vec::<f32>::new())).ax()?;
            past.push(empty.into_dyn());
        }
        Ok(Self {
            prompt_len: prompt.len(),
            max_new_tokens,
            context_length: cfg.context_length,
            eos: cfg.eos_token_ids.clone(),
            sampler,
            history: prompt.to_vec(),
            prefilled: 0,
            prefill_chunk: PREFILL_CHUNK,
            past,
            ids: Vec::with_capacity(max_new_tokens),
            timings: Timings::default(),
            start: None,
            first_token_at: None,
            last_token_at: None,
            stop: None,
        })
    }

    /// Prompts longer than `n` tokens prefill in chunks of `n` (at least 1; default [`PREFILL_CHUNK`]).
    pub fn with_prefill_chunk(mut self, n: usize) -> Self {
        self.prefill_chunk = n.max(1);
        self
    }

    /// Why generation ended, once it has (after the step that produced the last token).
    pub fn stop(&self) -> Option<StopReason> {
        self.stop
    }

    /// Ends the generation here (the user interrupted it); what was generated stays.
    pub fn interrupt(&mut self) {
        self.stop.get_or_insert(StopReason::Interrupted);
    }

    /// Runs the graph once: a prefill chunk (the whole prompt when it fits in one) or a decode step. Returns the
    /// sampled token, or the prefill's progress when a chunk left prompt tokens to run. Errors when generation
    /// has already stopped.
    pub fn step(&mut self, llama: &mut Llama) -> Result<Step> {
        ensure!(self.stop.is_none(), "generation has already stopped ({:?})", self.stop);
        let start = *self.start.get_or_insert_with(Instant::now);
        let prefill = self.prefilled < self.prompt_len;
        let feed: Vec<i64> = if prefill {
            let end = (self.prefilled + self.prefill_chunk).min(self.prompt_len);
            self.history[self.prefilled..end].iter().map(|&t| i64::from(t)).collect()
        } else {
            // a decode step feeds the last sampled token
            self.history.last().map(|&t| i64::from(t)).into_iter().collect()
        };
        let s = feed.len();
        let mut inputs: Vec<(Cow<str>, SessionInputValue)> = Vec::with_capacity(1 + self.past.len());
        let input_ids = Tensor::from_array(([1usize, s], feed)).ax()?;
        inputs.push((Cow::Borrowed("input_ids"), input_ids.into()));
        for (name, value) in llama.past_names.iter().zip(self.past.drain(..)) {
            inputs.push((Cow::Borrowed(name.as_str()), value.into()));
        }
        let step = self.ids.len();
        let cached = if prefill { self.prefilled } else { self.prompt_len + step - 1 };
        let what = if prefill { "prefill" } else { "decode" };
        let mut out = llama
            .session
            .run(inputs)
            .ax()
            .with_context(|| format!("ONNX Runtime run ({what} step {step}: {s} new tokens, {cached} cached)"))?;
        for name in &llama.present_names {
            self.past.push(out.remove(name.as_str()).with_context(|| format!("the run returned no `{name}`"))?);
        }
        if prefill {
            self.prefilled += s;
            if self.prefilled < self.prompt_len {
                return Ok(Step::Prefill { done: self.prefilled, total: self.prompt_len });
            }
            self.timings.prefill_s = start.elapsed().as_secs_f64();
        }
        let next = {
            let logits = out.get("logits").context("the run returned no `logits`")?;
            let (shape, data) = logits.try_extract_tensor::<f32>().ax().context("reading `logits`")?;
            let dims: &[i64] = shape;
            ensure!(
                dims.len() == 3 && dims[0] == 1 && dims[1] == s as i64 && dims[2] > 0,
                "`logits` has shape {dims:?}, expected [1, {s}, vocab]"
            );
            let v = dims[2] as usize;
            self.sampler.sample_after(&data[(s - 1) * v..s * v], &self.history)?
        };
        drop(out);

        self.ids.push(next);
        self.history.push(next);
        let now = Instant::now();
        self.last_token_at = Some(now);
        if self.first_token_at.is_none() {
            self.first_token_at = Some(now);
            self.timings.ttft_s = (now - start).as_secs_f64();
        }
        self.stop = if self.eos.contains(&next) {
            Some(StopReason::Eos)
        } else if self.ids.len() >= self.max_new_tokens {
            Some(StopReason::MaxNewTokens)
        } else if self.prompt_len + self.ids.len() > self.context_length {
            // Feeding `next` would make the cache prompt + ids tokens long.
            Some(StopReason::ContextLength)
        } else {
            None
        };
        Ok(Step::Token(next))
    }

    /// The result. Decode time runs from the first token to the last one.
    pub fn finish(self) -> Generation {
        let mut timings = self.timings;
        if let (Some(first), Some(last)) = (self.first_token_at, self.last_token_at) {
            timings.decode_s = (last - first).as_secs_f64();
        }
        let stop = self.stop.unwrap_or(StopReason::MaxNewTokens);
        Generation { ids: self.ids, stop, timings }
    }
}

/// Generates up to `max_new_tokens` tokens after `prompt`; `on_step` is called after each step, with the
/// prefill's progress or each token as it is sampled (its time counts towards decode time, as streaming is part of
/// answering). `on_step` returning `false` interrupts the generation there.
pub fn generate(
    llama: &mut Llama,
    prompt: &[u32],
    max_new_tokens: usize,
    sampler: Sampler,
    mut on_step: impl FnMut(Step) -> Result<bool>,
) -> Result<Generation> {
    let mut g = Generator::new(llama, prompt, max_new_tokens, sampler)?;
    while g.stop().is_none() {
        let step = g.step(llama)?;
        if !on_step(step)? {
            g.interrupt();
        }
    }
    Ok(g.finish())
}
