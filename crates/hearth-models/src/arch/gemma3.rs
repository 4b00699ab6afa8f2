//! Gemma 3 (text): QK-norm, norms after attention and FFN as well as before, GELU gating,
//! embeddings scaled by √n_embd, and five sliding-window layers for every global one.

use hearth_backend::{Activation, RopeKind};
use hearth_gguf::GgufFile;

use crate::{config::CommonHparams, DecoderConfig, LayerKind, ModelError};

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
    c.layer_kinds = (0..c.n_layers)
        .map(|il| {
            if il % SLIDING_PATTERN < SLIDING_PATTERN - 1 {
                LayerKind::Sliding
            } else {
                LayerKind::Global
            }
        })
        .collect();
    c.rope_sliding.freq_base = SLIDING_ROPE_BASE;
    c.rope_sliding.freq_scale = 1.0;
    Ok(c)
}
