//! The server's path: requests run through the scheduler, many per forward step, with chunked
//! prefill, prefix caching and preemption. At temperature 0 every request must produce
//! exactly the tokens it produces alone through the plain one-sequence path, whether a step
//! brings back logits or the device's argmax.

mod common;

use common::{model_path, open_engine};
use hearth_engine::scheduler::{FinishReason, RequestId, SchedulerConfig};
use hearth_engine::{Engine, EngineOptions, NextToken, Sequence};
use hearth_sampler::{argmax, Sampler, SamplingParams};

const MAX_NEW: usize = 12;

/// Prompts of many lengths; every fourth shares a 70-token prefix with the others like it, so
/// the prefix cache has blocks to share.
fn prompts(n_vocab: u32, n: usize) -> Vec<Vec<u32>> {
    let shared: Vec<u32> = (0..70).map(|i| (i * 131 + 17) % n_vocab).collect();
    (0..n as u32)
        .map(|r| {
            let len = 3 + (r * 37) % 90;
            let own = (0..len).map(|i| (r * 7919 + i * 104_729 + 11) % n_vocab);
            if r % 4 == 0 {
                shared.iter().copied().chain(own).collect()
            } else {
                own.collect()
            }
        })
        .collect()
}

/// Each prompt alone, greedy, through `Engine::generate`.
fn alone(engine: &mut Engine, prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    prompts
        .iter()
        .map(|p| {
            let mut seq = Sequence::new();
            let mut sampler = Sampler::new(SamplingParams::greedy()).expect("greedy");
            let report = engine
                .generate(&mut seq, p, &mut sampler, MAX_NEW, |_| true)
                .expect("generate alone");
            engine.release(&mut seq);
            report.tokens
        })
        .collect()
}

/// All prompts at once through the scheduler; returns each one's tokens and how many
/// preemptions happened.
fn scheduled(
    engine: &mut Engine,
    prompts: &[Vec<u32>],
    config: SchedulerConfig,
) -> (Vec<Vec<u32>>, usize) {
    let mut sched = engine.scheduler(config);
    for (id, p) in prompts.iter().enumerate() {
        sched.add(id as RequestId, p.clone(), MAX_NEW).expect("add");
    }
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
    let mut n_done = 0;
    let mut n_preempted = 0;
    let mut n_steps = 0;
    while n_done < prompts.len() {
        n_steps += 1;
        assert!(n_steps < 10_000, "the scheduler stopped making progress");
        let plan = sched.schedule();
        n_preempted += plan.preempted.len();
        assert!(plan.n_tokens() <= config.max_batch_tokens);
        assert!(plan.seqs.len() <= config.max_seqs);
        // Every other step takes the device's argmax instead of the logits: both must give
        // the tokens each request gives alone.
        let step = if n_steps % 2 == 0 {
            engine.run_plan_argmax(&plan)
        } else {
            engine.run_plan(&plan)
        };
        let step = step.expect("run plan");
        let sampled: Vec<(RequestId, u32, bool)> = step
            .iter()
            .map(|(id, next)| {
                let t = match next {
                    NextToken::Logits(row) => argmax(row),
                    NextToken::Picked(t) => t,
                };
                (id, t, engine.tokenizer.is_eog(t))
            })
            .collect();
        engine.recycle(step);
        for &(id, t, _) in &sampled {
            out[id as usize].push(t);
        }
        for (_, reason) in sched.update(&plan, &sampled) {
            assert_ne!(reason, FinishReason::Aborted);
            n_done += 1;
        }
    }
    assert_eq!(
        sched.pool().n_free(),
        sched.pool().n_blocks(),
        "every block came back"
    );
    (out, n_preempted)
}

fn check(
    model: &str,
    n_requests: usize,
    config: SchedulerConfig,
    n_kv_tokens: usize,
    expect_preemption: bool,
) {
    let path = model_path(model);
    let mut reference = open_engine(&path);
    let n_vocab = reference.n_vocab() as u32;
    let prompts = prompts(n_vocab, n_requests);
    let want = alone(&mut reference, &prompts);
    drop(reference);
    let opts = EngineOptions {
        n_ctx: 1024,
        n_kv_tokens,
        n_threads: 2,
        device: common::test_device(),
        ..EngineOptions::default()
    };
    let mut engine = Engine::load(&path, &opts).expect("load");
    let (got, n_preempted) = scheduled(&mut engine, &prompts, config);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g,
            w,
            "{model}: request {i} (prompt of {} tokens)",
            prompts[i].len()
        );
    }
    if expect_preemption {
        assert!(
            n_preempted > 0,
            "the pool was meant to be too small to hold every request"
        );
    }
}

#[test]
fn smollm2_32_requests_together_equal_each_alone() {
    let config = SchedulerConfig {
        max_batch_tokens: 96,
        max_seqs: 32,
    };
    check(
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        32,
        config,
        32 * 256,
        false,
    );
}

#[test]
fn smollm2_preemption_under_a_small_pool_changes_nothing() {
    // 640 slots for 16 requests that need up to ~170 each: some must be preempted and
    // recomputed (mostly from the prefix cache).
    let config = SchedulerConfig {
        max_batch_tokens: 128,
        max_seqs: 16,
    };
    check("SmolLM2-135M-Instruct.Q4_1.gguf", 16, config, 640, true);
}

#[test]
fn gemma3_sliding_window_requests_together_equal_each_alone() {
    let config = SchedulerConfig {
        max_batch_tokens: 64,
        max_seqs: 8,
    };
    check("gemma-3-270m-q4_k_m.gguf", 8, config, 8 * 256, false);
}

#[test]
fn smollm2_prompt_chunks_that_sample_nothing_still_fill_the_cache() {
    // A 16-token budget: most steps run only prompt chunks that reach no prompt's end, so
    // they ask for no logits at all; their keys and values must still be written.
    let config = SchedulerConfig {
        max_batch_tokens: 16,
        max_seqs: 4,
    };
    check("SmolLM2-135M-Instruct.Q4_1.gguf", 4, config, 4 * 256, false);
}
