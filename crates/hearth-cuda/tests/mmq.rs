//! The tensor-core matmul of quantized weights and int8 activations (kernels/mmq.cu), which
//! takes batches of 5 to 48 tokens: tiles cut by the ends of rows, tokens and groups, stored and
//! accumulated, against the int8 GEMV on one token at a time (same products, another summation
//! order) and against the CPU backend. Without a usable GPU the test prints "skipped: <reason>".

mod common;

use common::{gpu, random_host_weight};
use hearth_backend::cpu::CpuBackend;
use hearth_backend::Backend;
use hearth_quant::GgmlType;
use rand::{Rng, SeedableRng};

/// `W · x` (or, with `base`, `base + W · x`) on `be`.
fn project<B: Backend>(
    be: &B,
    w: &B::Weight,
    x: &[f32],
    (tokens, cols, rows): (usize, usize, usize),
    base: Option<&[f32]>,
) -> Vec<f32> {
    be.begin_forward(None);
    let xt = be.upload(x, tokens, cols).expect("upload");
    let out = match base {
        Some(b) => {
            let mut out = be.upload(b, tokens, rows).expect("upload");
            be.matmul_add(w, &xt, &mut out).expect("matmul_add");
            out
        }
        None => {
            let mut out = be.alloc(tokens, rows).expect("alloc");
            be.matmul(w, &xt, &mut out).expect("matmul");
            out
        }
    };
    be.to_host(&out).expect("to host")
}

/// Σ (a − b)² / Σ b².
fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    num / den
}

#[test]
fn mmq_matches_the_gemv_and_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    let cpu = CpuBackend::new(2).expect("cpu backend");
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    // (type, rows, cols): whole tiles; rows and groups that end inside a tile.
    let cases = [
        (GgmlType::Q8_0, 256, 512),
        (GgmlType::Q8_0, 200, 160),
        (GgmlType::Q8_0, 96, 1024),
        (GgmlType::Q4_K, 256, 512),
        (GgmlType::Q4_K, 200, 1280),
    ];
    for (ty, rows, cols) in cases {
        let host = random_host_weight(ty, rows, cols, &mut rng);
        let w_gpu = gpu.load_weight(host.clone()).expect("load");
        let w_cpu = cpu.load_weight(host).expect("load");
        // 5 to 48 tokens take MMQ (see backend/mmq.rs); 33 and 48 end inside a token tile.
        for tokens in [5, 17, 32, 33, 48] {
            let x: Vec<f32> = (0..tokens * cols)
                .map(|_| rng.gen_range(-2.0..2.0))
                .collect();
            let base: Vec<f32> = (0..tokens * rows)
                .map(|_| rng.gen_range(-1.0..1.0))
                .collect();
            for accumulate in [false, true] {
                let what = format!("{ty} {rows}x{cols} x{tokens} accumulate {accumulate}");
                let b = accumulate.then_some(base.as_slice());
                let got = project(&gpu, &w_gpu, &x, (tokens, cols, rows), b);
                // The GEMV, token by token.
                let mut by_token = Vec::new();
                for t in 0..tokens {
                    let xt = &x[t * cols..(t + 1) * cols];
                    let bt = b.map(|b| &b[t * rows..(t + 1) * rows]);
                    by_token.extend(project(&gpu, &w_gpu, xt, (1, cols, rows), bt));
                }
                let vs_gemv = nmse(&got, &by_token);
                let want = project(&cpu, &w_cpu, &x, (tokens, cols, rows), b);
                let vs_cpu = nmse(&got, &want);
                eprintln!("{what}: nmse vs gemv {vs_gemv:.2e}, vs cpu {vs_cpu:.2e}");
                // Same 8-bit products as the GEMV, summed in another order (2e-14 measured for
                // the GEMVs against the CPU); a wrong fragment, tile edge or scale gives 1e-2.
                assert!(vs_gemv < 1e-10, "{what}: nmse {vs_gemv:e} vs the GEMV");
                // Q8_0: the CPU quantizes the activations the same way. K-quants: the CPU uses
                // 256-value groups (Q8_K), ~1e-5 relative apart from the GPU's 32-value ones.
                let bound = if ty == GgmlType::Q8_0 { 1e-10 } else { 1e-3 };
                assert!(vs_cpu < bound, "{what}: nmse {vs_cpu:e} vs the CPU");
            }
        }
    }
}
