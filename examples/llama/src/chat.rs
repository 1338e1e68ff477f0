//! Chat prompts: the model's Jinja chat template (model_config.json `chat_template`, from the GGUF) rendered
//! with minijinja the way Hugging Face `apply_chat_template` renders it (trim_blocks, lstrip_blocks, variables
//! `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, function `raise_exception`).

use anyhow::{Result, anyhow};
use minijinja::{Environment, Error, ErrorKind, Value, context};

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Self {
        Self { role: role.into(), content: content.into() }
    }
}

/// The messages of one request: an optional system message, then the user's.
pub fn messages(system: Option<&str>, user: &str) -> Vec<Message> {
    let mut m = Vec::new();
    if let Some(s) = system {
        m.push(Message::new("system", s));
    }
    m.push(Message::new("user", user));
    m
}

/// Renders `template` for `messages`.
pub fn render(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    let mut env = Environment::new();
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| anyhow!("chat template syntax config: {e}"))?,
    );
    env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    let tmpl = env.template_from_str(template).map_err(|e| anyhow!("chat template does not parse: {e:#}"))?;
    let msgs: Value =
        messages.iter().map(|m| context! { role => m.role.as_str(), content => m.content.as_str() }).collect();
    tmpl.render(context! { messages => msgs, add_generation_prompt, bos_token, eos_token })
        .map_err(|e| anyhow!("rendering the chat template: {e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M-Instruct's template, verbatim from the GGUF (tokenizer.chat_template).
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}\
{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}\
{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn smollm2_default_system_prompt() {
        let s = render(SMOLLM2, &messages(None, "What is 2+2?"), true, "<|im_start|>", "<|im_end|>").unwrap();
        assert_eq!(
            s,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn smollm2_own_system_prompt_and_no_generation_prompt() {
        let m = messages(Some("Be brief."), "Hi");
        let s = render(SMOLLM2, &m, false, "", "").unwrap();
        assert_eq!(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
        let s = render(SMOLLM2, &m, true, "", "").unwrap();
        assert!(s.ends_with("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"), "{s}");
    }

    #[test]
    fn multi_turn_and_hf_whitespace_rules() {
        // trim_blocks/lstrip_blocks as transformers sets them; bos_token; raise_exception
        let t = "{{ bos_token }}\n{% for m in messages %}\n  {% if m.role == 'tool' %}{{ raise_exception('no tools') }}{% endif %}\n[{{ m.role }}] {{ m.content }}\n{% endfor %}";
        let m = vec![Message::new("user", "a"), Message::new("assistant", "b")];
        assert_eq!(render(t, &m, false, "<s>", "</s>").unwrap(), "<s>\n[user] a\n[assistant] b\n");
        let e = render(t, &[Message::new("tool", "x")], false, "", "").unwrap_err().to_string();
        assert!(e.contains("no tools"), "{e}");
    }

    #[test]
    fn syntax_error_is_reported() {
        assert!(render("{% for %}", &[], true, "", "").unwrap_err().to_string().contains("does not parse"));
    }
}
