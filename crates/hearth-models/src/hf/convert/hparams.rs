//! `general.*` and `{arch}.*` metadata keys, as llama.cpp's converter writes them, and the
//! rope tensors some scalings are stored as.

use std::path::Path;

use hearth_gguf::{GgufWriter, Value};

use super::ConvertArch;
use crate::hf::config::HfConfig;
use crate::hf::HfCheckpoint;
use crate::{LayerKind, ModelError};

/// A tensor of values computed here rather than read from the checkpoint.
pub struct ExtraTensor {
    pub name: &'static str,
    pub values: Vec<f32>,
}

/// Adds the keys to `w`; returns the rope tensors to write (`rope_freqs.weight` for Llama 3
/// scaling, `rope_factors_{long,short}.weight` for LongRoPE).
pub fn add_hparams(
    w: &mut GgufWriter,
    ck: &HfCheckpoint,
    cfg: &HfConfig,
    arch: &ConvertArch,
    file_type: u32,
) -> Result<Vec<ExtraTensor>, ModelError> {
    let c = &ck.config;
    let a = arch.gguf;
    let u = |n: usize| Value::U32(n as u32);
    let mut kv = vec![
        ("general.architecture".to_string(), Value::String(a.into())),
        ("general.type".into(), Value::String("model".into())),
        ("general.name".into(), Value::String(model_name(&ck.dir))),
        ("general.file_type".into(), Value::U32(file_type)),
        ("general.quantization_version".into(), Value::U32(2)),
        (format!("{a}.vocab_size"), u(c.n_vocab)),
        (format!("{a}.context_length"), u(c.n_ctx_train)),
        (format!("{a}.embedding_length"), u(c.n_embd)),
        (format!("{a}.feed_forward_length"), u(c.n_ff)),
        (format!("{a}.block_count"), u(c.n_layers)),
        (format!("{a}.attention.head_count"), u(c.n_heads)),
        (format!("{a}.attention.head_count_kv"), u(c.n_kv_heads)),
        (format!("{a}.attention.key_length"), u(c.head_dim)),
        (format!("{a}.attention.value_length"), u(c.head_dim)),
        (format!("{a}.rope.dimension_count"), u(c.rope.n_rot)),
        (format!("{a}.rope.freq_base"), Value::F32(c.rope.freq_base)),
        (
            format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(c.rms_eps),
        ),
    ];
    let extra = rope_keys(ck, cfg, a, &mut kv)?;
    if let Some(m) = &c.moe {
        kv.push((format!("{a}.expert_count"), u(m.n_expert)));
        kv.push((format!("{a}.expert_used_count"), u(m.n_expert_used)));
        if arch.expert_ff_key != "feed_forward_length" {
            kv.push((format!("{a}.{}", arch.expert_ff_key), u(m.n_ff_expert)));
        }
        if !m.norm_topk_prob {
            kv.push((format!("{a}.expert_weights_norm"), Value::Bool(false)));
        }
    }
    attention_keys(ck, arch, &mut kv);
    for (k, v) in kv {
        w.add_kv(k, v)?;
    }
    Ok(extra)
}

/// Sliding window, soft caps, and where llama.cpp's fixed rules for an architecture differ
/// from the checkpoint's config, the keys that say so.
fn attention_keys(ck: &HfCheckpoint, arch: &ConvertArch, kv: &mut Vec<(String, Value)>) {
    let c = &ck.config;
    let a = arch.gguf;
    if let Some(window) = c.sliding_window {
        kv.push((
            format!("{a}.attention.sliding_window"),
            Value::U32(window as u32),
        ));
    }
    if let Some(cap) = c.attn_softcap {
        kv.push((format!("{a}.attn_logit_softcapping"), Value::F32(cap)));
    }
    if let Some(cap) = c.final_softcap {
        kv.push((format!("{a}.final_logit_softcapping"), Value::F32(cap)));
    }
    let n = arch.swa_pattern;
    if n > 0 && c.sliding_window.is_some() {
        // llama.cpp's layout: layer il slides unless il % n == n - 1.
        let fixed = (0..c.n_layers).all(|il| {
            let sliding = il % n < n - 1;
            (c.layer_kinds[il] == LayerKind::Sliding) == sliding
        });
        if !fixed {
            let pattern = c
                .layer_kinds
                .iter()
                .map(|k| Value::Bool(*k == LayerKind::Sliding))
                .collect();
            kv.push((
                format!("{a}.attention.sliding_window_pattern"),
                Value::Array(pattern),
            ));
        }
    }
    let derived = 1.0 / (c.head_dim as f32).sqrt();
    if arch.scale_key && ((c.attn_scale - derived) / derived).abs() > 1e-6 {
        kv.push((format!("{a}.attention.scale"), Value::F32(c.attn_scale)));
    }
}

/// The keys (and tensors) of the global layers' rope scaling.
fn rope_keys(
    ck: &HfCheckpoint,
    cfg: &HfConfig,
    a: &str,
    kv: &mut Vec<(String, Value)>,
) -> Result<Vec<ExtraTensor>, ModelError> {
    let c = &ck.config;
    let rope = crate::hf::rope::read(cfg, c.head_dim, Some("full_attention"))?;
    let key = |k: &str| format!("{a}.rope.scaling.{k}");
    let factors = |name, values| ExtraTensor { name, values };
    let mut extra = Vec::new();
    match rope.kind.as_str() {
        "linear" => {
            kv.push((key("type"), Value::String("linear".into())));
            kv.push((key("factor"), Value::F32(1.0 / c.rope.freq_scale)));
        }
        "llama3" => extra.push(factors("rope_freqs.weight", c.rope.freq_factors.clone())),
        "yarn" => {
            kv.push((key("type"), Value::String("yarn".into())));
            let factor = rope.factor.unwrap_or(1.0);
            kv.push((key("factor"), Value::F32(factor as f32)));
            let old = rope.original_context.unwrap_or(0.0);
            kv.push((key("original_context_length"), Value::U32(old as u32)));
        }
        "longrope" | "su" => {
            kv.push((key("attn_factor"), Value::F32(rope.attn_factor as f32)));
            let old = rope.original_context.unwrap_or(0.0);
            kv.push((key("original_context_length"), Value::U32(old as u32)));
            let long = rope.long_rope.map(|l| l.long_factors).unwrap_or_default();
            extra.push(factors("rope_factors_long.weight", long));
            extra.push(factors("rope_factors_short.weight", rope.freq_factors));
        }
        // Default rope, and dynamic NTK, which llama.cpp's keys cannot carry (nor llama.cpp
        // run): the read-back check refuses it, as the file would lose `dynamic_ntk`.
        _ => {}
    }
    Ok(extra)
}

/// `general.name`: the folder's name.
fn model_name(dir: &Path) -> String {
    dir.canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into())
}
