//! Plain descriptions of what an operation should do, shared by every backend.

/// How rotary embedding pairs up the values of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeKind {
    /// Adjacent pairs `(x[2i], x[2i+1])`: GGUF llama-family files (their Q/K weights were permuted
    /// at conversion so that this matches the HF layout).
    Normal,
    /// Halves `(x[i], x[i + n_rot/2])`: the HF / GPT-NeoX layout (Qwen, Gemma).
    Neox,
}

/// Rotary position embedding parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeSpec {
    pub kind: RopeKind,
    /// Number of leading values of each head that are rotated (≤ head_dim, even).
    pub n_rot: usize,
    pub freq_base: f32,
    /// Linear position scaling: positions are multiplied by this (1.0 = none).
    pub freq_scale: f32,
    /// Per-frequency divisors (Llama 3.1 `rope_freqs`), length `n_rot / 2`, or empty.
    pub freq_factors: Vec<f32>,
}

impl RopeSpec {
    /// The ratio of consecutive rotation frequencies, `freq_base^(-2 / n_rot)`, computed in
    /// f32 as ggml does.
    pub fn theta_scale(&self) -> f32 {
        theta_scale_of(self.freq_base, self.n_rot)
    }
}

/// `base^(-2 / n_rot)` in f32: the ratio of consecutive rotation frequencies of a rope with
/// base `base` (see [`RopeRows::theta_scales`]).
pub fn theta_scale_of(base: f32, n_rot: usize) -> f32 {
    base.powf(-2.0 / n_rot as f32)
}

/// The rows one rope call rotates: where each is, and, where rows differ in their base,
/// each row's own frequency ratio.
#[derive(Clone, Copy, Debug)]
pub struct RopeRows<'a> {
    /// `[n_rows]`: each row's position.
    pub positions: &'a [u32],
    /// `[n_rows]`: each row's `base^(-2 / n_rot)`, in place of the one
    /// [`RopeSpec::freq_base`] gives every row; `None`: every row uses `freq_base`.
    ///
    /// NOTE: dynamic NTK scaling raises the base with the length of a sequence, and a batch
    /// holds several sequences, so the base is a property of the row, not of the model.
    pub theta_scales: Option<&'a [f32]>,
}

impl<'a> RopeRows<'a> {
    /// Rows at `positions`, all with the model's base.
    pub fn at(positions: &'a [u32]) -> Self {
        Self {
            positions,
            theta_scales: None,
        }
    }

    /// How many rows there are, if the two arrays agree on it.
    pub fn n_rows(&self) -> Option<usize> {
        let n = self.positions.len();
        match self.theta_scales {
            Some(t) if t.len() != n => None,
            _ => Some(n),
        }
    }

    /// Row `i`'s `base^(-2 / n_rot)`, given `plain`, the one of [`RopeSpec::freq_base`]
    /// (computed once per call by the caller).
    pub fn theta_scale(&self, i: usize, plain: f32) -> f32 {
        self.theta_scales.map_or(plain, |t| t[i])
    }
}

/// The nonlinearity of a gated feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// x · sigmoid(x) (Llama, Qwen).
    Silu,
    /// GELU, tanh approximation (Gemma).
    GeluTanh,
}

/// How keys and values are stored in the KV cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvType {
    /// Half precision, as llama.cpp and Ollama store them by default. Queries and softmax
    /// weights are rounded to f16 too, as ggml rounds the f32 operand of an f16 product.
    #[default]
    F16,
    /// Full precision: twice the memory, and no rounding anywhere in attention (what
    /// transformers computes in f32, and llama.cpp with `-ctk f32 -ctv f32`).
    F32,
}

impl KvType {
    /// Bytes one stored value takes.
    pub fn size(self) -> u64 {
        match self {
            KvType::F16 => 2,
            KvType::F32 => 4,
        }
    }

    /// The name users type (`f16`, `f32`).
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::F32 => "f32",
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f16" => Ok(KvType::F16),
            "f32" => Ok(KvType::F32),
            _ => Err(format!(
                "'{s}' is not a KV cache type hearth has (f16, f32)"
            )),
        }
    }
}

/// Shape of the KV cache to allocate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvSpec {
    /// `n_kv_heads * head_dim` for each layer.
    pub kv_dims: Vec<usize>,
    pub n_blocks: usize,
    pub block_size: usize,
    /// How each key and value is stored.
    pub dtype: KvType,
}

impl KvSpec {
    /// Bytes this cache takes.
    pub fn bytes(&self) -> u64 {
        let slots = (self.n_blocks * self.block_size) as u64;
        let per_value = self.dtype.size();
        self.kv_dims
            .iter()
            .map(|&d| 2 * per_value * slots * d as u64)
            .sum()
    }
}

/// One sequence's part of a batch, as attention sees it.
///
/// The sequence's new tokens are rows `token_start .. token_start + n_tokens` of the batch and sit
/// at positions `first_pos ..`; positions before `first_pos` are already in the cache.
#[derive(Clone, Debug)]
pub struct AttnSeq<'a> {
    pub token_start: usize,
    pub n_tokens: usize,
    pub first_pos: usize,
    /// Physical block of each logical block of the sequence; covers `first_pos + n_tokens` tokens.
    pub block_table: &'a [u32],
}

/// All sequences of a batch.
#[derive(Clone, Debug)]
pub struct AttnBatch<'a> {
    pub seqs: &'a [AttnSeq<'a>],
    pub block_size: usize,
}

impl AttnSeq<'_> {
    /// Flat cache slot of position `pos` of this sequence.
    #[inline]
    pub fn slot(&self, pos: usize, block_size: usize) -> usize {
        self.block_table[pos / block_size] as usize * block_size + pos % block_size
    }
}

/// Per-layer attention parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct AttnParams {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies q·k before the softmax.
    pub scale: f32,
    /// Sliding window: a token at position p sees positions p - window + 1 ..= p.
    pub window: Option<usize>,
    /// Attention-logit soft-capping `c · tanh(x / c)` (Gemma 2), if any.
    pub softcap: Option<f32>,
}

/// The weights of one dense decoder layer as [`crate::Backend::decode_layers`] runs it:
/// a pre-norm attention block (optionally QK-normed) and a pre-norm gated feed-forward block,
/// each adding its output to the residual stream, with no biases and no post-norms.
pub struct DenseLayer<'a, W> {
    pub attn_norm: &'a W,
    pub wq: &'a W,
    pub wk: &'a W,
    pub wv: &'a W,
    /// Per-head RMSNorm weights of q and k (Qwen 3), or `None`.
    pub qk_norms: Option<(&'a W, &'a W)>,
    pub wo: &'a W,
    pub ffn_norm: &'a W,
    pub gate: &'a W,
    pub up: &'a W,
    pub down: &'a W,
}

/// What every layer of a [`DenseLayer`] stack shares.
pub struct DenseStack<'a> {
    /// Full attention: no window and no soft-capping.
    pub attn: &'a AttnParams,
    pub rope: &'a RopeSpec,
    /// The RMSNorm epsilon of every norm.
    pub eps: f32,
    pub activation: Activation,
    /// Rows of the gate and up projections.
    pub n_ff: usize,
}
