//! The generation loop: one prefill run over the whole prompt (past tensors with P = 0), then one run per new
//! token, feeding each run's `present.*` outputs back as the next run's `past_key_values.*` inputs (the same
//! ORT values, not copies).

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

/// Generates up to `max_new_tokens` tokens after `prompt`; `on_token` is called with each token as it is
/// sampled (its time counts towards decode time, as streaming is part of answering).
pub fn generate(
    llama: &mut Llama,
    prompt: &[u32],
    max_new_tokens: usize,
    sampler: &mut Sampler,
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<Generation> {
    let cfg = llama.config.clone();
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

    // Empty caches: [1, kv_heads, 0, head_dim].
    let mut past: Vec<DynValue> = Vec::with_capacity(llama.past_names.len());
    for _ in &llama.past_names {
        let empty = Tensor::<f32>::from_array(([1usize, cfg.num_kv_heads, 0, cfg.head_dim], Vec::<f32>::new())).ax()?;
        past.push(empty.into_dyn());
    }

    let mut ids: Vec<u32> = Vec::with_capacity(max_new_tokens);
    let mut step_input: Vec<i64> = prompt.iter().map(|&t| i64::from(t)).collect();
    let mut timings = Timings::default();
    let start = Instant::now();
    let mut first_token_at = start;
    let mut last_token_at: Instant;
    let stop = loop {
        let s = step_input.len();
        let mut inputs: Vec<(Cow<str>, SessionInputValue)> = Vec::with_capacity(1 + past.len());
        let input_ids = Tensor::from_array(([1usize, s], std::mem::take(&mut step_input))).ax()?;
        inputs.push((Cow::Borrowed("input_ids"), input_ids.into()));
        for (name, value) in llama.past_names.iter().zip(past.drain(..)) {
            inputs.push((Cow::Borrowed(name.as_str()), value.into()));
        }
        let step = ids.len();
        let cached = if step == 0 { 0 } else { prompt.len() + step - 1 };
        let mut out = llama
            .session
            .run(inputs)
            .ax()
            .with_context(|| format!("ONNX Runtime run (step {step}: {s} new tokens, {cached} cached)"))?;
        if step == 0 {
            timings.prefill_s = start.elapsed().as_secs_f64();
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
            sampler.sample(&data[(s - 1) * v..s * v])?
        };
        for name in &llama.present_names {
            past.push(out.remove(name.as_str()).with_context(|| format!("the run returned no `{name}`"))?);
        }
        drop(out);

        ids.push(next);
        last_token_at = Instant::now();
        if ids.len() == 1 {
            first_token_at = last_token_at;
            timings.ttft_s = (first_token_at - start).as_secs_f64();
        }
        on_token(next)?;
        if cfg.eos_token_ids.contains(&next) {
            break StopReason::Eos;
        }
        if ids.len() >= max_new_tokens {
            break StopReason::MaxNewTokens;
        }
        // Feeding `next` makes the cache prompt + ids tokens long.
        if prompt.len() + ids.len() > cfg.context_length {
            break StopReason::ContextLength;
        }
        step_input = vec![i64::from(next)];
    };
    timings.decode_s = (last_token_at - first_token_at).as_secs_f64();
    Ok(Generation { ids, stop, timings })
}
