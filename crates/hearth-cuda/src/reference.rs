//! CPU references and test data for the conformance checks: random weights in GGUF block
//! layout, f64 results through hearth-quant's reference dequantization, and error measures.

use half::f16;
use hearth_quant::{dequantize_row, GgmlType};
use rand::Rng;
use rayon::prelude::*;

/// f32 unit roundoff (2^-24).
pub const F32_UNIT_ROUNDOFF: f64 = 5.960_464_477_539_063e-8;

/// Byte offsets of the f16 scale fields inside one block of `ty` (d, and dmin where it has
/// one), and the block size in bytes. None for types without a GEMV kernel.
fn scale_fields(ty: GgmlType) -> Option<(&'static [usize], usize)> {
    Some(match ty {
        GgmlType::Q8_0 => (&[0], 34),
        GgmlType::Q4_0 => (&[0], 18),
        GgmlType::Q4_K => (&[0, 2], 144),
        GgmlType::Q6_K => (&[208], 210),
        _ => return None,
    })
}

/// Random weights of `n_rows x n_cols` elements of `ty` in GGUF layout. Quant bytes are
/// uniform; f16 scales are drawn in [2^-10, 2^-6) (positive: for Q4_K this makes
/// [`abs_weight_rows`] exact), F16 weights uniform in (-1, 1).
pub fn random_weights(ty: GgmlType, n_rows: usize, n_cols: usize, rng: &mut impl Rng) -> Vec<u8> {
    let n = n_rows * n_cols;
    if ty == GgmlType::F16 {
        return (0..n)
            .flat_map(|_| f16::from_f32(rng.gen_range(-1.0f32..1.0)).to_le_bytes())
            .collect();
    }
    let bytes_len = ty.bytes_for(n as u64).unwrap_or(0) as usize;
    let mut bytes = vec![0u8; bytes_len];
    rng.fill(&mut bytes[..]);
    if let Some((fields, block_bytes)) = scale_fields(ty) {
        for block in bytes.chunks_exact_mut(block_bytes) {
            for &at in fields {
                let d = f16::from_f32(rng.gen_range(1.0f32 / 1024.0..1.0 / 64.0));
                block[at..at + 2].copy_from_slice(&d.to_le_bytes());
            }
        }
    }
    bytes
}

/// Dequantizes every row (hearth-quant's scalar reference, bit-exact with ggml).
pub fn dequantize_rows(ty: GgmlType, bytes: &[u8], n_rows: usize, n_cols: usize) -> Vec<f32> {
    let row_bytes = bytes.len() / n_rows.max(1);
    let mut out = vec![0f32; n_rows * n_cols];
    out.par_chunks_mut(n_cols)
        .zip(bytes.par_chunks(row_bytes))
        .for_each(|(dst, src)| {
            // NOTE: the data comes from `random_weights` with matching sizes, so this cannot
            // fail; NaN makes any mistake here visible in the comparison instead of panicking.
            if dequantize_row(ty, src, dst).is_err() {
                dst.fill(f32::NAN);
            }
        });
    out
}

/// The magnitudes |w| the GPU's rounding errors scale with. For Q4_K the kernel computes
/// `d*sc*q` and `dmin*m` separately, so the magnitude is `|d*sc*q| + |dmin*m|`: with the
/// positive scales of [`random_weights`] that is the dequantization with dmin negated.
pub fn abs_weight_rows(ty: GgmlType, bytes: &[u8], n_rows: usize, n_cols: usize) -> Vec<f32> {
    let mut w = if ty == GgmlType::Q4_K {
        let mut flipped = bytes.to_vec();
        for block in flipped.chunks_exact_mut(144) {
            block[3] ^= 0x80; // sign bit of dmin (f16 at bytes 2..4, little-endian)
        }
        dequantize_rows(ty, &flipped, n_rows, n_cols)
    } else {
        dequantize_rows(ty, bytes, n_rows, n_cols)
    };
    w.iter_mut().for_each(|v| *v = v.abs());
    w
}

/// The activations as the int8-activation GEMV kernels see them (kernels/gemv_q8a.cu,
/// `quantize_q8_1`): per 32-value group, `q = round_half_even(x * (127 / amax))` and
/// `d = amax / 127` rounded to f16, both as on the GPU; returns `d * q` per value, exact in f64.
pub fn quantize_q8a_f64(x: &[f32]) -> Vec<f64> {
    x.chunks(32)
        .flat_map(|g| {
            let amax = g.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = f16::from_f32(amax / 127.0).to_f32();
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            g.iter()
                .map(move |&v| d as f64 * (v * id).round_ties_even() as f64)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The magnitudes the int8-activation kernels' rounding errors scale with: as
/// [`abs_weight_rows`], except Q4_0, whose kernel computes `d·q·x` and `8·d·Σx` apart, so its
/// magnitude is `d·(q + 8) = d·(q − 8) + 16·d` (q in 0..16).
pub fn abs_weight_rows_q8a(ty: GgmlType, bytes: &[u8], n_rows: usize, n_cols: usize) -> Vec<f32> {
    if ty != GgmlType::Q4_0 {
        return abs_weight_rows(ty, bytes, n_rows, n_cols);
    }
    let w = dequantize_rows(ty, bytes, n_rows, n_cols);
    // d·(q + 8) from d·(q − 8): add 16·d, d being each block's (positive) scale.
    w.chunks(32)
        .zip(bytes.chunks_exact(18))
        .flat_map(|(vals, block)| {
            let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
            vals.iter().map(move |&v| v + 16.0 * d).collect::<Vec<_>>()
        })
        .collect()
}

/// `W · x` in f64 over f32 weights and f64 activations.
pub fn gemv_f64_x64(w: &[f32], x: &[f64], n_cols: usize) -> Vec<f64> {
    w.par_chunks(n_cols)
        .map(|row| row.iter().zip(x).map(|(&a, &b)| a as f64 * b).sum())
        .collect()
}

/// `W · x` in f64 over f32 weights `w` (`[n_rows, n_cols]`).
pub fn gemv_f64(w: &[f32], x: &[f32], n_cols: usize) -> Vec<f64> {
    w.par_chunks(n_cols)
        .map(|row| row.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum())
        .collect()
}

/// Worst-case NMSE of an f32 GEMV against the exact result: each output's error is at most
/// `γ_n · Σ_k |w_k x_k|` with `γ_n = n·u / (1 - n·u)`, where `n` bounds the roundings any one
/// product passes through (its lane's running sum, the in-block sums and scales, the warp
/// reduction). `abs_dot` holds `Σ|w x|` per row, `exact` the reference outputs.
pub fn gemv_nmse_bound(abs_dot: &[f64], exact: &[f64], n_cols: usize) -> f64 {
    let n = (n_cols / 32 + 16) as f64;
    let gamma = n * F32_UNIT_ROUNDOFF / (1.0 - n * F32_UNIT_ROUNDOFF);
    let num: f64 = abs_dot.iter().map(|a| (gamma * a).powi(2)).sum();
    let den: f64 = exact.iter().map(|v| v * v).sum();
    num / den
}

/// RMSNorm in f64: `x / sqrt(mean(x²) + eps) * w` per row of `w.len()` values.
pub fn rms_norm_f64(x: &[f32], w: &[f32], eps: f32) -> Vec<f64> {
    let dim = w.len();
    x.chunks(dim)
        .flat_map(|row| {
            let mean = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / dim as f64;
            let scale = 1.0 / (mean + eps as f64).sqrt();
            row.iter()
                .zip(w)
                .map(move |(&v, &g)| v as f64 * scale * g as f64)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Worst-case NMSE of the f32 RMSNorm kernel: every output is a product of positive-term
/// roundings: the sum of squares (a thread's `dim / threads` terms and a 10-level block
/// reduction, halved by the square root), then mean, eps, sqrt, division and two products.
pub fn rms_norm_nmse_bound(dim: usize, threads: usize) -> f64 {
    let n = (dim.div_ceil(threads) + 10) as f64 / 2.0 + 6.0;
    let rel = n * F32_UNIT_ROUNDOFF / (1.0 - n * F32_UNIT_ROUNDOFF);
    rel * rel * 1.1
}

/// `‖got - want‖² / ‖want‖²`; infinite when any value is NaN or infinite.
pub fn nmse(got: &[f32], want: &[f64]) -> f64 {
    if got.len() != want.len() || got.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w).powi(2))
        .sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    if den == 0.0 {
        return if num == 0.0 { 0.0 } else { f64::INFINITY };
    }
    num / den
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn random_weights_have_exact_sizes_and_finite_values() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for ty in crate::GEMV_TYPES {
            let bytes = random_weights(ty, 3, 512, &mut rng);
            assert_eq!(bytes.len() as u64, ty.bytes_for(3 * 512).unwrap(), "{ty}");
            let w = dequantize_rows(ty, &bytes, 3, 512);
            assert!(w.iter().all(|v| v.is_finite()), "{ty}");
            assert!(w.iter().any(|&v| v != 0.0), "{ty}");
        }
    }

    #[test]
    fn q4k_magnitudes_are_the_two_terms_added() {
        // One block: d = 1, dmin = 1, group 0 scale 2 / min 3, all quants 1.
        let mut block = [0u8; 144];
        block[0..2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
        block[2..4].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
        block[4] = 2; // scale of group 0
        block[8] = 3; // min of group 0
        block[16..144].fill(0x11);
        let w = dequantize_rows(GgmlType::Q4_K, &block, 1, 256);
        let a = abs_weight_rows(GgmlType::Q4_K, &block, 1, 256);
        assert_eq!(w[0], 2.0 * 1.0 - 3.0);
        assert_eq!(a[0], 2.0 * 1.0 + 3.0);
    }

    #[test]
    fn nmse_flags_nan_and_measures_relative_error() {
        assert_eq!(nmse(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((nmse(&[1.5, 0.0], &[1.0, 0.0]) - 0.25).abs() < 1e-12);
        assert_eq!(nmse(&[f32::NAN, 1.0], &[1.0, 1.0]), f64::INFINITY);
        assert_eq!(nmse(&[1.0], &[1.0, 1.0]), f64::INFINITY);
    }

    #[test]
    fn bounds_grow_with_the_accumulation_length() {
        let b1 = gemv_nmse_bound(&[10.0], &[1.0], 896);
        let b2 = gemv_nmse_bound(&[10.0], &[1.0], 14336);
        assert!(b1 < b2 && b2 < 1e-4, "{b1} {b2}");
        assert!(rms_norm_nmse_bound(896, 256) < 1e-11);
    }
}
