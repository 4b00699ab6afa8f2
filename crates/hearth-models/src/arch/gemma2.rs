//! Gemma 2: Gemma with soft-capped attention scores and logits, norms after attention and
//! feed-forward as well as before, and sliding-window attention on every other layer.

use hearth_backend::RopeKind;
use hearth_gguf::GgufFile;

use crate::hf::config::{decoder_config, HfConfig};
use crate::{config::CommonHparams, DecoderConfig, LayerKind, ModelError};

/// A `gemma2` GGUF file's config.
pub fn config(file: &GgufFile) -> Result<DecoderConfig, ModelError> {
    let arch = "gemma2";
    let meta = file.metadata();
    let hp = CommonHparams::read(meta, arch)?;
    let n_embd = hp.n_embd;
    let mut c =
        super::gemma::gemma_common(hp.into_config(arch, super::n_vocab(file)?, RopeKind::Neox));
    c.post_norms = true;
    // NOTE: as llama.cpp: the 27B model (46 layers) scales queries by 1/√(n_embd / n_heads)
    // (its query_pre_attn_scalar); the others by 1/√head_dim.
    if c.n_layers == 46 {
        c.attn_scale = 1.0 / ((n_embd / c.n_heads) as f32).sqrt();
    }
    let softcap = |k: &str| -> Result<Option<f32>, ModelError> {
        let key = format!("{arch}.{k}");
        match meta.get_f32(&key)? {
            Some(v) if v > 0.0 => Ok(Some(v)),
            Some(v) => Err(ModelError::BadConfig {
                key,
                reason: format!("{v} must be positive"),
            }),
            None => Ok(None),
        }
    };
    c.attn_softcap = softcap("attn_logit_softcapping")?;
    c.final_softcap = softcap("final_logit_softcapping")?;
    let key = format!("{arch}.attention.sliding_window");
    let window = meta.require_u32(&key)? as usize;
    if window == 0 {
        return Err(ModelError::BadConfig {
            key,
            reason: "must be positive".into(),
        });
    }
    c.sliding_window = Some(window);
    // Even layers slide, odd layers attend globally (llama.cpp and transformers agree).
    c.layer_kinds = super::sliding_layers(meta, arch, c.n_layers, 2)?;
    if let Some(scale) = super::attention_scale(meta, arch)? {
        c.attn_scale = scale;
    }
    Ok(c)
}

/// A `Gemma2ForCausalLM` checkpoint's config.
pub fn hf_config(cfg: &HfConfig) -> Result<DecoderConfig, ModelError> {
    let mut c = super::gemma::gemma_common(decoder_config(cfg, "gemma2", RopeKind::Neox)?);
    c.post_norms = true;
    hf_gemma_attention(cfg, &mut c, 2)?;
    c.attn_softcap = hf_softcap(cfg, "attn_logit_softcapping")?;
    c.final_softcap = hf_softcap(cfg, "final_logit_softcapping")?;
    Ok(c)
}

/// `key`, a positive soft cap, or `None` when absent (null).
pub(crate) fn hf_softcap(cfg: &HfConfig, key: &str) -> Result<Option<f32>, ModelError> {
    match cfg.f64(key)? {
        Some(v) if v > 0.0 => Ok(Some(v as f32)),
        Some(v) => Err(cfg.error(key, format!("{v} must be positive"))),
        None => Ok(None),
    }
}

/// Gemma 2/3 attention settings: `query_pre_attn_scalar`, `sliding_window` and the layer
/// types (`layer_types`, else one global layer in every `pattern`).
pub(crate) fn hf_gemma_attention(
    cfg: &HfConfig,
    c: &mut DecoderConfig,
    pattern: usize,
) -> Result<(), ModelError> {
    if cfg.bool("use_bidirectional_attention", false)? {
        return Err(cfg.error("use_bidirectional_attention", "is true; not supported yet"));
    }
    if let Some(s) = cfg.f64("query_pre_attn_scalar")? {
        if s <= 0.0 {
            return Err(cfg.error("query_pre_attn_scalar", format!("{s} must be positive")));
        }
        c.attn_scale = (1.0 / s.sqrt()) as f32;
    }
    let pattern = cfg.usize("sliding_window_pattern")?.unwrap_or(pattern);
    c.layer_kinds = match cfg.get("layer_types") {
        None => (0..c.n_layers)
            .map(|il| {
                if (il + 1) % pattern == 0 {
                    LayerKind::Global
                } else {
                    LayerKind::Sliding
                }
            })
            .collect(),
        Some(v) => layer_types(cfg, v, c.n_layers)?,
    };
    if c.layer_kinds.contains(&LayerKind::Sliding) {
        c.sliding_window = Some(cfg.require_usize("sliding_window")?);
    }
    Ok(())
}

/// `layer_types`: one `full_attention` or `sliding_attention` per layer.
fn layer_types(
    cfg: &HfConfig,
    v: &serde_json::Value,
    n_layers: usize,
) -> Result<Vec<LayerKind>, ModelError> {
    let key = "layer_types";
    let list = v
        .as_array()
        .ok_or_else(|| cfg.error(key, format!("is {v}, expected a list")))?;
    if list.len() != n_layers {
        return Err(cfg.error(
            key,
            format!("has {} entries for {n_layers} layers", list.len()),
        ));
    }
    list.iter()
        .map(|t| match t.as_str() {
            Some("full_attention") => Ok(LayerKind::Global),
            Some("sliding_attention") => Ok(LayerKind::Sliding),
            _ => Err(cfg.error(
                key,
                format!("holds {t}; expected full_attention or sliding_attention"),
            )),
        })
        .collect()
}
