//! `matmul` against a naive loop of the scalar reference dot kernel.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::dot::tests::{random_row, tolerance};
use crate::*;

fn check(ty: GgmlType, rows: usize, n_blocks: usize, n_tokens: usize, rng: &mut StdRng) {
    let cols = n_blocks * ty.block_size();
    let data = random_row(ty, rows * n_blocks, rng);
    let w = WeightMatrix::new(ty, &data, rows, cols).unwrap();
    let x: Vec<f32> = (0..n_tokens * cols)
        .map(|_| rng.gen_range(-2f32..2.0))
        .collect();
    let mut out = vec![f32::NAN; n_tokens * rows];
    matmul(&w, &x, n_tokens, &mut out).unwrap();

    let act = vec_dot_type(ty).unwrap();
    let act_row = act.bytes_for(cols as u64).unwrap() as usize;
    let row_bytes = data.len() / rows;
    for t in 0..n_tokens {
        let mut a = vec![0u8; act_row];
        quantize_activations(act, &x[t * cols..(t + 1) * cols], &mut a).unwrap();
        for r in 0..rows {
            let wr = &data[r * row_bytes..(r + 1) * row_bytes];
            let want = vec_dot_reference(ty, cols, wr, &a).unwrap();
            let got = out[t * rows + r];
            let tol = tolerance(ty, wr, &a, cols);
            assert!(
                (got - want).abs() <= tol,
                "{ty} rows={rows} cols={cols} n_tokens={n_tokens}: out[{t}, {r}] = {got}, reference {want}"
            );
        }
    }
}

#[test]
fn matmul_matches_reference_loop() {
    use GgmlType::*;
    let mut rng = StdRng::seed_from_u64(11);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    for ty in [
        Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F32, F16, BF16,
    ] {
        assert!(supports_matmul(ty), "{ty}");
        // Odd and even block counts: the wide kernels take blocks in pairs.
        let block_counts: &[usize] = match ty.block_size() {
            1 => &[300],
            32 => &[1, 13, 18],
            _ => &[1, 2],
        };
        for &n_blocks in block_counts {
            for n_tokens in [1, 3, 17] {
                // Small (serial path) and large enough to be split across the pool.
                check(ty, 5, n_blocks, n_tokens, &mut rng);
                pool.install(|| check(ty, 203, n_blocks, n_tokens, &mut rng));
            }
        }
    }
    assert!(!supports_matmul(IQ2_XXS));
}

#[test]
fn matmul_and_dequantize_rows_check_shapes() {
    let data = vec![0u8; 4 * 18];
    assert!(WeightMatrix::new(GgmlType::Q4_0, &data, 4, 33).is_err());
    assert!(WeightMatrix::new(GgmlType::Q4_0, &data, 3, 32).is_err());
    let w = WeightMatrix::new(GgmlType::Q4_0, &data, 4, 32).unwrap();
    let mut out = vec![0f32; 4];
    assert!(matmul(&w, &[0.0; 31], 1, &mut out).is_err());
    assert!(matmul(&w, &[0.0; 32], 1, &mut out[..3]).is_err());
    let mut row = vec![1f32; 64];
    dequantize_rows(&w, 2, &mut row).unwrap();
    assert!(row.iter().all(|&v| v == 0.0));
    let err = dequantize_rows(&w, 3, &mut row).unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    assert!(dequantize_rows(&w, 0, &mut row[..31]).is_err());
}

#[test]
fn dequantize_rows_matches_dequantize_row() {
    let mut rng = StdRng::seed_from_u64(3);
    let data = random_row(GgmlType::Q6_K, 3, &mut rng);
    let w = WeightMatrix::new(GgmlType::Q6_K, &data, 3, 256).unwrap();
    let mut got = vec![0f32; 256];
    dequantize_rows(&w, 1, &mut got).unwrap();
    let mut want = vec![0f32; 256];
    dequantize_row(GgmlType::Q6_K, &data[210..420], &mut want).unwrap();
    assert_eq!(got, want);
}
