//! Matmul micro benchmark: decode (1 token) and prefill shapes per weight type, on 1 and 2
//! threads. Reports time per call, weight GB/s and GFLOP/s.
//!
//! `cargo bench -p hearth-quant --bench matmul -- [TYPE ...] [--threads N,M] [--prefill N]
//!  [--prefill-only] [--shape ROWSxCOLS] [--iters N]`
//!
//! `--iters N` runs a fixed number of calls per shape (after one warm-up call) instead of a
//! fixed time, so that `perf stat` cycle and instruction counts compare across builds.

use std::time::{Duration, Instant};

use half::{bf16, f16};
use hearth_quant::{kernel_name, matmul, GgmlType, WeightMatrix};

/// Offsets of the f16 scale fields of each block type (kept finite so the numbers are real).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        _ => &[],
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

fn random_weights(ty: GgmlType, rows: usize, cols: usize, rng: &mut XorShift) -> Vec<u8> {
    let n = rows * cols;
    match ty {
        GgmlType::F32 => (0..n).flat_map(|_| rng.unit().to_le_bytes()).collect(),
        GgmlType::F16 => (0..n)
            .flat_map(|_| f16::from_f32(rng.unit()).to_le_bytes())
            .collect(),
        GgmlType::BF16 => (0..n)
            .flat_map(|_| bf16::from_f32(rng.unit()).to_le_bytes())
            .collect(),
        _ => {
            let bytes = ty.bytes_for(n as u64).expect("whole blocks") as usize;
            let mut data: Vec<u8> = (0..bytes).map(|_| rng.next() as u8).collect();
            for b in data.chunks_exact_mut(ty.type_size()) {
                for &off in f16_fields(ty) {
                    b[off..off + 2]
                        .copy_from_slice(&f16::from_f32(rng.unit() * 0.01).to_le_bytes());
                }
            }
            data
        }
    }
}

/// Mean seconds per call over at least `min_time`, after `min_time / 2` of warm-up (clock
/// ramp-up and first-touch page faults otherwise show up as a slow first measurement).
fn time_it(min_time: Duration, mut f: impl FnMut()) -> f64 {
    let warm = Instant::now();
    while warm.elapsed() < min_time / 2 {
        f();
    }
    let start = Instant::now();
    let mut iters = 0u32;
    while iters < 3 || start.elapsed() < min_time {
        f();
        iters += 1;
    }
    start.elapsed().as_secs_f64() / iters as f64
}

/// Mean seconds per call over exactly `n` calls, after one warm-up call.
fn time_n(n: u32, mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed().as_secs_f64() / n.max(1) as f64
}

fn main() {
    use GgmlType::*;
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut threads = vec![1usize, 2];
    let mut prefill = 128usize;
    let mut filter = Vec::new();
    let mut prefill_only = false;
    let mut iters = None;
    let mut only_shape = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--threads" => {
                let v = it.next().expect("--threads needs a list like 1,2");
                threads = v
                    .split(',')
                    .map(|t| t.parse().expect("thread count"))
                    .collect();
            }
            "--prefill" => prefill = it.next().and_then(|v| v.parse().ok()).expect("--prefill N"),
            "--prefill-only" => prefill_only = true,
            "--shape" => only_shape = Some(it.next().expect("--shape ROWSxCOLS").clone()),
            "--iters" => iters = Some(it.next().and_then(|v| v.parse().ok()).expect("--iters N")),
            name => filter.push(name.to_uppercase()),
        }
    }
    let types = [
        Q4_1, Q8_0, Q4_K, Q6_K, Q5_0, F16, F32, Q4_0, Q5_K, Q3_K, Q2_K, Q5_1, BF16,
    ];
    // (rows, cols, n_tokens): decode shapes (640 x 2048 is where k-quants fit: cols % 256 == 0),
    // then prefill (SmolLM2, then Gemma 3).
    let shapes = [
        (1536, 576, 1),
        (49152, 576, 1),
        (262144, 640, 1),
        (640, 2048, 1),
        (1536, 576, prefill),
        (576, 1536, prefill),
        // Gemma 3 270M prefill: attn_q / ffn_up (640 -> 1024 / 2048) and ffn_down (2048 -> 640).
        (1024, 640, prefill),
        (2048, 640, prefill),
        (640, 2048, prefill),
    ];
    println!("kernels: {}", kernel_name());
    println!(
        "{:<5} {:>3} {:>17} {:>5} {:>10} {:>8} {:>9}",
        "type", "thr", "rows x cols", "tok", "us/call", "GB/s", "GFLOP/s"
    );
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for ty in types {
        if !filter.is_empty() && !filter.iter().any(|f| f == ty.name()) {
            continue;
        }
        for &(rows, cols, n_tokens) in &shapes {
            let skip_shape = only_shape
                .as_ref()
                .is_some_and(|s| *s != format!("{rows}x{cols}"));
            if cols % ty.block_size() != 0 || (prefill_only && n_tokens == 1) || skip_shape {
                continue;
            }
            let data = random_weights(ty, rows, cols, &mut rng);
            let w = WeightMatrix::new(ty, &data, rows, cols).expect("consistent shape");
            let x: Vec<f32> = (0..n_tokens * cols).map(|_| rng.unit()).collect();
            let mut out = vec![0f32; n_tokens * rows];
            for &t in &threads {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(t)
                    .build()
                    .expect("thread pool");
                let min_time = Duration::from_millis(300);
                let mut call = || matmul(&w, &x, n_tokens, &mut out).expect("matmul");
                let secs = pool.install(|| match iters {
                    Some(n) => time_n(n, &mut call),
                    None => time_it(min_time, &mut call),
                });
                let gbs = data.len() as f64 / secs / 1e9;
                let gflops = 2.0 * (rows * cols * n_tokens) as f64 / secs / 1e9;
                println!(
                    "{:<5} {:>3} {:>17} {:>5} {:>10.1} {:>8.2} {:>9.2}",
                    ty.name(),
                    t,
                    format!("{rows} x {cols}"),
                    n_tokens,
                    secs * 1e6,
                    gbs,
                    gflops
                );
            }
        }
    }
}
