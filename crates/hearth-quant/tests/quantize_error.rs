//! Quantization error per type on llama.cpp's `test-quantize-fns` data, within the bounds that
//! test uses, and round trips through the scalar dequantizer.
//!
//! Bounds (tests/test-quantize-fns.cpp): total error 0.002 (0.0075 for Q2_K, 0.004 for
//! Q3_K), dot product error 0.02 (0.04 for Q2_K), measured on 4096 values
//! `0.1 + 2 * cos(i + offset)`.

use hearth_quant::{
    dequantize_row, quantize_activations, quantize_row, vec_dot, vec_dot_type, GgmlType,
};

const TEST_SIZE: usize = 32 * 128;

const TYPES: [GgmlType; 10] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// `generate_data`: `0.1 + 2*cosf(i + offset)`, the sum taken in double as C promotes it.
fn generate_data(offset: f32) -> Vec<f32> {
    (0..TEST_SIZE)
        .map(|i| (0.1 + (2.0 * (i as f32 + offset).cos()) as f64) as f32)
        .collect()
}

/// `array_rmse`: `sqrt(sum of squared differences) / n` (not a true RMSE, as in the test).
fn array_rmse(a: &[f32], b: &[f32]) -> f32 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = (x - y) as f64;
            d * d
        })
        .sum();
    (sum.sqrt() as f32) / a.len() as f32
}

fn quantize(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; ty.bytes_for(x.len() as u64).unwrap() as usize];
    quantize_row(ty, x, &mut q).unwrap();
    q
}

fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    dequantize_row(ty, &quantize(ty, x), &mut out).unwrap();
    out
}

/// Bits per element of each type's quants (8 for the float types, whose relative error is
/// below 2^-8).
fn bits(ty: GgmlType) -> u32 {
    match ty {
        GgmlType::Q2_K => 2,
        GgmlType::Q3_K => 3,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K => 4,
        GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q5_K => 5,
        GgmlType::Q6_K => 6,
        _ => 8,
    }
}

fn max_total_error(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::Q2_K => 0.0075,
        GgmlType::Q3_K => 0.0040,
        _ => 0.002,
    }
}

#[test]
fn total_quantization_error_within_llama_cpp_bounds() {
    let x = generate_data(0.0);
    for ty in TYPES {
        let err = array_rmse(&x, &round_trip(ty, &x));
        eprintln!("{ty}: total quantization error {err:.6}");
        assert!(err < max_total_error(ty), "{ty}: {err}");
        // Not vacuous: every type here loses some precision on this data.
        assert!(err > 0.0, "{ty}");
    }
}

#[test]
fn dot_product_error_within_llama_cpp_bounds() {
    let (x, y) = (generate_data(0.0), generate_data(1.0));
    let exact: f64 = x.iter().zip(&y).map(|(&a, &b)| (a * b) as f64).sum();
    for ty in TYPES {
        let act = vec_dot_type(ty).unwrap();
        let mut a = vec![0u8; act.bytes_for(TEST_SIZE as u64).unwrap() as usize];
        quantize_activations(act, &y, &mut a).unwrap();
        let got = vec_dot(ty, TEST_SIZE, &quantize(ty, &x), &a).unwrap();
        let err = (got - exact as f32).abs() / TEST_SIZE as f32;
        let bound = if ty == GgmlType::Q2_K { 0.04 } else { 0.02 };
        eprintln!("{ty}: dot product error {err:.6}");
        assert!(err < bound, "{ty}: {err}");
    }
}

#[test]
fn sizes_and_exact_values_round_trip() {
    // Values a type represents exactly come back exactly: -8..7 times a power of two for the
    // symmetric 4-bit type, 0..15 steps above the block minimum for the affine one.
    let q4: Vec<f32> = (0..64).map(|i| ((i % 16) as f32 - 8.0) * 0.25).collect();
    assert_eq!(round_trip(GgmlType::Q4_0, &q4), q4);
    let q41: Vec<f32> = (0..64).map(|i| (i % 16) as f32 * 0.5 + 1.0).collect();
    assert_eq!(round_trip(GgmlType::Q4_1, &q41), q41);
    // Q8_0: integers with a block maximum of 127 give d = 1.
    let q8: Vec<f32> = (0..64).map(|i| ((i * 37) % 255) as f32 - 127.0).collect();
    let q8: Vec<f32> = q8
        .chunks(32)
        .flat_map(|c| c.iter().copied().chain([127.0]).skip(1))
        .collect();
    assert_eq!(round_trip(GgmlType::Q8_0, &q8), q8);
    let x = generate_data(0.5);
    for ty in TYPES
        .into_iter()
        .chain([GgmlType::F16, GgmlType::BF16, GgmlType::F32])
    {
        let q = quantize(ty, &x);
        assert_eq!(
            q.len(),
            TEST_SIZE / ty.block_size() * ty.type_size(),
            "{ty} size"
        );
        let back = round_trip(ty, &x);
        let max_diff = x
            .iter()
            .zip(&back)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        // The data spans [-1.9, 2.1]; no element is off by more than one quantization step of
        // that range.
        let step = 4.0 / ((1u32 << bits(ty)) - 1) as f32;
        assert!(
            max_diff < step,
            "{ty}: max |x - dequant(quant(x))| = {max_diff}"
        );
    }
    assert_eq!(round_trip(GgmlType::F32, &x), x);
}

#[test]
fn all_zero_input_stays_zero() {
    let zeros = vec![0f32; 512];
    for ty in TYPES {
        assert!(round_trip(ty, &zeros).iter().all(|&v| v == 0.0), "{ty}");
    }
}
