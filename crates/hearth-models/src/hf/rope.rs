//! Rotary-embedding settings of a Hugging Face config: `rope_theta` and `rope_scaling`
//! (older files), or `rope_parameters` (transformers 5), which holds both, possibly one
//! object per layer type (Gemma 3).

use serde_json::{Map, Value};

use super::config::HfConfig;
use crate::rope_scaling::{llama3_factors, longrope_attn_factor, yarn_attn_factor, Yarn};
use crate::ModelError;

/// What the decoder's `RopeSpec` needs.
pub struct RopeSettings {
    pub theta: f64,
    /// Rotated values per head (`partial_rotary_factor` × head_dim).
    pub n_rot: usize,
    /// Position multiplier (`1 / factor` for linear scaling).
    pub freq_scale: f32,
    /// Per-frequency divisors (Llama 3, YaRN, LongRoPE); empty for none.
    pub freq_factors: Vec<f32>,
    /// transformers multiplies cos and sin by this (YaRN's and LongRoPE's
    /// `attention_factor`), which scales every q·k by its square when all of a head rotates.
    pub attn_factor: f64,
    /// Dynamic NTK scaling (see `DecoderConfig::dynamic_ntk`).
    pub dynamic_ntk: Option<crate::DynamicNtk>,
    /// The scaling's `rope_type` (`default`, `linear`, `llama3`, `yarn`, `longrope`, `dynamic`).
    pub kind: String,
    /// Its `factor` (YaRN; the others keep theirs in the fields above).
    pub factor: Option<f64>,
    /// Its `original_max_position_embeddings` (YaRN, LongRoPE).
    pub original_context: Option<f64>,
    /// LongRoPE's factors for long contexts (see `DecoderConfig::long_rope`).
    pub long_rope: Option<crate::LongRope>,
}

/// The scaling object and the name errors give it.
struct Scaling<'a> {
    cfg: &'a HfConfig,
    key: String,
    map: Option<&'a Map<String, Value>>,
}

impl Scaling<'_> {
    fn error(&self, k: &str, reason: impl Into<String>) -> ModelError {
        self.cfg.error(&format!("{}.{k}", self.key), reason)
    }

    fn get(&self, k: &str) -> Option<&Value> {
        self.map.and_then(|s| s.get(k)).filter(|v| !v.is_null())
    }

    fn num(&self, k: &str) -> Result<Option<f64>, ModelError> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.error(k, format!("is {v}, expected a number"))),
        }
    }

    /// A positive number that must be present.
    fn factor(&self, k: &str) -> Result<f64, ModelError> {
        match self.num(k)? {
            Some(f) if f > 0.0 => Ok(f),
            Some(f) => Err(self.error(k, format!("{f} must be positive"))),
            None => Err(self.error(k, "is missing")),
        }
    }

    /// A list of `len` positive numbers (LongRoPE's factors).
    fn factor_list(&self, k: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        let list = self
            .get(k)
            .and_then(Value::as_array)
            .ok_or_else(|| self.error(k, "is missing or not a list"))?;
        if list.len() != len {
            return Err(self.error(k, format!("has {} values, expected {len}", list.len())));
        }
        list.iter()
            .map(|v| match v.as_f64() {
                Some(f) if f > 0.0 => Ok(f as f32),
                _ => Err(self.error(k, format!("holds {v}, expected positive numbers"))),
            })
            .collect()
    }
}

/// Read rope settings for `head_dim`-sized heads. `layer_type` (`full_attention`,
/// `sliding_attention`) picks the entry of a `rope_parameters` that holds one object per layer
/// type; a flat `rope_parameters` serves every layer type.
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
    let s = match object(cfg, "rope_scaling")? {
        Some(map) => Scaling {
            cfg,
            key: "rope_scaling".into(),
            map: Some(map),
        },
        None => Scaling {
            cfg,
            key: params_key.clone(),
            map: params,
        },
    };
    let p = Scaling {
        cfg,
        key: params_key,
        map: params,
    };
    let theta = match p.num("rope_theta")? {
        Some(t) => t,
        None => cfg.f64("rope_theta")?.unwrap_or(10_000.0),
    };
    if theta <= 0.0 {
        return Err(cfg.error("rope_theta", format!("{theta} must be positive")));
    }
    let partial = match s.num("partial_rotary_factor")? {
        Some(f) => f,
        None => cfg.f64("partial_rotary_factor")?.unwrap_or(1.0),
    };
    // As transformers: int(head_dim * partial_rotary_factor).
    let n_rot = (head_dim as f64 * partial) as usize;
    if !(partial > 0.0 && partial <= 1.0) || n_rot == 0 || !n_rot.is_multiple_of(2) {
        return Err(cfg.error(
            "partial_rotary_factor",
            format!("{partial} × head_dim {head_dim} is not a positive even number ≤ head_dim"),
        ));
    }
    let mut out = RopeSettings {
        theta,
        n_rot,
        freq_scale: 1.0,
        freq_factors: Vec::new(),
        attn_factor: 1.0,
        dynamic_ntk: None,
        kind: String::new(),
        factor: None,
        original_context: None,
        long_rope: None,
    };
    scale(&s, &mut out)?;
    Ok(out)
}

/// Apply the scaling `s` names (`rope_type`, or `type` in older files) to `out`.
fn scale(s: &Scaling, out: &mut RopeSettings) -> Result<(), ModelError> {
    let kind = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let (theta, dim) = (out.theta, out.n_rot);
    out.kind = kind.to_string();
    match kind {
        "default" => {}
        "linear" => out.freq_scale = (1.0 / s.factor("factor")?) as f32,
        "llama3" => {
            out.freq_factors = llama3_factors(
                theta,
                dim,
                s.factor("factor")?,
                s.factor("low_freq_factor")?,
                s.factor("high_freq_factor")?,
                s.factor("original_max_position_embeddings")?,
            )
        }
        "yarn" => {
            let truncate = match s.get("truncate") {
                None => true,
                Some(v) => v.as_bool().ok_or_else(|| {
                    s.error("truncate", format!("is {v}, expected true or false"))
                })?,
            };
            let yarn = Yarn {
                factor: s.factor("factor")?,
                old_context: s.factor("original_max_position_embeddings")?,
                beta_fast: s.num("beta_fast")?.unwrap_or(32.0),
                beta_slow: s.num("beta_slow")?.unwrap_or(1.0),
                truncate,
            };
            out.factor = Some(yarn.factor);
            out.original_context = Some(yarn.old_context);
            out.freq_factors = yarn.factors(theta, dim);
            out.attn_factor = match s.num("attention_factor")? {
                Some(a) => a,
                None => yarn_attn_factor(yarn.factor, s.num("mscale")?, s.num("mscale_all_dim")?),
            };
        }
        "longrope" | "su" => longrope(s, out)?,
        // NOTE: plain frequencies until a sequence outgrows max_position_embeddings; the
        // decoder raises the base per sequence from there (see `DynamicNtk`).
        "dynamic" => {
            if dim <= 2 {
                return Err(s.error(
                    "rope_type",
                    format!("dynamic needs more than 2 rotated values per head, not {dim}"),
                ));
            }
            out.dynamic_ntk = Some(crate::DynamicNtk {
                factor: s.factor("factor")?,
                original_context: s.cfg.require_usize("max_position_embeddings")?,
                sliding_layers: true,
            });
        }
        other => {
            return Err(s.error(
                "rope_type",
                format!(
                "'{other}' is not supported yet (default, linear, llama3, yarn, longrope, dynamic)"
            ),
            ))
        }
    }
    Ok(())
}

/// LongRoPE (Phi 3): per-frequency divisors, short and long, and an attention factor.
///
/// The short factors go in `freq_factors`; the long ones replace them when the model runs
/// with a context longer than `original_max_position_embeddings` (see
/// `DecoderConfig::fit_context` for how that follows llama.cpp and transformers).
fn longrope(s: &Scaling, out: &mut RopeSettings) -> Result<(), ModelError> {
    let old_context = match s.num("original_max_position_embeddings")? {
        Some(n) => n,
        None => s
            .cfg
            .usize("original_max_position_embeddings")?
            .ok_or_else(|| s.error("original_max_position_embeddings", "is missing"))?
            as f64,
    };
    if old_context < 1.0 {
        return Err(s.error(
            "original_max_position_embeddings",
            format!("{old_context} must be positive"),
        ));
    }
    let factor = match s.num("factor")? {
        Some(f) => f,
        None => s.cfg.require_usize("max_position_embeddings")? as f64 / old_context,
    };
    out.freq_factors = s.factor_list("short_factor", out.n_rot / 2)?;
    out.long_rope = Some(crate::LongRope {
        original_context: old_context as usize,
        long_factors: s.factor_list("long_factor", out.n_rot / 2)?,
    });
    out.original_context = Some(old_context);
    out.attn_factor = match s.num("attention_factor")? {
        Some(a) => a,
        None => longrope_attn_factor(factor, old_context),
    };
    Ok(())
}

fn object<'a>(cfg: &'a HfConfig, key: &str) -> Result<Option<&'a Map<String, Value>>, ModelError> {
    match cfg.get(key) {
        None => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(v) => Err(cfg.error(key, format!("is {v}, expected an object"))),
    }
}
