//! Mistral: Llama whose every layer may attend over a sliding window (`sliding_window`,
//! Mistral 7B v0.1; later versions set it to null). llama.cpp's converter writes Mistral as
//! GGUF architecture "llama", so only the HF config lives here.

use hearth_backend::RopeKind;

use crate::hf::config::{decoder_config, HfConfig};
use crate::{DecoderConfig, LayerKind, ModelError};

/// A `MistralForCausalLM` checkpoint's config; it runs as "llama", as its GGUF files do.
pub fn hf_config(cfg: &HfConfig) -> Result<DecoderConfig, ModelError> {
    let mut c = decoder_config(cfg, "llama", RopeKind::Neox)?;
    if let Some(window) = cfg.usize("sliding_window")? {
        c.sliding_window = Some(window);
        c.layer_kinds = vec![LayerKind::Sliding; c.n_layers];
    }
    Ok(c)
}
