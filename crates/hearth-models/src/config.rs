//! The typed configuration of a decoder-only transformer, read from GGUF metadata.

use hearth_backend::{Activation, RopeKind, RopeSpec};
use hearth_gguf::Metadata;

use crate::{ModelError, MoeConfig};

/// Whether a layer attends to the whole context or a sliding window of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    Global,
    Sliding,
}

/// Everything a [`crate::DecoderModel`] needs to know about its architecture.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    /// `general.architecture`.
    pub arch: String,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    /// Context length the model was trained for.
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    /// Rotary embedding of global layers.
    pub rope: RopeSpec,
    /// Rotary embedding of sliding-window layers (Gemma 3 uses a different base there).
    pub rope_sliding: RopeSpec,
    /// Per-head RMS norm of queries and keys before rope (Qwen 3, Gemma 3).
    pub qk_norm: bool,
    /// Learned biases added to the query, key and value projections (Qwen 2).
    pub attn_qkv_bias: bool,
    /// Extra RMS norms on the attention and feed-forward outputs (Gemma 2/3).
    pub post_norms: bool,
    /// Embeddings are multiplied by this (Gemma: √n_embd).
    pub embed_scale: Option<f32>,
    pub activation: Activation,
    /// Multiplies q·k.
    pub attn_scale: f32,
    pub attn_softcap: Option<f32>,
    pub final_softcap: Option<f32>,
    /// Tokens a sliding-window layer sees (itself included).
    pub sliding_window: Option<usize>,
    /// `[n_layers]`
    pub layer_kinds: Vec<LayerKind>,
    /// Sparse mixture-of-experts feed-forward in every layer (Mixtral, Qwen 3 MoE);
    /// `None`: a dense one of width `n_ff`.
    pub moe: Option<MoeConfig>,
}

impl DecoderConfig {
    /// `n_kv_heads * head_dim`: the width of one token's keys (or values) in one layer.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

/// Hyperparameters every decoder stores under `{arch}.*`.
pub struct CommonHparams {
    pub n_embd: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    pub n_rot: usize,
    pub freq_base: f32,
    pub freq_scale: f32,
}

fn positive(key: &str, value: u32) -> Result<usize, ModelError> {
    if value == 0 {
        return Err(ModelError::BadConfig {
            key: key.to_string(),
            reason: "must be positive".into(),
        });
    }
    Ok(value as usize)
}

impl CommonHparams {
    /// Read `{arch}.embedding_length` and friends, with llama.cpp's defaults for optional keys.
    pub fn read(meta: &Metadata, arch: &str) -> Result<Self, ModelError> {
        let key = |k: &str| format!("{arch}.{k}");
        let req = |k: &str| -> Result<usize, ModelError> {
            let full = key(k);
            positive(&full, meta.require_u32(&full)?)
        };
        let n_embd = req("embedding_length")?;
        let n_layers = req("block_count")?;
        let n_heads = req("attention.head_count")?;
        let n_ff = req("feed_forward_length")?;
        let n_kv_heads = match meta.get_u32(&key("attention.head_count_kv"))? {
            Some(v) => positive(&key("attention.head_count_kv"), v)?,
            None => n_heads,
        };
        let head_dim = match meta.get_u32(&key("attention.key_length"))? {
            Some(v) => positive(&key("attention.key_length"), v)?,
            None => n_embd / n_heads,
        };
        if let Some(v) = meta.get_u32(&key("attention.value_length"))? {
            if v as usize != head_dim {
                return Err(ModelError::BadConfig {
                    key: key("attention.value_length"),
                    reason: format!("{v} differs from the key length {head_dim}; not supported"),
                });
            }
        }
        if n_heads % n_kv_heads != 0 {
            return Err(ModelError::BadConfig {
                key: key("attention.head_count_kv"),
                reason: format!("{n_heads} heads cannot be shared by {n_kv_heads} KV heads"),
            });
        }
        let n_rot = match meta.get_u32(&key("rope.dimension_count"))? {
            Some(v) => v as usize,
            None => head_dim,
        };
        if n_rot > head_dim || n_rot % 2 != 0 {
            return Err(ModelError::BadConfig {
                key: key("rope.dimension_count"),
                reason: format!("{n_rot} is not an even number ≤ head size {head_dim}"),
            });
        }
        let freq_scale = match meta.get_f32(&key("rope.scaling.factor"))? {
            Some(f) if f > 0.0 && meta.get_str(&key("rope.scaling.type"))? != Some("none") => {
                1.0 / f
            }
            _ => 1.0,
        };
        Ok(Self {
            n_embd,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            n_ff,
            n_ctx_train: meta.get_u32(&key("context_length"))?.unwrap_or(2048) as usize,
            rms_eps: meta
                .get_f32(&key("attention.layer_norm_rms_epsilon"))?
                .unwrap_or(1e-5),
            n_rot,
            freq_base: meta.get_f32(&key("rope.freq_base"))?.unwrap_or(10000.0),
            freq_scale,
        })
    }

    /// A config with these hyperparameters and the plain Llama choices for everything else;
    /// architecture files change what differs.
    pub fn into_config(self, arch: &str, n_vocab: usize, rope_kind: RopeKind) -> DecoderConfig {
        let rope = RopeSpec {
            kind: rope_kind,
            n_rot: self.n_rot,
            freq_base: self.freq_base,
            freq_scale: self.freq_scale,
            freq_factors: Vec::new(),
        };
        DecoderConfig {
            arch: arch.to_string(),
            n_vocab,
            n_embd: self.n_embd,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            n_ff: self.n_ff,
            n_ctx_train: self.n_ctx_train,
            rms_eps: self.rms_eps,
            rope_sliding: rope.clone(),
            rope,
            qk_norm: false,
            attn_qkv_bias: false,
            post_norms: false,
            embed_scale: None,
            activation: Activation::Silu,
            attn_scale: 1.0 / (self.head_dim as f32).sqrt(),
            attn_softcap: None,
            final_softcap: None,
            sliding_window: None,
            layer_kinds: vec![LayerKind::Global; self.n_layers],
            moe: None,
        }
    }
}
