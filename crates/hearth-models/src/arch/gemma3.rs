//! Gemma 3 (text): QK-norm, norms after attention and FFN as well as before, GELU gating,
//! embeddings scaled by √n_embd, and five sliding-window layers for every global one.

use hearth_backend::{Activation, RopeKind};
use hearth_gguf::GgufFile;

use crate::hf::config::{decoder_config, layer_type_rope, HfConfig};
use crate::{config::CommonHparams, DecoderConfig, ModelError};

/// Every sixth layer attends globally; the others see a sliding window.
const SLIDING_PATTERN: usize = 6;
/// Rope base of the sliding-window layers (not stored in GGUF files; fixed by the architecture).
const SLIDING_ROPE_BASE: f32 = 10_000.0;

pub fn config(file: &GgufFile) -> Result<DecoderConfig, ModelError> {
    let arch = "gemma3";
    let meta = file.metadata();
    let hp = CommonHparams::read(meta, arch)?;
    let n_embd = hp.n_embd;
    let mut c = hp.into_config(arch, super::n_vocab(file)?, RopeKind::Neox);
    c.qk_norm = true;
    c.post_norms = true;
    c.activation = Activation::GeluTanh;
    c.embed_scale = Some((n_embd as f32).sqrt());
    // NOTE: the 27B model scales queries by 1/√(n_embd / n_heads); the others by 1/√head_dim,
    // which `into_config` already set.
    if c.n_layers == 62 {
        c.attn_scale = 1.0 / ((n_embd / c.n_heads) as f32).sqrt();
    }
    let key = "gemma3.attention.sliding_window";
    let window = meta.require_u32(key)? as usize;
    if window == 0 {
        return Err(ModelError::BadConfig {
            key: key.into(),
            reason: "must be positive".into(),
        });
    }
    c.sliding_window = Some(window);
    c.layer_kinds = super::sliding_layers(meta, arch, c.n_layers, SLIDING_PATTERN)?;
    if let Some(scale) = super::attention_scale(meta, arch)? {
        c.attn_scale = scale;
    }
    c.rope_sliding.freq_base = SLIDING_ROPE_BASE;
    c.rope_sliding.freq_scale = 1.0;
    Ok(c)
}

/// A `Gemma3ForCausalLM` (text-only) checkpoint's config: Gemma 2's layout without its soft
/// caps (unless set), QK-norm, and a rope of their own for the sliding-window layers.
pub fn hf_config(cfg: &HfConfig) -> Result<DecoderConfig, ModelError> {
    let mut c = super::gemma::gemma_common(decoder_config(cfg, "gemma3", RopeKind::Neox)?);
    c.post_norms = true;
    c.qk_norm = true;
    super::gemma2::hf_gemma_attention(cfg, &mut c, SLIDING_PATTERN)?;
    c.attn_softcap = super::gemma2::hf_softcap(cfg, "attn_logit_softcapping")?;
    c.final_softcap = super::gemma2::hf_softcap(cfg, "final_logit_softcapping")?;
    let nested = cfg
        .get("rope_parameters")
        .is_some_and(|p| p.get("sliding_attention").is_some());
    if nested {
        c.rope_sliding = layer_type_rope(cfg, c.head_dim, RopeKind::Neox, "sliding_attention")?;
    } else {
        // Older configs: `rope_scaling` is for the global layers only; the sliding ones
        // use `rope_local_base_freq` unscaled.
        let base = cfg
            .f64("rope_local_base_freq")?
            .unwrap_or(SLIDING_ROPE_BASE as f64);
        c.rope_sliding = c.rope.clone();
        c.rope_sliding.freq_base = base as f32;
        c.rope_sliding.freq_scale = 1.0;
        c.rope_sliding.freq_factors.clear();
    }
    // The sliding layers' rope is a plain one of their own in transformers too.
    if let Some(ntk) = &mut c.dynamic_ntk {
        ntk.sliding_layers = false;
    }
    Ok(c)
}
