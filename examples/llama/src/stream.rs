//! Streaming detokenization: turns one token id at a time into printable text.
//!
//! A byte-level BPE token can end in the middle of a UTF-8 character; decoding it alone gives U+FFFD. So the
//! decoder keeps a window of ids (`prefix..`), decodes it after each new token, and emits only the part beyond
//! what it already emitted, holding everything back while the text ends in U+FFFD (an incomplete character) —
//! the approach of Hugging Face's text-generation-inference. Decoding a short window instead of the whole
//! growing list keeps each step O(1); [`StreamDecoder::finish`] emits whatever is still held back.

use anyhow::{Result, anyhow};

/// Something that turns token ids into text (skipping special tokens).
pub trait Detokenize {
    fn detokenize(&self, ids: &[u32]) -> Result<String>;
}

impl Detokenize for tokenizers::Tokenizer {
    fn detokenize(&self, ids: &[u32]) -> Result<String> {
        self.decode(ids, true).map_err(|e| anyhow!("decoding token ids {ids:?}: {e}"))
    }
}

/// The streaming state.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    /// Start of the decode window: the tokens before it are fully emitted and no longer decoded.
    prefix: usize,
    /// End of what has been emitted: ids[prefix..read] decode to text already printed.
    read: usize,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one token; returns the new text that is now complete (possibly empty).
    pub fn push(&mut self, d: &impl Detokenize, id: u32) -> Result<String> {
        self.ids.push(id);
        let done = d.detokenize(&self.ids[self.prefix..self.read])?;
        let now = d.detokenize(&self.ids[self.prefix..])?;
        if now.len() > done.len() && !now.ends_with('\u{FFFD}') {
            let new = match now.strip_prefix(done.as_str()) {
                Some(s) => s.to_string(),
                // The window decoded differently once extended (should not happen with byte-level BPE):
                // emit from the first difference on character boundaries rather than lose text.
                None => now.chars().skip(done.chars().count()).collect(),
            };
            self.prefix = self.read;
            self.read = self.ids.len();
            Ok(new)
        } else {
            Ok(String::new())
        }
    }

    /// Emits whatever is still held back (e.g. a trailing incomplete character, as U+FFFD).
    pub fn finish(&mut self, d: &impl Detokenize) -> Result<String> {
        let done = d.detokenize(&self.ids[self.prefix..self.read])?;
        let now = d.detokenize(&self.ids[self.prefix..])?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(match now.strip_prefix(done.as_str()) {
            Some(s) => s.to_string(),
            None => now.chars().skip(done.chars().count()).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte-level "tokenizer": token i < 256 is byte i, 256 is a special token (skipped), 257 = "ab".
    struct Bytes;
    impl Detokenize for Bytes {
        fn detokenize(&self, ids: &[u32]) -> Result<String> {
            let mut b = Vec::new();
            for &i in ids {
                match i {
                    0..=255 => b.push(i as u8),
                    256 => {}
                    257 => b.extend_from_slice(b"ab"),
                    _ => return Err(anyhow!("bad id {i}")),
                }
            }
            Ok(String::from_utf8_lossy(&b).into_owned())
        }
    }

    fn stream(ids: &[u32]) -> Vec<String> {
        let mut s = StreamDecoder::new();
        let mut out: Vec<String> = ids.iter().map(|&i| s.push(&Bytes, i).unwrap()).collect();
        out.push(s.finish(&Bytes).unwrap());
        out
    }

    fn ids_of(text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }

    #[test]
    fn ascii_streams_token_by_token() {
        assert_eq!(stream(&ids_of("hi!")), vec!["h", "i", "!", ""]);
    }

    #[test]
    fn multibyte_characters_are_held_until_complete() {
        // é = C3 A9; 🙂 = F0 9F 99 82
        let ids = ids_of("aé🙂z");
        let out = stream(&ids);
        assert_eq!(out, vec!["a", "", "é", "", "", "", "🙂", "z", ""]);
        assert_eq!(out.concat(), "aé🙂z");
    }

    #[test]
    fn special_tokens_and_multi_char_tokens() {
        let out = stream(&[257, 256, 104, 256]);
        assert_eq!(out.concat(), "abh");
        assert_eq!(out[0], "ab");
    }

    #[test]
    fn incomplete_tail_is_flushed_by_finish() {
        let out = stream(&[0x61, 0xE2, 0x82]); // "a" + first two bytes of €
        assert_eq!(out[..3], ["a", "", ""]);
        assert_eq!(out[3], "\u{FFFD}");
    }

    #[test]
    fn streamed_text_equals_full_decode_on_long_input() {
        let text = "Paris — the capital of France — is famous for the Eiffel Tower, café culture and 🥐. ";
        let ids: Vec<u32> = ids_of(&text.repeat(20));
        assert_eq!(stream(&ids).concat(), Bytes.detokenize(&ids).unwrap());
    }
}
