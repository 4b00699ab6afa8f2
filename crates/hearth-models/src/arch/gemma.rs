//! Gemma (1): Llama with GELU (tanh) gating, embeddings scaled by √n_embd, norms that scale
//! by 1 + w, a head size of its own (256 at 7B) and tied embeddings.

use hearth_backend::{Activation, RopeKind};
use hearth_gguf::GgufFile;

use crate::hf::config::{decoder_config, HfConfig};
use crate::{config::CommonHparams, DecoderConfig, ModelError};

/// A `gemma` GGUF file's config (norm weights already hold 1 + w).
pub fn config(file: &GgufFile) -> Result<DecoderConfig, ModelError> {
    let arch = "gemma";
    let hp = CommonHparams::read(file.metadata(), arch)?;
    let n_embd = hp.n_embd;
    let mut c = hp.into_config(arch, super::n_vocab(file)?, RopeKind::Neox);
    c.activation = Activation::GeluTanh;
    c.embed_scale = Some((n_embd as f32).sqrt());
    Ok(c)
}

/// A `GemmaForCausalLM` checkpoint's config. The norm weights get their 1 added as they load
/// (see [`crate::hf::HfTensors`]).
pub fn hf_config(cfg: &HfConfig) -> Result<DecoderConfig, ModelError> {
    let c = decoder_config(cfg, "gemma", RopeKind::Neox)?;
    Ok(gemma_common(c))
}

/// What every Gemma generation shares on top of the plain decoder.
pub(crate) fn gemma_common(mut c: DecoderConfig) -> DecoderConfig {
    c.activation = Activation::GeluTanh;
    // NOTE: transformers rounds √hidden_size to the weights' dtype; in f32 that is exact
    // enough, and llama.cpp scales in f32 too.
    c.embed_scale = Some((c.n_embd as f32).sqrt());
    c
}
