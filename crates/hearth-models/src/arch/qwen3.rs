//! Qwen 3 (dense): Llama with per-head RMS norm on queries and keys, and NeoX rope.

use hearth_backend::RopeKind;
use hearth_gguf::GgufFile;

use crate::{config::CommonHparams, DecoderConfig, ModelError};

pub fn config(file: &GgufFile) -> Result<DecoderConfig, ModelError> {
    let arch = "qwen3";
    let hp = CommonHparams::read(file.metadata(), arch)?;
    let mut c = hp.into_config(arch, super::n_vocab(file)?, RopeKind::Neox);
    c.qk_norm = true;
    Ok(c)
}
