//! The step-wise generation core in-process (what the chat server builds on): generations advanced in turns on
//! one session give exactly the tokens each gives alone, and a finished generation refuses another step.
//!
//! Environment as tests/driver.rs: `NIBBLE_LLAMA_Q4_DIR` (default `<workspace>/target/llama/smollm2-q4`),
//! `NIBBLE_ORT_DYLIB` / `ORT_DYLIB_PATH`, `NIBBLE_LIB`; `NIBBLE_SKIP_ORT_TESTS=1` skips.

use std::path::PathBuf;

use nibble_llama::frontend::Frontend;
use nibble_llama::generate::{Generator, Step, generate};
use nibble_llama::metrics::StopReason;
use nibble_llama::model::{self, Llama, ModelDir, SessionOptions};
use nibble_llama::paths;
use nibble_llama::sampling::{RepeatPenalty, Sampler, SamplingParams};

fn q4_dir() -> PathBuf {
    std::env::var_os("NIBBLE_LLAMA_Q4_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| paths::workspace().join("target").join("llama").join("smollm2-q4"))
}

/// One session on nibble's custom-op frontend, shared by the tests and taken one test at a time (ORT allows one
/// environment per process, and registering the custom-op domain from two threads at once races inside ORT).
fn llama() -> std::sync::MutexGuard<'static, Llama> {
    static ENV: std::sync::OnceLock<ort::environment::Environment> = std::sync::OnceLock::new();
    static LLAMA: std::sync::OnceLock<std::sync::Mutex<Llama>> = std::sync::OnceLock::new();
    let env = ENV.get_or_init(|| model::init_ort(&paths::ort_dylib(None).unwrap()).unwrap());
    let llama = LLAMA.get_or_init(|| {
        let dir = ModelDir::open(&q4_dir()).unwrap();
        let lib = paths::nibble_lib(None).unwrap();
        let opts =
            SessionOptions { nibble: Some((&lib, Frontend::CustomOp)), threads: Some(1), activation_quant: None };
        std::sync::Mutex::new(Llama::load(env, &dir, &opts).unwrap())
    });
    llama.lock().unwrap_or_else(|e| e.into_inner())
}

/// The shared session and the model's tokenizer, or `None` (after saying so) when NIBBLE_SKIP_ORT_TESTS=1.
fn setup() -> Option<(std::sync::MutexGuard<'static, Llama>, tokenizers::Tokenizer)> {
    if std::env::var("NIBBLE_SKIP_ORT_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED (NIBBLE_SKIP_ORT_TESTS=1)");
        return None;
    }
    let tok = ModelDir::open(&q4_dir()).unwrap().load_tokenizer().unwrap();
    Some((llama(), tok))
}

#[test]
fn interleaved_generations_match_each_alone() {
    let Some((mut llama, tok)) = setup() else { return };
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
        (0..3).map(|i| generate(&mut llama, &prompts[i], max[i], sampler(i), |_| Ok(true)).unwrap().ids).collect();

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

#[test]
fn chunked_prefill_gives_the_same_tokens_and_reports_progress() {
    let Some((mut llama, tok)) = setup() else { return };
    let prompt = tok.encode("The history of Paris: the city was founded by the Parisii, a tribe", false).unwrap();
    let prompt = prompt.get_ids().to_vec();
    assert!(prompt.len() > 12, "{}", prompt.len());
    let greedy = || Sampler::new(SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0 }, 1).unwrap();
    let whole = generate(&mut llama, &prompt, 8, greedy(), |_| Ok(true)).unwrap();

    for chunk in [1usize, 5, prompt.len() - 1, prompt.len()] {
        let mut g = Generator::new(&llama, &prompt, 8, greedy()).unwrap().with_prefill_chunk(chunk);
        let mut progress = Vec::new();
        let mut ids = Vec::new();
        while g.stop().is_none() {
            match g.step(&mut llama).unwrap() {
                Step::Prefill { done, total } => {
                    assert!(ids.is_empty(), "prefill progress after a token");
                    assert_eq!(total, prompt.len());
                    progress.push(done);
                }
                Step::Token(id) => ids.push(id),
            }
        }
        let want: Vec<usize> = (1..).map(|k| k * chunk).take_while(|&d| d < prompt.len()).collect();
        assert_eq!(progress, want, "chunk {chunk}: progress");
        let r = g.finish();
        assert_eq!(ids, r.ids);
        assert_eq!(r.ids, whole.ids, "chunk {chunk}: chunked prefill changed the tokens");
        assert!(r.timings.prefill_s > 0.0 && r.timings.ttft_s >= r.timings.prefill_s);
    }

    // interrupting: the callback's `false` ends it after that step, with what was generated
    let mut n = 0;
    let cut = generate(&mut llama, &prompt, 8, greedy(), |s| {
        n += matches!(s, Step::Token(_)) as usize;
        Ok(n < 3)
    })
    .unwrap();
    assert_eq!(cut.stop, StopReason::Interrupted);
    assert_eq!(cut.ids, whole.ids[..3]);
}

#[test]
fn repeat_penalty_changes_a_looping_answer() {
    let Some((mut llama, tok)) = setup() else { return };
    let prompt = tok.encode("dog dog dog dog dog dog dog dog", false).unwrap().get_ids().to_vec();
    let greedy = SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0 };
    let run = |llama: &mut Llama, penalty: f32| {
        let s = Sampler::new(greedy, 1).unwrap().with_repeat_penalty(RepeatPenalty { penalty, last_n: 64 }).unwrap();
        generate(llama, &prompt, 12, s, |_| Ok(true)).unwrap().ids
    };
    // how many generated ids repeat one seen before (prompt or answer)
    let repeats =
        |ids: &[u32]| (0..ids.len()).filter(|&i| prompt.contains(&ids[i]) || ids[..i].contains(&ids[i])).count();
    let plain = run(&mut llama, 1.0);
    let penalized = run(&mut llama, 5.0);
    assert!(repeats(&plain) >= 3, "without a penalty this prompt makes the model repeat itself: {plain:?}");
    assert!(repeats(&penalized) < repeats(&plain), "a strong penalty must cut the repeats: {penalized:?} vs {plain:?}");
}
