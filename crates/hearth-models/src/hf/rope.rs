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
    /// Per-frequency divisors (Llama 3 scaling); empty for none.
    pub freq_factors: Vec<f32>,
}

/// Read rope settings; `head_dim` sizes the Llama 3 factors.
pub fn read(cfg: &HfConfig, head_dim: usize) -> Result<RopeSettings, ModelError> {
    let params = object(cfg, "rope_parameters")?;
    let scaling = object(cfg, "rope_scaling")?;
    let (key, scaling) = match (scaling, params) {
        (Some(s), _) => ("rope_scaling", Some(s)),
        (None, p) => ("rope_parameters", p),
    };
    let num = |k: &str| -> Result<Option<f64>, ModelError> {
        let Some(v) = scaling.and_then(|s| s.get(k)).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        v.as_f64()
            .map(Some)
            .ok_or_else(|| cfg.error(&format!("{key}.{k}"), format!("is {v}, expected a number")))
    };
    let theta = match params
        .and_then(|p| p.get("rope_theta"))
        .and_then(Value::as_f64)
    {
        Some(t) => t,
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
        other => {
            return Err(cfg.error(
                &format!("{key}.rope_type"),
                format!("'{other}' is not supported (default, linear, llama3)"),
            ))
        }
    }
    if let Some(p) = num("partial_rotary_factor")?.or(cfg.f64("partial_rotary_factor")?) {
        if p != 1.0 {
            return Err(cfg.error("partial_rotary_factor", format!("{p} is not supported")));
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
