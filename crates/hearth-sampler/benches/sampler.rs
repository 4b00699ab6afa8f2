//! Sampler timings on a gemma-sized vocabulary (262,144 tokens): `cargo bench -p hearth-sampler`.

use std::hint::black_box;
use std::time::Instant;

use hearth_sampler::{argmax, top_logprobs, Sampler, SamplingParams};

const N_VOCAB: usize = 262_144;

/// Logits shaped like a language model's: a few strong candidates over a wide tail.
fn logits() -> Vec<f32> {
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    (0..N_VOCAB)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 40) as f32 / (1u64 << 24) as f32;
            // Mostly around -5, occasionally up to +10.
            -5.0 + 3.0 * u + if u > 0.9995 { 12.0 * u } else { 0.0 }
        })
        .collect()
}

fn time(name: &str, iters: usize, mut f: impl FnMut() -> u32) {
    black_box(f()); // warm-up: first call sizes the scratch buffers
    let start = Instant::now();
    for _ in 0..iters {
        black_box(f());
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
    println!("{name:<44} {us:>9.1} µs/token");
}

fn main() {
    let l = logits();
    let history: Vec<u32> = (0..64).map(|i| i * 4099 % N_VOCAB as u32).collect();
    let seeded = |p: SamplingParams| SamplingParams { seed: Some(1), ..p };
    let cases = [
        ("greedy", SamplingParams::greedy()),
        (
            "greedy + repeat_penalty 1.1",
            SamplingParams {
                repeat_penalty: 1.1,
                ..SamplingParams::greedy()
            },
        ),
        (
            "defaults (top_k 40, top_p 0.95, min_p 0.05)",
            SamplingParams::default(),
        ),
        (
            "top_k 0, top_p 0.95, min_p 0.05",
            SamplingParams {
                top_k: 0,
                ..SamplingParams::default()
            },
        ),
        (
            "top_k 0, top_p 1, min_p 0 (full softmax)",
            SamplingParams {
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                ..SamplingParams::default()
            },
        ),
    ];
    for (name, params) in cases {
        let Ok(mut s) = Sampler::new(seeded(params)) else {
            panic!("bench parameters for {name} are invalid");
        };
        time(name, 200, || s.sample(&l, &history));
    }
    time("argmax", 200, || argmax(&l));
    time("top_logprobs(20)", 200, || {
        top_logprobs(&l, 20).len() as u32
    });
}
