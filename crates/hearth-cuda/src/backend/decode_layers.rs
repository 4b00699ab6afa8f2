//! A one-token decode step's layers as one persistent kernel (kernels/decode_layers.cu): the
//! per-layer weight and cache addresses in a device table, the scratch rows, and a
//! cooperative launch.

use cudarc::driver::sys;
use cudarc::driver::CudaSlice;
use hearth_backend::{
    Activation, AttnBatch, BackendError, DenseLayer, DenseStack, RopeKind, RopeRows,
};
use hearth_quant::GgmlType;

use super::attention::batch_metadata;
use super::dependent_launch;
use super::launch::Arg;
use super::memory::device_address;
use super::staging::key_of;
use super::state::{Mode, State};
use super::{CudaBackend, CudaKvCache, CudaTensor, CudaWeight};
use crate::error::driver;
use crate::CudaError;

/// `HEARTH_CUDA_DECODE_LAYERS=1` turns the one-kernel decode step on (it is off by default:
/// see [`decode_layers_by_default`]).
const DECODE_LAYERS_VAR: &str = "HEARTH_CUDA_DECODE_LAYERS";
/// Threads per block of `decode_layers` (its DL_THREADS).
const THREADS: u32 = 128;
/// Device addresses per layer in the table (its DL_FIELDS), the last one the weight types.
const FIELDS: usize = 14;
/// Resident blocks per multiprocessor asked for, at most (fewer if the kernel's registers or
/// shared memory allow fewer). `HEARTH_CUDA_DECODE_BLOCKS_PER_SM` overrides it.
/// NOTE (H100, tg128): Qwen3-0.6B is fastest with 2 (1: 591, 2: 668, 3: 597, 4: 576 tok/s in
/// one call), Llama-3.1-8B with 4 (243 against 212), where the GEMVs need the warps.
const BLOCKS_PER_SM: u32 = 2;

/// Whether one-token decode steps run their layers as one kernel unless the backend is told
/// otherwise ([`CudaBackend::with_one_kernel_decode`]): only when `HEARTH_CUDA_DECODE_LAYERS=1`.
///
/// NOTE (H100, tg128 with the argmax on the GPU, one binary, two rounds per call): the kernel
/// gives the op-by-op step's logits (bit for bit in the tests) but is not yet faster. Qwen3-0.6B
/// Q8_0: 731-768 tok/s against 785-804 op by op (attention in chunks of 8 positions: 762-781);
/// Llama-3.1-8B Q4_K_M: 211-243 against 299-302. Where its time goes (DL_PROFILE, 0.6B, per
/// layer): barriers 12.5 µs (most of it waiting after attention and after gate/up), attention
/// 8, gate/up 7.7, the two redundant norms 5, the other GEMVs 10.7.
pub(super) fn decode_layers_by_default(dev: &crate::CudaDevice) -> bool {
    launches_cooperatively(dev) && std::env::var(DECODE_LAYERS_VAR).is_ok_and(|v| v == "1")
}

/// Whether the GPU can launch a grid whose blocks wait for each other (all resident at once).
pub(super) fn launches_cooperatively(dev: &crate::CudaDevice) -> bool {
    dev.context()
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)
        .is_ok_and(|v| v != 0)
}

/// What the kernel keeps between steps: the layer tables it was given and its counters (a
/// step's recording holds their addresses, so none is ever freed), and the grid size.
#[derive(Default)]
pub(super) struct DecodeLayersState {
    tables: Vec<(Vec<u64>, CudaSlice<u64>)>,
    /// The barrier's counter, then one per 32 rows of the feed-forward product and one per
    /// query head, all zero between launches: by their length.
    counters: Vec<(usize, CudaSlice<u32>)>,
    /// Blocks of the grid for a dynamic shared memory size.
    grids: Vec<(u32, u32)>,
}

/// The GGML type code the kernel decodes `w` as, if it has the int8-activation GEMV for it.
fn gemv_type(w: &CudaWeight) -> Option<u64> {
    let ok = w.mlx.is_none()
        && w.cols.is_multiple_of(32)
        && matches!(
            w.ty,
            GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_K | GgmlType::Q6_K
        );
    ok.then(|| w.ty.id() as u64)
}

fn is_vector(w: &CudaWeight, n: usize) -> bool {
    w.ty == GgmlType::F32 && (w.rows, w.cols) == (1, n)
}

/// The layer table's words (see kernels/decode_layers.cu), or `None` when some layer has a
/// weight of a type or shape the kernel does not take.
fn table_words(
    layers: &[DenseLayer<'_, CudaWeight>],
    stack: &DenseStack<'_>,
    n_embd: usize,
    cache: &CudaKvCache,
) -> Option<Vec<u64>> {
    let p = stack.attn;
    let (q_dim, kv_dim) = (p.n_heads * p.head_dim, p.n_kv_heads * p.head_dim);
    let mut words = Vec::with_capacity(layers.len() * FIELDS);
    for (il, l) in layers.iter().enumerate() {
        let shapes = [
            (l.wq, q_dim, n_embd),
            (l.wk, kv_dim, n_embd),
            (l.wv, kv_dim, n_embd),
            (l.wo, n_embd, q_dim),
            (l.gate, stack.n_ff, n_embd),
            (l.up, stack.n_ff, n_embd),
            (l.down, n_embd, stack.n_ff),
        ];
        let mut types = 0u64;
        for (i, (w, rows, cols)) in shapes.iter().enumerate() {
            if (w.rows, w.cols) != (*rows, *cols) {
                return None;
            }
            // gate and up share one type code (byte 4); down is byte 5.
            let byte = [0, 1, 2, 3, 4, 4, 5][i];
            types |= gemv_type(w)? << (8 * byte);
        }
        let norms_ok = is_vector(l.attn_norm, n_embd)
            && is_vector(l.ffn_norm, n_embd)
            && l.gate.ty == l.up.ty
            && l.qk_norms
                .is_none_or(|(a, b)| is_vector(a, p.head_dim) && is_vector(b, p.head_dim));
        let &(kc, vc) = cache.layers.get(il)?;
        if !norms_ok || cache.kv_dims.get(il) != Some(&kv_dim) {
            return None;
        }
        let (qn, kn) = l.qk_norms.map_or((0, 0), |(a, b)| (a.ptr, b.ptr));
        words.extend([
            l.attn_norm.ptr,
            l.wq.ptr,
            l.wk.ptr,
            l.wv.ptr,
            qn,
            kn,
            l.wo.ptr,
            l.ffn_norm.ptr,
            l.gate.ptr,
            l.up.ptr,
            l.down.ptr,
            kc,
            vc,
            types,
        ]);
    }
    Some(words)
}

impl CudaBackend {
    /// [`hearth_backend::Backend::decode_layers`]: `Ok(false)` where the kernel does not
    /// apply (shapes, types, attention variants it lacks) or cannot be set up in this pass.
    pub(super) fn launch_decode_layers(
        &self,
        x: &CudaTensor,
        layers: &[DenseLayer<'_, CudaWeight>],
        stack: &DenseStack<'_>,
        rows: RopeRows,
        cache: &CudaKvCache,
        batch: &AttnBatch,
    ) -> Result<bool, BackendError> {
        let p = stack.attn;
        let n_embd = x.cols;
        let (q_dim, kv_dim) = (p.n_heads * p.head_dim, p.n_kv_heads * p.head_dim);
        let rope = stack.rope;
        let supported = self.one_kernel_decode
            && x.rows == 1
            && !layers.is_empty()
            && batch.seqs.len() == 1
            && batch.seqs[0].n_tokens == 1
            && batch.block_size == cache.block_size
            && rows.positions.len() == 1
            && rows.theta_scales.is_none()
            && rows.positions[0] as usize == batch.seqs[0].first_pos
            && matches!(p.head_dim, 64 | 128)
            && p.n_kv_heads > 0
            && p.n_heads.is_multiple_of(p.n_kv_heads)
            && p.window.is_none()
            && p.softcap.is_none()
            && rope.n_rot <= p.head_dim
            && rope.n_rot.is_multiple_of(2)
            && (rope.freq_factors.is_empty() || rope.freq_factors.len() == rope.n_rot / 2)
            && [n_embd, q_dim, kv_dim, stack.n_ff]
                .iter()
                .all(|d| d.is_multiple_of(32));
        if !supported {
            return Ok(false);
        }
        let Some(words) = table_words(layers, stack, n_embd, cache) else {
            return Ok(false);
        };
        let mut st = self.state()?;
        let eager = st.mode == Mode::Eager;
        // Tables and the counter are made in eager passes only (a recording cannot copy host
        // data in); a step recorded or replayed without them ran, and runs, op by op.
        let table = match st.decode_layers.tables.iter().find(|(w, _)| *w == words) {
            Some((_, t)) => device_address(t, self.dev.stream()),
            None if eager => self.upload_table(&mut st, words)?,
            None => return Ok(false),
        };
        let n_counters = 1 + stack.n_ff / 32 + p.n_heads;
        let found = st
            .decode_layers
            .counters
            .iter()
            .find(|(n, _)| *n == n_counters);
        let counters = match found {
            Some((_, c)) => device_address(c, self.dev.stream()),
            None if eager => {
                let c = self
                    .dev
                    .stream()
                    .alloc_zeros::<u32>(n_counters)
                    .map_err(driver("decode layer counters"))?;
                let at = device_address(&c, self.dev.stream());
                st.decode_layers.counters.push((n_counters, c));
                at
            }
            None => return Ok(false),
        };
        let max_cols = n_embd.max(q_dim).max(stack.n_ff);
        let shared = (max_cols + max_cols / 32 * 8) as u32;
        let Some(blocks) = self.decode_grid(&mut st, shared)? else {
            return Ok(false);
        };

        // Scratch rows, then the step's host data (in the same order in every pass).
        let q = self.tensor(&mut st, 1, q_dim)?;
        let k = self.tensor(&mut st, 1, kv_dim)?;
        let v = self.tensor(&mut st, 1, kv_dim)?;
        let ctx = self.tensor(&mut st, 1, q_dim)?;
        let act = self.tensor(&mut st, 1, stack.n_ff)?;
        let (oq, ods) = self.alloc_q8(&mut st, q_dim)?;
        let (aq, ads) = self.alloc_q8(&mut st, stack.n_ff)?;
        let chunks = (blocks as usize / p.n_heads).max(1);
        let parts = self.tensor(&mut st, p.n_heads * chunks, p.head_dim + 2)?;
        let key = key_of(batch.seqs, "attention batch");
        let meta = match key.and_then(|k| st.staged_at(k)) {
            Some(dev) => dev,
            None => {
                let meta = batch_metadata(batch, 1, cache.n_blocks)?;
                self.stage_u32(&mut st, key, &meta)?
            }
        };
        let inputs = self.stage_rope_inputs(&mut st, rows, rope)?;
        st.forget_copies_of(x.ptr);
        if !st.mode.launches() {
            return Ok(true);
        }
        let stream = self.dev.stream().cu_stream();
        // SAFETY: the barrier's counter is the first word of a live device allocation.
        unsafe { sys::cuMemsetD32Async(counters, 0, 1, stream) }
            .result()
            .map_err(driver("decode barrier reset"))?;
        let args = [
            Arg::P(table),
            Arg::I(layers.len() as i32),
            Arg::P(x.ptr),
            Arg::P(q.ptr),
            Arg::P(k.ptr),
            Arg::P(v.ptr),
            Arg::P(ctx.ptr),
            Arg::P(oq),
            Arg::P(ods),
            Arg::P(act.ptr),
            Arg::P(aq),
            Arg::P(ads),
            Arg::P(parts.ptr),
            Arg::P(meta),
            Arg::P(counters),
            Arg::I(n_embd as i32),
            Arg::I(p.n_heads as i32),
            Arg::I(p.n_kv_heads as i32),
            Arg::I(p.head_dim as i32),
            Arg::I(stack.n_ff as i32),
            Arg::F(stack.eps),
            Arg::F(p.scale),
            Arg::I(rope.n_rot as i32),
            Arg::F(rope.theta_scale()),
            Arg::F(rope.freq_scale),
            Arg::P(inputs.factors),
            Arg::I((rope.kind == RopeKind::Neox) as i32),
            Arg::I((stack.activation == Activation::GeluTanh) as i32),
            Arg::I(cache.block_size as i32),
        ];
        let f = self.dev.function("decode_layers")?;
        // SAFETY: the arguments are decode_layers' parameters in order, each buffer sized as
        // the kernel reads it (the table for `layers.len()` layers, the scratch rows above).
        unsafe {
            dependent_launch::launch_cooperative(
                f.cu_function(),
                stream,
                blocks,
                THREADS,
                shared,
                &args,
            )
        }?;
        Ok(true)
    }

    fn upload_table(&self, st: &mut State, words: Vec<u64>) -> Result<u64, CudaError> {
        let stream = self.dev.stream();
        let t = stream
            .clone_htod(&words)
            .map_err(driver("decode layer table"))?;
        let at = device_address(&t, stream);
        st.decode_layers.tables.push((words, t));
        Ok(at)
    }

    /// Blocks of a `decode_layers` grid with `shared` bytes of dynamic shared memory: as many
    /// as can be resident at once, up to BLOCKS_PER_SM per multiprocessor; `None` when not
    /// even one fits.
    fn decode_grid(&self, st: &mut State, shared: u32) -> Result<Option<u32>, CudaError> {
        if let Some(&(_, blocks)) = st.decode_layers.grids.iter().find(|(s, _)| *s == shared) {
            return Ok((blocks > 0).then_some(blocks));
        }
        let per_sm = self.resident_per_sm(st, "decode_layers", THREADS, shared)? as u32;
        let wanted = std::env::var("HEARTH_CUDA_DECODE_BLOCKS_PER_SM")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(BLOCKS_PER_SM);
        let blocks = per_sm.min(wanted) * self.dev.info().sm_count;
        tracing::debug!(per_sm, blocks, shared, "decode_layers grid");
        st.decode_layers.grids.push((shared, blocks));
        Ok((blocks > 0).then_some(blocks))
    }
}
