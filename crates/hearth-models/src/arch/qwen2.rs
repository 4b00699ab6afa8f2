//! Qwen 2 / Qwen 2.5: Llama with learned biases on the query, key and value projections, and
//! NeoX rope.

use hearth_backend::RopeKind;
use hearth_gguf::GgufFile;

use crate::hf::config::{decoder_config, HfConfig};
use crate::{config::CommonHparams, DecoderConfig, ModelError};

pub fn config(file: &GgufFile) -> Result<DecoderConfig, ModelError> {
    let arch = "qwen2";
    let hp = CommonHparams::read(file.metadata(), arch)?;
    let mut c = hp.into_config(arch, super::n_vocab(file)?, RopeKind::Neox);
    c.attn_qkv_bias = true;
    Ok(c)
}

/// A `Qwen2ForCausalLM` checkpoint's config.
pub fn hf_config(cfg: &HfConfig) -> Result<DecoderConfig, ModelError> {
    // NOTE: Qwen 2 checkpoints carry `sliding_window` but only apply it when
    // `use_sliding_window` is set; none of the released models set it.
    if cfg.bool("use_sliding_window", false)? {
        return Err(cfg.error("use_sliding_window", "is true; not supported yet"));
    }
    let mut c = decoder_config(cfg, "qwen2", RopeKind::Neox)?;
    c.attn_qkv_bias = true;
    Ok(c)
}
