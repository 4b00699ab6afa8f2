use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use hearth_engine::{Engine, SeqStep, Sequence};
use hearth_sampler::{sample_best_rows, sample_rows, Sampler, SamplingParams, MAX_DEVICE_TOP_K};
use serde::Serialize;

use super::run::LoadArgs;

#[derive(Args)]
pub struct BenchArgs {
    /// GGUF model file, or a Hugging Face folder (config.json, safetensors, tokenizer.json)
    model: PathBuf,
    /// Prompt tokens for the prompt-processing test
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    n_prompt: usize,
    /// Tokens for the generation test
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    n_gen: usize,
    /// Repetitions of each test
    #[arg(short = 'r', long, default_value_t = 3)]
    repetitions: usize,
    /// Tokens already in each sequence's context before a test starts (as llama-bench's -d):
    /// they are run first, untimed, so that both tests measure attention over a longer context
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    n_depth: usize,
    /// Sequences generating together in the generation test, one batched step per token
    /// (as the server runs them); tg then reports their combined tokens per second
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Generation steps bring back only each sequence's most likely next token, found on the
    /// device, as greedy requests run (temperature 0, no penalties, no logprobs); one
    /// sequence then decodes as `hearth run` does, each step queued before the token it runs
    /// has come back where the backend can. Without it steps bring back the logits, as
    /// llama-bench does
    #[arg(long, conflicts_with = "sample")]
    greedy: bool,
    /// Generation steps also draw each sequence's next token with the default sampling
    /// settings (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05) as the server does: from
    /// the 40 best candidates the device selects, not from the logits
    #[arg(long)]
    sample: bool,
    /// With --sample: also a repeat penalty over each sequence's last 64 tokens, as Ollama
    /// requests have by default (1.1)
    #[arg(long, requires = "sample")]
    repeat_penalty: Option<f32>,
    #[command(flatten)]
    load: LoadArgs,
    /// One JSON object on standard output instead of a table
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct BenchReport {
    model: String,
    backend: String,
    threads: usize,
    load_s: f64,
    depth: usize,
    pp_tokens: usize,
    pp_tok_s: Stat,
    tg_tokens: usize,
    tg_parallel: usize,
    tg_greedy: bool,
    tg_sample: bool,
    tg_repeat_penalty: Option<f32>,
    tg_tok_s: Stat,
    peak_rss_mib: f64,
}

#[derive(Serialize)]
struct Stat {
    mean: f64,
    stddev: f64,
}

impl Stat {
    fn of(xs: &[f64]) -> Stat {
        let n = xs.len().max(1) as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        Stat {
            mean,
            stddev: var.sqrt(),
        }
    }
}

/// Token ids spread over the vocabulary, the same on every run (as llama-bench, the test does
/// not depend on what the tokens say).
fn bench_tokens(n: usize, n_vocab: usize) -> Vec<u32> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n_vocab as u64) as u32
        })
        .collect()
}

pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    if a.repetitions == 0 || a.n_prompt + a.n_gen == 0 {
        anyhow::bail!("nothing to measure: repetitions, --n-prompt and --n-gen are zero");
    }
    if a.parallel == 0 {
        anyhow::bail!("--parallel must be at least 1");
    }
    let mut opts = a.load.options(None);
    opts.n_ctx = opts.n_ctx.max(a.n_depth + a.n_prompt + a.n_gen + 1);
    opts.n_batch = opts.n_batch.max(a.n_prompt);
    opts.n_kv_tokens = opts.n_ctx.max(a.parallel * (a.n_depth + a.n_gen + 32));
    crate::cmd::init_logging("warn");
    let t0 = Instant::now();
    let mut engine = Engine::load(&a.model, &opts)?;
    let load_s = t0.elapsed().as_secs_f64();
    if let Some(note) = &engine.info().device_note {
        eprintln!("note: {note}");
    }
    let n_vocab = engine.n_vocab();
    // Warm-up, as llama-bench's warm-up run: touches every weight page once, and runs a prompt
    // of the measured length, so that what a GPU backend sets up at the first step of a shape
    // (library handles, transient memory, kernels loaded on first use) is not timed. With a
    // 16-token warm-up, pp512 on an H100 spread by half its mean over three repetitions.
    let mut seq = Sequence::new();
    engine.step(&mut seq, &bench_tokens(a.n_prompt.max(1), n_vocab))?;
    engine.release(&mut seq);
    // And two decode steps of the measured batch: kernels only decode uses (the wgpu backend's
    // decode projections) are built then, not inside the first timed generation.
    if a.n_gen > 0 {
        generation_test(&mut engine, 2, a.parallel, 0, Decode::of(&a))?;
    }

    let mut pp = Vec::new();
    let mut tg = Vec::new();
    for _ in 0..a.repetitions {
        if a.n_prompt > 0 {
            let tokens = bench_tokens(a.n_prompt, n_vocab);
            let mut seq = Sequence::new();
            fill_context(&mut engine, &mut seq, a.n_depth)?;
            let t = Instant::now();
            engine.step(&mut seq, &tokens)?;
            pp.push(a.n_prompt as f64 / t.elapsed().as_secs_f64());
            engine.release(&mut seq);
        }
        if a.n_gen > 0 {
            tg.push(generation_test(
                &mut engine,
                a.n_gen,
                a.parallel,
                a.n_depth,
                Decode::of(&a),
            )?);
        }
    }
    let report = BenchReport {
        model: a.model.display().to_string(),
        backend: engine.info().backend.clone(),
        threads: engine.info().n_threads,
        load_s,
        depth: a.n_depth,
        pp_tokens: a.n_prompt,
        pp_tok_s: Stat::of(&pp),
        tg_tokens: a.n_gen,
        tg_parallel: a.parallel,
        tg_greedy: a.greedy,
        tg_sample: a.sample,
        tg_repeat_penalty: a.repeat_penalty,
        tg_tok_s: Stat::of(&tg),
        peak_rss_mib: peak_rss_mib(),
    };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("model      {}", report.model);
        println!("backend    {}", report.backend);
        println!("load       {:.3} s", report.load_s);
        // As llama-bench labels tests after a context: "pp512 @ d2048".
        let at = match report.depth {
            0 => String::new(),
            d => format!(" @ d{d}"),
        };
        let pp_label = format!("pp{}{at}", report.pp_tokens);
        println!(
            "{pp_label:<9}  {:.1} ± {:.1} tok/s",
            report.pp_tok_s.mean, report.pp_tok_s.stddev
        );
        let mut label = match report.tg_parallel {
            1 => format!("tg{}{at}", report.tg_tokens),
            n => format!("tg{}x{n}{at}", report.tg_tokens),
        };
        if report.tg_greedy {
            label.push_str(" greedy");
        }
        if report.tg_sample {
            label.push_str(" sampled");
        }
        if let Some(r) = report.tg_repeat_penalty {
            label.push_str(&format!(" repeat penalty {r}"));
        }
        println!(
            "{label:<9}  {:.1} ± {:.1} tok/s",
            report.tg_tok_s.mean, report.tg_tok_s.stddev
        );
        println!("peak RSS   {:.1} MiB", report.peak_rss_mib);
    }
    Ok(())
}

/// What a generation step does after the forward pass.
#[derive(Clone, Copy, PartialEq)]
enum Decode {
    /// Brings the logits back, as llama-bench does.
    Logits,
    /// Brings back the argmax found on the device.
    Greedy,
    /// Draws with the default sampling settings and this repeat penalty, from each row's best
    /// candidates when the sampler needs few enough to select on the device, else from the
    /// logits.
    Sample(f32),
}

impl Decode {
    fn of(a: &BenchArgs) -> Decode {
        match (a.greedy, a.sample) {
            (true, _) => Decode::Greedy,
            (_, true) => Decode::Sample(a.repeat_penalty.unwrap_or(1.0)),
            _ => Decode::Logits,
        }
    }
}

/// Runs `depth` tokens into `seq` (untimed), the context a test then starts from.
fn fill_context(engine: &mut Engine, seq: &mut Sequence, depth: usize) -> anyhow::Result<()> {
    if depth > 0 {
        let tokens = bench_tokens(depth, engine.n_vocab());
        engine.step(seq, &tokens)?;
    }
    Ok(())
}

/// `n_gen` single-token steps of `parallel` sequences at once (each after `depth` tokens of
/// context), decoded as `decode` says; returns their combined tokens per second. The tokens
/// run are fixed (as llama-bench's), not the ones drawn.
fn generation_test(
    engine: &mut Engine,
    n_gen: usize,
    parallel: usize,
    depth: usize,
    decode: Decode,
) -> anyhow::Result<f64> {
    let n_vocab = engine.n_vocab();
    let tokens = bench_tokens(n_gen + parallel, n_vocab);
    let mut seqs: Vec<Sequence> = (0..parallel).map(|_| Sequence::new()).collect();
    for seq in &mut seqs {
        fill_context(engine, seq, depth)?;
    }
    let repeat_penalty = match decode {
        Decode::Sample(r) => r,
        Decode::Logits | Decode::Greedy => 1.0,
    };
    let params = SamplingParams {
        seed: Some(0),
        repeat_penalty,
        ..SamplingParams::default()
    };
    let mut samplers = (0..parallel)
        .map(|_| Sampler::new(params.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    // NOTE: as the server's engine loop chooses: a step whose samplers need only the best few
    // candidates brings back those, so `--sample` measures what a sampling request costs there.
    let best = samplers
        .first()
        .and_then(Sampler::best_needed)
        .filter(|&k| k <= MAX_DEVICE_TOP_K);
    if decode == Decode::Greedy && parallel == 1 {
        // NOTE: one greedy sequence decodes as `hearth run` does (`Engine::decode_greedy`):
        // where the backend chains steps, each is queued before the token it runs has come
        // back, so the tokens run are the model's own picks rather than fixed ones.
        let t = Instant::now();
        let steps = engine.decode_greedy(&mut seqs[0], tokens[0], n_gen, |_| true)?;
        let tok_s = steps as f64 / t.elapsed().as_secs_f64();
        engine.release(&mut seqs[0]);
        return Ok(tok_s);
    }
    let t = Instant::now();
    for i in 0..n_gen {
        let mut work: Vec<SeqStep> = seqs
            .iter_mut()
            .enumerate()
            .map(|(s, seq)| SeqStep {
                seq,
                tokens: &tokens[i + s..i + s + 1],
                logits_rows: vec![0],
            })
            .collect();
        // NOTE: the logits stay in the engine's buffer, as llama-batched-bench leaves them in
        // llama.cpp's: copying 64 rows of a 150k vocabulary out every step would be measured.
        match decode {
            Decode::Greedy => {
                engine.step_batch_argmax(&mut work)?;
            }
            Decode::Logits => {
                engine.step_batch_logits(&mut work)?;
            }
            Decode::Sample(_) => match best {
                Some(k) => {
                    let cands = engine.step_batch_best(&mut work, k)?;
                    // NOTE: fewer than `k` per row come back for a smaller vocabulary.
                    let per_row = (cands.len() / parallel).max(1);
                    let mut rows: Vec<_> = samplers
                        .iter_mut()
                        .zip(cands.chunks(per_row))
                        .zip(&seqs)
                        .map(|((s, row), seq)| (s, row, seq.tokens()))
                        .collect();
                    sample_best_rows(&mut rows);
                }
                None => {
                    let logits = engine.step_batch_logits(&mut work)?;
                    let mut rows: Vec<_> = samplers
                        .iter_mut()
                        .zip(logits.chunks(n_vocab))
                        .zip(&seqs)
                        .map(|((s, row), seq)| (s, row, seq.tokens()))
                        .collect();
                    sample_rows(&mut rows);
                }
            },
        }
    }
    let tok_s = (n_gen * parallel) as f64 / t.elapsed().as_secs_f64();
    for seq in &mut seqs {
        engine.release(seq);
    }
    Ok(tok_s)
}

/// Peak resident set size of this process (VmHWM), or 0 where the OS does not say.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}
