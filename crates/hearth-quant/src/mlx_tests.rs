use half::{bf16, f16};
use rand::{Rng, SeedableRng};

use super::*;

struct Owned {
    spec: MlxSpec,
    packed: Vec<u8>,
    scales: Vec<u8>,
    biases: Vec<u8>,
    rows: usize,
    cols: usize,
}

impl Owned {
    fn random(bits: u32, group_size: usize, scale_ty: GgmlType, rows: usize, cols: usize) -> Self {
        let mut rng = rand::rngs::StdRng::seed_from_u64(bits as u64 * 1000 + group_size as u64);
        let spec = MlxSpec {
            bits,
            group_size,
            scale_ty,
        };
        let packed = (0..rows * spec.packed_row_bytes(cols))
            .map(|_| rng.gen::<u8>())
            .collect();
        let n = rows * cols / group_size;
        let mut half = |lo: f32, hi: f32| -> Vec<u8> {
            (0..n)
                .flat_map(|_| {
                    let v = rng.gen_range(lo..hi);
                    match scale_ty {
                        GgmlType::BF16 => bf16::from_f32(v).to_le_bytes().to_vec(),
                        GgmlType::F32 => v.to_le_bytes().to_vec(),
                        _ => f16::from_f32(v).to_le_bytes().to_vec(),
                    }
                })
                .collect()
        };
        let scales = half(0.001, 0.02);
        let biases = half(-0.1, 0.1);
        Owned {
            spec,
            packed,
            scales,
            biases,
            rows,
            cols,
        }
    }

    fn matrix(&self) -> MlxMatrix<'_> {
        MlxMatrix::new(
            self.spec,
            &self.packed,
            &self.scales,
            &self.biases,
            self.rows,
            self.cols,
        )
        .expect("valid matrix")
    }
}

/// The reference: widen the row, then a plain f64 dot product.
fn reference(m: &MlxMatrix, x: &[f32], n_tokens: usize) -> Vec<f64> {
    let mut out = vec![0f64; n_tokens * m.rows];
    let mut row = vec![0f32; m.cols];
    for r in 0..m.rows {
        m.dequantize_row(r, &mut row).expect("row");
        for t in 0..n_tokens {
            let xt = &x[t * m.cols..(t + 1) * m.cols];
            out[t * m.rows + r] = row.iter().zip(xt).map(|(&a, &b)| a as f64 * b as f64).sum();
        }
    }
    out
}

#[test]
fn unpacks_values_little_endian_as_mlx_packs_them() {
    // One row of 32 4-bit values 0..15, 0..15: word k holds values 8k..8k+7, lowest bits first.
    let mut packed = Vec::new();
    for k in 0..4u32 {
        let mut word = 0u32;
        for j in 0..8u32 {
            word |= ((8 * k + j) % 16) << (4 * j);
        }
        packed.extend_from_slice(&word.to_le_bytes());
    }
    let scales = f16::from_f32(0.5).to_le_bytes();
    let biases = f16::from_f32(-1.0).to_le_bytes();
    let spec = MlxSpec {
        bits: 4,
        group_size: 32,
        scale_ty: GgmlType::F16,
    };
    let m = MlxMatrix::new(spec, &packed, &scales, &biases, 1, 32).expect("matrix");
    let mut row = vec![0f32; 32];
    m.dequantize_row(0, &mut row).expect("row");
    let want: Vec<f32> = (0..32).map(|i| 0.5 * (i % 16) as f32 - 1.0).collect();
    assert_eq!(row, want);
}

#[test]
fn matmul_matches_reference_for_each_format() {
    let cases = [
        (4, 64, GgmlType::F16),
        (4, 32, GgmlType::BF16),
        (4, 128, GgmlType::F32),
        (8, 32, GgmlType::F16),
        (8, 64, GgmlType::BF16),
        (8, 128, GgmlType::F16),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for (bits, gs, ty) in cases {
        let (rows, cols, n_tokens) = (70, 256, 3);
        let w = Owned::random(bits, gs, ty, rows, cols);
        let m = w.matrix();
        let x: Vec<f32> = (0..n_tokens * cols)
            .map(|_| rng.gen_range(-1.0..1.0))
            .collect();
        let mut out = vec![0f32; n_tokens * rows];
        mlx_matmul(&m, &x, n_tokens, &mut out).expect("matmul");
        let want = reference(&m, &x, n_tokens);
        for (i, (&a, &b)) in out.iter().zip(&want).enumerate() {
            let err = (a as f64 - b).abs();
            assert!(
                err < 1e-4 * b.abs().max(1.0),
                "bits {bits} gs {gs} {ty}: out[{i}] = {a}, reference {b}"
            );
        }
    }
}

#[test]
fn one_token_or_many_give_the_same_bits() {
    let (rows, cols, n_tokens) = (100, 128, 6);
    let w = Owned::random(4, 64, GgmlType::F16, rows, cols);
    let m = w.matrix();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let x: Vec<f32> = (0..n_tokens * cols)
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let mut all = vec![0f32; n_tokens * rows];
    mlx_matmul(&m, &x, n_tokens, &mut all).expect("batch");
    for t in 0..n_tokens {
        let mut one = vec![0f32; rows];
        mlx_matmul(&m, &x[t * cols..(t + 1) * cols], 1, &mut one).expect("one");
        assert_eq!(one, all[t * rows..(t + 1) * rows], "token {t}");
    }
}

#[test]
fn rejects_unknown_bits_groups_and_lengths() {
    let w = Owned::random(4, 64, GgmlType::F16, 2, 64);
    let spec = |bits, group_size| MlxSpec {
        bits,
        group_size,
        scale_ty: GgmlType::F16,
    };
    let err = MlxMatrix::new(spec(3, 64), &w.packed, &w.scales, &w.biases, 2, 64).unwrap_err();
    assert!(err.contains("3 bits"), "{err}");
    let err = MlxMatrix::new(spec(4, 48), &w.packed, &w.scales, &w.biases, 2, 64).unwrap_err();
    assert!(err.contains("group size 48"), "{err}");
    let err = MlxMatrix::new(spec(4, 64), &w.packed[1..], &w.scales, &w.biases, 2, 64).unwrap_err();
    assert!(err.contains("packed weights"), "{err}");
    let err = MlxMatrix::new(spec(4, 64), &w.packed, &w.scales, &w.biases[2..], 2, 64).unwrap_err();
    assert!(err.contains("biases"), "{err}");
}
