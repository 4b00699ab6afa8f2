//! Mixtral (HF `MixtralForCausalLM`): Llama attention with a sparse mixture-of-experts
//! feed-forward in every layer. Its GGUF files are `llama` with `llama.expert_count` set
//! (see [`super::llama`]).

use hearth_backend::RopeKind;

use crate::hf::config::{decoder_config, HfConfig};
use crate::{DecoderConfig, ModelError, MoeConfig};

/// A `MixtralForCausalLM` checkpoint's config.
pub fn hf_config(cfg: &HfConfig) -> Result<DecoderConfig, ModelError> {
    if cfg.get("sliding_window").is_some() {
        return Err(cfg.error("sliding_window", "is set; not supported yet"));
    }
    // NOTE: see `super::llama::hf_config` for why NeoX rope runs HF's q/k weights as stored.
    let mut c = decoder_config(cfg, "llama", RopeKind::Neox)?;
    let moe = MoeConfig {
        n_expert: cfg.require_usize("num_local_experts")?,
        n_expert_used: cfg.require_usize("num_experts_per_tok")?,
        // Mixtral's experts are `intermediate_size` wide.
        n_ff_expert: c.n_ff,
        // Mixtral always renormalises the top-k weights.
        norm_topk_prob: true,
    };
    moe.validate("num_experts_per_tok")
        .map_err(|reason| cfg.error("num_experts_per_tok", reason))?;
    c.moe = Some(moe);
    Ok(c)
}
