//! The runner thread end to end on the CPU, with a tiny model from the repository's fixtures:
//! chained greedy steps (`RunnerConfig::chain_greedy`) must not change any request's tokens,
//! text or ending, whether requests end by length, by a stop string or by sampling beside
//! greedy ones.

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use hearth_engine::{Device, Engine, EngineOptions};
use hearth_sampler::SamplingParams;

use super::{Event, Finish, GenerateRequest, RunnerConfig, RunnerHandle};
use crate::metrics::Metrics;

fn engine() -> Engine {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-qwen3-q8_0.gguf");
    let opts = EngineOptions {
        n_ctx: 256,
        n_kv_tokens: 2048,
        n_threads: 2,
        device: Device::Cpu,
        ..EngineOptions::default()
    };
    Engine::load(&path, &opts).expect("the tiny Qwen3 fixture loads")
}

/// What a request came back with: its tokens, its text, how it ended.
#[derive(Debug, PartialEq)]
struct Outcome {
    tokens: Vec<u32>,
    text: String,
    finish: Finish,
    n_generated: usize,
}

fn request(
    prompt: Vec<u32>,
    max_tokens: usize,
    params: SamplingParams,
    stop: &[String],
) -> GenerateRequest {
    GenerateRequest {
        prompt,
        max_tokens,
        params,
        stop: stop.to_vec(),
        logprobs: None,
        arrived: Instant::now(),
    }
}

/// Runs `requests` together on a runner with chaining `chain`; their outcomes in order, and
/// how many steps were queued ahead.
fn run(requests: &[GenerateRequest], chain: bool) -> (Vec<Outcome>, u64) {
    let config = RunnerConfig {
        max_batch_tokens: 64,
        max_seqs: 8,
        chain_greedy: Some(chain),
    };
    let metrics = Arc::new(Metrics::default());
    let runner = RunnerHandle::spawn("tiny", engine(), config, metrics.clone()).expect("spawn");
    let receivers: Vec<_> = requests
        .iter()
        .map(|r| runner.submit(r.clone()).expect("the runner is up"))
        .collect();
    let outcomes = receivers
        .into_iter()
        .map(|mut rx| {
            let (mut tokens, mut text) = (Vec::new(), String::new());
            loop {
                match rx.blocking_recv().expect("the request ends with Done") {
                    Event::Chunk(c) => {
                        tokens.extend(c.tokens);
                        text.push_str(&c.text);
                    }
                    Event::Done(summary) => {
                        return Outcome {
                            tokens,
                            text,
                            finish: summary.finish,
                            n_generated: summary.n_generated,
                        }
                    }
                    Event::Error(e) => panic!("request failed: {e}"),
                }
            }
        })
        .collect();
    (outcomes, metrics.chained_steps.load(Relaxed))
}

fn prompt(seed: u32, len: u32) -> Vec<u32> {
    (0..len)
        .map(|i| (seed * 7919 + i * 104_729 + 11) % 500 + 10)
        .collect()
}

#[test]
fn chained_greedy_steps_give_every_request_the_same_tokens() {
    let greedy = SamplingParams::greedy;
    let mut requests = vec![
        request(prompt(1, 5), 6, greedy(), &[]),
        request(prompt(2, 9), 11, greedy(), &[]),
        request(prompt(3, 3), 17, greedy(), &[]),
        request(prompt(4, 12), 24, greedy(), &[]),
        request(prompt(5, 7), 24, greedy(), &[]),
    ];
    // Request 4 ends on a stop string, a few tokens in, while others go on: the step queued
    // ahead of that one still runs its row, which must come to nothing.
    let (plain, _) = run(&requests, false);
    let tokenizer = engine().tokenizer.clone();
    let generated = &plain[4].tokens;
    let stop = (3..generated.len())
        .find_map(|k| {
            let piece = tokenizer.decode(&generated[k..=k]);
            let before = tokenizer.decode(&generated[..k]);
            (!piece.trim().is_empty() && !before.contains(piece.as_str())).then_some(piece)
        })
        .expect("a token to stop on");
    requests[4].stop = vec![stop];
    // A sampled request keeps the first steps unchained until it ends.
    let sampled = SamplingParams {
        temperature: 0.8,
        seed: Some(7),
        ..SamplingParams::default()
    };
    requests.push(request(prompt(6, 4), 4, sampled, &[]));
    let (plain, n_plain) = run(&requests, false);
    assert_eq!(n_plain, 0, "no step is queued ahead without chaining");
    assert_eq!(
        plain[4].finish,
        Finish::Stop,
        "the stop string ends request 4"
    );
    assert!(plain[4].n_generated < 24);
    assert!(plain[..4].iter().all(|o| o.finish == Finish::Length));
    let (chained, n_chained) = run(&requests, true);
    assert!(n_chained >= 10, "only {n_chained} steps were queued ahead");
    for (i, (p, c)) in plain.iter().zip(&chained).enumerate() {
        assert_eq!(p, c, "request {i}");
    }
}
