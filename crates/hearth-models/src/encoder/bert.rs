//! BERT (HF `BertModel`): the encoder of sentence-transformers models such as all-MiniLM-L6-v2.
//!
//! ```text
//!  x = LayerNorm(word[tokens] + position[0..n] + token_type[0])
//!  per layer:  x = LayerNorm(x + attn_out(bidirectional_attn(x)))      (post-LN)
//!              x = LayerNorm(x + ffn_down(gelu(ffn_up(x))))
//!  hidden states: x, one row per token
//! ```

use std::ops::Range;

use hearth_backend::{AttnParams, Backend};

use crate::hf::config::HfConfig;
use crate::{ModelError, TensorLoader};

/// BERT hyperparameters from `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub n_layers: usize,
    pub n_ff: usize,
    /// `max_position_embeddings`: the longest input the position table covers.
    pub n_positions: usize,
    pub n_token_types: usize,
    pub eps: f32,
}

impl BertConfig {
    /// Read the keys of a BERT `config.json`; an activation or position embedding other than
    /// BERT's own (exact GELU, absolute positions) is refused by name.
    pub fn from_hf(cfg: &HfConfig) -> Result<Self, ModelError> {
        if let Some(act) = cfg.str("hidden_act")? {
            if act != "gelu" {
                return Err(cfg.error(
                    "hidden_act",
                    format!("is '{act}'; only 'gelu' (exact, erf) is supported for BERT"),
                ));
            }
        }
        if let Some(kind) = cfg.str("position_embedding_type")? {
            if kind != "absolute" {
                return Err(cfg.error(
                    "position_embedding_type",
                    format!("is '{kind}'; only 'absolute' is supported"),
                ));
            }
        }
        let n_embd = cfg.require_usize("hidden_size")?;
        let n_heads = cfg.require_usize("num_attention_heads")?;
        if n_embd % n_heads != 0 {
            return Err(cfg.error(
                "num_attention_heads",
                format!("{n_heads} does not divide hidden_size {n_embd}"),
            ));
        }
        Ok(Self {
            n_vocab: cfg.require_usize("vocab_size")?,
            n_embd,
            n_heads,
            head_dim: n_embd / n_heads,
            n_layers: cfg.require_usize("num_hidden_layers")?,
            n_ff: cfg.require_usize("intermediate_size")?,
            n_positions: cfg.require_usize("max_position_embeddings")?,
            n_token_types: cfg.usize("type_vocab_size")?.unwrap_or(2),
            eps: cfg.f64("layer_norm_eps")?.unwrap_or(1e-12) as f32,
        })
    }
}

/// A LayerNorm's scale and shift, kept on the host (the backend op takes them as slices).
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

/// A linear layer with bias: the weight on the backend, the bias on the host.
struct Linear<W> {
    weight: W,
    bias: Vec<f32>,
}

/// One encoder block (HF names in comments).
struct Layer<W> {
    query: Linear<W>,    // attention.self.query  [n_embd, n_embd]
    key: Linear<W>,      // attention.self.key
    value: Linear<W>,    // attention.self.value
    attn_out: Linear<W>, // attention.output.dense
    attn_norm: Norm,     // attention.output.LayerNorm
    ffn_up: Linear<W>,   // intermediate.dense  [n_ff, n_embd]
    ffn_down: Linear<W>, // output.dense  [n_embd, n_ff]
    ffn_norm: Norm,      // output.LayerNorm
}

/// A BERT encoder on backend `B`.
pub struct BertModel<B: Backend> {
    pub config: BertConfig,
    word: B::Weight,     // embeddings.word_embeddings  [n_vocab, n_embd]
    position: B::Weight, // embeddings.position_embeddings  [n_positions, n_embd]
    /// Row 0 of `embeddings.token_type_embeddings`: every input is a single segment.
    token_type: Vec<f32>,
    embed_norm: Norm, // embeddings.LayerNorm
    layers: Vec<Layer<B::Weight>>,
}

fn norm<B: Backend>(loader: &TensorLoader<B>, name: &str, n: usize) -> Result<Norm, ModelError> {
    Ok(Norm {
        weight: loader.vector_f32(&format!("{name}.weight"), n)?,
        bias: loader.vector_f32(&format!("{name}.bias"), n)?,
    })
}

fn linear<B: Backend>(
    loader: &TensorLoader<B>,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Linear<B::Weight>, ModelError> {
    Ok(Linear {
        weight: loader.load(&format!("{name}.weight"), rows, cols)?,
        bias: loader.vector_f32(&format!("{name}.bias"), rows)?,
    })
}

impl<B: Backend> BertModel<B> {
    /// Load the weights under their HF `BertModel` names.
    pub fn load(config: BertConfig, loader: &TensorLoader<B>) -> Result<Self, ModelError> {
        let (e, ff) = (config.n_embd, config.n_ff);
        let mut layers = Vec::with_capacity(config.n_layers);
        for i in 0..config.n_layers {
            let n = |s: &str| format!("encoder.layer.{i}.{s}");
            layers.push(Layer {
                query: linear(loader, &n("attention.self.query"), e, e)?,
                key: linear(loader, &n("attention.self.key"), e, e)?,
                value: linear(loader, &n("attention.self.value"), e, e)?,
                attn_out: linear(loader, &n("attention.output.dense"), e, e)?,
                attn_norm: norm(loader, &n("attention.output.LayerNorm"), e)?,
                ffn_up: linear(loader, &n("intermediate.dense"), ff, e)?,
                ffn_down: linear(loader, &n("output.dense"), e, ff)?,
                ffn_norm: norm(loader, &n("output.LayerNorm"), e)?,
            });
        }
        let types = loader.host(
            "embeddings.token_type_embeddings.weight",
            config.n_token_types,
            e,
        )?;
        let mut token_type = vec![0.0; e];
        let row_bytes = types.ty.bytes_for(e as u64).unwrap_or(0) as usize;
        hearth_quant::dequantize_row(types.ty, &types.data.bytes()[..row_bytes], &mut token_type)
            .map_err(|err| ModelError::BadTensor {
            name: types.name.clone(),
            reason: err.to_string(),
        })?;
        Ok(Self {
            word: loader.load("embeddings.word_embeddings.weight", config.n_vocab, e)?,
            position: loader.load(
                "embeddings.position_embeddings.weight",
                config.n_positions,
                e,
            )?,
            token_type,
            embed_norm: norm(loader, "embeddings.LayerNorm", e)?,
            layers,
            config,
        })
    }

    /// The last hidden states of several texts at once: `tokens` is their token ids one after
    /// the other, `seqs` the row range of each. Returns `[n_tokens, n_embd]` row-major.
    pub fn forward(
        &self,
        be: &B,
        tokens: &[u32],
        seqs: &[Range<usize>],
    ) -> Result<Vec<f32>, ModelError> {
        let c = &self.config;
        let mut covered = 0;
        for s in seqs {
            if s.start != covered || s.end < s.start {
                return Err(ModelError::BadBatch(
                    "sequences must tile the tokens".into(),
                ));
            }
            if s.len() > c.n_positions {
                return Err(ModelError::BadBatch(format!(
                    "a text of {} tokens is longer than the {} positions of the model",
                    s.len(),
                    c.n_positions
                )));
            }
            covered = s.end;
        }
        if covered != tokens.len() {
            return Err(ModelError::BadBatch(
                "sequences must tile the tokens".into(),
            ));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(ModelError::BadBatch(format!(
                "token id {t} is outside the vocabulary of {}",
                c.n_vocab
            )));
        }
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        be.run(|| self.forward_on(be, tokens, seqs))
    }

    fn forward_on(
        &self,
        be: &B,
        tokens: &[u32],
        seqs: &[Range<usize>],
    ) -> Result<Vec<f32>, ModelError> {
        let (c, n) = (&self.config, tokens.len());
        let positions: Vec<u32> = seqs.iter().flat_map(|s| 0..s.len() as u32).collect();
        let mut x = be.alloc(n, c.n_embd)?; // [n_tokens, n_embd]
        be.embed(&self.word, tokens, &mut x)?;
        let mut pos = be.alloc(n, c.n_embd)?;
        be.embed(&self.position, &positions, &mut pos)?;
        be.add(&mut x, &pos)?;
        add_row(be, &mut x, &self.token_type)?;
        be.layer_norm(
            &mut x,
            &self.embed_norm.weight,
            &self.embed_norm.bias,
            c.eps,
        )?;
        let params = AttnParams {
            n_heads: c.n_heads,
            n_kv_heads: c.n_heads,
            head_dim: c.head_dim,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            window: None,
            softcap: None,
        };
        for layer in &self.layers {
            let q = apply(be, &layer.query, &x, c.n_embd)?;
            let k = apply(be, &layer.key, &x, c.n_embd)?;
            let v = apply(be, &layer.value, &x, c.n_embd)?;
            let mut ctx = be.alloc(n, c.n_embd)?; // [n_tokens, n_heads * head_dim]
            be.attention_bidirectional(&q, &k, &v, seqs, &params, &mut ctx)?;
            let attn = apply(be, &layer.attn_out, &ctx, c.n_embd)?;
            be.add(&mut x, &attn)?;
            be.layer_norm(
                &mut x,
                &layer.attn_norm.weight,
                &layer.attn_norm.bias,
                c.eps,
            )?;
            let mut up = apply(be, &layer.ffn_up, &x, c.n_ff)?; // [n_tokens, n_ff]
            be.gelu_erf(&mut up)?;
            let down = apply(be, &layer.ffn_down, &up, c.n_embd)?;
            be.add(&mut x, &down)?;
            be.layer_norm(&mut x, &layer.ffn_norm.weight, &layer.ffn_norm.bias, c.eps)?;
        }
        Ok(be.to_host(&x)?)
    }
}

/// `W · x + b`, `[n_tokens, rows]`.
fn apply<B: Backend>(
    be: &B,
    lin: &Linear<B::Weight>,
    x: &B::Tensor,
    rows: usize,
) -> Result<B::Tensor, ModelError> {
    let (n, _) = be.shape(x);
    let mut out = be.alloc(n, rows)?;
    be.matmul(&lin.weight, x, &mut out)?;
    add_row(be, &mut out, &lin.bias)?;
    Ok(out)
}

/// `x[r] += row` for every row `r` of `x`.
fn add_row<B: Backend>(be: &B, x: &mut B::Tensor, row: &[f32]) -> Result<(), ModelError> {
    let (rows, cols) = be.shape(x);
    let tiled: Vec<f32> = row.iter().copied().cycle().take(rows * cols).collect();
    be.add(x, &be.upload(&tiled, rows, cols)?)?;
    Ok(())
}
