//! hearth's [`Backend`] on an NVIDIA GPU.
//!
//! Weights are uploaded in their GGUF block layout (no dequantized copies); the KV cache is
//! paged f16 in GPU memory with the same block tables as the CPU backend. Activations live in a
//! per-forward arena, and decode steps are recorded once as CUDA graphs and replayed
//! (`state.rs` explains the modes).

mod argmax;
mod attention;
mod blas;
mod chained;
mod decode_layers;
mod dependent_launch;
mod forward;
mod host_output;
mod launch;
mod memory;
mod mlx;
mod mmq;
mod staging;
mod state;
mod step_gate;
mod top_k;
mod upload;
mod weight_heap;

#[cfg(test)]
pub(crate) use attention::{
    ATTN_MAX_SPLITS, ATTN_SPLIT_MIN, ATTN_WIDE_WARPS, GQA_BK, GQA_MAX_GROUP, GQA_MAX_SPLITS,
    GQA_STAGES, GQA_THREADS,
};
pub use mmq::mmq_takes_f16_activations;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::{result, CudaSlice};
use hearth_backend::{
    Activation, AttnBatch, AttnParams, Backend, BackendError, DenseLayer, DenseStack, HostValues,
    HostWeight, KvSpec, RopeKind, RopeRows, RopeSpec,
};
use hearth_quant::GgmlType;
use hearth_sampler::Candidate;

use crate::{CudaDevice, CudaError, KernelCache};
use launch::Arg;
use memory::{Lease, Staging};
use staging::{key_of, PINNED_START};
use state::{Mode, State};
use weight_heap::{WeightHeap, WeightMemory};

/// A whole-number setting from the environment, for measurements: `None` when unset, or
/// (with a warning naming the value) when it is not a number in `range`.
pub(super) fn measurement_setting(
    name: &str,
    range: std::ops::RangeInclusive<usize>,
) -> Option<usize> {
    let v = std::env::var(name).ok()?;
    match v.parse::<usize>() {
        Ok(n) if range.contains(&n) => Some(n),
        _ => {
            tracing::warn!(
                value = %v,
                "{name} must be a whole number from {} to {}; using the default",
                range.start(),
                range.end()
            );
            None
        }
    }
}

impl From<CudaError> for BackendError {
    fn from(e: CudaError) -> Self {
        match e {
            CudaError::Unsupported { .. } | CudaError::Shape { .. } => {
                BackendError::Unsupported(e.to_string())
            }
            e => BackendError::Device(e.to_string()),
        }
    }
}

/// A dense f32 matrix in the forward pass's arena: valid until the next forward pass. Its
/// memory goes back to the arena when it is dropped.
pub struct CudaTensor {
    ptr: u64,
    rows: usize,
    cols: usize,
    _lease: Option<Lease>,
}

impl std::fmt::Debug for CudaTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaTensor[{}, {}] at {:#x}",
            self.rows, self.cols, self.ptr
        )
    }
}

impl CudaTensor {
    fn len(&self) -> usize {
        self.rows * self.cols
    }
}

/// A weight in GPU memory: a matrix in its file's block layout, or a vector as f32.
pub struct CudaWeight {
    name: String,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    ptr: u64,
    /// Set for an MLX affine-quantized matrix: `ptr` holds its packed words (`ty` is I32).
    mlx: Option<mlx::MlxLayout>,
    _mem: WeightMemory,
}

/// Per layer: keys and values, each `[n_slots, kv_dim]` f16.
pub struct CudaKvCache {
    layers: Vec<(u64, u64)>,
    _bufs: Vec<CudaSlice<u16>>,
    kv_dims: Vec<usize>,
    block_size: usize,
    n_blocks: usize,
}

/// Threads of a `top_k_f32` block (kernels/top_k.cu), one block per row.
const TOP_K_THREADS: u32 = 1024;
/// The largest k `top_k_f32` selects (its TOP_K_MAX; the sampler asks for at most this many).
pub(crate) const TOP_K_MAX: usize = hearth_sampler::MAX_DEVICE_TOP_K;

/// The CUDA backend on one GPU.
pub struct CudaBackend {
    dev: CudaDevice,
    /// cuBLAS for long prompts, created at their first (`blas.rs`); where it is not
    /// installed they use hearth's kernels.
    blas: blas::LazyBlas,
    /// Where weights go; `None` where the GPU has no virtual memory management (each weight
    /// is then an allocation of its own).
    weights: Option<Arc<WeightHeap>>,
    /// Bytes of the weights loaded so far (padding included).
    weight_bytes: AtomicUsize,
    state: Mutex<State>,
    /// Whether kernels are launched for programmatic dependent launch (see `launch.rs`).
    overlap_launches: bool,
    /// Whether one-token decode steps may run their layers as one kernel (`decode_layers.rs`).
    one_kernel_decode: bool,
    /// `HEARTH_CUDA_ATTN_WIDE`: wide attention blocks for every batch or none
    /// (`attention.rs` `wide_attention`).
    wide_attention_set: Option<bool>,
    /// Longest sequence from which few-token steps split attention heads across blocks
    /// (`attention.rs` `attention_splits`; `HEARTH_CUDA_ATTN_SPLIT_FROM` for measurements).
    attn_split_from: usize,
    /// Whether split decode attention may run on tensor cores, a block for the query heads of
    /// a KV head (`attention.rs` `gqa_attention_kernels`; `HEARTH_CUDA_ATTN_GQA=0` for
    /// measurements turns it off).
    gqa_attention: bool,
    /// Fewest keys a block of split prompt attention walks (`attention.rs` `flash_splits`;
    /// `HEARTH_CUDA_FLASH_SPLIT_KEYS` for measurements).
    flash_split_keys: usize,
    /// Up to how many bytes of f32 rows the blocks of an int8 GEMV may read to quantize their
    /// own copies of its activations (`launch.rs` `own_q8_fits`; `HEARTH_CUDA_OWN_Q8_BYTES`
    /// for measurements, 0 never).
    own_q8_bytes: usize,
    /// Whether q/k norm and rope run a thread a rotating pair where they can
    /// (`qk_norm_rope_pairs`; `HEARTH_CUDA_QK_PAIRS=0` for measurements turns it off).
    qk_pairs: bool,
    /// Whether a pass's logits that come back are written by their GEMV straight into the
    /// caller's page-locked memory (`host_output.rs`; `HEARTH_CUDA_HOST_OUTPUT=0` for
    /// measurements turns it off).
    host_output: bool,
    /// Products written straight into host memory so far (`host_output.rs`).
    host_outputs: AtomicUsize,
    /// Whether int8 GEMVs of rows that fit one window take four rows a warp (`launch.rs`
    /// `q8a_rows4`; `HEARTH_CUDA_ROWS4=0` for measurements turns it off).
    rows4: bool,
    /// Launches of those kernels so far.
    rows4_launches: AtomicUsize,
    /// The gate of decode steps queued ahead of the host (`step_gate.rs`).
    gate: step_gate::SharedGate,
    /// Whether a step whose logits come back is queued again ahead of the next pass
    /// (`step_gate.rs`; `HEARTH_CUDA_AHEAD=0` for measurements turns it off).
    ahead: bool,
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // A step queued ahead would wait for a pass that never comes; called off, it runs
        // again, and must end before its graph and buffers go.
        let _ = self.synchronize();
    }
}

impl CudaBackend {
    /// Opens GPU `ordinal` with the kernels from the default cache (compiled on a miss).
    pub fn open(ordinal: usize) -> Result<Self, CudaError> {
        let dev = CudaDevice::open(ordinal, &KernelCache::default_location())?;
        let context_bytes = memory::in_use_on_gpu();
        let weights = WeightHeap::new(
            dev.context(),
            dev.info().ordinal,
            dev.info().total_memory as usize,
        );
        let staging = Staging::new(dev.context(), dev.stream(), PINNED_START)?;
        let gate = step_gate::StepGate::new(dev.context(), dev.stream())?;
        let overlap_launches = dependent_launch::overlap_launches(dev.info().compute_capability);
        let one_kernel_decode = decode_layers::decode_layers_by_default(&dev);
        tracing::debug!(
            overlap_launches,
            one_kernel_decode,
            context_mib = context_bytes >> 20,
            kernel_local_bytes = dev.kernel_local_bytes(),
            "CUDA backend opened"
        );
        Ok(Self {
            dev,
            blas: blas::LazyBlas::new(),
            weights,
            weight_bytes: AtomicUsize::new(0),
            state: Mutex::new(State::new(staging)),
            overlap_launches,
            one_kernel_decode,
            wide_attention_set: measurement_setting("HEARTH_CUDA_ATTN_WIDE", 0..=1).map(|v| v == 1),
            attn_split_from: measurement_setting("HEARTH_CUDA_ATTN_SPLIT_FROM", 0..=1 << 30)
                .unwrap_or(attention::ATTN_SPLIT_FROM),
            gqa_attention: measurement_setting("HEARTH_CUDA_ATTN_GQA", 0..=1) != Some(0),
            flash_split_keys: measurement_setting("HEARTH_CUDA_FLASH_SPLIT_KEYS", 1..=1 << 30)
                .unwrap_or(attention::FLASH_SPLIT_KEYS),
            own_q8_bytes: measurement_setting("HEARTH_CUDA_OWN_Q8_BYTES", 0..=1 << 40)
                .unwrap_or(launch::OWN_Q8_BYTES),
            qk_pairs: measurement_setting("HEARTH_CUDA_QK_PAIRS", 0..=1) != Some(0),
            host_output: measurement_setting("HEARTH_CUDA_HOST_OUTPUT", 0..=1) != Some(0),
            host_outputs: AtomicUsize::new(0),
            rows4: measurement_setting("HEARTH_CUDA_ROWS4", 0..=1) != Some(0),
            rows4_launches: AtomicUsize::new(0),
            gate: Arc::new(Mutex::new(gate)),
            ahead: step_gate::ahead_by_default(),
        })
    }

    /// Turns the one-token decode step as one kernel (`decode_layers.rs`) on or off, whatever
    /// `HEARTH_CUDA_DECODE_LAYERS` says; on only where the GPU can launch it.
    pub fn with_one_kernel_decode(mut self, on: bool) -> Self {
        self.one_kernel_decode = on && decode_layers::launches_cooperatively(&self.dev);
        self
    }

    /// Sets up to how many bytes of f32 rows the blocks of an int8 GEMV may read to quantize
    /// their own copies of its activations, whatever `HEARTH_CUDA_OWN_Q8_BYTES` says: 0 never
    /// (a quantize_q8_1 launch, or the gated GEMV's copy, instead), `usize::MAX` wherever
    /// the shapes allow (`launch.rs` `own_q8_fits`).
    pub fn with_own_q8_bytes(mut self, bytes: usize) -> Self {
        self.own_q8_bytes = bytes;
        self
    }

    /// Lets q/k norm and rope run a thread a rotating pair where the layout allows, or not,
    /// whatever `HEARTH_CUDA_QK_PAIRS` says (`qk_norm_rope_pairs`, kernels/model.cu).
    pub fn with_qk_pairs(mut self, on: bool) -> Self {
        self.qk_pairs = on;
        self
    }

    /// Lets the GEMV of a pass's logits that come back write them straight into the caller's
    /// page-locked memory, or not, whatever `HEARTH_CUDA_HOST_OUTPUT` says (`host_output.rs`).
    pub fn with_host_output(mut self, on: bool) -> Self {
        self.host_output = on;
        self
    }

    /// Lets int8 GEMVs of rows that fit one window take four rows a warp, or not, whatever
    /// `HEARTH_CUDA_ROWS4` says (`launch.rs` `q8a_rows4`); the same bits either way.
    pub fn with_rows4(mut self, on: bool) -> Self {
        self.rows4 = on;
        self
    }

    /// How many int8 GEMVs so far took four rows a warp (`with_rows4`); a replayed graph's
    /// count once, when recorded.
    pub fn rows4_launches(&self) -> usize {
        self.rows4_launches
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many passes so far had their last matmul written straight into the caller's
    /// page-locked memory (`Backend::matmul_to_host`) rather than copied back.
    pub fn host_outputs(&self) -> usize {
        self.host_outputs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets the longest sequence (positions) from which few-token decode steps split attention
    /// heads across blocks, whatever `HEARTH_CUDA_ATTN_SPLIT_FROM` says: 0 splits every such
    /// step, `usize::MAX` none (`attention.rs` `attention_splits`).
    pub fn with_attention_split_from(mut self, positions: usize) -> Self {
        self.attn_split_from = positions;
        self
    }

    /// Lets split decode attention run on tensor cores where it applies, or not, whatever
    /// `HEARTH_CUDA_ATTN_GQA` says (`attention.rs` `gqa_attention_kernels`).
    pub fn with_gqa_attention(mut self, on: bool) -> Self {
        self.gqa_attention = on;
        self
    }

    /// Sets the fewest keys a block of split prompt attention walks, whatever
    /// `HEARTH_CUDA_FLASH_SPLIT_KEYS` says: a prompt chunk splits its spans once they hold
    /// twice this many keys; `usize::MAX` never splits (`attention.rs` `flash_splits`).
    pub fn with_flash_split_keys(mut self, keys: usize) -> Self {
        self.flash_split_keys = keys.max(1);
        self
    }

    /// The opened device.
    pub fn device(&self) -> &CudaDevice {
        &self.dev
    }

    fn state(&self) -> Result<MutexGuard<'_, State>, BackendError> {
        self.state
            .lock()
            .map_err(|_| BackendError::Device("CUDA backend state poisoned by a panic".into()))
    }

    fn tensor(&self, st: &mut State, rows: usize, cols: usize) -> Result<CudaTensor, CudaError> {
        // A replayed step launches nothing: its tensors only need the addresses the recording
        // gave them (the graph reads its results there), without the arena's bookkeeping.
        if let Some(ptr) = st.replayed_tensor() {
            st.forget_copies_of(ptr);
            return Ok(CudaTensor {
                ptr,
                rows,
                cols,
                _lease: None,
            });
        }
        let may_grow = st.mode == Mode::Eager;
        let (ptr, lease) = st
            .arena
            .alloc_leased(self.dev.stream(), rows * cols * 4, may_grow)?;
        // The memory may have been a dropped tensor's, whose copies are not this one's.
        st.forget_copies_of(ptr);
        st.log_tensor(ptr);
        Ok(CudaTensor {
            ptr,
            rows,
            cols,
            _lease: Some(lease),
        })
    }
}

fn check_matmul(w: &CudaWeight, x: &CudaTensor, out: &CudaTensor) -> Result<(), BackendError> {
    check(
        x.cols == w.cols && (out.rows, out.cols) == (x.rows, w.rows),
        || {
            format!(
                "matmul {}: [{}, {}] weights with [{}, {}] input into [{}, {}]",
                w.name, w.rows, w.cols, x.rows, x.cols, out.rows, out.cols
            )
        },
    )
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), BackendError> {
    if ok {
        Ok(())
    } else {
        Err(BackendError::Unsupported(what()))
    }
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Weight = CudaWeight;
    type KvCache = CudaKvCache;

    fn name(&self) -> String {
        let info = self.dev.info();
        format!("cuda:{} ({})", info.ordinal, info.name)
    }

    fn begin_forward(&self, key: Option<u64>) {
        self.start_forward(key, false, None);
    }

    fn begin_forward_to_host(
        &self,
        key: Option<u64>,
        out: &mut HostValues,
        len: usize,
    ) -> Result<(), BackendError> {
        self.start_forward_to_host(key, out, len)
    }

    fn matmul_to_host(
        &self,
        w: &CudaWeight,
        x: &CudaTensor,
        n_out: usize,
        out: &mut HostValues,
    ) -> Result<(), BackendError> {
        self.matmul_into_host(w, x, n_out, out)
    }

    fn chains_argmax(&self) -> bool {
        true
    }

    fn chains_in_background(&self) -> bool {
        true
    }

    fn begin_chained_forward(&self, key: Option<u64>) {
        self.start_forward(key, true, None);
    }

    fn embed_chained(&self, table: &CudaWeight, out: &mut CudaTensor) -> Result<(), BackendError> {
        self.embed_last_chained(table, out)
    }

    fn argmax_rows_chained(&self, t: &CudaTensor) -> Result<(), BackendError> {
        check(t.cols > 0 && i32::try_from(t.cols).is_ok(), || {
            format!("argmax over rows of {} values", t.cols)
        })?;
        self.queue_chained_argmax(t)
    }

    fn take_chained_argmax(&self, out: &mut Vec<u32>) -> Result<(), BackendError> {
        self.take_chained(out)
    }

    fn long_context_step(&self, context: usize) -> bool {
        self.long_context(context)
    }

    fn load_weight(&self, w: HostWeight) -> Result<CudaWeight, BackendError> {
        self.upload_weight(w)
    }

    fn new_kv_cache(&self, spec: &KvSpec) -> Result<CudaKvCache, BackendError> {
        self.alloc_kv_cache(spec)
    }

    fn to_host_into(&self, t: &CudaTensor, out: &mut Vec<f32>) -> Result<(), BackendError> {
        self.read_back(t, out)
    }

    fn to_host_values(&self, t: &CudaTensor, out: &mut HostValues) -> Result<(), BackendError> {
        self.read_back_values(t, out)
    }

    fn alloc(&self, rows: usize, cols: usize) -> Result<CudaTensor, BackendError> {
        let mut st = self.state()?;
        Ok(self.tensor(&mut st, rows, cols)?)
    }

    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> Result<CudaTensor, BackendError> {
        check(data.len() == rows * cols, || {
            format!("upload of {} values as [{rows}, {cols}]", data.len())
        })?;
        let mut st = self.state()?;
        let ptr = self.stage(&mut st, None, bytemuck::cast_slice(data))?;
        Ok(CudaTensor {
            ptr,
            rows,
            cols,
            _lease: None,
        })
    }

    fn to_host(&self, t: &CudaTensor) -> Result<Vec<f32>, BackendError> {
        let mut out = Vec::new();
        self.to_host_into(t, &mut out)?;
        Ok(out)
    }

    fn top_k_rows(
        &self,
        t: &CudaTensor,
        k: usize,
        out: &mut Vec<Candidate>,
    ) -> Result<(), BackendError> {
        check(
            (1..=t.cols).contains(&k) && i32::try_from(t.cols).is_ok(),
            || format!("top-{k} of rows of {} values", t.cols),
        )?;
        out.clear();
        if k > TOP_K_MAX {
            // More than the kernel's shared arrays hold: selected on the host.
            let values = self.to_host(t)?;
            hearth_sampler::best_of_rows(&values, t.cols, k, out);
            return Ok(());
        }
        let best = {
            let mut st = self.state()?;
            let best = self.tensor(&mut st, t.rows, 2 * k)?;
            if !self.launch_top_k_split(&mut st, t, k, &best)? {
                let args = [
                    Arg::P(t.ptr),
                    Arg::P(best.ptr),
                    Arg::I(t.cols as i32),
                    Arg::I(k as i32),
                ];
                self.launch(&st, "top_k_f32", (t.rows as u32, 1), TOP_K_THREADS, &args)?;
            }
            best
        };
        let mut words = Vec::new();
        self.read_back(&best, &mut words)?;
        hearth_backend::unpack_top_k(&words, k, out);
        Ok(())
    }

    fn argmax_rows(&self, t: &CudaTensor, out: &mut Vec<u32>) -> Result<(), BackendError> {
        check(t.cols > 0 && i32::try_from(t.cols).is_ok(), || {
            format!("argmax over rows of {} values", t.cols)
        })?;
        let ids = {
            let mut st = self.state()?;
            let ids = self.tensor(&mut st, t.rows, 1)?;
            self.launch_argmax(&mut st, t, ids.ptr, 0)?;
            ids
        };
        // The kernel writes u32 ids into the f32 slots of `ids`; the read-back keeps the bits.
        let mut words = Vec::new();
        self.read_back(&ids, &mut words)?;
        out.clear();
        out.extend(words.iter().map(|w| w.to_bits()));
        Ok(())
    }

    fn copy(&self, t: &CudaTensor) -> Result<CudaTensor, BackendError> {
        let mut st = self.state()?;
        let out = self.tensor(&mut st, t.rows, t.cols)?;
        if st.mode.launches() {
            // SAFETY: both ranges are arena allocations of t.len() f32.
            unsafe {
                result::memcpy_dtod_async(
                    out.ptr,
                    t.ptr,
                    t.len() * 4,
                    self.dev.stream().cu_stream(),
                )
            }
            .map_err(|e| BackendError::Device(format!("copy: {e:?}")))?;
        }
        Ok(out)
    }

    fn shape(&self, t: &CudaTensor) -> (usize, usize) {
        (t.rows, t.cols)
    }

    fn embed(
        &self,
        table: &CudaWeight,
        tokens: &[u32],
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        check((out.rows, out.cols) == (tokens.len(), table.cols), || {
            format!("embedding {} into [{}, {}]", table.name, out.rows, out.cols)
        })?;
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= table.rows) {
            return Err(BackendError::BadWeight {
                name: table.name.clone(),
                reason: format!("token id {t} is outside the vocabulary of {}", table.rows),
            });
        }
        let mut st = self.state()?;
        let ids = self.stage_u32(&mut st, key_of(tokens, "tokens"), tokens)?;
        self.launch_embed(&st, table, ids, out)?;
        Ok(())
    }

    fn matmul(
        &self,
        w: &CudaWeight,
        x: &CudaTensor,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        check_matmul(w, x, out)?;
        let mut st = self.state()?;
        self.launch_matmul(&mut st, w, x, out, false)?;
        Ok(())
    }

    fn matmul3(
        &self,
        w: [&CudaWeight; 3],
        x: &CudaTensor,
        out: [&mut CudaTensor; 3],
    ) -> Result<(), BackendError> {
        for (w, o) in w.iter().zip(&out) {
            check_matmul(w, x, o)?;
        }
        let mut st = self.state()?;
        let outs = [&*out[0], &*out[1], &*out[2]];
        if !self.launch_matmul3(&mut st, w, x, outs)? {
            for (w, o) in w.into_iter().zip(outs) {
                self.launch_matmul(&mut st, w, x, o, false)?;
            }
        }
        Ok(())
    }

    fn qk_norm_rope(
        &self,
        q: &mut CudaTensor,
        k: &mut CudaTensor,
        norms: Option<(&CudaWeight, &CudaWeight)>,
        rows: RopeRows,
        head_dim: usize,
        rope: &RopeSpec,
        eps: f32,
    ) -> Result<(), BackendError> {
        let norms_ok = norms
            .is_none_or(|(a, b)| (a.rows, a.cols, b.rows, b.cols) == (1, head_dim, 1, head_dim));
        check(
            head_dim > 0
                && head_dim <= 256
                && norms_ok
                && rows.n_rows() == Some(q.rows)
                && k.rows == q.rows
                && q.cols.is_multiple_of(head_dim)
                && k.cols.is_multiple_of(head_dim)
                && rope_fits(rope, head_dim),
            || {
                format!(
                    "q/k norm and rope over heads of {head_dim} in rows of {} and {}",
                    q.cols, k.cols
                )
            },
        )?;
        let mut st = self.state()?;
        let inputs = self.stage_rope_inputs(&mut st, rows, rope)?;
        let (qn, kn) = norms.map_or((0, 0), |(a, b)| (a.ptr, b.ptr));
        let (n_q, n_k) = (q.cols / head_dim, k.cols / head_dim);
        let neox = rope.kind == RopeKind::Neox;
        // A thread a rotating pair where each thread's pair lies at the same offsets
        // (kernels/model.cu qk_norm_rope_pairs).
        let pairs =
            self.qk_pairs && head_dim.is_multiple_of(2) && (!neox || rope.n_rot == head_dim);
        let (name, threads) = if pairs {
            ("qk_norm_rope_pairs", head_dim / 2)
        } else {
            ("qk_norm_rope", head_dim)
        };
        self.launch(
            &st,
            name,
            ((n_q + n_k) as u32, q.rows as u32),
            threads.next_multiple_of(32) as u32,
            &[
                Arg::P(q.ptr),
                Arg::P(k.ptr),
                Arg::P(qn),
                Arg::P(kn),
                Arg::P(inputs.positions),
                Arg::I(n_q as i32),
                Arg::I(n_k as i32),
                Arg::I(head_dim as i32),
                Arg::F(eps),
                Arg::I(rope.n_rot as i32),
                Arg::F(rope.theta_scale()),
                Arg::P(inputs.theta_scales),
                Arg::F(rope.freq_scale),
                Arg::P(inputs.factors),
                Arg::I(neox as i32),
            ],
        )?;
        Ok(())
    }

    fn matmul_add(
        &self,
        w: &CudaWeight,
        x: &CudaTensor,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        check_matmul(w, x, out)?;
        let mut st = self.state()?;
        self.launch_matmul(&mut st, w, x, out, true)?;
        Ok(())
    }

    fn gated_matmul(
        &self,
        gate: &CudaWeight,
        up: &CudaWeight,
        x: &CudaTensor,
        act: Activation,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        check_matmul(gate, x, out)?;
        check_matmul(up, x, out)?;
        let mut st = self.state()?;
        let gelu = act == Activation::GeluTanh;
        if self.launch_gated(&mut st, gate, up, x, gelu, out)? {
            return Ok(());
        }
        let u = self.tensor(&mut st, out.rows, out.cols)?;
        match self.mmq_for(&[gate, up], x.rows) {
            // Both in one launch: each alone leaves multiprocessors idle on small models.
            Some(kernel) => {
                self.launch_mmq_segments(&mut st, kernel, &[gate, up], x, &[out, &u])?
            }
            None => {
                self.launch_matmul(&mut st, gate, x, out, false)?;
                self.launch_matmul(&mut st, up, x, &u, false)?;
            }
        }
        let n = out.len();
        self.launch(
            &st,
            "glu",
            (launch::elementwise_blocks(n), 1),
            launch::ELEMENTWISE_THREADS,
            &[
                Arg::P(out.ptr),
                Arg::P(u.ptr),
                Arg::I(n as i32),
                Arg::I(gelu as i32),
            ],
        )?;
        Ok(())
    }

    fn rms_norm_copy(
        &self,
        x: &CudaTensor,
        weight: &CudaWeight,
        eps: f32,
    ) -> Result<CudaTensor, BackendError> {
        let mut st = self.state()?;
        let out = self.tensor(&mut st, x.rows, x.cols)?;
        if norm_quantizes(x) {
            self.launch_norm_quantize(&mut st, x, weight, eps, &out)?;
        } else {
            self.launch_norm(&st, x, weight, x.cols, eps, &out)?;
        }
        Ok(out)
    }

    fn rms_norm(
        &self,
        x: &mut CudaTensor,
        weight: &CudaWeight,
        group: usize,
        eps: f32,
    ) -> Result<(), BackendError> {
        let mut st = self.state()?;
        if group == x.cols && norm_quantizes(x) {
            // NOTE: whole rows of a decode step (the final norm, before the output matrix):
            // normed into a new tensor together with their 8-bit copy for the int8 GEMV, one
            // launch instead of this norm in place and the GEMV's own quantize_q8_1.
            let out = self.tensor(&mut st, x.rows, x.cols)?;
            self.launch_norm_quantize(&mut st, x, weight, eps, &out)?;
            *x = out;
            return Ok(());
        }
        self.launch_norm(&st, x, weight, group, eps, x)?;
        Ok(())
    }

    fn rope(
        &self,
        x: &mut CudaTensor,
        rows: RopeRows,
        head_dim: usize,
        rope: &RopeSpec,
    ) -> Result<(), BackendError> {
        check(
            rows.n_rows() == Some(x.rows)
                && x.cols.is_multiple_of(head_dim)
                && rope_fits(rope, head_dim),
            || {
                format!(
                    "rope over {} of {head_dim} values in rows of {}",
                    rope.n_rot, x.cols
                )
            },
        )?;
        let mut st = self.state()?;
        let inputs = self.stage_rope_inputs(&mut st, rows, rope)?;
        self.launch(
            &st,
            "rope_rows",
            (x.rows as u32, 1),
            128,
            &[
                Arg::P(x.ptr),
                Arg::P(inputs.positions),
                Arg::I(x.cols as i32),
                Arg::I(head_dim as i32),
                Arg::I(rope.n_rot as i32),
                Arg::F(rope.theta_scale()),
                Arg::P(inputs.theta_scales),
                Arg::F(rope.freq_scale),
                Arg::P(inputs.factors),
                Arg::I((rope.kind == RopeKind::Neox) as i32),
            ],
        )?;
        Ok(())
    }

    fn add(&self, x: &mut CudaTensor, y: &CudaTensor) -> Result<(), BackendError> {
        check(x.len() == y.len(), || "add of different shapes".into())?;
        let st = self.state()?;
        self.launch_elementwise(&st, "add_f32", &[Arg::P(x.ptr), Arg::P(y.ptr)], x.len())?;
        Ok(())
    }

    fn scale(&self, x: &mut CudaTensor, s: f32) -> Result<(), BackendError> {
        let st = self.state()?;
        self.launch_elementwise(&st, "scale_f32", &[Arg::P(x.ptr), Arg::F(s)], x.len())?;
        Ok(())
    }

    fn glu(
        &self,
        gate: &mut CudaTensor,
        up: &CudaTensor,
        act: Activation,
    ) -> Result<(), BackendError> {
        check(gate.len() == up.len(), || "glu of different shapes".into())?;
        let st = self.state()?;
        let n = gate.len();
        let act = match act {
            Activation::Silu => 0,
            Activation::GeluTanh => 1,
        };
        self.launch(
            &st,
            "glu",
            (launch::elementwise_blocks(n), 1),
            launch::ELEMENTWISE_THREADS,
            &[
                Arg::P(gate.ptr),
                Arg::P(up.ptr),
                Arg::I(n as i32),
                Arg::I(act),
            ],
        )?;
        Ok(())
    }

    fn scatter_add_rows(
        &self,
        x: &mut CudaTensor,
        y: &CudaTensor,
        rows: &[usize],
        weights: &[f32],
    ) -> Result<(), BackendError> {
        hearth_backend::check_scatter(x.rows, x.cols, y.rows, y.cols, rows, weights)?;
        if rows.is_empty() {
            return Ok(());
        }
        // One thread block per row of y, all at once: a target row twice would race.
        let mut seen = vec![false; x.rows];
        check(
            rows.iter().all(|&r| !std::mem::replace(&mut seen[r], true)),
            || "scatter_add_rows: a target row appears twice".into(),
        )?;
        let mut st = self.state()?;
        let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        let dev_idx = self.stage_u32(&mut st, None, &idx)?;
        let dev_w = self.stage(&mut st, None, bytemuck::cast_slice(weights))?;
        self.launch(
            &st,
            "scatter_add_rows",
            (rows.len() as u32, 1),
            256,
            &[
                Arg::P(x.ptr),
                Arg::P(y.ptr),
                Arg::P(dev_idx),
                Arg::P(dev_w),
                Arg::I(x.cols as i32),
            ],
        )?;
        Ok(())
    }

    fn gather_rows(&self, x: &CudaTensor, rows: &[usize]) -> Result<CudaTensor, BackendError> {
        check(rows.iter().all(|&r| r < x.rows), || {
            "gather of a row past the end".into()
        })?;
        let mut st = self.state()?;
        let out = self.tensor(&mut st, rows.len(), x.cols)?;
        if rows.is_empty() {
            return Ok(out);
        }
        let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        // NOTE: no staging key: a mixture-of-experts layer gathers a fresh row list per expert,
        // and a freed list's address (the key) may come back holding other rows.
        let dev_idx = self.stage_u32(&mut st, None, &idx)?;
        self.launch(
            &st,
            "gather_rows",
            (rows.len() as u32, 1),
            256,
            &[
                Arg::P(x.ptr),
                Arg::P(dev_idx),
                Arg::I(x.cols as i32),
                Arg::P(out.ptr),
            ],
        )?;
        Ok(out)
    }

    fn decode_layers(
        &self,
        x: &mut CudaTensor,
        layers: &[DenseLayer<'_, CudaWeight>],
        stack: &DenseStack<'_>,
        rows: RopeRows,
        cache: &mut CudaKvCache,
        batch: &AttnBatch,
    ) -> Result<bool, BackendError> {
        self.launch_decode_layers(x, layers, stack, rows, cache, batch)
    }

    fn attention(
        &self,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        cache: &mut CudaKvCache,
        layer: usize,
        batch: &AttnBatch,
        params: &AttnParams,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        let mut st = self.state()?;
        self.launch_attention(&mut st, q, k, v, cache, layer, batch, params, out)?;
        Ok(())
    }
}

/// Whether the rope kernels can rotate `rope.n_rot` of a head's `head_dim` values.
fn rope_fits(rope: &RopeSpec, head_dim: usize) -> bool {
    rope.n_rot <= head_dim
        && rope.n_rot.is_multiple_of(2)
        && (rope.freq_factors.is_empty() || rope.freq_factors.len() == rope.n_rot / 2)
}

impl CudaBackend {
    /// `out = rms_norm(x)` over whole rows, and out's 8-bit copy for the int8-activation GEMVs
    /// that decode steps run next (kept in the state, see [`state::Quantized`]).
    ///
    /// NOTE (H200, 2026-11-29, BENCHMARKS.md): computed instead by the o and down GEMVs that
    /// write x (their last block, found through a counter a token, normed the whole row), a
    /// decode step was 7-10% slower (Qwen3-0.6B Q8_0 tg128 `--greedy` 1,200 against 1,294
    /// tok/s): the counter's fences and atomic cost more than the link between two kernels.
    fn launch_norm_quantize(
        &self,
        st: &mut State,
        x: &CudaTensor,
        weight: &CudaWeight,
        eps: f32,
        out: &CudaTensor,
    ) -> Result<(), BackendError> {
        check_norm_weight(weight, x.cols, x.cols)?;
        let (q, ds) = self.alloc_q8(st, x.len())?;
        // NOTE: 4 values per thread, up to 1024 threads: one block does the whole row, and
        // with 8 warps a 4096-wide row took 16 dependent rounds of loads and shuffles per warp
        // (20 µs, a quarter of an 8B model's decode step on an H100). A multiple of 32
        // threads: the kernel's shuffles take whole warps.
        let threads = (x.cols / 4).clamp(32, 1024).next_multiple_of(32) as u32;
        let args = [
            Arg::P(x.ptr),
            Arg::P(weight.ptr),
            Arg::P(out.ptr),
            Arg::P(q),
            Arg::P(ds),
            Arg::I(x.cols as i32),
            Arg::F(eps),
        ];
        self.launch(st, "rms_norm_quantize", (x.rows as u32, 1), threads, &args)?;
        st.quantized
            .set(Some(state::Quantized { of: out.ptr, q, ds }));
        Ok(())
    }

    /// `out = rms_norm(x)` per group of `group` values (`out` may be `x`).
    fn launch_norm(
        &self,
        st: &State,
        x: &CudaTensor,
        weight: &CudaWeight,
        group: usize,
        eps: f32,
        out: &CudaTensor,
    ) -> Result<(), BackendError> {
        check_norm_weight(weight, group, x.cols)?;
        let n_groups = (x.len() / group) as u32;
        let threads = (group.next_multiple_of(32)).min(256) as u32;
        let args = [
            Arg::P(x.ptr),
            Arg::P(weight.ptr),
            Arg::P(out.ptr),
            Arg::I(group as i32),
            Arg::F(eps),
        ];
        self.launch(st, "rms_norm_groups", (n_groups, 1), threads, &args)?;
        Ok(())
    }
}

/// Whether a norm over whole rows of `x` also writes their 8-bit copy (`rms_norm_quantize`):
/// rows few enough for the int8-activation kernels, of whole 32-value groups.
fn norm_quantizes(x: &CudaTensor) -> bool {
    mmq::takes_int8_activations(x.rows) && x.cols.is_multiple_of(32)
}

/// A norm weight of `group` values, applied to rows of `cols` (a multiple of it).
fn check_norm_weight(weight: &CudaWeight, group: usize, cols: usize) -> Result<(), BackendError> {
    if weight.rows != 1 || weight.cols != group || group == 0 || !cols.is_multiple_of(group) {
        return Err(BackendError::BadWeight {
            name: weight.name.clone(),
            reason: format!(
                "norm of {} values applied to groups of {group}",
                weight.cols
            ),
        });
    }
    Ok(())
}
