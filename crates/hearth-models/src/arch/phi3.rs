//! Phi 3 / Phi 3.5 / Phi 4 mini: Llama with fused query-key-value and gate-up matrices
//! (split at load, without copies), partial rotation (Phi 4 mini), LongRoPE scaling and an
//! optional sliding window over every layer.

use hearth_backend::RopeKind;
use hearth_gguf::GgufFile;

use crate::hf::config::{decoder_config, HfConfig};
use crate::{config::CommonHparams, DecoderConfig, LayerKind, ModelError};

/// A `phi3` GGUF file's config: fused `attn_qkv` and `ffn_up` (gate rows first).
pub fn config(file: &GgufFile) -> Result<DecoderConfig, ModelError> {
    let arch = "phi3";
    let meta = file.metadata();
    let hp = CommonHparams::read(meta, arch)?;
    let mut c = hp.into_config(arch, super::n_vocab(file)?, RopeKind::Neox);
    c.fused_projections = true;
    // LongRoPE: llama.cpp's converter stores the factors as tensors and the attention factor
    // as a key; the long factors replace the short ones in contexts longer than the original
    // (see DecoderConfig::fit_context).
    let short = super::vector_f32(file, "rope_factors_short.weight", c.rope.n_rot / 2)?;
    if let Some(short) = short {
        let key = "phi3.rope.scaling.attn_factor";
        let attn = meta.get_f32(key)?.unwrap_or(1.0);
        if attn != 1.0 && c.rope.n_rot != c.head_dim {
            return Err(ModelError::BadConfig {
                key: key.into(),
                reason: "an attention factor with a partial rotation is not supported yet".into(),
            });
        }
        c.rope.freq_factors = short;
        c.attn_scale *= attn * attn;
        let old = meta.require_u32("phi3.rope.scaling.original_context_length")?;
        let long_name = "rope_factors_long.weight";
        let long = super::vector_f32(file, long_name, c.rope.n_rot / 2)?.ok_or_else(|| {
            ModelError::BadTensor {
                name: long_name.into(),
                reason: "is missing beside rope_factors_short.weight".into(),
            }
        })?;
        c.long_rope = Some(crate::LongRope {
            original_context: old as usize,
            long_factors: long,
        });
    }
    if let Some(window) = meta.get_u32("phi3.attention.sliding_window")? {
        if window > 0 {
            c.sliding_window = Some(window as usize);
            c.layer_kinds = vec![LayerKind::Sliding; c.n_layers];
        }
    }
    c.rope_sliding = c.rope.clone();
    Ok(c)
}

/// A `Phi3ForCausalLM` checkpoint's config.
pub fn hf_config(cfg: &HfConfig) -> Result<DecoderConfig, ModelError> {
    let mut c = decoder_config(cfg, "phi3", RopeKind::Neox)?;
    c.fused_projections = true;
    if let Some(window) = cfg.usize("sliding_window")? {
        c.sliding_window = Some(window);
        c.layer_kinds = vec![LayerKind::Sliding; c.n_layers];
    }
    Ok(c)
}
