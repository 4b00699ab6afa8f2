//! The CUDA backend against the CPU backend (the reference) on the same model: the logits of
//! a prompt, then greedy decoding of one sequence alone (which may run all layers as one
//! kernel) and of several stepped together (the path that is recorded as a CUDA graph at its
//! second step and replayed after).
//!
//! Models: the tiny fixtures of the repository, plus any listed in `$HEARTH_CUDA_TEST_MODELS`
//! (colon-separated paths, e.g. real-shape synthetic models on a GPU machine). Without a usable
//! GPU each test prints why on stderr and checks nothing else (CI has no GPU).

mod common;

use std::path::{Path, PathBuf};

use common::{argmax, repo_root};
use hearth_engine::{Device, Engine, EngineError, EngineOptions, SeqStep, Sequence};

/// Largest |gpu - cpu| over the largest |cpu| of the logits. Neither side is exact: the CPU
/// quantizes activations to 8 bits for quantized weights (as llama.cpp does), the GPU rounds
/// them to f16 for tensor-core GEMMs (prompt chunks) and sums in another order. Measured on an
/// H100: 8e-4..4e-3 for float weights, 1.0e-2..3.1e-2 for Q8_0 / Q4_K_M; a wrong kernel gives
/// tenths or NaN.
const BOUND: f32 = 5e-2;
const N_SEQS: usize = 4;
const N_DECODE: usize = 24;

fn load(path: &Path, device: Device) -> Result<Engine, EngineError> {
    let opts = EngineOptions {
        n_ctx: 512,
        n_kv_tokens: 4 * 512,
        n_threads: 2,
        device,
        ..EngineOptions::default()
    };
    Engine::load(path, &opts)
}

/// Deterministic token ids below `n_vocab`.
fn prompt(seed: u64, len: usize, n_vocab: usize) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % n_vocab as u64) as u32
        })
        .collect()
}

/// max |a - b| / max |a|; infinite when b has a NaN (which `max` would skip).
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    if b.iter().any(|v| v.is_nan()) {
        return f32::INFINITY;
    }
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    diff / scale
}

/// Gap between the best and second-best logit: how far from a tie a greedy choice was.
fn top_gap(xs: &[f32]) -> f32 {
    let best = argmax(xs) as usize;
    let second = xs
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != best)
        .fold(f32::NEG_INFINITY, |m, (_, &v)| m.max(v));
    xs[best] - second
}

/// Greedy-decode N_SEQS sequences together for N_DECODE steps; returns each step's logits.
fn decode_together(engine: &mut Engine, prompts: &[Vec<u32>]) -> Vec<Vec<Vec<f32>>> {
    let mut seqs: Vec<Sequence> = prompts.iter().map(|_| Sequence::new()).collect();
    let mut next: Vec<u32> = Vec::new();
    for (seq, p) in seqs.iter_mut().zip(prompts) {
        let logits = engine.feed(seq, p).expect("prompt");
        next.push(argmax(&logits));
    }
    let mut steps = Vec::new();
    for _ in 0..N_DECODE {
        let tokens: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
        let mut work: Vec<SeqStep> = seqs
            .iter_mut()
            .zip(&tokens)
            .map(|(seq, t)| SeqStep {
                seq,
                tokens: &t[..],
                logits_rows: vec![0],
            })
            .collect();
        let out = engine.step_batch(&mut work).expect("decode step");
        next = out.iter().map(|l| argmax(l)).collect();
        steps.push(out);
    }
    steps
}

fn check(path: &Path) {
    check_prompts(path, 5);
}

/// `check` with decode prompts of `first_len`, `first_len + 3`, ... tokens.
fn check_prompts(path: &Path, first_len: usize) {
    let mut gpu = match load(path, Device::Cuda(0)) {
        Ok(e) => e,
        Err(EngineError::Device(why)) => {
            eprintln!("skipped {}: {why}", path.display());
            return;
        }
        Err(e) => panic!("{}: {e}", path.display()),
    };
    let mut cpu = load(path, Device::Cpu).expect("loads on the CPU");
    eprintln!("{}: {}", path.display(), gpu.info().backend);
    let n_vocab = cpu.n_vocab();

    let p = prompt(1, 40, n_vocab);
    let (mut a, mut b) = (Sequence::new(), Sequence::new());
    let want = cpu.feed(&mut a, &p).expect("cpu prompt");
    let got = gpu.feed(&mut b, &p).expect("gpu prompt");
    let d = rel_diff(&want, &got);
    eprintln!("  prompt of 40: relative max |logit diff| {d:.2e}");
    assert!(d <= BOUND, "prompt logits differ by {d:e}");

    let prompts: Vec<Vec<u32>> = (0..N_SEQS as u64)
        .map(|i| prompt(10 + i, first_len + 3 * i as usize, n_vocab))
        .collect();
    // One sequence alone (a step the CUDA backend may run as one kernel), then all together.
    for group in [&prompts[..1], &prompts[..]] {
        let want = decode_together(&mut cpu, group);
        let got = decode_together(&mut gpu, group);
        let worst = compare_decodes(&want, &got, group.len());
        eprintln!(
            "  decode, {} together: relative max |logit diff| {worst:.2e}",
            group.len()
        );
        assert!(worst <= BOUND, "decode logits differ by {worst:e}");
    }
}

/// The largest relative logit difference of `n` sequences' steps, each compared up to its
/// first greedy choice that differs (which must be a near-tie).
fn compare_decodes(want: &[Vec<Vec<f32>>], got: &[Vec<Vec<f32>>], n: usize) -> f32 {
    let mut worst = 0f32;
    for s in 0..n {
        for (step, (w, g)) in want.iter().zip(got).enumerate() {
            let (w, g) = (&w[s], &g[s]);
            worst = worst.max(rel_diff(w, g));
            if argmax(w) != argmax(g) {
                // Only a near-tie may flip: one that logits within BOUND of the CPU's can
                // reverse (each of the two may move by BOUND times the largest). After it the
                // sequences differ, so stop comparing.
                let gap = top_gap(w);
                let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
                assert!(
                    gap < 2.0 * BOUND * scale,
                    "sequence {s} step {step}: greedy token {} vs {} with a gap of {gap} \
                     (largest logit {scale}, logits differ by {:e} relative)",
                    argmax(w),
                    argmax(g),
                    rel_diff(w, g)
                );
                eprintln!(
                    "  sequence {s}: near-tie at step {step} (gap {gap}, largest logit {scale}, \
                     logits differ by {:.2e} relative), compared up to it",
                    rel_diff(w, g)
                );
                break;
            }
        }
    }
    worst
}

fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(name)
}

#[test]
fn tiny_qwen3_f16() {
    check(&fixture("tiny-qwen3-f16.gguf"));
}

#[test]
fn tiny_qwen3_q8_0() {
    check(&fixture("tiny-qwen3-q8_0.gguf"));
}

/// Decode steps whose sequences grow past the length from which the CUDA backend splits
/// attention heads across blocks (set low here, so that spans of 110 to 140 positions take
/// one and then two or three splits): recordings on both sides of it, replayed.
#[test]
fn tiny_qwen3_q8_0_with_split_attention() {
    // NOTE: the whole test process sees this; other tests then split too, which changes only
    // which kernels they run, not what they must match.
    std::env::set_var("HEARTH_CUDA_ATTN_SPLIT_FROM", "120");
    check_prompts(&fixture("tiny-qwen3-q8_0.gguf"), 110);
}

#[test]
fn hf_tiny_llama_bf16() {
    check(&fixture("hf-tiny-llama-bf16"));
}

#[test]
fn hf_tiny_qwen2_biases() {
    check(&fixture("hf-tiny-qwen2"));
}

/// Sparse experts: routing is read back to the host and the experts' outputs are added by
/// the default (host) `scatter_add_rows`.
#[test]
fn tiny_qwen3_moe_q8_0() {
    check(&fixture("tiny-qwen3-moe-q8_0.gguf"));
}

#[test]
fn hf_tiny_mixtral() {
    check(&fixture("hf-tiny-mixtral"));
}

#[test]
fn models_from_the_environment() {
    let Some(list) = std::env::var_os("HEARTH_CUDA_TEST_MODELS") else {
        eprintln!("HEARTH_CUDA_TEST_MODELS not set: no extra models");
        return;
    };
    for path in std::env::split_paths(&list) {
        check(&path);
    }
}
