//! Rope scaling schemes as per-frequency divisors and an attention factor, the two things
//! the shared rope and attention apply: computed the way transformers computes them (and
//! llama.cpp, whose GGUF keys describe the same schemes).

use std::f64::consts::PI;

/// Llama 3.1's per-frequency divisors, as transformers' `_compute_llama3_parameters` (and
/// llama.cpp's converter, which stores them as `rope_freqs.weight`) compute them. `dim` is the
/// number of rotated values per head.
pub(crate) fn llama3_factors(
    theta: f64,
    dim: usize,
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    old_context: f64,
) -> Vec<f32> {
    let low_freq_wavelen = old_context / low_freq_factor;
    let high_freq_wavelen = old_context / high_freq_factor;
    (0..dim / 2)
        .map(|i| {
            let freq = 1.0 / theta.powf((2 * i) as f64 / dim as f64);
            let wavelen = 2.0 * PI / freq;
            let f = if wavelen < high_freq_wavelen {
                1.0
            } else if wavelen > low_freq_wavelen {
                factor
            } else {
                let smooth = (old_context / wavelen - low_freq_factor)
                    / (high_freq_factor - low_freq_factor);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            f as f32
        })
        .collect()
}

/// YaRN's frequency blend (transformers' `_compute_yarn_parameters`; llama.cpp's
/// `rope_yarn` with its correction dimensions is the same with `truncate`).
pub(crate) struct Yarn {
    pub factor: f64,
    /// Context length the model was trained for before scaling.
    pub old_context: f64,
    pub beta_fast: f64,
    pub beta_slow: f64,
    /// Round the correction range outwards to whole dimensions.
    pub truncate: bool,
}

impl Yarn {
    /// Per-frequency divisors: 1 (extrapolation) for the fast dimensions, `factor`
    /// (interpolation) for the slow ones, a linear ramp between.
    pub fn factors(&self, theta: f64, dim: usize) -> Vec<f32> {
        let d = dim as f64;
        let correction = |rotations: f64| {
            d * (self.old_context / (rotations * 2.0 * PI)).ln() / (2.0 * theta.ln())
        };
        let (mut low, mut high) = (correction(self.beta_fast), correction(self.beta_slow));
        if self.truncate {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
        if low == high {
            high += 0.001; // as transformers does, to avoid dividing by zero
        }
        (0..dim / 2)
            .map(|i| {
                // The share of the original (extrapolated) frequency.
                let keep = 1.0 - ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                let inv = (1.0 - keep) / self.factor + keep;
                (1.0 / inv) as f32
            })
            .collect()
    }
}

/// YaRN's default attention factor (transformers' `get_mscale`).
pub(crate) fn yarn_attn_factor(
    factor: f64,
    mscale: Option<f64>,
    mscale_all_dim: Option<f64>,
) -> f64 {
    let get = |m: f64| {
        if factor <= 1.0 {
            1.0
        } else {
            0.1 * m * factor.ln() + 1.0
        }
    };
    match (mscale, mscale_all_dim) {
        (Some(m), Some(a)) if m != 0.0 && a != 0.0 => get(m) / get(a),
        _ => get(1.0),
    }
}

/// LongRoPE's default attention factor (transformers' `_compute_longrope_parameters`).
pub(crate) fn longrope_attn_factor(factor: f64, old_context: f64) -> f64 {
    if factor <= 1.0 {
        1.0
    } else {
        (1.0 + factor.ln() / old_context.ln()).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yarn_keeps_fast_and_slows_slow_frequencies() {
        let y = Yarn {
            factor: 4.0,
            old_context: 64.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            truncate: true,
        };
        let f = y.factors(10_000.0, 16);
        assert_eq!(f.len(), 8);
        assert_eq!(f[0], 1.0);
        assert_eq!(f[7], 4.0);
        assert!(f.windows(2).all(|w| w[0] <= w[1]), "{f:?}");
        assert!((yarn_attn_factor(4.0, None, None) - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-12);
    }
}
