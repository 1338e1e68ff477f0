//! An answer's text as tokens arrive: streaming detokenization (`nibble_llama::stream`) plus OpenAI `stop`
//! sequences. Text that could still be the start of a stop sequence is held back until it cannot; when one
//! appears, the answer ends just before it, and the stop sequence itself is never sent.

use std::sync::Arc;

use anyhow::Result;
use nibble_llama::stream::{Detokenize, StreamDecoder};

pub struct TextStream<D: Detokenize = tokenizers::Tokenizer> {
    tok: Arc<D>,
    dec: StreamDecoder,
    stops: Vec<String>,
    /// Everything decoded so far.
    text: String,
    /// `text[..emitted]` has been handed out.
    emitted: usize,
    /// The most bytes ever held back: the longest stop sequence minus one.
    hold: usize,
}

impl<D: Detokenize> TextStream<D> {
    pub fn new(tok: Arc<D>, stops: Vec<String>) -> Self {
        let hold = stops.iter().map(|s| s.len().saturating_sub(1)).max().unwrap_or(0);
        Self { tok, dec: StreamDecoder::new(), stops, text: String::new(), emitted: 0, hold }
    }

    /// Adds a token: the text now safe to send, and whether a stop sequence ended the answer.
    pub fn push(&mut self, id: u32) -> Result<(String, bool)> {
        let piece = self.dec.push(&*self.tok, id)?;
        self.text += &piece;
        Ok(self.release(false))
    }

    /// The end of generation: the rest of the text (cut at a stop sequence if one is in it), and whether one was.
    pub fn finish(&mut self) -> Result<(String, bool)> {
        let rest = self.dec.finish(&*self.tok)?;
        self.text += &rest;
        Ok(self.release(true))
    }

    fn release(&mut self, all: bool) -> (String, bool) {
        let found = self.stops.iter().filter_map(|s| self.text.find(s.as_str())).min();
        if let Some(at) = found {
            let out = self.text[self.emitted..at.max(self.emitted)].to_string();
            self.emitted = self.text.len();
            return (out, true);
        }
        // Hold back the longest end of the text that is the start of a stop sequence (it may yet complete).
        let len = self.text.len();
        let held = if all {
            0
        } else {
            (1..=self.hold.min(len - self.emitted))
                .rev()
                .find(|&k| {
                    self.text.is_char_boundary(len - k)
                        && self.stops.iter().any(|s| s.starts_with(&self.text[len - k..]))
                })
                .unwrap_or(0)
        };
        let safe = len - held;
        let out = self.text[self.emitted..safe.max(self.emitted)].to_string();
        self.emitted = safe.max(self.emitted);
        (out, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Token i decodes to PIECES[i].
    struct Pieces;
    const PIECES: &[&str] = &["Hel", "lo", " wor", "ld", "!\n", "Bye", "é"];
    impl Detokenize for Pieces {
        fn detokenize(&self, ids: &[u32]) -> Result<String> {
            Ok(ids.iter().map(|&i| PIECES[i as usize]).collect())
        }
    }

    fn run(stops: &[&str], ids: &[u32]) -> (Vec<String>, bool) {
        let mut t = TextStream::new(Arc::new(Pieces), stops.iter().map(|s| s.to_string()).collect());
        let mut out = Vec::new();
        for &i in ids {
            let (s, stop) = t.push(i).unwrap();
            out.push(s);
            if stop {
                return (out, true);
            }
        }
        let (s, stop) = t.finish().unwrap();
        out.push(s);
        (out, stop)
    }

    #[test]
    fn without_stops_everything_streams_at_once() {
        let (out, stop) = run(&[], &[0, 1, 2, 3]);
        assert_eq!(out, vec!["Hel", "lo", " wor", "ld", ""]);
        assert!(!stop);
    }

    #[test]
    fn stop_sequence_across_tokens_is_cut_and_never_sent() {
        let (out, stop) = run(&["world"], &[0, 1, 2, 3, 4]);
        assert!(stop);
        assert_eq!(out.concat(), "Hello ");
    }

    #[test]
    fn only_a_possible_start_of_a_stop_is_held_back() {
        // "l" and "ld" could start "ldx": held; "ld!\n" cannot: released with the next piece.
        let (out, stop) = run(&["ldx"], &[0, 1, 2, 3, 4]);
        assert!(!stop);
        assert_eq!(out, vec!["He", "llo", " wor", "", "ld!\n", ""]);
        // held text that completes the stop is never sent
        let (out, stop) = run(&["ld!"], &[0, 1, 2, 3, 4]);
        assert!(stop);
        assert_eq!(out, vec!["He", "llo", " wor", "", ""]);
    }

    #[test]
    fn earliest_of_several_stops_wins_and_multibyte_text_stays_whole() {
        let (out, stop) = run(&["Bye", "!"], &[0, 1, 4, 5]);
        assert!(stop);
        assert_eq!(out.concat(), "Hello");
        let (out, stop) = run(&["éé"], &[5, 6]);
        assert!(!stop);
        assert_eq!(out.concat(), "Byeé");
    }
}
