//! Chatbot metrics, their JSON form and the --compare table. Definitions: [`crate::cli::METRICS_HELP`].

use serde::Serialize;

/// The measured intervals of one request, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Session creation (graph load, optimisation, nibble packing).
    pub session_create_s: f64,
    /// Chat template + tokenizer.
    pub tokenize_s: f64,
    /// The prefill run alone.
    pub prefill_s: f64,
    /// Start of the prefill run → first sampled token.
    pub ttft_s: f64,
    /// First sampled token → last sampled token.
    pub decode_s: f64,
}

/// Rates and costs derived from [`Timings`] and the token counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metrics {
    pub prefill_tok_s: f64,
    /// (generated − 1) / decode_s; `None` with fewer than 2 generated tokens (no decode interval).
    pub decode_tok_s: Option<f64>,
    /// TTFT + decode.
    pub total_s: f64,
    pub usd_total: f64,
    pub usd_per_million_output_tokens: Option<f64>,
    pub usd_per_million_prompt_tokens: f64,
}

impl Metrics {
    pub fn new(t: &Timings, prompt_tokens: usize, generated_tokens: usize, usd_per_hour: f64) -> Self {
        let usd_per_s = usd_per_hour / 3600.0;
        let prefill_tok_s = prompt_tokens as f64 / t.prefill_s;
        let decode_tok_s =
            (generated_tokens >= 2 && t.decode_s > 0.0).then(|| (generated_tokens - 1) as f64 / t.decode_s);
        let total_s = t.ttft_s + t.decode_s;
        Self {
            prefill_tok_s,
            decode_tok_s,
            total_s,
            usd_total: usd_per_s * total_s,
            usd_per_million_output_tokens: decode_tok_s.map(|r| usd_per_s / r * 1e6),
            usd_per_million_prompt_tokens: usd_per_s / prefill_tok_s * 1e6,
        }
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// An EOS token (model_config.json eos_token_ids) was generated; it is the last generated id.
    Eos,
    /// --max-new-tokens reached.
    MaxNewTokens,
    /// The next token would not fit in context_length.
    ContextLength,
    /// The user interrupted it (Ctrl-C in the driver).
    Interrupted,
}

impl StopReason {
    pub fn describe(self) -> &'static str {
        match self {
            StopReason::Eos => "EOS",
            StopReason::MaxNewTokens => "--max-new-tokens",
            StopReason::ContextLength => "context length",
            StopReason::Interrupted => "interrupted (Ctrl-C)",
        }
    }
}

/// One run, as written by --json (and a row of the --compare JSON, with `label`).
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub model: String,
    pub weights: String,
    pub nibble: bool,
    /// How ORT loaded nibble: "ep" or "custom-op" (null without nibble).
    pub frontend: Option<&'static str>,
    pub threads: Option<u32>,
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub repeat_penalty: f32,
    pub repeat_last_n: usize,
    pub seed: u64,
    pub prompt_tokens: usize,
    pub prompt_token_ids: Vec<u32>,
    pub generated_tokens: usize,
    pub generated_token_ids: Vec<u32>,
    pub stop_reason: StopReason,
    pub text: String,
    pub session_create_s: f64,
    pub tokenize_s: f64,
    pub ttft_s: f64,
    pub prefill_s: f64,
    pub prefill_tok_s: f64,
    pub decode_s: f64,
    pub decode_tok_s: Option<f64>,
    pub total_s: f64,
    pub usd_per_hour: f64,
    pub usd_total: f64,
    pub usd_per_million_output_tokens: Option<f64>,
    pub usd_per_million_prompt_tokens: f64,
    /// The process's peak resident memory so far, MiB (Linux VmHWM; `None` where /proc is not there).
    pub peak_rss_mib: Option<f64>,
    /// --compare only: how the generated ids compare with the fp32 row's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_fp32: Option<String>,
    /// --compare only: how many leading generated ids equal the fp32 row's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_prefix_as_fp32: Option<usize>,
}

impl RunReport {
    /// The human-readable metrics block of a single run.
    pub fn summary(&self) -> String {
        let dec = |v: Option<f64>, d: usize| v.map_or("n/a".to_string(), |x| format!("{x:.d$}"));
        let mut s = String::new();
        s += &format!(
            "model            {} ({}, {})\n",
            self.model,
            self.weights,
            match self.frontend {
                Some("ep") => "nibble kernels, execution provider",
                Some(_) => "nibble kernels, custom-op library",
                None => "ORT built-in kernels",
            }
        );
        s += &format!("threads          {}\n", self.threads.map_or("ORT default".to_string(), |n| n.to_string()));
        s += &format!(
            "tokens           {} prompt, {} generated (stop: {})\n",
            self.prompt_tokens,
            self.generated_tokens,
            self.stop_reason.describe()
        );
        s += &format!(
            "session create   {:.3} s (load + optimise{}; once per session)\n",
            self.session_create_s,
            if self.nibble { " + weight packing" } else { "" }
        );
        s += &format!("tokenize         {:.4} s (not in TTFT)\n", self.tokenize_s);
        s += &format!("TTFT             {:.4} s\n", self.ttft_s);
        s += &format!("prefill          {:.4} s, {:.1} tok/s\n", self.prefill_s, self.prefill_tok_s);
        s += &format!("decode           {:.4} s, {} tok/s\n", self.decode_s, dec(self.decode_tok_s, 1));
        s += &format!("total            {:.4} s (TTFT + decode)\n", self.total_s);
        s += &format!(
            "cost at ${}/hour  ${:.8} for this request; ${} per million output tokens, ${:.4} per million prompt tokens",
            self.usd_per_hour,
            self.usd_total,
            dec(self.usd_per_million_output_tokens, 4),
            self.usd_per_million_prompt_tokens
        );
        if let Some(rss) = self.peak_rss_mib {
            s += &format!("\npeak RSS         {rss:.0} MiB (the process so far)");
        }
        s
    }

    /// The metrics of one answer on one line (the -i chat mode prints it after each answer).
    pub fn one_line(&self) -> String {
        let mut s = format!(
            "{} tokens ({}), TTFT {:.3} s, prefill {:.0} tok/s",
            self.generated_tokens,
            self.stop_reason.describe(),
            self.ttft_s,
            self.prefill_tok_s
        );
        if let Some(d) = self.decode_tok_s {
            s += &format!(", decode {d:.1} tok/s");
        }
        s += &format!(", total {:.2} s, ${:.8}", self.total_s, self.usd_total);
        if let Some(rss) = self.peak_rss_mib {
            s += &format!(", peak RSS {rss:.0} MiB");
        }
        s
    }
}

/// The process's peak resident set size in MiB (VmHWM in /proc/self/status), where Linux provides it.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.trim_start_matches("VmHWM:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib / 1024.0)
}

/// The number of leading ids `a` and `b` share.
pub fn same_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How `ids` compare with `reference`: "32/32 same as fp32" or "first diff at token 7 (7/32 same)".
pub fn compare_ids(ids: &[u32], reference: &[u32]) -> String {
    let same = same_prefix(ids, reference);
    if same == ids.len() && same == reference.len() {
        format!("{}/{} same as fp32", same, ids.len())
    } else if same == ids.len().min(reference.len()) {
        format!("same prefix, {} vs {} tokens", ids.len(), reference.len())
    } else {
        format!("first diff at token {same} ({same}/{} same)", ids.len())
    }
}

/// One row of the --compare table: a report or a skipped run with a note.
pub enum Row {
    Ran(Box<RunReport>),
    Skipped { label: String, note: String },
}

/// The --compare table, aligned, with a title naming the cost rate.
pub fn table(rows: &[Row], usd_per_hour: f64) -> String {
    let head = ["run", "create s", "TTFT s", "prefill tok/s", "decode tok/s", "total s", "$/M out", "tokens vs fp32"];
    let mut cells: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        cells.push(match r {
            Row::Ran(r) => vec![
                r.label.clone().unwrap_or_default(),
                format!("{:.2}", r.session_create_s),
                format!("{:.3}", r.ttft_s),
                format!("{:.1}", r.prefill_tok_s),
                r.decode_tok_s.map_or("n/a".into(), |v| format!("{v:.1}")),
                format!("{:.2}", r.total_s),
                r.usd_per_million_output_tokens.map_or("n/a".into(), |v| format!("{v:.3}")),
                r.vs_fp32.clone().unwrap_or_default(),
            ],
            Row::Skipped { label, note } => {
                let mut v = vec![label.clone(), format!("skipped: {note}")];
                v.resize(head.len(), String::new());
                v
            }
        });
    }
    // A skipped row's note spans the remaining columns: leave it out of the widths.
    let mut width = vec![0usize; head.len()];
    for (i, row) in cells.iter().enumerate() {
        let skipped = i > 0 && matches!(rows[i - 1], Row::Skipped { .. });
        for (j, c) in row.iter().enumerate() {
            if !(skipped && j == 1) {
                width[j] = width[j].max(c.chars().count());
            }
        }
    }
    let mut out =
        format!("costs at ${usd_per_hour}/hour (--usd-per-hour); same prompt, sampling settings and max tokens\n");
    for (i, row) in cells.iter().enumerate() {
        let skipped = i > 0 && matches!(rows[i - 1], Row::Skipped { .. });
        let mut line = String::new();
        for (j, c) in row.iter().enumerate() {
            let pad = width[j].saturating_sub(c.chars().count());
            if skipped && j == 1 {
                line += c;
                break;
            }
            // label and last column left-aligned, numbers right-aligned
            if j == 0 || j + 1 == row.len() {
                line += c;
                line += &" ".repeat(pad);
            } else {
                line += &" ".repeat(pad);
                line += c;
            }
            line += "  ";
        }
        out += line.trim_end();
        out += "\n";
        if i == 0 {
            out += &"-".repeat(width.iter().sum::<usize>() + 2 * (width.len() - 1));
            out += "\n";
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn rates_and_costs() {
        let t = Timings { session_create_s: 3.0, tokenize_s: 0.01, prefill_s: 0.5, ttft_s: 0.5 + 1e-4, decode_s: 4.0 };
        let m = Metrics::new(&t, 100, 41, 3.6);
        assert!(close(m.prefill_tok_s, 200.0));
        assert!(close(m.decode_tok_s.unwrap(), 10.0));
        assert!(close(m.total_s, 4.5001));
        // $3.6/h = $0.001/s
        assert!(close(m.usd_total, 0.001 * 4.5001));
        assert!(close(m.usd_per_million_output_tokens.unwrap(), 0.001 / 10.0 * 1e6)); // $100 per M
        assert!(close(m.usd_per_million_prompt_tokens, 0.001 / 200.0 * 1e6)); // $5 per M
    }

    #[test]
    fn one_token_has_no_decode_rate() {
        let t = Timings { prefill_s: 0.2, ttft_s: 0.2, ..Default::default() };
        let m = Metrics::new(&t, 10, 1, 1.0);
        assert_eq!(m.decode_tok_s, None);
        assert_eq!(m.usd_per_million_output_tokens, None);
        assert!(close(m.total_s, 0.2));
    }

    #[test]
    fn id_comparison() {
        assert_eq!(compare_ids(&[1, 2, 3], &[1, 2, 3]), "3/3 same as fp32");
        assert_eq!(compare_ids(&[1, 2, 4], &[1, 2, 3]), "first diff at token 2 (2/3 same)");
        assert_eq!(compare_ids(&[1, 2], &[1, 2, 3]), "same prefix, 2 vs 3 tokens");
        assert_eq!(compare_ids(&[5], &[1]), "first diff at token 0 (0/1 same)");
    }

    fn report(label: &str) -> RunReport {
        RunReport {
            label: Some(label.into()),
            model: "m".into(),
            weights: "fp32".into(),
            nibble: false,
            frontend: None,
            threads: None,
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
            prompt_tokens: 10,
            prompt_token_ids: vec![1; 10],
            generated_tokens: 2,
            generated_token_ids: vec![7, 2],
            stop_reason: StopReason::Eos,
            text: "hi".into(),
            session_create_s: 1.0,
            tokenize_s: 0.0,
            ttft_s: 0.1,
            prefill_s: 0.1,
            prefill_tok_s: 100.0,
            decode_s: 0.05,
            decode_tok_s: Some(20.0),
            total_s: 0.15,
            usd_per_hour: 1.0,
            usd_total: 1e-5,
            usd_per_million_output_tokens: Some(13.889),
            usd_per_million_prompt_tokens: 2.778,
            peak_rss_mib: Some(300.0),
            vs_fp32: Some("2/2 same as fp32".into()),
            same_prefix_as_fp32: Some(2),
        }
    }

    #[test]
    fn summary_names_packing_only_with_nibble_and_shows_peak_rss() {
        let mut r = report("x");
        assert!(!r.summary().contains("packing") && r.summary().contains("peak RSS         300 MiB"));
        r.nibble = true;
        assert!(r.summary().contains("weight packing"));
        r.stop_reason = StopReason::Interrupted;
        assert!(r.summary().contains("interrupted (Ctrl-C)") && r.one_line().contains("interrupted (Ctrl-C)"));
        assert!(peak_rss_mib().is_some_and(|m| m > 1.0), "VmHWM of this test process");
    }

    #[test]
    fn table_is_aligned() {
        let rows = vec![
            Row::Ran(Box::new(report("fp32"))),
            Row::Skipped { label: "int4 ORT built-in".into(), note: "nibble-domain graph".into() },
            Row::Ran(Box::new(report("int4 nibble"))),
        ];
        let t = table(&rows, 1.0);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 6, "{t}");
        assert!(lines[0].contains("$1/hour"));
        assert!(lines[1].starts_with("run ") && lines[1].contains("decode tok/s"));
        assert!(lines[3].starts_with("fp32 ") && lines[3].contains("2/2 same as fp32"));
        assert!(lines[4].contains("skipped: nibble-domain graph"));
        // the numeric columns end at the same offsets in the header and in the ran rows
        let end = |l: &str, pat: &str| l.find(pat).unwrap() + pat.len();
        assert_eq!(end(lines[1], "decode tok/s"), end(lines[3], "20.0"));
        assert_eq!(end(lines[3], "20.0"), end(lines[5], "20.0"));
    }

    #[test]
    fn json_field_names() {
        let v = serde_json::to_value(report("x")).unwrap();
        for k in [
            "model",
            "nibble",
            "threads",
            "prompt_tokens",
            "generated_token_ids",
            "text",
            "session_create_s",
            "ttft_s",
            "prefill_s",
            "prefill_tok_s",
            "decode_s",
            "decode_tok_s",
            "total_s",
            "usd_per_hour",
            "usd_total",
            "usd_per_million_output_tokens",
            "usd_per_million_prompt_tokens",
            "label",
            "stop_reason",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["stop_reason"], "eos");
        assert_eq!(v["threads"], serde_json::Value::Null);
    }
}
