//! The seam between models and hardware.
//!
//! A model is written once against [`Backend`]: a narrow set of tensor operations over dense
//! activations, stored weights and a paged KV cache. Which device runs them, how weights are laid
//! out there and how the cache is paged are the backend's business. Every operation has a CPU
//! implementation ([`cpu::CpuBackend`]) that is the reference other backends are tested against.

pub mod cpu;
pub mod encoder;
mod host_values;
mod spec;
mod weight;

pub use host_values::{DeviceVisible, HostValues};
pub use spec::{
    theta_scale_of, Activation, AttnBatch, AttnParams, AttnSeq, DenseLayer, DenseStack, KvSpec,
    KvType, RopeKind, RopeRows, RopeSpec,
};
pub use weight::{ByteSource, HostWeight, MlxGroups};

/// An error from a backend operation or from preparing data for one.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("tensor '{name}': {reason}")]
    BadWeight { name: String, reason: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// The device failed an operation (a launch, a copy, a synchronization).
    #[error("{0}")]
    Device(String),
    #[error(transparent)]
    Quant(#[from] hearth_quant::QuantError),
}

/// Appends the candidates a device's top-k kernel wrote to `out`: per row, `k` values, then
/// their `k` ids as u32 bits in f32 slots (the layout of both GPU backends' kernels).
pub fn unpack_top_k(words: &[f32], k: usize, out: &mut Vec<hearth_sampler::Candidate>) {
    for row in words.chunks(2 * k.max(1)) {
        let (values, ids) = row.split_at(k.min(row.len()));
        out.extend(
            values
                .iter()
                .zip(ids)
                .map(|(&logit, id)| hearth_sampler::Candidate {
                    id: id.to_bits(),
                    logit,
                }),
        );
    }
}

/// The operations a model's forward pass is made of.
///
/// Tensors are dense row-major f32 matrices `[rows, cols]` (one row per token). Weights are
/// whatever the backend made of a [`HostWeight`]; models only pass them back to it.
pub trait Backend: Send + Sync {
    /// A dense activation matrix on the device.
    type Tensor: Send;
    /// A weight prepared for this device (a linear layer, an embedding table or a norm vector).
    type Weight: Send + Sync;
    /// Paged key/value storage for all layers.
    type KvCache: Send;

    /// A short name for logs and `hearth show` ("cpu (avx512-vnni, 2 threads)").
    fn name(&self) -> String;

    /// Run `f` (a whole forward pass) on the backend's threads, so that the operations inside it
    /// do not each pay for a hand-off to them.
    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        f()
    }

    /// Announce the shape of the forward pass about to run. Two passes with the same `Some` key
    /// make the same calls with the same shapes in the same order, and differ only in the host
    /// data they pass (tokens, positions, block tables), so a backend may record the first and
    /// replay the recording (a CUDA graph). `None`: run every call as it comes.
    fn begin_forward(&self, key: Option<u64>) {
        let _ = key;
    }

    /// [`Self::begin_forward`] for a pass that ends in [`Self::matmul_to_host`] into `out`,
    /// `len` values: a device that writes host memory may aim that matmul straight at `out`
    /// (its memory is then known before the pass's first op, when a replayed recording may
    /// already be on its way), so that no copy follows the pass. After a failed pass, what
    /// `out` holds is unspecified.
    fn begin_forward_to_host(
        &self,
        key: Option<u64>,
        out: &mut HostValues,
        len: usize,
    ) -> Result<(), BackendError> {
        let _ = (out, len);
        self.begin_forward(key);
        Ok(())
    }

    /// Whether a decode step whose longest sequence holds `context` positions runs other
    /// kernels than a step over shorter sequences (the CUDA backend splits long attention
    /// spans across blocks). Steps on either side get different replay keys.
    fn long_context_step(&self, context: usize) -> bool {
        let _ = context;
        false
    }

    /// Prepare a weight for this device. The CPU backend keeps a reference to the host bytes
    /// (no copy); a GPU backend uploads them.
    fn load_weight(&self, weight: HostWeight) -> Result<Self::Weight, BackendError>;
    /// Prepare weights that multiply the same input (q, k and v; gate and up), in order. A
    /// backend may store them side by side so that one kernel reads them all (see
    /// [`Self::matmul3`] and [`Self::gated_matmul`]); the default loads them one by one.
    fn load_weight_group(
        &self,
        weights: Vec<HostWeight>,
    ) -> Result<Vec<Self::Weight>, BackendError> {
        weights.into_iter().map(|w| self.load_weight(w)).collect()
    }
    /// Allocate KV storage for `spec.n_blocks` blocks of `spec.block_size` token slots.
    fn new_kv_cache(&self, spec: &KvSpec) -> Result<Self::KvCache, BackendError>;

    /// A `[rows, cols]` tensor for an op to write into. Its values are unspecified until then
    /// (every op writes all of its output), so a device need not clear it.
    fn alloc(&self, rows: usize, cols: usize) -> Result<Self::Tensor, BackendError>;
    /// Copy `[rows, cols]` host values to the device.
    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> Result<Self::Tensor, BackendError>;
    /// Copy a tensor back to the host, row-major.
    fn to_host(&self, t: &Self::Tensor) -> Result<Vec<f32>, BackendError>;
    /// Copy a tensor back into `out` (replacing what it held), reusing its allocation: logits
    /// of many sequences are tens of MB per step, too much to allocate afresh each time.
    fn to_host_into(&self, t: &Self::Tensor, out: &mut Vec<f32>) -> Result<(), BackendError> {
        *out = self.to_host(t)?;
        Ok(())
    }
    /// [`Self::to_host_into`] into values a device may copy into directly (a decode step's
    /// logits, read back every step).
    fn to_host_values(&self, t: &Self::Tensor, out: &mut HostValues) -> Result<(), BackendError> {
        self.to_host_into(t, out.vec_mut())
    }
    /// `w · x` for every row of `x` into `out` (`[x rows, n_out]`, `n_out` the rows of `w`,
    /// replacing what it held): the last op of a pass begun with
    /// [`Self::begin_forward_to_host`], whose result comes back to the host. The default
    /// multiplies and copies the product back.
    fn matmul_to_host(
        &self,
        w: &Self::Weight,
        x: &Self::Tensor,
        n_out: usize,
        out: &mut HostValues,
    ) -> Result<(), BackendError> {
        let (rows, _) = self.shape(x);
        let mut product = self.alloc(rows, n_out)?;
        self.matmul(w, x, &mut product)?;
        self.to_host_values(&product, out)
    }
    /// The index of the largest value of each row of `t`, into `out` (replacing what it
    /// held), by the rules of `hearth_sampler::argmax`: ties go to the lower index, NaN never
    /// wins, a row of only NaN gives 0. What greedy decoding needs: a GPU backend finds them
    /// on the device and copies back one word per row instead of the row (600 KB for a
    /// 152k-token vocabulary). The default copies the rows back and searches them here.
    fn argmax_rows(&self, t: &Self::Tensor, out: &mut Vec<u32>) -> Result<(), BackendError> {
        let (_, cols) = self.shape(t);
        let values = self.to_host(t)?;
        out.clear();
        out.extend(values.chunks(cols.max(1)).map(hearth_sampler::argmax));
        Ok(())
    }

    /// Whether this backend chains greedy decode steps: a pass may take its tokens from the
    /// ids the chained argmax before it left on the device ([`Self::embed_chained`]) and bring
    /// its own ids back later ([`Self::argmax_rows_chained`], [`Self::take_chained_argmax`]),
    /// so that the next step is queued while this one runs. A GPU then never waits for the
    /// host between steps. Backends that answer false need none of the three.
    fn chains_argmax(&self) -> bool {
        false
    }
    /// Whether a chained step runs while the host goes on (a GPU's queue), so that queueing
    /// the next step before taking this one's ids overlaps the host's work with the device's.
    /// False where each pass computes before it returns (the CPU chains only so that the
    /// engine's loop is the same everywhere: there, queueing ahead only delays each token).
    fn chains_in_background(&self) -> bool {
        false
    }
    /// [`Self::begin_forward`] for a pass that ends in [`Self::argmax_rows_chained`]: the
    /// chained passes before it may still be running.
    fn begin_chained_forward(&self, key: Option<u64>) {
        self.begin_forward(key);
    }
    /// [`Self::embed`] of the ids the last [`Self::argmax_rows_chained`] found, row for row
    /// (`out` has as many rows as that argmax had).
    fn embed_chained(
        &self,
        table: &Self::Weight,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError> {
        let _ = (table, out);
        Err(BackendError::Unsupported(
            "this backend does not chain decode steps".into(),
        ))
    }
    /// [`Self::argmax_rows`] without waiting for the result: the ids stay where the next
    /// [`Self::embed_chained`] reads them, and [`Self::take_chained_argmax`] brings them back.
    fn argmax_rows_chained(&self, t: &Self::Tensor) -> Result<(), BackendError> {
        let _ = t;
        Err(BackendError::Unsupported(
            "this backend does not chain decode steps".into(),
        ))
    }
    /// Waits for the oldest [`Self::argmax_rows_chained`] not yet taken and writes its ids into
    /// `out` (replacing what it held).
    fn take_chained_argmax(&self, out: &mut Vec<u32>) -> Result<(), BackendError> {
        let _ = out;
        Err(BackendError::Unsupported(
            "no chained decode step is waiting to be taken".into(),
        ))
    }

    /// The `k` best values of each row of `t` (`1 <= k <= cols`), best first, appended as
    /// `k` candidates per row to `out` (replacing what it held): `hearth_sampler::best_of_rows`'s
    /// selection and order (higher value, then lower index; NaN as -inf). What sampling with a
    /// top-k stage needs (`Sampler::sample_best`): a GPU backend selects them on the device and
    /// copies back `k` candidates per row instead of the row. The default copies the rows back
    /// and selects here.
    fn top_k_rows(
        &self,
        t: &Self::Tensor,
        k: usize,
        out: &mut Vec<hearth_sampler::Candidate>,
    ) -> Result<(), BackendError> {
        let (_, cols) = self.shape(t);
        if k == 0 || k > cols {
            return Err(BackendError::Unsupported(format!(
                "top-{k} of rows of {cols} values"
            )));
        }
        let values = self.to_host(t)?;
        out.clear();
        hearth_sampler::best_of_rows(&values, cols, k, out);
        Ok(())
    }
    /// A copy of a tensor.
    fn copy(&self, t: &Self::Tensor) -> Result<Self::Tensor, BackendError>;
    /// `(rows, cols)` of a tensor.
    fn shape(&self, t: &Self::Tensor) -> (usize, usize);

    /// `out[i] = table[tokens[i]]` (dequantized rows of an embedding table).
    fn embed(
        &self,
        table: &Self::Weight,
        tokens: &[u32],
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError>;
    /// `out[t, r] = Σ_c w[r, c] · x[t, c]`: a linear layer without bias.
    fn matmul(
        &self,
        w: &Self::Weight,
        x: &Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError>;
    /// RMS-normalize each group of `group` consecutive values of every row and multiply by
    /// `weight` (length `group`). `group == cols` is the usual per-token norm; `group == head_dim`
    /// is the per-head QK-norm.
    fn rms_norm(
        &self,
        x: &mut Self::Tensor,
        weight: &Self::Weight,
        group: usize,
        eps: f32,
    ) -> Result<(), BackendError>;
    /// Rotary position embedding applied in place to every `head_dim` group of every row; row `i`
    /// is at position `rows.positions[i]` (with its own base where `rows.theta_scales` gives one).
    fn rope(
        &self,
        x: &mut Self::Tensor,
        rows: RopeRows,
        head_dim: usize,
        rope: &RopeSpec,
    ) -> Result<(), BackendError>;
    /// `x += y`.
    fn add(&self, x: &mut Self::Tensor, y: &Self::Tensor) -> Result<(), BackendError>;
    /// `x *= s`.
    fn scale(&self, x: &mut Self::Tensor, s: f32) -> Result<(), BackendError>;
    /// Gated linear unit: `gate = act(gate) * up`, in place in `gate`.
    fn glu(
        &self,
        gate: &mut Self::Tensor,
        up: &Self::Tensor,
        act: Activation,
    ) -> Result<(), BackendError>;
    /// Keep only the given rows, in that order.
    fn gather_rows(&self, x: &Self::Tensor, rows: &[usize]) -> Result<Self::Tensor, BackendError>;

    /// `rms_norm` of a copy of `x` over whole rows; `x` is unchanged (the norm in front of a
    /// projection, which must leave the residual stream as it is).
    fn rms_norm_copy(
        &self,
        x: &Self::Tensor,
        weight: &Self::Weight,
        eps: f32,
    ) -> Result<Self::Tensor, BackendError> {
        let mut h = self.copy(x)?;
        let cols = self.shape(x).1;
        self.rms_norm(&mut h, weight, cols, eps)?;
        Ok(h)
    }

    /// `out[i] = W[i] · x` for three weights that read the same input (q, k, v projections).
    fn matmul3(
        &self,
        w: [&Self::Weight; 3],
        x: &Self::Tensor,
        out: [&mut Self::Tensor; 3],
    ) -> Result<(), BackendError> {
        for (w, o) in w.into_iter().zip(out) {
            self.matmul(w, x, o)?;
        }
        Ok(())
    }

    /// `out[i] = W[i] · rms_norm(x)` for three weights (q, k, v), RMSNorm over whole rows with
    /// `norm`; `x` is unchanged. A backend can fuse the norm into the projections.
    fn rms_norm_matmul3(
        &self,
        x: &Self::Tensor,
        norm: &Self::Weight,
        eps: f32,
        w: [&Self::Weight; 3],
        out: [&mut Self::Tensor; 3],
    ) -> Result<(), BackendError> {
        let h = self.rms_norm_copy(x, norm, eps)?;
        self.matmul3(w, &h, out)
    }

    /// Per-head RMSNorm of `q` and `k` with `norms` (QK-norm, when given), then rotary
    /// embedding of both at `rows`.
    #[allow(clippy::too_many_arguments)]
    fn qk_norm_rope(
        &self,
        q: &mut Self::Tensor,
        k: &mut Self::Tensor,
        norms: Option<(&Self::Weight, &Self::Weight)>,
        rows: RopeRows,
        head_dim: usize,
        rope: &RopeSpec,
        eps: f32,
    ) -> Result<(), BackendError> {
        if let Some((qn, kn)) = norms {
            self.rms_norm(q, qn, head_dim, eps)?;
            self.rms_norm(k, kn, head_dim, eps)?;
        }
        self.rope(q, rows, head_dim, rope)?;
        self.rope(k, rows, head_dim, rope)
    }

    /// `out += W · x`: a projection added to the residual stream.
    fn matmul_add(
        &self,
        w: &Self::Weight,
        x: &Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError> {
        let (rows, cols) = self.shape(out);
        let mut t = self.alloc(rows, cols)?;
        self.matmul(w, x, &mut t)?;
        self.add(out, &t)
    }

    /// `x[rows[i]] += weights[i] * y[i]` for every row `i` of `y`: adds the outputs of one
    /// expert, computed on the rows routed to it, back into the residual stream.
    ///
    /// The default goes through the host (two copies down, one up): correct on any backend,
    /// and a backend with a kernel of its own overrides it.
    fn scatter_add_rows(
        &self,
        x: &mut Self::Tensor,
        y: &Self::Tensor,
        rows: &[usize],
        weights: &[f32],
    ) -> Result<(), BackendError> {
        let ((n, cols), (m, y_cols)) = (self.shape(x), self.shape(y));
        check_scatter(n, cols, m, y_cols, rows, weights)?;
        let mut xh = self.to_host(x)?;
        let yh = self.to_host(y)?;
        for (i, (&r, &w)) in rows.iter().zip(weights).enumerate() {
            let src = &yh[i * cols..(i + 1) * cols];
            let dst = &mut xh[r * cols..(r + 1) * cols];
            dst.iter_mut().zip(src).for_each(|(d, s)| *d += w * s);
        }
        *x = self.upload(&xh, n, cols)?;
        Ok(())
    }

    /// `out = act(W_gate · x) * (W_up · x)`: the first half of a gated feed-forward block.
    fn gated_matmul(
        &self,
        gate: &Self::Weight,
        up: &Self::Weight,
        x: &Self::Tensor,
        act: Activation,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError> {
        let (rows, cols) = self.shape(out);
        let mut u = self.alloc(rows, cols)?;
        self.matmul(gate, x, out)?;
        self.matmul(up, x, &mut u)?;
        self.glu(out, &u, act)
    }

    /// `gated_matmul` of `rms_norm(x)` (RMSNorm over whole rows with `norm`); `x` is
    /// unchanged. A backend can fuse the norm into the projections.
    #[allow(clippy::too_many_arguments)]
    fn rms_norm_gated_matmul(
        &self,
        x: &Self::Tensor,
        norm: &Self::Weight,
        eps: f32,
        gate: &Self::Weight,
        up: &Self::Weight,
        act: Activation,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError> {
        let h = self.rms_norm_copy(x, norm, eps)?;
        self.gated_matmul(gate, up, &h, act, out)
    }

    /// LayerNorm with bias over whole rows: `x = (x - mean) / sqrt(var + eps) * weight + bias`
    /// (`weight` and `bias` hold `cols` values). The default runs [`encoder::layer_norm_rows`]
    /// on a host copy.
    fn layer_norm(
        &self,
        x: &mut Self::Tensor,
        weight: &[f32],
        bias: &[f32],
        eps: f32,
    ) -> Result<(), BackendError> {
        let (rows, cols) = self.shape(x);
        if weight.len() != cols || bias.len() != cols {
            return Err(BackendError::Unsupported(format!(
                "layer_norm: {cols} columns, {} weights, {} biases",
                weight.len(),
                bias.len()
            )));
        }
        let mut host = self.to_host(x)?;
        encoder::layer_norm_rows(&mut host, weight, bias, eps);
        *x = self.upload(&host, rows, cols)?;
        Ok(())
    }

    /// Exact GELU, `x · Φ(x)`, in place. The default runs [`encoder::gelu_erf`] on a host copy.
    fn gelu_erf(&self, x: &mut Self::Tensor) -> Result<(), BackendError> {
        let (rows, cols) = self.shape(x);
        let mut host = self.to_host(x)?;
        encoder::gelu_erf(&mut host);
        *x = self.upload(&host, rows, cols)?;
        Ok(())
    }

    /// Attention without a causal mask or a cache (encoders): each token of `seqs[i]` (a row
    /// range) attends to every token of that range. `q`: `[n_tokens, n_heads * head_dim]`,
    /// `k`/`v`: `[n_tokens, n_kv_heads * head_dim]`; `out`: `[n_tokens, n_heads * head_dim]`.
    /// `params.window` and `params.softcap` must be `None`. The default runs
    /// [`encoder::attention_bidirectional`] on host copies.
    fn attention_bidirectional(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        seqs: &[std::ops::Range<usize>],
        params: &AttnParams,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError> {
        if params.window.is_some() || params.softcap.is_some() {
            return Err(BackendError::Unsupported(
                "bidirectional attention with a sliding window or soft-capping".into(),
            ));
        }
        let (n, q_dim) = self.shape(q);
        let kv_dim = params.n_kv_heads * params.head_dim;
        let fits = q_dim == params.n_heads * params.head_dim
            && self.shape(k) == (n, kv_dim)
            && self.shape(v) == (n, kv_dim)
            && self.shape(out) == (n, q_dim)
            && seqs.iter().all(|r| r.start <= r.end && r.end <= n);
        if !fits {
            return Err(BackendError::Unsupported(
                "bidirectional attention: tensor shapes or sequence ranges do not agree".into(),
            ));
        }
        let (q, k, v) = (self.to_host(q)?, self.to_host(k)?, self.to_host(v)?);
        let host = encoder::attention_bidirectional(&q, &k, &v, seqs, params);
        *out = self.upload(&host, n, q_dim)?;
        Ok(())
    }

    /// [`Backend::qk_norm_rope`] of `q` and `k`, then [`Backend::attention`]: one layer's
    /// position encoding and attention in one call, which a backend may run as one kernel.
    /// `q` and `k` hold unspecified values afterwards.
    #[allow(clippy::too_many_arguments)]
    fn qk_norm_rope_attention(
        &self,
        q: &mut Self::Tensor,
        k: &mut Self::Tensor,
        v: &Self::Tensor,
        norms: Option<(&Self::Weight, &Self::Weight)>,
        rows: RopeRows,
        rope: &RopeSpec,
        eps: f32,
        cache: &mut Self::KvCache,
        layer: usize,
        batch: &AttnBatch,
        params: &AttnParams,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError> {
        self.qk_norm_rope(q, k, norms, rows, params.head_dim, rope, eps)?;
        self.attention(q, k, v, cache, layer, batch, params, out)
    }

    /// Every layer of a decode step of one sequence by one token, in one call, where a
    /// backend can run the whole stack at once (one kernel rather than several per layer):
    /// `x` (`[1, n_embd]`, the token's embedding) becomes the last layer's output, and each
    /// layer's key and value are written to `cache`, as the layers run op by op would.
    /// `Ok(false)`: this backend has no such path for these layers, and nothing was done.
    #[allow(clippy::too_many_arguments)]
    fn decode_layers(
        &self,
        x: &mut Self::Tensor,
        layers: &[DenseLayer<'_, Self::Weight>],
        stack: &DenseStack<'_>,
        rows: RopeRows,
        cache: &mut Self::KvCache,
        batch: &AttnBatch,
    ) -> Result<bool, BackendError> {
        let _ = (x, layers, stack, rows, cache, batch);
        Ok(false)
    }

    /// Causal attention over the paged cache for one layer.
    ///
    /// `q`: `[n_tokens, n_heads * head_dim]`, `k`/`v`: `[n_tokens, n_kv_heads * head_dim]` for
    /// the batch's new tokens (already position-encoded). Writes the new K/V into their cache
    /// slots first, then attends each token to every earlier token of its own sequence (and
    /// itself), within `params.window` when set. `out`: `[n_tokens, n_heads * head_dim]`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        cache: &mut Self::KvCache,
        layer: usize,
        batch: &AttnBatch,
        params: &AttnParams,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError>;
}

/// Check the arguments of [`Backend::scatter_add_rows`]: `x` is `[n, cols]`, `y` is
/// `[m, y_cols]`, and there is one target row below `n` and one weight per row of `y`.
pub fn check_scatter(
    n: usize,
    cols: usize,
    m: usize,
    y_cols: usize,
    rows: &[usize],
    weights: &[f32],
) -> Result<(), BackendError> {
    if cols != y_cols || rows.len() != m || weights.len() != m {
        return Err(BackendError::Unsupported(format!(
            "scatter_add_rows: [{m}, {y_cols}] rows with {} targets and {} weights into \
             [{n}, {cols}]",
            rows.len(),
            weights.len()
        )));
    }
    if let Some(&r) = rows.iter().find(|&&r| r >= n) {
        return Err(BackendError::Unsupported(format!(
            "scatter_add_rows: target row {r} of {n}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_words_unpack_into_candidates_row_by_row() {
        let id = |i: u32| f32::from_bits(i);
        // Two rows, k = 2: values, then ids, per row. Id 0x7fc00001 would be a NaN as a float:
        // the bits must come through unchanged.
        let words = [5.0, -1.0, id(7), id(0x7fc0_0001), 0.5, -0.0, id(3), id(0)];
        let mut out = vec![hearth_sampler::Candidate { id: 9, logit: 9.0 }];
        unpack_top_k(&words, 2, &mut out);
        let got: Vec<(u32, u32)> = out.iter().map(|c| (c.id, c.logit.to_bits())).collect();
        let want = [
            (9, 9.0f32.to_bits()),
            (7, 5.0f32.to_bits()),
            (0x7fc0_0001, (-1.0f32).to_bits()),
            (3, 0.5f32.to_bits()),
            (0, (-0.0f32).to_bits()),
        ];
        assert_eq!(got, want);
    }
}
