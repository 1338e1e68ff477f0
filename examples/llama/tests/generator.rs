//! The step-wise generation core in-process (what the chat server builds on): generations advanced in turns on
//! one session give exactly the tokens each gives alone, and a finished generation refuses another step.
//!
//! Environment as tests/driver.rs: `NIBBLE_LLAMA_Q4_DIR` (default `<workspace>/target/llama/smollm2-q4`),
//! `NIBBLE_ORT_DYLIB` / `ORT_DYLIB_PATH`, `NIBBLE_LIB`; `NIBBLE_SKIP_ORT_TESTS=1` skips.

use std::path::PathBuf;

use nibble_llama::frontend::Frontend;
use nibble_llama::generate::{Generator, generate};
use nibble_llama::metrics::StopReason;
use nibble_llama::model::{self, Llama, ModelDir, SessionOptions};
use nibble_llama::paths;
use nibble_llama::sampling::{Sampler, SamplingParams};

fn q4_dir() -> PathBuf {
    std::env::var_os("NIBBLE_LLAMA_Q4_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| paths::workspace().join("target").join("llama").join("smollm2-q4"))
}

#[test]
fn interleaved_generations_match_each_alone() {
    if std::env::var("NIBBLE_SKIP_ORT_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED (NIBBLE_SKIP_ORT_TESTS=1)");
        return;
    }
    let env = model::init_ort(&paths::ort_dylib(None).unwrap()).unwrap();
    let dir = ModelDir::open(&q4_dir()).unwrap();
    let lib = paths::nibble_lib(None).unwrap();
    let opts = SessionOptions { nibble: Some((&lib, Frontend::CustomOp)), threads: Some(1) };
    let mut llama = Llama::load(&env, &dir, &opts).unwrap();
    let tok = dir.load_tokenizer().unwrap();
    let prompts: Vec<Vec<u32>> = ["The capital of France is", "Three primary colors are", "1, 2, 3, 4,"]
        .iter()
        .map(|p| tok.encode(*p, false).unwrap().get_ids().to_vec())
        .collect();
    let sampled = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.9 };
    let sampler = |i: usize| {
        let p = if i == 1 { sampled } else { SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0 } };
        Sampler::new(p, 7 + i as u64).unwrap()
    };
    let max = [6usize, 9, 4];

    let alone: Vec<Vec<u32>> =
        (0..3).map(|i| generate(&mut llama, &prompts[i], max[i], sampler(i), |_| Ok(())).unwrap().ids).collect();

    // Round robin, one graph run per generation per turn, until all have stopped.
    let mut gens: Vec<Generator> =
        (0..3).map(|i| Generator::new(&llama, &prompts[i], max[i], sampler(i)).unwrap()).collect();
    while gens.iter().any(|g| g.stop().is_none()) {
        for g in gens.iter_mut().filter(|g| g.stop().is_none()) {
            g.step(&mut llama).unwrap();
        }
    }
    for (i, mut g) in gens.into_iter().enumerate() {
        assert!(g.step(&mut llama).is_err(), "a stopped generation must refuse another step");
        let r = g.finish();
        assert_eq!(r.ids, alone[i], "generation {i}: interleaved differs from alone");
        assert!(r.ids.len() <= max[i] && !r.ids.is_empty());
        if r.ids.len() < max[i] {
            assert_eq!(r.stop, StopReason::Eos);
        }
        assert!(r.timings.ttft_s > 0.0 && r.timings.prefill_s > 0.0);
    }
    assert!(Generator::new(&llama, &[], 4, sampler(0)).is_err(), "an empty prompt must be refused");
    assert!(Generator::new(&llama, &prompts[0], 0, sampler(0)).is_err(), "max_new_tokens 0 must be refused");
}
