//! The typed configuration of a decoder-only transformer, read from GGUF metadata.

use hearth_backend::{Activation, RopeKind, RopeSpec};
use hearth_gguf::Metadata;

use crate::{DynamicNtk, ModelError, MoeConfig};

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
    /// Queries, keys and values are one stored matrix (`attn_qkv`, `[q + k + v rows]`), and
    /// gate and up are one (`ffn_up`, gate rows first) (Phi 3).
    pub fused_projections: bool,
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
    /// Dynamic NTK scaling of `rope` (HF `rope_type: dynamic`): the base grows with a
    /// sequence's length past the original context.
    pub dynamic_ntk: Option<DynamicNtk>,
    /// LongRoPE's second set of frequency divisors, for contexts longer than the original one
    /// (see [`DecoderConfig::fit_context`]); `rope.freq_factors` holds the short set.
    pub long_rope: Option<LongRope>,
}

/// See [`DecoderConfig::long_rope`].
#[derive(Clone, Debug, PartialEq)]
pub struct LongRope {
    /// The context the model was first trained for (`original_max_position_embeddings`).
    pub original_context: usize,
    /// Per-frequency divisors for longer contexts, length `n_rot / 2`.
    pub long_factors: Vec<f32>,
}

impl DecoderConfig {
    /// Settle what depends on the context size the model runs with: LongRoPE's long factors
    /// replace the short ones when `n_ctx` exceeds the original context.
    ///
    /// NOTE: this is llama.cpp's rule (it picks the factors by context size). transformers
    /// picks them per forward pass by the sequence's length, so the two agree for every
    /// sequence when the context is at most the original one, and for sequences longer than
    /// it otherwise; a short sequence in a long context gets the long factors here, as in
    /// llama.cpp. One set per model keeps a sequence's cached keys consistent.
    pub fn fit_context(&mut self, n_ctx: usize) {
        if let Some(long) = &self.long_rope {
            if n_ctx > long.original_context {
                self.rope.freq_factors = long.long_factors.clone();
                self.rope_sliding.freq_factors = long.long_factors.clone();
            }
        }
    }

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
    /// Per-frequency divisors (YaRN), length `n_rot / 2`, or empty.
    pub freq_factors: Vec<f32>,
    /// Rope's scale of cos and sin (YaRN), which scales q·k by its square.
    pub attn_factor: f64,
}

/// What `{arch}.rope.scaling.*` asks for.
struct RopeScaling {
    freq_scale: f32,
    freq_factors: Vec<f32>,
    attn_factor: f64,
}

impl RopeScaling {
    /// `{arch}.rope.scaling.type` (none, linear, yarn; absent with a factor: linear, as
    /// llama.cpp reads it) and its parameters.
    fn read(meta: &Metadata, arch: &str, theta: f32, n_rot: usize) -> Result<Self, ModelError> {
        let key = |k: &str| format!("{arch}.rope.scaling.{k}");
        let mut out = Self {
            freq_scale: 1.0,
            freq_factors: Vec::new(),
            attn_factor: 1.0,
        };
        let factor = match meta.get_f32(&key("factor"))? {
            Some(f) if f > 0.0 => Some(f as f64),
            Some(f) => return Err(bad(key("factor"), format!("{f} must be positive"))),
            None => None,
        };
        let kind = meta.get_str(&key("type"))?;
        match (kind, factor) {
            (Some("none"), _) | (None | Some("linear"), None) => {}
            (None | Some("linear"), Some(f)) => out.freq_scale = (1.0 / f) as f32,
            (Some("yarn"), _) => {
                let f = factor.ok_or_else(|| bad(key("factor"), "is missing".into()))?;
                let old = meta.require_u32(&key("original_context_length"))?;
                let yarn = crate::rope_scaling::Yarn {
                    factor: f,
                    old_context: old as f64,
                    beta_fast: meta.get_f32(&key("yarn_beta_fast"))?.unwrap_or(32.0) as f64,
                    beta_slow: meta.get_f32(&key("yarn_beta_slow"))?.unwrap_or(1.0) as f64,
                    truncate: true,
                };
                out.freq_factors = yarn.factors(theta as f64, n_rot);
                // llama.cpp: mscale = attn_factor · (1 + 0.1 ln factor).
                let attn = meta.get_f32(&key("attn_factor"))?.unwrap_or(1.0) as f64;
                out.attn_factor = attn * crate::rope_scaling::yarn_attn_factor(f, None, None);
            }
            (Some(other), _) => {
                return Err(bad(
                    key("type"),
                    format!("'{other}' is not supported yet (none, linear, yarn)"),
                ))
            }
        }
        Ok(out)
    }
}

fn bad(key: String, reason: String) -> ModelError {
    ModelError::BadConfig { key, reason }
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
        let freq_base = meta.get_f32(&key("rope.freq_base"))?.unwrap_or(10000.0);
        let scaling = RopeScaling::read(meta, arch, freq_base, n_rot)?;
        if scaling.attn_factor != 1.0 && n_rot != head_dim {
            return Err(ModelError::BadConfig {
                key: key("rope.scaling.type"),
                reason: "an attention factor with a partial rotation is not supported yet".into(),
            });
        }
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
            freq_base,
            freq_scale: scaling.freq_scale,
            freq_factors: scaling.freq_factors,
            attn_factor: scaling.attn_factor,
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
            freq_factors: self.freq_factors,
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
            fused_projections: false,
            post_norms: false,
            embed_scale: None,
            activation: Activation::Silu,
            attn_scale: (self.attn_factor * self.attn_factor) as f32
                / (self.head_dim as f32).sqrt(),
            attn_softcap: None,
            final_softcap: None,
            sliding_window: None,
            layer_kinds: vec![LayerKind::Global; self.n_layers],
            moe: None,
            dynamic_ntk: None,
            long_rope: None,
        }
    }
}
