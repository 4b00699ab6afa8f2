//! Qwen 3 (dense): Llama with per-head RMS norm on queries and keys, and NeoX rope.

use hearth_backend::RopeKind;
use hearth_gguf::GgufFile;

use crate::hf::config::{decoder_config, HfConfig};
use crate::{config::CommonHparams, DecoderConfig, ModelError};

pub fn config(file: &GgufFile) -> Result<DecoderConfig, ModelError> {
    let arch = "qwen3";
    let hp = CommonHparams::read(file.metadata(), arch)?;
    let mut c = hp.into_config(arch, super::n_vocab(file)?, RopeKind::Neox);
    c.qk_norm = true;
    Ok(c)
}

/// A `Qwen3ForCausalLM` checkpoint's config.
pub fn hf_config(cfg: &HfConfig) -> Result<DecoderConfig, ModelError> {
    if cfg.bool("use_sliding_window", false)? {
        return Err(cfg.error("use_sliding_window", "is true; not supported yet"));
    }
    if let Some(kinds) = cfg.get("layer_types").and_then(|v| v.as_array()) {
        if let Some(k) = kinds.iter().find(|k| k.as_str() != Some("full_attention")) {
            return Err(cfg.error(
                "layer_types",
                format!("holds {k}; only full_attention is supported"),
            ));
        }
    }
    let mut c = decoder_config(cfg, "qwen3", RopeKind::Neox)?;
    c.qk_norm = true;
    Ok(c)
}
