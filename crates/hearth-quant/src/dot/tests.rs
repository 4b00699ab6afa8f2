//! SIMD kernels against the scalar references on random blocks.

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::quantize_activations;

/// Offsets of f16 scale fields in each weight block (random bytes there could be NaN or huge).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        _ => &[],
    }
}

/// A random weight row of `n_blocks` blocks with finite scales.
pub(crate) fn random_row(ty: GgmlType, n_blocks: usize, rng: &mut StdRng) -> Vec<u8> {
    let n = n_blocks * ty.block_size();
    match ty {
        GgmlType::F32 => (0..n)
            .flat_map(|_| rng.gen_range(-2f32..2.0).to_le_bytes())
            .collect(),
        GgmlType::F16 => (0..n)
            .flat_map(|_| f16::from_f32(rng.gen_range(-2f32..2.0)).to_le_bytes())
            .collect(),
        GgmlType::BF16 => (0..n)
            .flat_map(|_| half::bf16::from_f32(rng.gen_range(-2f32..2.0)).to_le_bytes())
            .collect(),
        _ => {
            let mut row: Vec<u8> = (0..n_blocks * ty.type_size()).map(|_| rng.gen()).collect();
            for b in row.chunks_exact_mut(ty.type_size()) {
                for &off in f16_fields(ty) {
                    let v = f16::from_f32(rng.gen_range(-0.05f32..0.05));
                    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
            row
        }
    }
}

/// Dequantized activation row, for the tolerance bound.
fn act_values(act: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    if act == GgmlType::Q8_1 {
        // Same as Q8_0 except for the extra `s` field.
        for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(36)) {
            let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
            for (v, &q) in o.iter_mut().zip(&b[4..]) {
                *v = d * q as i8 as f32;
            }
        }
    } else {
        crate::dequantize_row(act, bytes, &mut out).unwrap();
    }
    out
}

/// The allowed |fast - reference| of one dot product: 1e-5 of sum |w_i * a_i|, since both sum
/// integer products exactly per block and differ only in f32 reassociation.
pub(crate) fn tolerance(ty: GgmlType, w: &[u8], a: &[u8], n: usize) -> f32 {
    let act = vec_dot_type(ty).unwrap();
    let mut wv = vec![0f32; n];
    crate::dequantize_row(ty, w, &mut wv).unwrap();
    let av = act_values(act, a, n);
    let bound: f32 = wv.iter().zip(&av).map(|(p, q)| (p * q).abs()).sum();
    1e-5 * bound + 1e-30
}

/// |fast - reference| must stay within 1e-5 of sum |w_i * a_i| (f32 reassociation only).
fn check_level(level: KernelLevel) {
    let table = kernels_at(level);
    let mut rng = StdRng::seed_from_u64(7);
    let mut checked = 0;
    for &(ty, fast) in &table {
        let act = vec_dot_type(ty).unwrap();
        let reference = scalar_kernel(ty).unwrap();
        let max_blocks = if ty.block_size() == 1 { 300 } else { 12 };
        for seed in 0..40u64 {
            let n_blocks = 1 + (seed as usize * 7919) % max_blocks;
            let n = n_blocks * ty.block_size();
            let w = random_row(ty, n_blocks, &mut rng);
            let x: Vec<f32> = (0..n).map(|_| rng.gen_range(-3f32..3.0)).collect();
            let mut a = vec![0u8; row_bytes(act, n).unwrap()];
            quantize_activations(act, &x, &mut a).unwrap();
            let (got, want) = (fast(&w, &a), reference(&w, &a));
            let tol = tolerance(ty, &w, &a, n);
            assert!(
                (got - want).abs() <= tol,
                "{} {ty}: n={n} seed={seed}: fast {got} vs reference {want} (tol {tol})",
                level.name()
            );
            checked += 1;
        }
    }
    assert!(checked > 0);
}

#[test]
fn simd_kernels_match_scalar_reference() {
    check_level(KernelLevel::Scalar);
    #[cfg(target_arch = "x86_64")]
    {
        let level = kernel_level();
        if level != KernelLevel::Scalar {
            check_level(KernelLevel::Avx2);
        }
        if level == KernelLevel::Avx512Vnni {
            check_level(KernelLevel::Avx512Vnni);
        }
    }
}

#[test]
fn q8_0_weights_at_minus_128_are_exact() {
    // -128 is a valid stored weight; the |x| · sign(y, x) trick must not overflow on it.
    let mut w = vec![0u8; 34];
    w[..2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
    w[2..].fill(0x80);
    let x = [127f32; 32];
    let mut a = vec![0u8; 34];
    quantize_activations(GgmlType::Q8_0, &x, &mut a).unwrap();
    let want = -128.0 * 127.0 * 32.0;
    assert_eq!(vec_dot_reference(GgmlType::Q8_0, 32, &w, &a).unwrap(), want);
    assert_eq!(vec_dot(GgmlType::Q8_0, 32, &w, &a).unwrap(), want);
}

#[test]
fn vec_dot_checks_lengths_and_types() {
    let err = vec_dot(GgmlType::Q4_K, 256, &[0; 143], &[0; 292]).unwrap_err();
    assert!(err.to_string().contains("Q4_K"), "{err}");
    let err = vec_dot(GgmlType::Q4_K, 256, &[0; 144], &[0; 291]).unwrap_err();
    assert!(err.to_string().contains("Q8_K"), "{err}");
    let err = vec_dot(GgmlType::IQ4_XS, 256, &[0; 136], &[0; 292]).unwrap_err();
    assert!(err.to_string().contains("IQ4_XS"), "{err}");
}

/// Random weight rows and quantized activation rows for the multi-row / multi-token kernels.
fn random_case(
    ty: GgmlType,
    n_rows: usize,
    n_blocks: usize,
    rng: &mut StdRng,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let act = vec_dot_type(ty).unwrap();
    let n = n_blocks * ty.block_size();
    let w = (0..n_rows).map(|_| random_row(ty, n_blocks, rng)).collect();
    let a = (0..4)
        .map(|_| {
            let x: Vec<f32> = (0..n).map(|_| rng.gen_range(-3f32..3.0)).collect();
            let mut a = vec![0u8; row_bytes(act, n).unwrap()];
            quantize_activations(act, &x, &mut a).unwrap();
            a
        })
        .collect();
    (w, a)
}

fn assert_close(ty: GgmlType, what: &str, got: f32, w: &[u8], a: &[u8], n: usize) {
    let want = scalar_kernel(ty).unwrap()(w, a);
    let tol = tolerance(ty, w, a, n);
    assert!(
        (got - want).abs() <= tol,
        "{what} {ty}: n={n}: fast {got} vs reference {want} (tol {tol})"
    );
}

#[test]
fn multi_token_kernels_match_scalar_reference() {
    use GgmlType::*;
    let mut rng = StdRng::seed_from_u64(13);
    let mut checked = 0;
    for ty in [
        Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
    ] {
        let max_blocks = if ty.block_size() == 32 { 23 } else { 5 };
        for seed in 0..30usize {
            // Odd and even block counts (the 32-element kernels take blocks in pairs).
            let n_blocks = 1 + (seed * 7919) % max_blocks;
            let n = n_blocks * ty.block_size();
            let (w, a) = random_case(ty, 4, n_blocks, &mut rng);
            if let Some(dot4) = fast_kernel_x4(ty) {
                let got = dot4(&w[0], [&a[0], &a[1], &a[2], &a[3]]);
                for (k, &g) in got.iter().enumerate() {
                    assert_close(ty, "x4", g, &w[0], &a[k], n);
                }
                checked += 1;
            }
            if let Some(pk) = fast_packed(ty) {
                let act = vec_dot_type(ty).unwrap();
                // Odd strides: packed rows need no alignment.
                let (ws, as_) = (pk.w_row_bytes(n_blocks) + 3, pk.a_row_bytes(n_blocks) + 5);
                let mut wp = vec![0u8; 4 * ws];
                for (r, dst) in w.iter().zip(wp.chunks_exact_mut(ws)) {
                    pk.pack_weights(ty, r, n_blocks, dst);
                }
                let mut ap = vec![0u8; 4 * as_ + 1];
                for (r, dst) in a.iter().zip(ap[1..].chunks_exact_mut(as_)) {
                    pk.pack_acts(act, r, n_blocks, dst);
                }
                let at = |k: usize| &ap[1 + k * as_..1 + (k + 1) * as_];
                let got = pk.tile(&wp, ws, [at(0), at(1), at(2), at(3)], n_blocks);
                for (i, &g) in got.iter().enumerate() {
                    assert_close(ty, "packed tile", g, &w[i / 4], &a[i % 4], n);
                }
                checked += 1;
            }
        }
    }
    // Nothing to check where the CPU has no multi-token kernels.
    assert!(checked > 0 || kernel_level() != KernelLevel::Avx512Vnni);
}
