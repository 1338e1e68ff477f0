//! What nibble sees and chooses on this machine, for people (`nibble-info`) and tools (`nibble-info --json`):
//! the version, the ONNX Runtime versions it supports, the CPU features detected, the ISA ladder (as capped by
//! `NIBBLE_ISA` / `NIBBLE_FAMILIES`), and which kernel family each (compute path, bits, block size) gets.
#![deny(unsafe_code)]

use nibble_kernels::registry::{self, Ladder};
use nibble_kernels::{ComputePath, Cpu, Problem};
use serde_json::json;

/// Oldest ONNX Runtime the custom-op frontend supports (the API version `RegisterCustomOps` requests).
pub fn ort_min_custom_op() -> String {
    format!("1.{}", crate::api::API_VERSION)
}
/// Oldest ONNX Runtime the execution-provider frontend supports (the kernel-based plugin EP API).
pub fn ort_min_ep() -> String {
    format!("1.{}", crate::ep::abi::EP_API_VERSION)
}
/// The runtimes the test suite runs on (x86_64; the newest also on aarch64 under qemu): the version column of
/// scripts/ort-versions.txt, the one list (scripts/setup.sh fetches them from it).
pub fn ort_tested() -> Vec<&'static str> {
    include_str!("../../scripts/ort-versions.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}
/// Block sizes in the selection table (any power of two >= 16 is accepted).
const BLOCK_SIZES: [usize; 5] = [16, 32, 64, 128, 256];

/// One row of the selection table: the family a node gets, or why none can serve it.
#[derive(Debug, Clone)]
pub struct Choice {
    pub path: &'static str,
    pub bits: u32,
    pub block_size: usize,
    pub family: Result<String, String>,
}

/// Everything `nibble-info` prints.
#[derive(Debug, Clone)]
pub struct Info {
    pub version: &'static str,
    pub arch: &'static str,
    pub features: Vec<&'static str>,
    pub sve_vl: Option<usize>,
    pub sme_svl: Option<usize>,
    pub rungs: Vec<&'static str>,
    pub isa_cap: Option<String>,
    pub families_env: Option<String>,
    /// The families this CPU (as capped) can run, in the order tried, with their packed layout; or the error
    /// building the ladder.
    pub ladder: Result<Vec<(String, String)>, String>,
    pub choices: Vec<Choice>,
}

impl Info {
    /// Reads this process's CPU and ladder (`NIBBLE_ISA`, `NIBBLE_FAMILIES` apply as in a session).
    pub fn gather() -> Info {
        let cpu = Cpu::get();
        let ladder = registry::ladder().map_err(|e| e.to_string());
        let choices = match &ladder {
            Ok(l) => table(l),
            Err(_) => Vec::new(),
        };
        Info {
            version: env!("CARGO_PKG_VERSION"),
            arch: std::env::consts::ARCH,
            features: cpu.features().iter().map(|f| f.name()).collect(),
            sve_vl: cpu.sve_vl(),
            sme_svl: cpu.sme_svl(),
            rungs: cpu.rungs().into_iter().map(|i| i.name()).collect(),
            isa_cap: std::env::var("NIBBLE_ISA").ok().filter(|v| !v.is_empty()),
            families_env: std::env::var("NIBBLE_FAMILIES").ok().filter(|v| !v.is_empty()),
            ladder: ladder.map(|l| {
                l.families()
                    .iter()
                    .filter(|f| f.gemv().runs_on(l.cpu()) && f.gemm().runs_on(l.cpu()))
                    .map(|f| (f.name().to_string(), f.layout(l.cpu()).to_string()))
                    .collect()
            }),
            choices,
        }
    }

    /// The report for a person.
    pub fn text(&self) -> String {
        let mut s = format!("nibble {} ({})\n", self.version, self.arch);
        s += &format!(
            "ONNX Runtime: custom-op library from {}, execution provider from {}; tested with {}\n",
            ort_min_custom_op(),
            ort_min_ep(),
            ort_tested().join(", ")
        );
        s += &format!(
            "CPU features: {}\n",
            if self.features.is_empty() { "none".into() } else { self.features.join(" ") }
        );
        if let Some(vl) = self.sve_vl {
            s += &format!("SVE vector length: {} bits\n", vl * 8);
        }
        if let Some(svl) = self.sme_svl {
            s += &format!("SME streaming vector length: {} bits\n", svl * 8);
        }
        s += &format!("ISA rungs on this CPU (best last): {}\n", self.rungs.join(" < "));
        if let Some(cap) = &self.isa_cap {
            s += &format!("NIBBLE_ISA={cap}: kernels above that rung are not used\n");
        }
        if let Some(f) = &self.families_env {
            s += &format!("NIBBLE_FAMILIES={f}: only these families, in this order\n");
        }
        match &self.ladder {
            Err(e) => s += &format!("kernel ladder: ERROR {e}\n"),
            Ok(families) => {
                s += "kernel families this CPU can run, in the order tried:\n";
                for (name, layout) in families {
                    s += &format!("  {name}  (packed layout {layout})\n");
                }
            }
        }
        s += "session settings (session config key; C++ CustomOpConfigs and EP provider options drop the \"nibble.\"):\n";
        for (key, values, default) in settings() {
            s += &format!("  {key} = {} (default {default})\n", values.join(" | "));
        }
        s += "selection (weights with zero points; accuracy_level 4 = int8 path, 1-3 = fp32 path):\n";
        // One line per (path, bits) and run of block sizes with the same outcome.
        let outcome = |c: &Choice| match &c.family {
            Ok(f) => f.clone(),
            Err(e) => format!("none: {e}"),
        };
        for run in self.choices.chunk_by(|a, b| a.path == b.path && a.bits == b.bits && outcome(a) == outcome(b)) {
            let (first, last) = (&run[0], &run[run.len() - 1]);
            let sizes = if run.len() == 1 {
                first.block_size.to_string()
            } else {
                format!("{}-{}", first.block_size, last.block_size)
            };
            s += &format!("  {:<4} bits={} block_size={:<7} -> {}\n", first.path, first.bits, sizes, outcome(first));
        }
        s
    }

    /// The report as JSON (for tools, and the Python package's `info()` through [`crate::NibbleInfo`]).
    pub fn json(&self) -> String {
        let ladder = match &self.ladder {
            Ok(f) => json!(f.iter().map(|(n, l)| json!({"family": n, "layout": l})).collect::<Vec<_>>()),
            Err(e) => json!({ "error": e }),
        };
        let selection: Vec<_> = self
            .choices
            .iter()
            .map(|c| {
                json!({
                    "path": c.path,
                    "bits": c.bits,
                    "block_size": c.block_size,
                    "family": c.family.as_ref().ok(),
                    "error": c.family.as_ref().err(),
                })
            })
            .collect();
        json!({
            "version": self.version,
            "arch": self.arch,
            "ort": {"custom_op_min": ort_min_custom_op(), "ep_min": ort_min_ep(), "tested": ort_tested()},
            "cpu_features": self.features,
            "sve_vl_bits": self.sve_vl.map(|v| v * 8),
            "sme_svl_bits": self.sme_svl.map(|v| v * 8),
            "rungs": self.rungs,
            "nibble_isa": self.isa_cap,
            "nibble_families": self.families_env,
            "ladder": ladder,
            "settings": settings()
                .iter()
                .map(|(k, v, d)| json!({"key": k, "values": v, "default": d}))
                .collect::<Vec<_>>(),
            "selection": selection,
        })
        .to_string()
    }
}

/// Each session setting: key, accepted values, default.
fn settings() -> [(&'static str, Vec<&'static str>, &'static str); 3] {
    use crate::domain::{KEY_ACCURACY_DEFAULT, KEY_ACT_QUANT, KEY_OVERRIDE};
    use nibble_kernels::ActQuant;
    [
        // Unset: com.microsoft too, wherever nibble is faster than ORT's kernel on this CPU (versus_ort).
        (KEY_OVERRIDE, vec!["0", "1"], "unset (com.microsoft where nibble is faster)"),
        (KEY_ACCURACY_DEFAULT, vec!["1", "2", "3", "4"], "4"),
        (KEY_ACT_QUANT, vec![ActQuant::Block.name(), ActQuant::Row.name()], ActQuant::default().name()),
    ]
}

/// The family for each (path, bits, block size) on `ladder`.
fn table(ladder: &Ladder) -> Vec<Choice> {
    let mut out = Vec::new();
    for path in [ComputePath::Int8, ComputePath::Fp32] {
        for bits in [4u32, 8, 2] {
            for block_size in BLOCK_SIZES {
                let family = ladder
                    .select(&Problem::new(path, bits, block_size, true))
                    .map(|s| s.name().to_string())
                    .map_err(|e| e.to_string());
                out.push(Choice { path: path.name(), bits, block_size, family });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_common_shape_has_a_family_and_the_report_says_so() {
        let tested = ort_tested();
        let parsed: Vec<Vec<u32>> =
            tested.iter().map(|v| v.split('.').map(|p| p.parse().expect("numeric version")).collect()).collect();
        assert!(parsed.len() >= 2 && parsed.iter().all(|v| v.len() == 3) && parsed.is_sorted(), "{tested:?}");
        let info = Info::gather();
        assert!(info.ladder.is_ok(), "{:?}", info.ladder);
        assert_eq!(info.choices.len(), 2 * 3 * BLOCK_SIZES.len());
        for c in &info.choices {
            assert!(c.family.is_ok(), "{} bits={} bs={}: {:?}", c.path, c.bits, c.block_size, c.family);
        }
        let text = info.text();
        assert!(
            text.contains("kernel families this CPU can run, in the order tried")
                && text.contains("int8 bits=4 block_size=")
        );

        let v: serde_json::Value = serde_json::from_str(&info.json()).unwrap();
        assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(v["selection"].as_array().unwrap().len(), info.choices.len());
        assert_eq!(v["selection"][0]["path"], "int8");
        assert!(v["selection"][0]["family"].is_string() && v["selection"][0]["error"].is_null(), "{v}");
        assert_eq!(v["ladder"].as_array().unwrap().len(), info.ladder.as_ref().unwrap().len());
    }
}
