//! The server's path: requests run through the scheduler, many per forward step, with chunked
//! prefill, prefix caching and preemption. At temperature 0 every request must produce
//! exactly the tokens it produces alone through the plain one-sequence path, whether a step
//! brings back logits, the device's argmax or the device's best candidates. And a step that
//! brings back each row's best candidates must bring back exactly the best of the logits the
//! same step gives, from which seeded samplers draw the same tokens.

mod common;

use common::{model_path, open_engine};
use hearth_engine::scheduler::{FinishReason, RequestId, SchedulerConfig};
use hearth_engine::{Engine, EngineOptions, NextToken, Sequence};
use hearth_sampler::{argmax, best_of_rows, Sampler, SamplingParams, MAX_DEVICE_TOP_K};

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
/// preemptions happened. `chain`: steps where every request decodes run as the server runs
/// them on a GPU, queued without waiting (`Engine::queue_plan_chained`) with the step after
/// each planned and queued before its tokens are taken (`Scheduler::schedule_ahead`).
fn scheduled(
    engine: &mut Engine,
    prompts: &[Vec<u32>],
    config: SchedulerConfig,
    chain: bool,
) -> (Vec<Vec<u32>>, usize) {
    let mut sched = engine.scheduler(config);
    for (id, p) in prompts.iter().enumerate() {
        sched.add(id as RequestId, p.clone(), MAX_NEW).expect("add");
    }
    let mut greedy = Sampler::new(SamplingParams::greedy()).expect("greedy");
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
    let mut n_done = 0;
    let mut n_preempted = 0;
    let mut n_steps = 0;
    let (mut ahead, mut n_ahead) = (None, 0);
    while n_done < prompts.len() {
        n_steps += 1;
        assert!(n_steps < 10_000, "the scheduler stopped making progress");
        let (plan, chained) = match ahead.take() {
            Some(plan) => (plan, true),
            None => {
                let plan = sched.schedule();
                let decodes = plan.seqs.iter().all(|s| s.tokens.len() == 1 && s.sample);
                let chained = chain && decodes;
                if chained {
                    engine.queue_plan_chained(&plan, false).expect("queue");
                }
                (plan, chained)
            }
        };
        if chained {
            ahead = sched.schedule_ahead(&plan);
            if let Some(next) = &ahead {
                engine.queue_plan_chained(next, true).expect("queue ahead");
                n_ahead += 1;
            }
        }
        n_preempted += plan.preempted.len();
        assert!(plan.n_tokens() <= config.max_batch_tokens);
        assert!(plan.seqs.len() <= config.max_seqs);
        // Steps take in turn the logits, the device's argmax and the device's 40 best
        // candidates (as the server runs greedy requests beside top-k ones): all must give the
        // tokens each request gives alone.
        let step = match n_steps % 3 {
            _ if chained => engine.take_plan_chained(&plan),
            0 => engine.run_plan_argmax(&plan),
            1 => engine.run_plan(&plan),
            _ => engine.run_plan_best(&plan, 40),
        };
        let step = step.expect("run plan");
        let sampled: Vec<(RequestId, u32, bool)> = step
            .iter()
            .map(|(id, next)| {
                let t = match next {
                    NextToken::Logits(row) => argmax(row),
                    NextToken::Picked(t) => t,
                    NextToken::Best(best) => {
                        assert_eq!(best.len(), 40, "request {id}: candidates per row");
                        greedy.sample_best(best, &[])
                    }
                };
                (id, t, engine.tokenizer.is_eog(t))
            })
            .collect();
        engine.recycle(step);
        for &(id, t, _) in &sampled {
            // NOTE: a step planned ahead still runs the rows of requests that ended.
            if sched.tokens(id).is_some() {
                out[id as usize].push(t);
            }
        }
        for (_, reason) in sched.update(&plan, &sampled) {
            assert_ne!(reason, FinishReason::Aborted);
            n_done += 1;
        }
    }
    if let Some(plan) = ahead {
        engine.take_plan_chained(&plan).expect("take the last step");
    }
    assert_eq!(
        sched.pool().n_free(),
        sched.pool().n_blocks(),
        "every block came back"
    );
    if chain && engine.chains_plans() {
        assert!(
            n_ahead >= MAX_NEW / 2,
            "only {n_ahead} steps were planned ahead"
        );
    }
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
    let (got, n_preempted) = scheduled(&mut engine, &prompts, config, false);
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

/// Request `id`'s sampling settings: the defaults (top-k 40), a small top-k, the largest top-k
/// the device selects, greedy, Ollama's defaults (top-k 40 with a repeat penalty of 1.1 over
/// the last 64 tokens: 104 candidates) and greedy with frequency and presence penalties; so a
/// step's `k`, the largest its requests need, is often more than some of them need.
fn sampling_params(id: RequestId) -> SamplingParams {
    let seed = Some(1000 + id);
    match id % 6 {
        4 => SamplingParams {
            repeat_penalty: 1.1,
            seed,
            ..SamplingParams::default()
        },
        5 => SamplingParams {
            frequency_penalty: 0.5,
            presence_penalty: 0.3,
            repeat_last_n: 16,
            seed,
            ..SamplingParams::greedy()
        },
        0 => SamplingParams {
            seed,
            ..SamplingParams::default()
        },
        1 => SamplingParams {
            temperature: 1.0,
            top_k: 5,
            seed,
            ..SamplingParams::default()
        },
        2 => SamplingParams {
            temperature: 1.2,
            top_k: MAX_DEVICE_TOP_K,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            ..SamplingParams::default()
        },
        _ => SamplingParams::greedy(),
    }
}

/// Two identical engines run the same plans, one bringing back the logits (`run_plan`), the
/// other each sampling row's best candidates (`run_plan_best`, with the largest `k` the step's
/// requests need, as the server chooses it). The candidates must be exactly `best_of_rows` of
/// the logits, and each request's seeded sampler must draw the same token from either.
fn check_best_against_logits(model: &str, n_requests: usize, config: SchedulerConfig) {
    let path = model_path(model);
    let opts = EngineOptions {
        n_ctx: 1024,
        n_kv_tokens: n_requests * 256,
        n_threads: 2,
        device: common::test_device(),
        ..EngineOptions::default()
    };
    let mut logits_engine = Engine::load(&path, &opts).expect("load");
    let mut best_engine = Engine::load(&path, &opts).expect("load");
    let prompts = prompts(logits_engine.n_vocab() as u32, n_requests);
    let mut scheds = [
        logits_engine.scheduler(config),
        best_engine.scheduler(config),
    ];
    // Per request: the sampler that draws from the logits, and its twin for the candidates.
    let mut samplers: Vec<[Sampler; 2]> = Vec::new();
    for (id, p) in prompts.iter().enumerate() {
        let id = id as RequestId;
        for s in &mut scheds {
            s.add(id, p.clone(), MAX_NEW).expect("add");
        }
        let sampler = || Sampler::new(sampling_params(id)).expect("valid settings");
        samplers.push([sampler(), sampler()]);
    }
    let (mut n_done, mut n_steps, mut n_not_argmax) = (0, 0, 0);
    let mut ks = std::collections::BTreeSet::new();
    let mut want = Vec::new();
    while n_done < n_requests {
        n_steps += 1;
        assert!(n_steps < 10_000, "the scheduler stopped making progress");
        let plan = scheds[0].schedule();
        assert_eq!(scheds[1].schedule(), plan, "the two schedulers parted ways");
        let k = plan
            .seqs
            .iter()
            .filter(|s| s.sample)
            .filter_map(|s| samplers[s.id as usize][1].best_needed())
            .max()
            .unwrap_or(1);
        ks.insert(k);
        let from_logits = logits_engine.run_plan(&plan).expect("run plan");
        let from_best = best_engine.run_plan_best(&plan, k).expect("run plan best");
        assert_eq!(from_logits.len(), from_best.len());
        let mut sampled = Vec::new();
        for ((id, a), (id_b, b)) in from_logits.iter().zip(from_best.iter()) {
            assert_eq!(
                id, id_b,
                "the outputs list the requests in different orders"
            );
            let (NextToken::Logits(row), NextToken::Best(best)) = (a, b) else {
                panic!("request {id}: a logits step and a top-k step brought back the wrong kinds");
            };
            want.clear();
            best_of_rows(row, row.len(), k, &mut want);
            assert_eq!(
                best,
                &want[..],
                "{model}: request {id}, step {n_steps}, top {k}"
            );
            let [whole, cands] = &mut samplers[id as usize];
            let history = scheds[0].tokens(id).expect("running");
            let t = whole.sample(row, history);
            assert_eq!(
                cands.sample_best(best, history),
                t,
                "{model}: request {id}, step {n_steps}: the two draws differ"
            );
            n_not_argmax += usize::from(t != argmax(row));
            sampled.push((id, t, logits_engine.tokenizer.is_eog(t)));
        }
        logits_engine.recycle(from_logits);
        best_engine.recycle(from_best);
        let finished = scheds[0].update(&plan, &sampled);
        assert_eq!(scheds[1].update(&plan, &sampled), finished);
        for (_, reason) in finished {
            assert_ne!(reason, FinishReason::Aborted);
            n_done += 1;
        }
    }
    eprintln!("{model}: {n_steps} steps, top-k sizes {ks:?}, {n_not_argmax} draws off the argmax");
    // NOTE: draws that leave the argmax are what makes the comparison of random draws mean
    // something: a sampler that only ever picked the best candidate would agree trivially.
    assert!(n_not_argmax > 0, "{model}: no draw left the argmax");
}

#[test]
fn smollm2_best_candidates_equal_the_best_of_the_logits() {
    let config = SchedulerConfig {
        max_batch_tokens: 64,
        max_seqs: 8,
    };
    check_best_against_logits("SmolLM2-135M-Instruct.Q4_1.gguf", 8, config);
}

#[test]
fn tiny_qwen3_best_candidates_equal_the_best_of_the_logits() {
    let config = SchedulerConfig {
        max_batch_tokens: 48,
        max_seqs: 4,
    };
    check_best_against_logits("tiny-qwen3-q8_0.gguf", 8, config);
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

/// Chained steps (`scheduled` with `chain`) against the same plans run one by one: each
/// request's tokens must be exactly the same. (Not against each request alone: on a GPU a
/// batch's rows may round differently from a single row's.)
fn check_chained(model: &str, n_requests: usize, config: SchedulerConfig) {
    let path = model_path(model);
    let opts = EngineOptions {
        n_ctx: 1024,
        n_kv_tokens: n_requests * 256,
        n_threads: 2,
        device: common::test_device(),
        ..EngineOptions::default()
    };
    let run = |chain: bool| {
        let mut engine = Engine::load(&path, &opts).expect("load");
        let n_vocab = engine.n_vocab() as u32;
        scheduled(&mut engine, &prompts(n_vocab, n_requests), config, chain).0
    };
    let (plain, chained) = (run(false), run(true));
    for (i, (p, c)) in plain.iter().zip(&chained).enumerate() {
        assert_eq!(p, c, "{model}: request {i}, one by one and chained");
    }
}

#[test]
fn smollm2_chained_steps_equal_steps_one_by_one() {
    // Every prompt in the first step, so that most later steps only decode.
    let config = SchedulerConfig {
        max_batch_tokens: 2048,
        max_seqs: 16,
    };
    check_chained("SmolLM2-135M-Instruct.Q4_1.gguf", 16, config);
}

#[test]
fn tiny_qwen3_chained_steps_equal_steps_one_by_one() {
    let config = SchedulerConfig {
        max_batch_tokens: 1024,
        max_seqs: 8,
    };
    check_chained("tiny-qwen3-q8_0.gguf", 8, config);
}

#[test]
fn a_prompt_chunk_is_refused_as_a_chained_step() {
    let path = model_path("tiny-qwen3-q8_0.gguf");
    let opts = EngineOptions {
        n_ctx: 256,
        n_kv_tokens: 256,
        n_threads: 2,
        device: common::test_device(),
        ..EngineOptions::default()
    };
    let mut engine = Engine::load(&path, &opts).expect("load");
    let config = SchedulerConfig {
        max_batch_tokens: 64,
        max_seqs: 4,
    };
    let mut sched = engine.scheduler(config);
    sched.add(7, vec![11, 12, 13, 14, 15], 4).expect("add");
    let plan = sched.schedule();
    let err = engine.queue_plan_chained(&plan, false).unwrap_err();
    assert!(err.to_string().contains("request 7"), "{err}");
    assert!(err.to_string().contains("not 5 token(s)"), "{err}");
    // Nothing was queued, so there is nothing to take; the plan still runs as usual.
    assert!(engine.take_plan_chained(&plan).is_err());
    let out = engine.run_plan_argmax(&plan).expect("the prompt runs");
    assert_eq!(out.len(), 1);
}
