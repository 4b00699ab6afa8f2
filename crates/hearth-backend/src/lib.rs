//! The seam between models and hardware.
//!
//! A model is written once against [`Backend`]: a narrow set of tensor operations over dense
//! activations, stored weights and a paged KV cache. Which device runs them, how weights are laid
//! out there and how the cache is paged are the backend's business. Every operation has a CPU
//! implementation ([`cpu::CpuBackend`]) that is the reference other backends are tested against.

pub mod cpu;
mod spec;
mod weight;

pub use spec::{Activation, AttnBatch, AttnParams, AttnSeq, KvSpec, RopeKind, RopeSpec};
pub use weight::{ByteSource, HostWeight};

/// An error from a backend operation or from preparing data for one.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("tensor '{name}': {reason}")]
    BadWeight { name: String, reason: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    #[error(transparent)]
    Quant(#[from] hearth_quant::QuantError),
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

    /// Prepare a weight for this device. The CPU backend keeps a reference to the host bytes
    /// (no copy); a GPU backend uploads them.
    fn load_weight(&self, weight: HostWeight) -> Result<Self::Weight, BackendError>;
    /// Allocate KV storage for `spec.n_blocks` blocks of `spec.block_size` token slots.
    fn new_kv_cache(&self, spec: &KvSpec) -> Result<Self::KvCache, BackendError>;

    /// A zeroed `[rows, cols]` tensor.
    fn zeros(&self, rows: usize, cols: usize) -> Self::Tensor;
    /// Copy `[rows, cols]` host values to the device.
    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> Self::Tensor;
    /// Copy a tensor back to the host, row-major.
    fn to_host(&self, t: &Self::Tensor) -> Vec<f32>;
    /// A copy of a tensor.
    fn copy(&self, t: &Self::Tensor) -> Self::Tensor;
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
    /// is at position `positions[i]`.
    fn rope(
        &self,
        x: &mut Self::Tensor,
        positions: &[u32],
        head_dim: usize,
        rope: &RopeSpec,
    ) -> Result<(), BackendError>;
    /// `x += y`.
    fn add(&self, x: &mut Self::Tensor, y: &Self::Tensor);
    /// `x *= s`.
    fn scale(&self, x: &mut Self::Tensor, s: f32);
    /// Gated linear unit: `gate = act(gate) * up`, in place in `gate`.
    fn glu(&self, gate: &mut Self::Tensor, up: &Self::Tensor, act: Activation);
    /// Keep only the given rows, in that order.
    fn gather_rows(&self, x: &Self::Tensor, rows: &[usize]) -> Self::Tensor;

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
