//! Qwen 3 MoE: Qwen 3 attention (QK-norm, NeoX rope) with a sparse mixture-of-experts
//! feed-forward in every layer.

use hearth_backend::RopeKind;
use hearth_gguf::GgufFile;

use crate::hf::config::HfConfig;
use crate::{config::CommonHparams, DecoderConfig, ModelError, MoeConfig};

/// A `qwen3moe` GGUF file's config.
pub fn config(file: &GgufFile) -> Result<DecoderConfig, ModelError> {
    let arch = "qwen3moe";
    let hp = CommonHparams::read(file.metadata(), arch)?;
    let mut c = hp.into_config(arch, super::n_vocab(file)?, RopeKind::Neox);
    c.qk_norm = true;
    let moe = MoeConfig::from_gguf(file.metadata(), arch, "expert_feed_forward_length")?;
    c.moe = Some(moe.ok_or_else(|| ModelError::BadConfig {
        key: format!("{arch}.expert_count"),
        reason: "is missing or 0; a qwen3moe model needs experts".into(),
    })?);
    Ok(c)
}

/// A `Qwen3MoeForCausalLM` checkpoint's config.
///
/// Released checkpoints put experts in every layer (`decoder_sparse_step` 1, no
/// `mlp_only_layers`); other layouts are refused, naming the key.
pub fn hf_config(cfg: &HfConfig) -> Result<DecoderConfig, ModelError> {
    if cfg.usize("decoder_sparse_step")?.unwrap_or(1) != 1 {
        return Err(cfg.error(
            "decoder_sparse_step",
            "is not 1: dense layers between sparse ones are not supported yet",
        ));
    }
    if let Some(layers) = cfg.get("mlp_only_layers").and_then(|v| v.as_array()) {
        if !layers.is_empty() {
            return Err(cfg.error(
                "mlp_only_layers",
                "is not empty: dense layers between sparse ones are not supported yet",
            ));
        }
    }
    let mut c = super::qwen3::hf_config(cfg)?;
    c.arch = "qwen3moe".into();
    // NOTE: transformers 5 writes `num_local_experts`; released checkpoints `num_experts`.
    let experts_key = if cfg.get("num_experts").is_some() {
        "num_experts"
    } else {
        "num_local_experts"
    };
    let moe = MoeConfig {
        n_expert: cfg.require_usize(experts_key)?,
        n_expert_used: cfg.require_usize("num_experts_per_tok")?,
        n_ff_expert: cfg.require_usize("moe_intermediate_size")?,
        norm_topk_prob: cfg.bool("norm_topk_prob", false)?,
    };
    moe.validate("num_experts_per_tok")
        .map_err(|reason| cfg.error("num_experts_per_tok", reason))?;
    c.moe = Some(moe);
    Ok(c)
}
