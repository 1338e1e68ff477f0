//! From messages to prompt token ids, as the driver and the server both do it: the model's chat template
//! (model_config.json `chat_template`, with the tokenizer's BOS/EOS strings), then the tokenizer with special
//! tokens in the rendered text matched as such, then BOS prepended when model_config.json says add_bos_token and
//! the text does not already start with it.

use anyhow::{Context, Result, anyhow, ensure};
use tokenizers::Tokenizer;

use crate::chat::{self, Message};
use crate::model::ModelConfig;

/// The chat prompt text for `messages`, ending with the assistant's turn (add_generation_prompt). `None` when
/// the model has no chat template.
pub fn render_chat(tok: &Tokenizer, cfg: &ModelConfig, messages: &[Message]) -> Result<Option<String>> {
    let Some(template) = &cfg.chat_template else { return Ok(None) };
    let token = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i)).unwrap_or_default();
    let eos = token(cfg.eos_token_ids.first().copied());
    chat::render(template, messages, true, &token(cfg.bos_token_id), &eos)
        .context("the model's chat template (model_config.json)")
        .map(Some)
}

/// The token ids of prompt `text`.
pub fn encode(tok: &Tokenizer, cfg: &ModelConfig, text: &str) -> Result<Vec<u32>> {
    let enc = tok.encode(text, false).map_err(|e| anyhow!("tokenizing the prompt: {e}"))?;
    let mut ids = enc.get_ids().to_vec();
    if cfg.add_bos_token
        && let Some(bos) = cfg.bos_token_id
        && ids.first() != Some(&bos)
    {
        ids.insert(0, bos);
    }
    ensure!(!ids.is_empty(), "the prompt is empty after tokenization");
    Ok(ids)
}
