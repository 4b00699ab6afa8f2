//! Rotary-embedding settings of a Hugging Face config: `rope_theta` and `rope_scaling`
//! (older files), or `rope_parameters` (transformers 5), which holds both.

use std::f64::consts::PI;

use serde_json::{Map, Value};

use super::config::HfConfig;
use crate::ModelError;

/// What the decoder's `RopeSpec` needs.
pub struct RopeSettings {
    pub theta: f64,
    /// Position multiplier (`1 / factor` for linear scaling).
    pub freq_scale: f32,
    /// Per-frequency divisors (Llama 3, YaRN); empty for none.
    pub freq_factors: Vec<f32>,
    /// transformers multiplies cos and sin by this (YaRN's `attention_factor`), which scales
    /// every q·k by its square.
    pub attn_factor: f64,
}

/// Read rope settings; `head_dim` sizes the per-frequency factors. `layer_type`
/// (`full_attention`, `sliding_attention`) picks the entry of a `rope_parameters` that holds
/// one object per layer type (Gemma 3); a flat `rope_parameters` serves every layer type.
pub fn read(
    cfg: &HfConfig,
    head_dim: usize,
    layer_type: Option<&str>,
) -> Result<RopeSettings, ModelError> {
    let mut params = object(cfg, "rope_parameters")?;
    let mut params_key = "rope_parameters".to_string();
    if let (Some(p), Some(t)) = (params, layer_type) {
        if let Some(v) = p.get(t) {
            params_key = format!("rope_parameters.{t}");
            params = match v {
                Value::Object(m) => Some(m),
                _ => return Err(cfg.error(&params_key, format!("is {v}, expected an object"))),
            };
        }
    }
    let scaling = object(cfg, "rope_scaling")?;
    let (key, scaling) = match (scaling, params) {
        (Some(s), _) => ("rope_scaling".to_string(), Some(s)),
        (None, p) => (params_key.clone(), p),
    };
    let num = |k: &str| -> Result<Option<f64>, ModelError> {
        let Some(v) = scaling.and_then(|s| s.get(k)).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        v.as_f64()
            .map(Some)
            .ok_or_else(|| cfg.error(&format!("{key}.{k}"), format!("is {v}, expected a number")))
    };
    let theta = match params.and_then(|p| p.get("rope_theta")) {
        Some(v) => v.as_f64().ok_or_else(|| {
            cfg.error(
                &format!("{params_key}.rope_theta"),
                format!("is {v}, expected a number"),
            )
        })?,
        None => cfg.f64("rope_theta")?.unwrap_or(10_000.0),
    };
    if theta <= 0.0 {
        return Err(cfg.error("rope_theta", format!("{theta} must be positive")));
    }
    let kind = scaling
        .and_then(|s| s.get("rope_type").or_else(|| s.get("type")))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let mut out = RopeSettings {
        theta,
        freq_scale: 1.0,
        freq_factors: Vec::new(),
        attn_factor: 1.0,
    };
    let factor = |name: &str| -> Result<f64, ModelError> {
        match num(name)? {
            Some(f) if f > 0.0 => Ok(f),
            Some(f) => Err(cfg.error(&format!("{key}.{name}"), format!("{f} must be positive"))),
            None => Err(cfg.error(&format!("{key}.{name}"), "is missing")),
        }
    };
    match kind {
        "default" => {}
        "linear" => out.freq_scale = (1.0 / factor("factor")?) as f32,
        "llama3" => {
            out.freq_factors = llama3_factors(
                theta,
                head_dim,
                factor("factor")?,
                factor("low_freq_factor")?,
                factor("high_freq_factor")?,
                factor("original_max_position_embeddings")?,
            )
        }
        "yarn" => {
            let truncate = match scaling.and_then(|s| s.get("truncate")) {
                None | Some(Value::Null) => true,
                Some(v) => v.as_bool().ok_or_else(|| {
                    cfg.error(
                        &format!("{key}.truncate"),
                        format!("is {v}, expected true or false"),
                    )
                })?,
            };
            let yarn = Yarn {
                factor: factor("factor")?,
                old_context: factor("original_max_position_embeddings")?,
                beta_fast: num("beta_fast")?.unwrap_or(32.0),
                beta_slow: num("beta_slow")?.unwrap_or(1.0),
                truncate,
            };
            out.freq_factors = yarn.factors(theta, head_dim);
            out.attn_factor = match num("attention_factor")? {
                Some(a) => a,
                None => yarn_attn_factor(yarn.factor, num("mscale")?, num("mscale_all_dim")?),
            };
        }
        other => {
            return Err(cfg.error(
                &format!("{key}.rope_type"),
                format!("'{other}' is not supported yet (default, linear, llama3, yarn)"),
            ))
        }
    }
    if let Some(p) = num("partial_rotary_factor")?.or(cfg.f64("partial_rotary_factor")?) {
        if p != 1.0 {
            return Err(cfg.error("partial_rotary_factor", format!("{p} is not supported yet")));
        }
    }
    Ok(out)
}

fn object<'a>(cfg: &'a HfConfig, key: &str) -> Result<Option<&'a Map<String, Value>>, ModelError> {
    match cfg.get(key) {
        None => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(v) => Err(cfg.error(key, format!("is {v}, expected an object"))),
    }
}

/// Llama 3.1's per-frequency divisors, as transformers' `_compute_llama3_parameters` (and
/// llama.cpp's converter, which stores them as `rope_freqs.weight`) compute them.
fn llama3_factors(
    theta: f64,
    head_dim: usize,
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    old_context: f64,
) -> Vec<f32> {
    let low_freq_wavelen = old_context / low_freq_factor;
    let high_freq_wavelen = old_context / high_freq_factor;
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / theta.powf((2 * i) as f64 / head_dim as f64);
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

/// YaRN's frequency blend, as transformers' `_compute_yarn_parameters` computes it.
struct Yarn {
    factor: f64,
    old_context: f64,
    beta_fast: f64,
    beta_slow: f64,
    truncate: bool,
}

impl Yarn {
    /// Per-frequency divisors: 1 (extrapolation) for the fast dimensions, `factor`
    /// (interpolation) for the slow ones, a linear ramp between.
    fn factors(&self, theta: f64, head_dim: usize) -> Vec<f32> {
        let dim = head_dim as f64;
        let correction = |rotations: f64| {
            dim * (self.old_context / (rotations * 2.0 * PI)).ln() / (2.0 * theta.ln())
        };
        let (mut low, mut high) = (correction(self.beta_fast), correction(self.beta_slow));
        if self.truncate {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
        if low == high {
            high += 0.001; // as transformers does, to avoid dividing by zero
        }
        (0..head_dim / 2)
            .map(|i| {
                // The share of the original (extrapolated) frequency.
                let keep = 1.0 - ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                let inv = (1.0 - keep) / self.factor + keep;
                (1.0 / inv) as f32
            })
            .collect()
    }
}

/// YaRN's default `attention_factor` (transformers' `get_mscale`).
fn yarn_attn_factor(factor: f64, mscale: Option<f64>, mscale_all_dim: Option<f64>) -> f64 {
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
