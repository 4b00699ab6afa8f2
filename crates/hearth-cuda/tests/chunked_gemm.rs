//! A batch too large for the int8 kernels goes through cuBLAS on the weights' f16 values,
//! which are dequantized a chunk of rows at a time into one kept buffer. A Q6_K weight of
//! 8,400 x 4,096 (more values than one chunk holds: chunks of 8,192 and 208 rows, the second
//! starting inside a row of 210-byte blocks' matrix) times 72 tokens must match the CPU's
//! product on rows of both chunks and at the seam (72 tokens: more than MMQ takes). Without a usable GPU the test prints
//! "skipped: <reason>".

mod common;

use common::{gpu, random_host_weight};
use hearth_backend::Backend;
use hearth_quant::GgmlType;
use rand::{Rng, SeedableRng};

#[test]
fn a_weight_larger_than_one_chunk_matches_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let (rows, cols, tokens) = (8400, 4096, 72);
    let host = random_host_weight(GgmlType::Q6_K, rows, cols, &mut rng);
    let w = gpu.load_weight(host.clone()).expect("load");
    let x: Vec<f32> = (0..tokens * cols)
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    gpu.begin_forward(None);
    let xt = gpu.upload(&x, tokens, cols).expect("upload");
    let mut out = gpu.alloc(tokens, rows).expect("alloc");
    gpu.matmul(&w, &xt, &mut out).expect("matmul");
    let got = gpu.to_host(&out).expect("to host");

    let row_bytes = (cols / 256) * 210;
    let mut values = vec![0f32; cols];
    let (mut err, mut norm) = (0f64, 0f64);
    for r in (0..16).chain(8176..8208).chain(rows - 16..rows) {
        let raw = &host.data.bytes()[r * row_bytes..(r + 1) * row_bytes];
        hearth_quant::dequantize_row(GgmlType::Q6_K, raw, &mut values).expect("dequantize");
        for t in 0..tokens {
            let xs = &x[t * cols..(t + 1) * cols];
            let want: f64 = values
                .iter()
                .zip(xs)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum();
            err += (got[t * rows + r] as f64 - want).powi(2);
            norm += want.powi(2);
        }
    }
    // f16 weights and activations, f32 sums: an NMSE near 1e-7.
    let nmse = err / norm;
    println!("NMSE against the CPU: {nmse:.3e}");
    assert!(nmse < 1e-5, "NMSE {nmse} against the CPU");
}
