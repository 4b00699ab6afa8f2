//! The tensor-core matmul of quantized weights and int8 activations (kernels/mmq.cu), which
//! takes batches of 5 to 64 tokens, against the CPU backend: tiles cut by the ends of rows,
//! tokens and groups, stored and accumulated. Without a usable GPU the test prints
//! "skipped: <reason>".

mod common;

use std::sync::Arc;

use common::gpu;
use hearth_backend::cpu::CpuBackend;
use hearth_backend::{Backend, HostWeight};
use hearth_cuda::reference::random_weights;
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

#[test]
fn mmq_matches_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    let cpu = CpuBackend::new(2).expect("cpu backend");
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    // (rows, cols): whole tiles; rows and groups that end inside a tile (5 groups of 32).
    for (rows, cols) in [(256, 512), (200, 160), (96, 1024)] {
        let data = random_weights(GgmlType::Q8_0, rows, cols, &mut rng);
        let host = HostWeight {
            name: "w".into(),
            ty: GgmlType::Q8_0,
            rows,
            cols,
            data: Arc::new(data),
            mlx: None,
        };
        let w_gpu = gpu.load_weight(host.clone()).expect("load");
        let w_cpu = cpu.load_weight(host).expect("load");
        for tokens in [5, 17, 32, 33, 64] {
            let x: Vec<f32> = (0..tokens * cols)
                .map(|_| rng.gen_range(-2.0..2.0))
                .collect();
            let base: Vec<f32> = (0..tokens * rows)
                .map(|_| rng.gen_range(-1.0..1.0))
                .collect();
            for accumulate in [false, true] {
                let b = accumulate.then_some(base.as_slice());
                let shape = (tokens, cols, rows);
                let got = project(&gpu, &w_gpu, &x, shape, b);
                let want = project(&cpu, &w_cpu, &x, shape, b);
                let num: f64 = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| ((a - b) as f64).powi(2))
                    .sum();
                let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
                let nmse = num / den;
                eprintln!("{rows}x{cols} x{tokens} accumulate {accumulate}: nmse {nmse:.2e}");
                // The CPU quantizes Q8_0 activations the same way; only the summation order
                // differs (as for the int8 GEMVs, measured 2e-14). A wrong fragment, tile edge
                // or scale gives 1e-2 and more.
                assert!(
                    nmse < 1e-10,
                    "{rows}x{cols} x{tokens} accumulate {accumulate}: nmse {nmse:e}"
                );
            }
        }
    }
}
