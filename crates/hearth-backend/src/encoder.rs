//! Host reference implementations of the operations only encoder models (BERT) use:
//! LayerNorm with bias, exact (erf) GELU and attention without a causal mask.
//!
//! The [`crate::Backend`] trait's default methods run these on a host copy of the tensor, so
//! every backend has them; a backend may replace them with kernels of its own and test those
//! against these.

use std::ops::Range;

use crate::AttnParams;

/// `x = (x - mean) / sqrt(var + eps) * weight + bias` for every row of `x` (`[rows, cols]`,
/// `cols == weight.len() == bias.len()`). Mean and variance are taken in f64, as a reference
/// should.
pub fn layer_norm_rows(x: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    let cols = weight.len();
    if cols == 0 {
        return;
    }
    for row in x.chunks_exact_mut(cols) {
        let n = cols as f64;
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        let inv = 1.0 / (var + eps as f64).sqrt();
        for ((v, &w), &b) in row.iter_mut().zip(weight).zip(bias) {
            *v = ((*v as f64 - mean) * inv) as f32 * w + b;
        }
    }
}

/// The error function, |error| < 1.2e-7 (Numerical Recipes' `erfc` Chebyshev fit, in f64).
pub fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - erfc
    } else {
        erfc - 1.0
    }
}

/// GELU with the exact normal CDF, `x · Φ(x) = 0.5 · x · (1 + erf(x / √2))` (BERT's `gelu`).
pub fn gelu_erf(x: &mut [f32]) {
    for v in x {
        let f = *v as f64;
        *v = (0.5 * f * (1.0 + erf(f / std::f64::consts::SQRT_2))) as f32;
    }
}

/// Attention where every token sees every token of its own sequence (no causal mask, no cache).
///
/// `q`: `[n_tokens, n_heads * head_dim]`, `k`/`v`: `[n_tokens, n_kv_heads * head_dim]`,
/// `seqs`: the row range of each sequence. Returns `[n_tokens, n_heads * head_dim]`. Rows
/// outside every range are left zero.
pub fn attention_bidirectional(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seqs: &[Range<usize>],
    p: &AttnParams,
) -> Vec<f32> {
    let (hd, q_dim, kv_dim) = (
        p.head_dim,
        p.n_heads * p.head_dim,
        p.n_kv_heads * p.head_dim,
    );
    let group = (p.n_heads / p.n_kv_heads.max(1)).max(1);
    let mut out = vec![0.0f32; q.len()];
    let mut scores = Vec::new();
    for seq in seqs {
        for t in seq.clone() {
            for h in 0..p.n_heads {
                let kv_off = (h / group) * hd;
                let qh = &q[t * q_dim + h * hd..][..hd];
                scores.clear();
                for s in seq.clone() {
                    let kh = &k[s * kv_dim + kv_off..][..hd];
                    let dot: f32 = qh.iter().zip(kh).map(|(a, b)| a * b).sum();
                    scores.push(dot * p.scale);
                }
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0f32;
                for x in scores.iter_mut() {
                    *x = (*x - max).exp();
                    sum += *x;
                }
                let oh = &mut out[t * q_dim + h * hd..][..hd];
                for (s, &w) in seq.clone().zip(&scores) {
                    let vh = &v[s * kv_dim + kv_off..][..hd];
                    for (o, &x) in oh.iter_mut().zip(vh) {
                        *o += w / sum * x;
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // Values from the tables of Abramowitz & Stegun (7.1).
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (2.0, 0.995_322_265_0),
            (-1.0, -0.842_700_792_9),
        ] {
            assert!((erf(x) - want).abs() < 2e-7, "erf({x}) = {}", erf(x));
        }
    }

    #[test]
    fn layer_norm_centers_and_scales() {
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        layer_norm_rows(&mut x, &[1.0, 1.0], &[0.5, -0.5], 0.0);
        assert_eq!(x, vec![-0.5, 0.5, -0.5, 0.5]);
    }

    #[test]
    fn attention_sees_later_tokens_and_not_other_sequences() {
        let p = AttnParams {
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 1,
            scale: 1.0,
            window: None,
            softcap: None,
        };
        // Equal scores: every token's output is the mean of its own sequence's values.
        let q = [0.0; 3];
        let out = attention_bidirectional(&q, &q, &[1.0, 3.0, 10.0], &[0..2, 2..3], &p);
        assert_eq!(out, vec![2.0, 2.0, 10.0]);
    }
}
