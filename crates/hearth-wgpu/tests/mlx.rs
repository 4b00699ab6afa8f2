//! MLX affine-quantized weights on the wgpu backend against the CPU backend, bit for bit:
//! the matmul (1 to 11 tokens, stored and accumulated, rows of one pass and of several) and
//! embedding rows, for 4 and 8 bits, each group size and scale type, whole and split across
//! bindings by rows.

mod common;

use std::sync::Arc;

use common::{cpu, embed_on, gpu, matmul_on, random};
use half::{bf16, f16};
use hearth_backend::{Backend, HostWeight, MlxGroups};
use hearth_quant::{GgmlType, MlxSpec};
use rand::{rngs::StdRng, Rng, SeedableRng};

/// `values` as a scale or bias table of type `ty`.
fn table_bytes(values: &[f32], ty: GgmlType) -> Vec<u8> {
    match ty {
        GgmlType::F16 => values
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect(),
        GgmlType::BF16 => values
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect(),
        _ => values.iter().flat_map(|&v| v.to_le_bytes()).collect(),
    }
}

/// A weight `[rows, cols]` as an MLX checkpoint holds one: random packed values, scales in
/// [0.01, 0.05) and biases in [-0.1, 0.1).
fn mlx_weight(spec: MlxSpec, rows: usize, cols: usize, rng: &mut StdRng) -> HostWeight {
    let packed: Vec<u8> = (0..rows * cols * spec.bits as usize / 8)
        .map(|_| rng.gen())
        .collect();
    let n_groups = rows * cols / spec.group_size;
    let scales: Vec<f32> = (0..n_groups).map(|_| rng.gen_range(0.01..0.05)).collect();
    let biases: Vec<f32> = (0..n_groups).map(|_| rng.gen_range(-0.1..0.1)).collect();
    HostWeight {
        name: format!(
            "mlx {}-bit g{} {}",
            spec.bits, spec.group_size, spec.scale_ty
        ),
        ty: GgmlType::I32,
        rows,
        cols,
        data: Arc::new(packed),
        mlx: Some(MlxGroups {
            spec,
            scales: Arc::new(table_bytes(&scales, spec.scale_ty)),
            biases: Arc::new(table_bytes(&biases, spec.scale_ty)),
        }),
    }
}

fn spec(bits: u32, group_size: usize, scale_ty: GgmlType) -> MlxSpec {
    MlxSpec {
        bits,
        group_size,
        scale_ty,
    }
}

/// How many values differ in their bits.
fn bits_differ(a: &[f32], b: &[f32]) -> usize {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count()
}

/// Matmul and embedding of each case on `g` against the CPU, bit for bit.
fn check_against_cpu<B: Backend>(g: &B, cases: &[(MlxSpec, usize, usize)]) {
    let c = cpu();
    let mut rng = StdRng::seed_from_u64(23);
    for &(spec, rows, cols) in cases {
        let w = mlx_weight(spec, rows, cols, &mut rng);
        // Tiles of 4 tokens: one, partial, whole, and several with a partial one.
        for n in [1, 3, 4, 11] {
            let x = random(&mut rng, n * cols);
            for add in [false, true] {
                let want = matmul_on(&c, w.clone(), &x, n, add);
                let got = matmul_on(g, w.clone(), &x, n, add);
                let differ = bits_differ(&want, &got);
                if differ > 0 {
                    eprintln!(
                        "want {:?}\n got {:?}",
                        &want[..want.len().min(5)],
                        &got[..got.len().min(5)]
                    );
                }
                eprintln!(
                    "{} [{rows}x{cols}] n={n} add={add}: {differ} differ",
                    w.name
                );
                assert_eq!(differ, 0, "{} [{rows}x{cols}] n={n} add={add}", w.name);
            }
        }
        let tokens = [0u32, rows as u32 - 1, rows as u32 / 2, 0];
        let want = embed_on(&c, w.clone(), &tokens);
        let got = embed_on(g, w.clone(), &tokens);
        assert_eq!(bits_differ(&want, &got), 0, "embedding of {}", w.name);
    }
}

#[test]
fn mlx_matmul_and_embedding_equal_cpu_bit_for_bit() {
    let Some(g) = gpu() else { return };
    check_against_cpu(
        &g,
        &[
            (spec(4, 64, GgmlType::F16), 70, 384),
            (spec(4, 32, GgmlType::BF16), 37, 96),
            (spec(8, 128, GgmlType::F32), 21, 512),
            (spec(8, 32, GgmlType::F16), 40, 256),
            (spec(4, 128, GgmlType::BF16), 9, 128),
            // 33 and 300 groups a row: more than one pass of the matmul's workgroup holds.
            (spec(4, 32, GgmlType::F16), 3, 1056),
            (spec(4, 32, GgmlType::F16), 5, 9600),
        ],
    );
}

#[test]
fn mlx_weights_split_across_bindings_equal_cpu() {
    let Some(g) = gpu() else { return };
    // Rows of 4-bit g64 f16, 384 columns: 192 packed bytes and 2 × 12 of scales and biases,
    // 216 bytes; parts of 4 rows (the limit is whole words: 1000 → 4 rows of 216).
    let g = g.with_weight_part_limit(1000);
    check_against_cpu(&g, &[(spec(4, 64, GgmlType::F16), 70, 384)]);
}

#[test]
fn mlx_weights_with_tables_of_the_wrong_size_are_errors_naming_the_tensor() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(5);
    let mut w = mlx_weight(spec(4, 64, GgmlType::F16), 8, 128, &mut rng);
    if let Some(m) = &mut w.mlx {
        m.scales = Arc::new(vec![0u8; 6]);
    }
    let err = match g.load_weight(w) {
        Ok(_) => panic!("a scale table of 6 bytes for 16 groups loaded"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("mlx 4-bit g64") && err.contains("scales"),
        "{err}"
    );
}
