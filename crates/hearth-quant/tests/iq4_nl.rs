//! IQ4_NL weights: dequantization compared bit for bit with gguf-py
//! (`tests/make_iq4_nl_fixture.py` writes `tests/data/dequant_iq4_nl.bin`), and the dot
//! products and matmul compared with those reference values.

use hearth_quant::{
    dequantize_row, matmul, quantize_activations, supports_dequantize, supports_matmul, vec_dot,
    vec_dot_reference, vec_dot_type, GgmlType, WeightMatrix,
};

/// One fixture record: raw IQ4_NL blocks and gguf-py's values for them.
struct Record {
    raw: Vec<u8>,
    values: Vec<f32>,
}

fn u32_at(b: &[u8], pos: &mut usize) -> u32 {
    let v = u32::from_le_bytes(b[*pos..*pos + 4].try_into().unwrap());
    *pos += 4;
    v
}

fn load() -> Vec<Record> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/dequant_iq4_nl.bin");
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    assert_eq!(&b[..4], b"HQFX", "bad fixture magic in {path}");
    let mut pos = 4;
    let count = u32_at(&b, &mut pos);
    (0..count)
        .map(|_| {
            let id = u32_at(&b, &mut pos);
            assert_eq!(GgmlType::from_id(id), Some(GgmlType::IQ4_NL));
            let n = u32_at(&b, &mut pos) as usize;
            let n_bytes = u32_at(&b, &mut pos) as usize;
            let raw = b[pos..pos + n_bytes].to_vec();
            pos += n_bytes;
            let values = b[pos..pos + 4 * n]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            pos += 4 * n;
            Record { raw, values }
        })
        .collect()
}

#[test]
fn iq4_nl_is_registered_for_loading_and_matmul() {
    assert!(supports_dequantize(GgmlType::IQ4_NL));
    assert!(supports_matmul(GgmlType::IQ4_NL));
    assert_eq!(vec_dot_type(GgmlType::IQ4_NL), Some(GgmlType::Q8_0));
}

#[test]
fn dequantize_matches_gguf_py_exactly() {
    let records = load();
    assert_eq!(records.len(), 3);
    for r in &records {
        let mut out = vec![0f32; r.values.len()];
        dequantize_row(GgmlType::IQ4_NL, &r.raw, &mut out).unwrap();
        for (i, (a, b)) in out.iter().zip(&r.values).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (*a == 0.0 && *b == 0.0),
                "element {i} of {}: got {a}, gguf-py {b}",
                r.values.len()
            );
        }
        // Rows inside a tensor may start at any byte.
        let mut shifted = vec![0u8; r.raw.len() + 1];
        shifted[1..].copy_from_slice(&r.raw);
        let mut out2 = vec![0f32; r.values.len()];
        dequantize_row(GgmlType::IQ4_NL, &shifted[1..], &mut out2).unwrap();
        assert_eq!(out, out2);
    }
}

#[test]
fn dequantize_rejects_partial_blocks() {
    let mut out = [0f32; 32];
    let err = dequantize_row(GgmlType::IQ4_NL, &[0; 17], &mut out).unwrap_err();
    assert!(err.to_string().contains("IQ4_NL"), "{err}");
    let mut out = [0f32; 48];
    let err = dequantize_row(GgmlType::IQ4_NL, &[0; 36], &mut out).unwrap_err();
    assert!(err.to_string().contains("IQ4_NL"), "{err}");
}

/// Activations quantized to Q8_0 and their dequantized values.
fn q8_0_row(x: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let mut a = vec![0u8; x.len() / 32 * 34];
    quantize_activations(GgmlType::Q8_0, x, &mut a).unwrap();
    let mut av = vec![0f32; x.len()];
    dequantize_row(GgmlType::Q8_0, &a, &mut av).unwrap();
    (a, av)
}

/// Deterministic activations with both signs and varied magnitude.
fn activations(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761) >> 8;
            (h % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

#[test]
fn dot_products_equal_the_gguf_py_values_times_the_activations() {
    // Each dot sums exact integer products per block and scales them once, so it agrees with
    // the f64 sum of gguf-py's weight values times the dequantized activations up to f32
    // rounding of the per-block scales and sums.
    for (k, r) in load().iter().enumerate() {
        let n = r.values.len();
        let (a, av) = q8_0_row(&activations(n, k as u32));
        let want: f64 = r
            .values
            .iter()
            .zip(&av)
            .map(|(&w, &x)| w as f64 * x as f64)
            .sum();
        let bound: f64 = r
            .values
            .iter()
            .zip(&av)
            .map(|(&w, &x)| (w as f64 * x as f64).abs())
            .sum();
        let reference = vec_dot_reference(GgmlType::IQ4_NL, n, &r.raw, &a).unwrap();
        let fast = vec_dot(GgmlType::IQ4_NL, n, &r.raw, &a).unwrap();
        for (name, got) in [("reference", reference), ("fast", fast)] {
            assert!(
                (got as f64 - want).abs() <= 1e-5 * bound + 1e-30,
                "{name} dot of {n}: {got} vs {want} (bound {bound})"
            );
        }
    }
}

#[test]
fn matmul_equals_per_row_dots() {
    // The 18-block record as 3 rows of 6 blocks (192 columns), against 5 tokens.
    let r = &load()[0];
    let (rows, cols, n_tokens) = (3, 192, 5);
    let w = WeightMatrix::new(GgmlType::IQ4_NL, &r.raw, rows, cols).unwrap();
    let x = activations(n_tokens * cols, 99);
    let mut out = vec![f32::NAN; n_tokens * rows];
    matmul(&w, &x, n_tokens, &mut out).unwrap();
    for t in 0..n_tokens {
        let (_, av) = q8_0_row(&x[t * cols..(t + 1) * cols]);
        for row in 0..rows {
            let wv = &r.values[row * cols..(row + 1) * cols];
            let want: f64 = wv.iter().zip(&av).map(|(&w, &x)| w as f64 * x as f64).sum();
            let bound: f64 = wv
                .iter()
                .zip(&av)
                .map(|(&w, &x)| (w as f64 * x as f64).abs())
                .sum();
            let got = out[t * rows + row] as f64;
            assert!(
                (got - want).abs() <= 1e-5 * bound + 1e-30,
                "out[{t}, {row}] = {got}, want {want}"
            );
        }
    }
}
