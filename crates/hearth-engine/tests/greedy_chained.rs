//! Greedy decoding with chained steps (`Engine::decode_greedy`): each step is queued before
//! the token it runs has come back, and runs the id the step before left on the device. It
//! must pick exactly the tokens that one step at a time (`Engine::step_argmax`) picks, leave
//! the sequence holding exactly the tokens run when it stops early (the step queued ahead is
//! dropped), and go on from there as if it had never been queued.

mod common;

use common::{model_path, open_engine};
use hearth_engine::{Engine, Sequence};
use hearth_sampler::{Sampler, SamplingParams};

const STEPS: usize = 40;

fn prompt(n_vocab: usize, len: usize) -> Vec<u32> {
    (0..len as u64)
        .map(|i| ((i * 104_729 + 7919) % n_vocab as u64) as u32)
        .collect()
}

/// The first token after `prompt`, then `STEPS` more, one synchronous step at a time.
fn one_step_at_a_time(engine: &mut Engine, prompt: &[u32]) -> Vec<u32> {
    let mut seq = Sequence::new();
    let mut tokens = vec![engine.feed_argmax(&mut seq, prompt).expect("prompt")];
    for _ in 0..STEPS {
        let last = *tokens.last().expect("a token");
        tokens.push(engine.step_argmax(&mut seq, &[last]).expect("decode step"));
    }
    engine.release(&mut seq);
    tokens
}

fn check(model: &str) {
    let mut engine = open_engine(&model_path(model));
    let prompt = prompt(engine.n_vocab(), 11);
    let want = one_step_at_a_time(&mut engine, &prompt);

    // Every step in one call.
    let mut seq = Sequence::new();
    let first = engine.feed_argmax(&mut seq, &prompt).expect("prompt");
    let mut got = vec![first];
    let steps = engine
        .decode_greedy(&mut seq, first, STEPS, |t| {
            got.push(t);
            true
        })
        .expect("chained decoding");
    assert_eq!(steps, STEPS, "{model}: steps run");
    assert_eq!(got, want, "{model}: chained steps picked other tokens");
    assert_eq!(
        seq.len(),
        prompt.len() + STEPS,
        "{model}: tokens in the sequence"
    );
    engine.release(&mut seq);

    // Stopped after the 7th picked token: the step queued to run it is dropped. Then on from
    // there: the dropped step's cache slot is written again.
    let stop = 7;
    let first = engine.feed_argmax(&mut seq, &prompt).expect("prompt");
    let mut got = vec![first];
    engine
        .decode_greedy(&mut seq, first, STEPS, |t| {
            got.push(t);
            got.len() <= stop
        })
        .expect("chained decoding");
    assert_eq!(got, want[..=stop], "{model}: tokens before the stop");
    let mut run = prompt.clone();
    run.extend_from_slice(&want[..stop]);
    assert_eq!(
        seq.tokens(),
        run,
        "{model}: the sequence after an early stop"
    );
    engine
        .decode_greedy(&mut seq, want[stop], STEPS - stop, |t| {
            got.push(t);
            true
        })
        .expect("chained decoding after a stop");
    assert_eq!(got, want, "{model}: tokens after going on from the stop");
    engine.release(&mut seq);

    // `generate` with a greedy sampler decodes this way.
    let mut sampler = Sampler::new(SamplingParams::greedy()).expect("greedy settings");
    let report = engine
        .generate(&mut seq, &prompt, &mut sampler, STEPS + 1, |_| true)
        .expect("generate");
    let n = report.tokens.len();
    assert_eq!(
        report.tokens,
        want[..n],
        "{model}: generate's greedy tokens"
    );
    assert_eq!(
        seq.len(),
        prompt.len() + n - 1,
        "{model}: tokens run by generate"
    );
    engine.release(&mut seq);
}

#[test]
fn tiny_qwen3_f16_chained_greedy_steps_equal_single_steps() {
    check("tiny-qwen3-f16.gguf");
}

#[test]
fn tiny_qwen3_q8_0_chained_greedy_steps_equal_single_steps() {
    check("tiny-qwen3-q8_0.gguf");
}

#[test]
fn smollm2_chained_greedy_steps_equal_single_steps() {
    check("SmolLM2-135M-Instruct.Q4_1.gguf");
}
