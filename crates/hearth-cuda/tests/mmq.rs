//! The tensor-core matmul of quantized weights (kernels/mmq.cu with int8 activations, or
//! kernels/mmq_f16.cu with f16 ones, by matrix size or as `HEARTH_CUDA_MMQ_F16` picks: run
//! these tests with it at 0 and at 1), which takes batches of 5 to 64 tokens (128 for small matrices): tiles cut by
//! the ends of rows, tokens and groups, stored and accumulated, against the int8 GEMV on one
//! token at a time and against the CPU backend. Without a usable GPU the test prints
//! "skipped: <reason>".

mod common;

use common::{gpu, random_host_weight};
use hearth_backend::cpu::CpuBackend;
use hearth_backend::{Activation, Backend};
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
        (GgmlType::Q6_K, 256, 512),
        (GgmlType::Q6_K, 200, 1280),
        // Few tiles over long rows: split-K (backend/mmq.rs), evenly (8 steps of 256 values
        // in 4 splits, 16 in 8) and not (11 steps in 5).
        (GgmlType::Q8_0, 64, 2048),
        (GgmlType::Q4_K, 96, 4096),
        (GgmlType::Q6_K, 96, 2816),
    ];
    for (ty, rows, cols) in cases {
        let f16 = hearth_cuda::mmq_takes_f16_activations(rows, cols);
        let host = random_host_weight(ty, rows, cols, &mut rng);
        let w_gpu = gpu.load_weight(host.clone()).expect("load");
        let w_cpu = cpu.load_weight(host).expect("load");
        // 5 to 128 tokens take MMQ for matrices this small (see backend/mmq.rs); 33, 48 and 97
        // end inside a token tile.
        for tokens in [5, 17, 32, 33, 48, 64, 97, 128] {
            let x: Vec<f32> = (0..tokens * cols)
                .map(|_| rng.gen_range(-2.0..2.0))
                .collect();
            let base: Vec<f32> = (0..tokens * rows)
                .map(|_| rng.gen_range(-1.0..1.0))
                .collect();
            for accumulate in [false, true] {
                let kind = if f16 { "f16" } else { "int8" };
                let what = format!("{ty} {rows}x{cols} x{tokens} accumulate {accumulate} {kind}");
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
                // int8: the same 8-bit products as the GEMV, summed in another order (2e-14
                // measured for the GEMVs against the CPU). f16: weights and activations rounded
                // to f16 (about 1e-7 apart from the exact products) against activations rounded
                // to 8 bits (about 1e-5). A wrong fragment, tile edge or scale gives 1e-2.
                let (gemv_bound, q8_0_bound) = if f16 { (1e-4, 1e-4) } else { (1e-10, 1e-10) };
                assert!(vs_gemv < gemv_bound, "{what}: nmse {vs_gemv:e} vs the GEMV");
                // Q8_0: the CPU quantizes the activations as the GEMV. K-quants: the CPU uses
                // 256-value groups (Q8_K), ~1e-5 relative apart from the GPU's 32-value ones.
                let bound = if ty == GgmlType::Q8_0 {
                    q8_0_bound
                } else {
                    1e-3
                };
                assert!(vs_cpu < bound, "{what}: nmse {vs_cpu:e} vs the CPU");
            }
        }
    }
}

/// q, k and v (rows of three sizes), and gate and up, each in one launch (`mmq3_*`): the same
/// bits as one launch per matrix, since every tile is computed alike: at 512 columns none is
/// split, at 4096 every launch here splits its tiles 8 ways (the most, backend/mmq.rs) on GPUs
/// of 100 multiprocessors or more.
#[test]
fn mmq_segments_equal_one_launch_per_matrix() {
    let Some(gpu) = gpu() else {
        return;
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let types = [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K];
    for (ty, cols) in [512, 4096].into_iter().flat_map(|c| types.map(|t| (t, c))) {
        let ws: Vec<_> = [200, 96, 64]
            .into_iter()
            .map(|rows| {
                let host = random_host_weight(ty, rows, cols, &mut rng);
                (rows, gpu.load_weight(host).expect("load"))
            })
            .collect();
        for tokens in [17, 48] {
            let what = format!("{ty} {cols} columns x{tokens}");
            let x: Vec<f32> = (0..tokens * cols)
                .map(|_| rng.gen_range(-2.0..2.0))
                .collect();
            gpu.begin_forward(None);
            let xt = gpu.upload(&x, tokens, cols).expect("upload");
            let mut outs: Vec<_> = ws
                .iter()
                .map(|(rows, _)| gpu.alloc(tokens, *rows).expect("alloc"))
                .collect();
            let [a, b, c] = &mut outs[..] else {
                unreachable!("three outputs")
            };
            gpu.matmul3([&ws[0].1, &ws[1].1, &ws[2].1], &xt, [a, b, c])
                .expect("matmul3");
            // Read back before `project` starts another pass, which reuses the pass's memory.
            let threes: Vec<_> = outs
                .iter()
                .map(|o| gpu.to_host(o).expect("to host"))
                .collect();
            for ((rows, w), three) in ws.iter().zip(threes) {
                let one = project(&gpu, w, &x, (tokens, cols, *rows), None);
                assert!(one == three, "{what}: {rows} rows of matmul3");
            }

            // gate and up: the 96-row matrix and another of 96 rows.
            let up = gpu
                .load_weight(random_host_weight(ty, 96, cols, &mut rng))
                .expect("load");
            let gate = &ws[1].1;
            gpu.begin_forward(None);
            let xt = gpu.upload(&x, tokens, cols).expect("upload");
            let mut fused = gpu.alloc(tokens, 96).expect("alloc");
            gpu.gated_matmul(gate, &up, &xt, Activation::Silu, &mut fused)
                .expect("gated");
            let mut g = gpu.alloc(tokens, 96).expect("alloc");
            let mut u = gpu.alloc(tokens, 96).expect("alloc");
            gpu.matmul(gate, &xt, &mut g).expect("gate");
            gpu.matmul(&up, &xt, &mut u).expect("up");
            gpu.glu(&mut g, &u, Activation::Silu).expect("glu");
            let fused = gpu.to_host(&fused).expect("to host");
            assert!(
                fused == gpu.to_host(&g).expect("to host"),
                "{what}: gate and up"
            );
        }
    }
}
