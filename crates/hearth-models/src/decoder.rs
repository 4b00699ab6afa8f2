//! The decoder-only transformer all supported architectures share.
//!
//! ```text
//!  x = embed(tokens) [· embed_scale]
//!  per layer:  h = attn(rms_norm(x))   [post-norm]   x += h
//!              h = ffn(rms_norm(x))    [post-norm]   x += h
//!  logits = lm_head(rms_norm(x[logits_rows]))
//! ```

use hearth_backend::{
    AttnBatch, AttnParams, Backend, DenseLayer, DenseStack, HostValues, RopeRows,
};
use hearth_sampler::Candidate;

use crate::moe::SparseFfn;
use crate::{Batch, DecoderConfig, LayerKind, ModelError, TensorLoader};

/// The weights of one transformer block (HF names in comments).
struct Layer<W> {
    attn_norm: W,              // input_layernorm
    wq: W,                     // self_attn.q_proj  [n_heads * head_dim, n_embd]
    wk: W,                     // self_attn.k_proj  [n_kv_heads * head_dim, n_embd]
    wv: W,                     // self_attn.v_proj
    wo: W,                     // self_attn.o_proj  [n_embd, n_heads * head_dim]
    q_norm: Option<W>,         // self_attn.q_norm  [head_dim]
    k_norm: Option<W>,         // self_attn.k_norm
    qkv_bias: Option<QkvBias>, // self_attn.{q,k,v}_proj.bias (Qwen 2)
    attn_post_norm: Option<W>, // post_attention_layernorm (Gemma)
    ffn_norm: W, // post_attention_layernorm (Llama) / pre_feedforward_layernorm (Gemma)
    ffn: Ffn<W>,
    ffn_post_norm: Option<W>, // post_feedforward_layernorm (Gemma)
}

/// A layer's feed-forward block.
enum Ffn<W> {
    Dense {
        gate: W, // mlp.gate_proj  [n_ff, n_embd]
        up: W,   // mlp.up_proj
        down: W, // mlp.down_proj  [n_embd, n_ff]
    },
    /// A router and its experts (Mixtral, Qwen 3 MoE).
    Sparse(SparseFfn<W>),
}

/// Query, key and value projection biases, kept on the host: they are added as one broadcast
/// row per token (the backends have no bias-add of their own).
struct QkvBias {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl QkvBias {
    fn load<B: Backend>(
        loader: &TensorLoader<B>,
        il: usize,
        q_dim: usize,
        kv_dim: usize,
    ) -> Result<Self, ModelError> {
        let n = |s: &str| format!("blk.{il}.{s}.bias");
        Ok(Self {
            q: loader.vector_f32(&n("attn_q"), q_dim)?,
            k: loader.vector_f32(&n("attn_k"), kv_dim)?,
            v: loader.vector_f32(&n("attn_v"), kv_dim)?,
        })
    }
}

/// `x[r] += bias` for every row `r` of `x`.
fn add_row<B: Backend>(be: &B, x: &mut B::Tensor, bias: &[f32]) -> Result<(), ModelError> {
    let (rows, cols) = be.shape(x);
    let tiled: Vec<f32> = bias.iter().copied().cycle().take(rows * cols).collect();
    be.add(x, &be.upload(&tiled, rows, cols)?)?;
    Ok(())
}

/// Whether `batch` wants the logits of every row, in order (as decode steps do).
fn wants_every_row(batch: &Batch) -> bool {
    batch.logits_rows.len() == batch.tokens.len()
        && batch.logits_rows.iter().enumerate().all(|(i, &r)| i == r)
}

/// What every layer's attention needs to know about the batch's rows.
struct LayerRows<'a> {
    batch: &'a Batch<'a>,
    attn: &'a AttnBatch<'a>,
    /// `[n_tokens]`: each row's rope `base^(-2 / n_rot)` where dynamic NTK scaling raises the
    /// base of some sequence (see [`crate::DynamicNtk`]); `None`: plain rope.
    theta_scales: Option<&'a [f32]>,
}

/// What a forward pass returns for its wanted rows, and where.
enum Head<'a> {
    /// Logits over the vocabulary.
    Logits(&'a mut HostValues),
    /// The hidden state after the final norm.
    Hidden(&'a mut Vec<f32>),
    /// The id of each row's largest logit (see [`Backend::argmax_rows`]).
    Argmax(&'a mut Vec<u32>),
    /// The `k` best candidates of each row (see [`Backend::top_k_rows`]).
    Best(usize, &'a mut Vec<Candidate>),
    /// Each row's argmax, left on the device for the next chained pass and brought back
    /// later (see [`Backend::argmax_rows_chained`]); `tokens_on_device`: this pass's own
    /// tokens are the ids the chained pass before it found, not the batch's.
    Chained { tokens_on_device: bool },
}

/// Set in a replay key (see [`DecoderModel::graph_key`]) for passes that end in
/// [`Head::Argmax`]: their last kernels differ from a logits pass of the same batch.
const ARGMAX_KEY: u64 = 1 << 33;
/// Set in a replay key for passes that end in [`Head::Best`], with `k` from bit
/// [`BEST_K_SHIFT`] on: the selection's kernel takes `k` as an argument.
const BEST_KEY: u64 = 1 << 34;
const BEST_K_SHIFT: u32 = 40;
/// Set in a replay key for decode steps over sequences long enough that the backend runs
/// other kernels ([`Backend::long_context_step`]).
const LONG_CONTEXT_KEY: u64 = 1 << 35;
/// Set in a replay key for passes that end in [`Head::Chained`], and with
/// [`TOKENS_ON_DEVICE_KEY`] for those whose tokens come from the pass before: the first
/// embeds staged ids, the second the ones on the device.
const CHAINED_KEY: u64 = 1 << 36;
const TOKENS_ON_DEVICE_KEY: u64 = 1 << 37;

/// A decoder-only transformer on backend `B`.
pub struct DecoderModel<B: Backend> {
    pub config: DecoderConfig,
    tok_embd: B::Weight,
    output_norm: B::Weight,
    /// `None` when the embeddings are tied.
    output: Option<B::Weight>,
    layers: Vec<Layer<B::Weight>>,
    /// When `Some`, each forward replaces it with the L2 norms of the last row's hidden state:
    /// after the embedding, after each layer but the last, and after the final norm, which
    /// are the rows of HF transformers' `output_hidden_states` (for reference comparisons).
    trace: std::sync::Mutex<Option<Vec<f32>>>,
}

impl<B: Backend> DecoderModel<B> {
    /// Load the weights named as llama.cpp's GGUF files name them.
    pub fn load(config: DecoderConfig, loader: &TensorLoader<B>) -> Result<Self, ModelError> {
        let c = &config;
        let (e, q_dim, kv_dim) = (c.n_embd, c.n_heads * c.head_dim, c.kv_dim());
        if c.moe.is_some() && c.post_norms {
            return Err(ModelError::BadConfig {
                key: format!("{}.expert_count", c.arch),
                reason: "experts with post-feed-forward norms are not supported yet".into(),
            });
        }
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let norm_opt =
                |s: &str, len: usize, on: bool| -> Result<Option<B::Weight>, ModelError> {
                    if on {
                        loader.load(&n(s), 1, len).map(Some)
                    } else {
                        Ok(None)
                    }
                };
            // Row ranges of the fused matrices (Phi 3), in the order they are stacked.
            let qkv = q_dim + 2 * kv_dim;
            let [wq, wk, wv] = loader.load_group(if c.fused_projections {
                [
                    loader.host_rows(&n("attn_qkv"), qkv, e, 0..q_dim)?,
                    loader.host_rows(&n("attn_qkv"), qkv, e, q_dim..q_dim + kv_dim)?,
                    loader.host_rows(&n("attn_qkv"), qkv, e, q_dim + kv_dim..qkv)?,
                ]
            } else {
                [
                    loader.host(&n("attn_q"), q_dim, e)?,
                    loader.host(&n("attn_k"), kv_dim, e)?,
                    loader.host(&n("attn_v"), kv_dim, e)?,
                ]
            })?;
            let ffn = match &c.moe {
                Some(moe) => Ffn::Sparse(SparseFfn::load(loader, i, moe, e)?),
                None => {
                    let ff = c.n_ff;
                    let [gate, up] = loader.load_group(if c.fused_projections {
                        [
                            loader.host_rows(&n("ffn_up"), 2 * ff, e, 0..ff)?,
                            loader.host_rows(&n("ffn_up"), 2 * ff, e, ff..2 * ff)?,
                        ]
                    } else {
                        [
                            loader.host(&n("ffn_gate"), ff, e)?,
                            loader.host(&n("ffn_up"), ff, e)?,
                        ]
                    })?;
                    let down = loader.load(&n("ffn_down"), e, ff)?;
                    Ffn::Dense { gate, up, down }
                }
            };
            layers.push(Layer {
                attn_norm: loader.load(&n("attn_norm"), 1, e)?,
                wq,
                wk,
                wv,
                wo: loader.load(&n("attn_output"), e, q_dim)?,
                q_norm: norm_opt("attn_q_norm", c.head_dim, c.qk_norm)?,
                k_norm: norm_opt("attn_k_norm", c.head_dim, c.qk_norm)?,
                qkv_bias: if c.attn_qkv_bias {
                    Some(QkvBias::load(loader, i, q_dim, kv_dim)?)
                } else {
                    None
                },
                attn_post_norm: norm_opt("post_attention_norm", e, c.post_norms)?,
                ffn_norm: loader.load(&n("ffn_norm"), 1, e)?,
                ffn,
                ffn_post_norm: norm_opt("post_ffw_norm", e, c.post_norms)?,
            });
        }
        Ok(Self {
            tok_embd: loader.load("token_embd.weight", c.n_vocab, e)?,
            output_norm: loader.load("output_norm.weight", 1, e)?,
            output: loader.load_optional("output.weight", c.n_vocab, e)?,
            layers,
            config,
            trace: std::sync::Mutex::new(None),
        })
    }

    /// Start (or stop) recording hidden-state norms; see [`Self::take_trace`].
    pub fn set_tracing(&self, on: bool) {
        if let Ok(mut t) = self.trace.lock() {
            *t = on.then(Vec::new);
        }
    }

    /// The hidden-state norms of the last forward's last row while tracing (see the field).
    pub fn take_trace(&self) -> Vec<f32> {
        match self.trace.lock() {
            Ok(mut t) => t.as_mut().map(std::mem::take).unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// Record the norm of `x`'s last row when tracing; `first` starts a new record.
    fn record(&self, be: &B, x: &B::Tensor, first: bool) {
        let Ok(mut guard) = self.trace.lock() else {
            return;
        };
        let Some(trace) = guard.as_mut() else {
            return;
        };
        if first {
            trace.clear();
        }
        let Ok(host) = be.to_host(x) else {
            return;
        };
        let n = self.config.n_embd;
        let last = &host[host.len().saturating_sub(n)..];
        trace.push(last.iter().map(|v| v * v).sum::<f32>().sqrt());
    }

    /// Run one step over `batch`, writing its K/V into `cache`; returns the logits of
    /// `batch.logits_rows`, `[logits_rows.len(), n_vocab]` row-major.
    pub fn forward(
        &self,
        backend: &B,
        batch: &Batch,
        cache: &mut B::KvCache,
        block_size: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let mut logits = HostValues::new();
        self.forward_into(backend, batch, cache, block_size, &mut logits)?;
        Ok(logits.into_vec())
    }

    /// [`Self::forward`] writing the logits into `logits` (its allocation is reused).
    pub fn forward_into(
        &self,
        backend: &B,
        batch: &Batch,
        cache: &mut B::KvCache,
        block_size: usize,
        logits: &mut HostValues,
    ) -> Result<(), ModelError> {
        logits.clear();
        let key = self.graph_key(backend, batch);
        self.run_pass(backend, batch, cache, block_size, key, Head::Logits(logits))
    }

    /// Like [`Self::forward_into`], but writes only the id of the largest logit of each of
    /// `batch.logits_rows` (ties to the lower id, as `hearth_sampler::argmax`): greedy
    /// decoding without copying the logits off the device.
    pub fn forward_argmax_into(
        &self,
        backend: &B,
        batch: &Batch,
        cache: &mut B::KvCache,
        block_size: usize,
        ids: &mut Vec<u32>,
    ) -> Result<(), ModelError> {
        ids.clear();
        let key = self.graph_key(backend, batch).map(|k| k | ARGMAX_KEY);
        self.run_pass(backend, batch, cache, block_size, key, Head::Argmax(ids))
    }

    /// Like [`Self::forward_into`], but writes only the `k` best candidates of each of
    /// `batch.logits_rows` (`Backend::top_k_rows`'s order), `k` per row: what sampling with a
    /// top-k stage reads (`hearth_sampler::Sampler::sample_best`), without copying the logits
    /// off the device.
    pub fn forward_best_into(
        &self,
        backend: &B,
        batch: &Batch,
        cache: &mut B::KvCache,
        block_size: usize,
        k: usize,
        best: &mut Vec<Candidate>,
    ) -> Result<(), ModelError> {
        best.clear();
        if k == 0 || k > self.config.n_vocab {
            return Err(ModelError::BadBatch(format!(
                "the {k} best of a {}-token vocabulary",
                self.config.n_vocab
            )));
        }
        let key = self
            .graph_key(backend, batch)
            .map(|key| key | BEST_KEY | (k as u64) << BEST_K_SHIFT);
        self.run_pass(backend, batch, cache, block_size, key, Head::Best(k, best))
    }

    /// Whether [`Self::forward_argmax_chained`] runs on `backend`: the backend chains decode
    /// steps, and the argmax needs nothing done on the host first (a final soft-cap's tanh is).
    pub fn chains_argmax(&self, backend: &B) -> bool {
        backend.chains_argmax() && self.config.final_softcap.is_none()
    }

    /// A greedy decode step that does not wait for its result: like
    /// [`Self::forward_argmax_into`], but the ids stay on the device for the next chained
    /// step and come back through [`Self::take_chained_argmax`], so that the next step can be
    /// queued while this one runs. `tokens_on_device`: run the ids the chained step before
    /// found, row for row, in place of `batch.tokens` (whose values are then not read; the
    /// batch still says where each row goes).
    pub fn forward_argmax_chained(
        &self,
        backend: &B,
        batch: &Batch,
        cache: &mut B::KvCache,
        block_size: usize,
        tokens_on_device: bool,
    ) -> Result<(), ModelError> {
        if !self.chains_argmax(backend) {
            return Err(ModelError::BadBatch(
                "chained greedy steps are not available on this backend and model".into(),
            ));
        }
        let on_device = if tokens_on_device {
            TOKENS_ON_DEVICE_KEY
        } else {
            0
        };
        let key = self
            .graph_key(backend, batch)
            .map(|k| k | CHAINED_KEY | on_device);
        let head = Head::Chained { tokens_on_device };
        self.check_batch(batch, block_size)?;
        if batch.tokens.is_empty() || batch.logits_rows.len() != batch.tokens.len() {
            return Err(ModelError::BadBatch(
                "a chained step wants the argmax of every one of its rows".into(),
            ));
        }
        backend.begin_chained_forward(key);
        backend.run(|| self.forward_on(backend, batch, cache, block_size, head))
    }

    /// The ids of the oldest [`Self::forward_argmax_chained`] step not yet taken, waiting for
    /// it to finish.
    pub fn take_chained_argmax(&self, backend: &B, ids: &mut Vec<u32>) -> Result<(), ModelError> {
        Ok(backend.take_chained_argmax(ids)?)
    }

    /// Like [`Self::forward_into`], but writes the final hidden states (after the final norm,
    /// before the output projection) of `batch.logits_rows`, `[logits_rows.len(), n_embd]`:
    /// what decoder-only embedding models pool.
    pub fn forward_hidden_into(
        &self,
        backend: &B,
        batch: &Batch,
        cache: &mut B::KvCache,
        block_size: usize,
        hidden: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        hidden.clear();
        self.run_pass(
            backend,
            batch,
            cache,
            block_size,
            None,
            Head::Hidden(hidden),
        )
    }

    /// Checks `batch` and runs one pass over it, announced to the backend with replay key
    /// `key`, into `head`'s output (left empty for an empty batch).
    fn run_pass(
        &self,
        backend: &B,
        batch: &Batch,
        cache: &mut B::KvCache,
        block_size: usize,
        key: Option<u64>,
        head: Head,
    ) -> Result<(), ModelError> {
        self.check_batch(batch, block_size)?;
        // NOTE: a batch that wants no logits (a prompt chunk that does not reach its end)
        // still runs: its keys and values must reach the cache.
        if batch.tokens.is_empty() {
            return Ok(());
        }
        let mut head = head;
        match &mut head {
            // NOTE: announced so that the backend may write the logits straight into `out`
            // (see `forward_on`); soft-capped ones are scaled on the device first.
            Head::Logits(out) if self.config.final_softcap.is_none() => {
                let len = batch.logits_rows.len() * self.config.n_vocab;
                backend.begin_forward_to_host(key, out, len)?;
            }
            _ => backend.begin_forward(key),
        }
        backend.run(|| self.forward_on(backend, batch, cache, block_size, head))
    }

    fn check_batch(&self, batch: &Batch, block_size: usize) -> Result<(), ModelError> {
        batch.validate(block_size).map_err(ModelError::BadBatch)?;
        if let Some(&t) = batch
            .tokens
            .iter()
            .find(|&&t| t as usize >= self.config.n_vocab)
        {
            return Err(ModelError::BadBatch(format!(
                "token id {t} is outside the vocabulary of {}",
                self.config.n_vocab
            )));
        }
        Ok(())
    }

    /// The replay key of a decode step (every sequence brings one token and wants its logits):
    /// such steps differ only in their host data, so a backend may replay a recording of the
    /// first. Other batches (prompt chunks, traced runs) run op by op.
    fn graph_key(&self, backend: &B, batch: &Batch) -> Option<u64> {
        let n = batch.tokens.len();
        let decode = batch.seqs.iter().all(|s| s.n_tokens == 1) && wants_every_row(batch);
        let tracing = self.trace.lock().map(|t| t.is_some()).unwrap_or(true);
        // NOTE: expert routing reads router logits back and sizes matmuls by them.
        let sparse = self.config.moe.is_some();
        // NOTE: a step whose rows carry their own rope base stages one more array and passes
        // it to the rope kernels, so it is a different recording from a plain step of `n`.
        let own_bases = self.rope_theta_scales(batch).is_some() as u64;
        let longest = batch.seqs.iter().map(|s| s.first_pos + s.n_tokens).max();
        let long = if backend.long_context_step(longest.unwrap_or(0)) {
            LONG_CONTEXT_KEY
        } else {
            0
        };
        (decode && !tracing && !sparse).then_some(n as u64 | own_bases << 32 | long)
    }

    /// Each row's rope `base^(-2 / n_rot)` when dynamic NTK scaling raises the base of some
    /// sequence of `batch`; `None` (plain rope) otherwise.
    fn rope_theta_scales(&self, batch: &Batch) -> Option<Vec<f32>> {
        let ntk = self.config.dynamic_ntk.as_ref()?;
        ntk.theta_scales(batch.seqs, batch.tokens.len(), &self.config.rope)
    }

    fn forward_on(
        &self,
        be: &B,
        batch: &Batch,
        cache: &mut B::KvCache,
        block_size: usize,
        head: Head,
    ) -> Result<(), ModelError> {
        let c = &self.config;
        let mut x = be.alloc(batch.tokens.len(), c.n_embd)?; // [n_tokens, n_embd]
        match head {
            Head::Chained {
                tokens_on_device: true,
            } => be.embed_chained(&self.tok_embd, &mut x)?,
            _ => be.embed(&self.tok_embd, batch.tokens, &mut x)?,
        }
        if let Some(s) = c.embed_scale {
            be.scale(&mut x, s)?;
        }
        self.record(be, &x, true);
        let attn_batch = AttnBatch {
            seqs: batch.seqs,
            block_size,
        };
        let theta_scales = self.rope_theta_scales(batch);
        let rows = LayerRows {
            batch,
            attn: &attn_batch,
            theta_scales: theta_scales.as_deref(),
        };
        let in_one_call = self.decode_layers_in_one_call(be, &mut x, &rows, cache)?;
        let layers = if in_one_call {
            &[][..]
        } else {
            &self.layers[..]
        };
        for (il, layer) in layers.iter().enumerate() {
            let mut ctx = self.attention(be, layer, il, &x, &rows, cache)?;
            if il + 1 == self.layers.len() {
                // NOTE: after the last attention only the rows whose logits are wanted matter
                // (one per sequence in decode), so the rest of the last layer runs on those.
                if batch.logits_rows.is_empty() {
                    return Ok(());
                }
                // A decode step wants every row: gathering them all would copy them in order.
                if !wants_every_row(batch) {
                    ctx = be.gather_rows(&ctx, batch.logits_rows)?;
                    x = be.gather_rows(&x, batch.logits_rows)?;
                }
            }
            self.project_add(be, &layer.wo, &ctx, layer.attn_post_norm.as_ref(), &mut x)?;
            match &layer.ffn {
                Ffn::Dense { gate, up, down } => {
                    let (n, _) = be.shape(&x);
                    let mut act = be.alloc(n, c.n_ff)?; // [n_tokens, n_ff]
                    let (norm, eps) = (&layer.ffn_norm, c.rms_eps);
                    be.rms_norm_gated_matmul(&x, norm, eps, gate, up, c.activation, &mut act)?;
                    self.project_add(be, down, &act, layer.ffn_post_norm.as_ref(), &mut x)?;
                }
                Ffn::Sparse(moe) => {
                    let h = be.rms_norm_copy(&x, &layer.ffn_norm, c.rms_eps)?;
                    moe.forward_add(be, &h, c.activation, &mut x)?
                }
            }
            if il + 1 < self.layers.len() {
                self.record(be, &x, false);
            }
        }
        be.rms_norm(&mut x, &self.output_norm, c.n_embd, c.rms_eps)?;
        self.record(be, &x, false);
        if let Head::Hidden(out) = head {
            be.to_host_into(&x, out)?;
            return Ok(());
        }
        let output = self.output.as_ref().unwrap_or(&self.tok_embd);
        let head = match head {
            Head::Logits(out) if c.final_softcap.is_none() => {
                be.matmul_to_host(output, &x, c.n_vocab, out)?;
                return Ok(());
            }
            other => other,
        };
        let (rows, _) = be.shape(&x);
        let mut logits = be.alloc(rows, c.n_vocab)?;
        be.matmul(output, &x, &mut logits)?;
        let Some(cap) = c.final_softcap else {
            match head {
                Head::Argmax(ids) => be.argmax_rows(&logits, ids)?,
                Head::Chained { .. } => be.argmax_rows_chained(&logits)?,
                Head::Best(k, best) => be.top_k_rows(&logits, k, best)?,
                Head::Logits(out) => be.to_host_values(&logits, out)?,
                Head::Hidden(out) => be.to_host_into(&logits, out)?,
            }
            return Ok(());
        };
        be.scale(&mut logits, 1.0 / cap)?;
        // tanh is applied on the host: it only runs over the few rows that are sampled.
        let soft_cap = |values: &mut [f32]| values.iter_mut().for_each(|v| *v = cap * v.tanh());
        match head {
            Head::Logits(out) => {
                be.to_host_values(&logits, out)?;
                soft_cap(out);
            }
            Head::Hidden(out) => {
                be.to_host_into(&logits, out)?;
                soft_cap(out);
            }
            Head::Argmax(ids) => {
                // NOTE: so is a soft-capped argmax: tanh may round neighbouring logits to one
                // value, and then the lower id wins, as when sampling from the capped logits.
                let mut values = Vec::new();
                be.to_host_into(&logits, &mut values)?;
                soft_cap(&mut values);
                ids.extend(values.chunks(c.n_vocab).map(hearth_sampler::argmax));
            }
            Head::Chained { .. } => {
                return Err(ModelError::BadBatch(
                    "a chained greedy step over soft-capped logits".into(),
                ))
            }
            Head::Best(k, best) => {
                // As the argmax: selected after the tanh, on the host.
                let mut values = Vec::new();
                be.to_host_into(&logits, &mut values)?;
                soft_cap(&mut values);
                hearth_sampler::best_of_rows(&values, c.n_vocab, k, best);
            }
        }
        Ok(())
    }

    /// A decode step of one sequence by one token through every layer in one backend call
    /// ([`Backend::decode_layers`]), where the layers are all dense, pre-norm only and
    /// unbiased, with full attention and plain rope, and no trace is wanted. `Ok(false)`: the
    /// caller runs the layers op by op.
    fn decode_layers_in_one_call(
        &self,
        be: &B,
        x: &mut B::Tensor,
        rows: &LayerRows,
        cache: &mut B::KvCache,
    ) -> Result<bool, ModelError> {
        let c = &self.config;
        let b = rows.batch;
        let one_token = b.tokens.len() == 1 && b.seqs.len() == 1 && b.logits_rows == [0];
        let tracing = self.trace.lock().map(|t| t.is_some()).unwrap_or(true);
        let plain = rows.theta_scales.is_none()
            && c.attn_softcap.is_none()
            && c.layer_kinds.iter().all(|&k| k != LayerKind::Sliding);
        if !one_token || tracing || !plain {
            return Ok(false);
        }
        let mut layers = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            let Ffn::Dense { gate, up, down } = &l.ffn else {
                return Ok(false);
            };
            if l.qkv_bias.is_some() || l.attn_post_norm.is_some() || l.ffn_post_norm.is_some() {
                return Ok(false);
            }
            layers.push(DenseLayer {
                attn_norm: &l.attn_norm,
                wq: &l.wq,
                wk: &l.wk,
                wv: &l.wv,
                qk_norms: l.q_norm.as_ref().zip(l.k_norm.as_ref()),
                wo: &l.wo,
                ffn_norm: &l.ffn_norm,
                gate,
                up,
                down,
            });
        }
        let attn = AttnParams {
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            scale: c.attn_scale,
            window: None,
            softcap: None,
        };
        let stack = DenseStack {
            attn: &attn,
            rope: &c.rope,
            eps: c.rms_eps,
            activation: c.activation,
            n_ff: c.n_ff,
        };
        let rope_rows = RopeRows::at(b.positions);
        Ok(be.decode_layers(x, &layers, &stack, rope_rows, cache, rows.attn)?)
    }

    fn attention(
        &self,
        be: &B,
        layer: &Layer<B::Weight>,
        il: usize,
        x: &B::Tensor,
        rows: &LayerRows,
        cache: &mut B::KvCache,
    ) -> Result<B::Tensor, ModelError> {
        let c = &self.config;
        let n = rows.batch.tokens.len();
        let (q_dim, kv_dim) = (c.n_heads * c.head_dim, c.kv_dim());
        let mut q = be.alloc(n, q_dim)?; // [n_tokens, n_heads * head_dim]
        let mut k = be.alloc(n, kv_dim)?; // [n_tokens, n_kv_heads * head_dim]
        let mut v = be.alloc(n, kv_dim)?;
        // q, k and v of the attention norm of the residual stream `x`.
        be.rms_norm_matmul3(
            x,
            &layer.attn_norm,
            c.rms_eps,
            [&layer.wq, &layer.wk, &layer.wv],
            [&mut q, &mut k, &mut v],
        )?;
        if let Some(b) = &layer.qkv_bias {
            add_row(be, &mut q, &b.q)?;
            add_row(be, &mut k, &b.k)?;
            add_row(be, &mut v, &b.v)?;
        }
        let sliding = c.layer_kinds[il] == LayerKind::Sliding;
        let rope = if sliding { &c.rope_sliding } else { &c.rope };
        let scaled = !sliding || c.dynamic_ntk.as_ref().is_some_and(|d| d.sliding_layers);
        let rope_rows = RopeRows {
            positions: rows.batch.positions,
            theta_scales: rows.theta_scales.filter(|_| scaled),
        };
        let norms = layer.q_norm.as_ref().zip(layer.k_norm.as_ref());
        let params = AttnParams {
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            scale: c.attn_scale,
            window: if sliding { c.sliding_window } else { None },
            softcap: c.attn_softcap,
        };
        let mut ctx = be.alloc(n, q_dim)?;
        be.qk_norm_rope_attention(
            &mut q, &mut k, &v, norms, rope_rows, rope, c.rms_eps, cache, il, rows.attn, &params,
            &mut ctx,
        )?;
        Ok(ctx)
    }

    /// `x += W · h`, or with a post-norm (Gemma) `x += rms_norm(W · h)`.
    fn project_add(
        &self,
        be: &B,
        w: &B::Weight,
        h: &B::Tensor,
        post_norm: Option<&B::Weight>,
        x: &mut B::Tensor,
    ) -> Result<(), ModelError> {
        match post_norm {
            None => be.matmul_add(w, h, x)?,
            Some(norm) => {
                let (rows, cols) = be.shape(x);
                let mut out = be.alloc(rows, cols)?;
                be.matmul(w, h, &mut out)?;
                be.rms_norm(&mut out, norm, cols, self.config.rms_eps)?;
                be.add(x, &out)?;
            }
        }
        Ok(())
    }
}
