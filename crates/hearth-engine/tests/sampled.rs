//! Sampling through the device's top-k selection: `Engine::generate` with a top-k sampler and
//! no penalties brings back only each step's best candidates (`feed_best`, `step_best`), and
//! must draw exactly the tokens that drawing from the whole logits, step by step, with an
//! identically seeded sampler draws.

mod common;

use common::{model_path, open_engine};
use hearth_engine::{Engine, Sequence};
use hearth_sampler::{Sampler, SamplingParams, MAX_DEVICE_TOP_K};

const MAX_NEW: usize = 24;

/// `generate`'s loop written out on the logits path: feed the prompt, then draw a token with
/// `Sampler::sample` and run it, until an end-of-generation token or `MAX_NEW` tokens.
fn from_logits(engine: &mut Engine, prompt: &[u32], params: &SamplingParams) -> Vec<u32> {
    let mut seq = Sequence::new();
    let mut sampler = Sampler::new(params.clone()).expect("valid settings");
    let mut logits = engine.feed(&mut seq, prompt).expect("prompt");
    let mut tokens = Vec::new();
    loop {
        let t = sampler.sample(&logits, seq.tokens());
        tokens.push(t);
        if engine.tokenizer.is_eog(t) || tokens.len() == MAX_NEW {
            break;
        }
        logits = engine.step(&mut seq, &[t]).expect("decode step");
    }
    engine.release(&mut seq);
    tokens
}

fn generated(engine: &mut Engine, prompt: &[u32], params: &SamplingParams) -> Vec<u32> {
    let mut seq = Sequence::new();
    let mut sampler = Sampler::new(params.clone()).expect("valid settings");
    let report = engine
        .generate(&mut seq, prompt, &mut sampler, MAX_NEW, |_| true)
        .expect("generate");
    engine.release(&mut seq);
    report.tokens
}

fn check(model: &str) {
    let mut engine = open_engine(&model_path(model));
    let v = engine.n_vocab() as u32;
    let prompts: Vec<Vec<u32>> = [(3, 9), (5, 40)]
        .iter()
        .map(|&(seed, n)| {
            (0..n)
                .map(|i| (seed * 7919 + i * 104_729 + 11) % v)
                .collect()
        })
        .collect();
    let defaults = SamplingParams::default();
    // The defaults (temperature 0.8, top-k 40) first; then the largest top-k the device
    // selects, a top-k of 1 (sampled, yet only one candidate), and one top-k past the device's
    // limit, which `generate` serves from the logits.
    let settings = [
        defaults.clone(),
        SamplingParams {
            temperature: 1.3,
            top_k: MAX_DEVICE_TOP_K,
            top_p: 1.0,
            min_p: 0.0,
            ..defaults.clone()
        },
        SamplingParams {
            top_k: 1,
            ..defaults.clone()
        },
        SamplingParams {
            top_k: MAX_DEVICE_TOP_K + 1,
            ..defaults.clone()
        },
    ];
    let mut n_off_greedy = 0;
    for (p, prompt) in prompts.iter().enumerate() {
        let greedy = generated(&mut engine, prompt, &SamplingParams::greedy());
        for (s, setting) in settings.iter().enumerate() {
            for seed in 0..3 {
                let params = SamplingParams {
                    seed: Some(seed),
                    ..setting.clone()
                };
                let want = from_logits(&mut engine, prompt, &params);
                let got = generated(&mut engine, prompt, &params);
                assert_eq!(
                    got, want,
                    "{model}: prompt {p}, setting {s}, seed {seed}: generate's draws differ from \
                     the logits'"
                );
                n_off_greedy += usize::from(got != greedy);
            }
        }
    }
    // NOTE: continuations that leave the greedy one show that the draws were random, so that
    // equal tokens mean the two paths drew alike (a top-k of 1 is greedy, and agrees anyway).
    assert!(
        n_off_greedy > 0,
        "{model}: every sampled continuation was the greedy one"
    );
}

#[test]
fn smollm2_generate_from_the_best_candidates_equals_sampling_the_logits() {
    check("SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn tiny_qwen3_generate_from_the_best_candidates_equals_sampling_the_logits() {
    check("tiny-qwen3-f16.gguf");
}
