//! The paged KV cache on the device and the attention op (kernels/attention.wgsl; for a few
//! tokens over a long context, kernels/attention_split.wgsl).

use hearth_backend::{AttnBatch, AttnParams, Backend, BackendError, KvSpec, KvType};

use std::sync::atomic::Ordering;

use hearth_quant::GgmlType;

use crate::backend::{check, words, WgpuBackend, WgpuTensor, WgpuWeight};
use crate::kernels::Module;
use crate::recorder::{Bind, Grid};

/// Keys and values of every layer: `n_blocks * block_size` slots of `kv_dim` f16 values each,
/// stored two per u32 word.
pub struct WgpuKvCache {
    /// `(keys, values)` per layer, each `[slots, kv_dim / 2]` words.
    layers: Vec<(wgpu::Buffer, wgpu::Buffer)>,
    kv_dims: Vec<usize>,
    n_blocks: usize,
    block_size: usize,
}

impl WgpuKvCache {
    pub(crate) fn new(be: &WgpuBackend, spec: &KvSpec) -> Result<WgpuKvCache, BackendError> {
        check(spec.dtype == KvType::F16, || {
            format!(
                "a {} KV cache on wgpu (its attention kernel reads f16 keys and values; use an \
                 f16 cache or the CPU)",
                spec.dtype
            )
        })?;
        let slots = (spec.n_blocks * spec.block_size) as u64;
        let mut layers = Vec::with_capacity(spec.kv_dims.len());
        for (i, &d) in spec.kv_dims.iter().enumerate() {
            check(d % 2 == 0, || {
                format!("layer {i}: an odd KV width ({d}) is not supported by the wgpu backend")
            })?;
            let bytes = slots * d as u64 * 2;
            let k = be.buffer(bytes).map_err(|e| kv_too_big(i, e))?;
            let v = be.buffer(bytes).map_err(|e| kv_too_big(i, e))?;
            layers.push((k, v));
        }
        Ok(WgpuKvCache {
            layers,
            kv_dims: spec.kv_dims.clone(),
            n_blocks: spec.n_blocks,
            block_size: spec.block_size,
        })
    }
}

fn kv_too_big(layer: usize, e: BackendError) -> BackendError {
    BackendError::OutOfMemory(format!(
        "KV cache of layer {layer}: {e}; use a smaller context"
    ))
}

/// Per-token `(position, table offset)` pairs followed by every sequence's block table, as the
/// kernels read them from `aux`. Checks that each table covers its sequence.
fn attention_aux(
    batch: &AttnBatch,
    n_tokens: usize,
    n_blocks: usize,
) -> Result<Vec<u32>, BackendError> {
    let mut aux = vec![0u32; 2 * n_tokens];
    let mut tables = Vec::new();
    let mut covered = 0;
    for (s, seq) in batch.seqs.iter().enumerate() {
        let end = seq.first_pos + seq.n_tokens;
        check(
            seq.token_start + seq.n_tokens <= n_tokens
                && seq.block_table.len() * batch.block_size >= end
                && seq.block_table.iter().all(|&b| (b as usize) < n_blocks),
            || {
                format!(
                    "sequence {s}: its block table does not cover positions 0..{end} in the cache"
                )
            },
        )?;
        let offset = tables.len() as u32;
        tables.extend_from_slice(seq.block_table);
        for i in 0..seq.n_tokens {
            let t = seq.token_start + i;
            aux[2 * t] = (seq.first_pos + i) as u32;
            aux[2 * t + 1] = offset;
        }
        covered += seq.n_tokens;
    }
    check(covered == n_tokens, || {
        format!("the batch's sequences cover {covered} of its {n_tokens} tokens")
    })?;
    aux.extend(tables);
    Ok(aux)
}

/// QK-norm (where there are norms) and RoPE of a decode step, done by the attention kernel
/// itself (see attention.wgsl's `norm_rope_qk`): the norm weights of q and k heads, and the
/// rotation of every token as `rope_table` gives it.
pub(crate) struct FusedQk<'a> {
    pub norms: Option<(&'a WgpuWeight, &'a WgpuWeight)>,
    pub table: Vec<f32>,
    pub n_rot: usize,
    pub neox: bool,
    pub eps: f32,
}

/// How `attention` runs a batch.
pub(crate) struct Plan {
    /// Chunks of SPLIT_CHUNK positions the split kernels would take per (token, head).
    n_chunks: usize,
    /// The single kernel, not the split ones.
    single_kernel: bool,
    /// The single kernel writes the step's own keys and values (a decode step).
    pub own_kv: bool,
}

pub(crate) fn plan(batch: &AttnBatch, p: &AttnParams, n_tokens: usize) -> Plan {
    let n_chunks = longest_span(batch, p.window).div_ceil(SPLIT_CHUNK);
    let single_kernel = n_tokens > SPLIT_MAX_TOKENS || n_chunks < SPLIT_MIN_CHUNKS;
    let own_kv = single_kernel && batch.seqs.iter().all(|s| s.n_tokens <= 1);
    Plan {
        n_chunks,
        single_kernel,
        own_kv,
    }
}

/// See [`hearth_backend::Backend::attention`]; with `fused` (only where `plan` says own_kv),
/// `q` and `k` are not yet normed and rotated, and the kernel does it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    be: &WgpuBackend,
    q: &WgpuTensor,
    k: &WgpuTensor,
    v: &WgpuTensor,
    cache: &mut WgpuKvCache,
    layer: usize,
    batch: &AttnBatch,
    p: &AttnParams,
    out: &mut WgpuTensor,
    fused: Option<&FusedQk>,
) -> Result<(), BackendError> {
    let kv_dim = p.n_kv_heads * p.head_dim;
    let q_dim = p.n_heads * p.head_dim;
    let n = q.rows;
    check(
        cache.kv_dims.get(layer) == Some(&kv_dim) && batch.block_size == cache.block_size,
        || format!("layer {layer}: KV cache shape does not match the attention parameters"),
    )?;
    check(
        p.n_kv_heads > 0 && p.n_heads.is_multiple_of(p.n_kv_heads),
        || {
            format!(
                "{} query heads cannot share {} KV heads",
                p.n_heads, p.n_kv_heads
            )
        },
    )?;
    check(p.head_dim.is_multiple_of(2) && p.head_dim <= 256, || {
        format!(
            "head_dim {} is not supported by the wgpu backend (even, at most 256)",
            p.head_dim
        )
    })?;
    check(
        (q.cols, k.cols, v.cols, out.cols) == (q_dim, kv_dim, kv_dim, q_dim)
            && k.rows == n
            && v.rows == n
            && out.rows == n,
        || format!("attention shapes q {q_dim} k/v {kv_dim} do not match the tensors"),
    )?;
    let mut aux = attention_aux(batch, n, cache.n_blocks)?;
    let mut params = [
        n as u32,
        p.n_heads as u32,
        p.n_kv_heads as u32,
        p.head_dim as u32,
        batch.block_size as u32,
        p.window.unwrap_or(0) as u32,
        p.scale.to_bits(),
        p.softcap.unwrap_or(0.0).to_bits(),
        2 * n as u32,
        0,
        0,
        0,
        0, // zero: see prelude.wgsl's `keep`
        0, // q8
        0, // q8_scales
        0, // own_kv
        0, // qk_norm
        0, // half_rot
        0, // neox
        0, // eps
        0, // rope_at
    ];
    let Plan {
        n_chunks,
        single_kernel,
        own_kv,
    } = plan(batch, p, n);
    check(fused.is_none() || own_kv, || {
        "the attention kernel norms and rotates q and k only in a decode step".to_string()
    })?;
    if let Some(f) = fused {
        params[16] = if f.norms.is_some() { 1 } else { 2 }; // attention.wgsl's QK_NORM_ROPE, ROPE_ONLY
        params[17] = (f.n_rot / 2) as u32;
        params[18] = f.neox as u32;
        params[19] = f.eps.to_bits();
        params[20] = aux.len() as u32;
        aux.extend(f.table.iter().map(|v| v.to_bits()));
    }
    let aux = words(&aux);
    let (kc, vc) = &cache.layers[layer];
    // NOTE: as the norms in front of projections do (see `rms_norm_copy`), the attention
    // kernel also writes its output as Q8_0 blocks for the o projection once a Q8_0 matmul
    // has been seen: a quantize dispatch fewer per layer. Whole heads are whole blocks.
    let oq = if single_kernel
        && be.norms_quantize.load(Ordering::Relaxed)
        && p.head_dim.is_multiple_of(32)
    {
        let oq = be.alloc_int8(GgmlType::Q8_0, n, q_dim)?;
        params[13] = 1;
        params[14] = oq.scales as u32;
        Some(oq)
    } else {
        None
    };
    // A decode step (every sequence brings one token) on the single kernel: the attention
    // kernel writes the keys and values itself (see attention.wgsl): a dispatch fewer.
    params[15] = own_kv as u32;
    let single = words(&params);
    let binds = [
        Bind::Buffer(&q.buf),
        Bind::Buffer(&k.buf),
        Bind::Buffer(&v.buf),
        Bind::Buffer(kc),
        Bind::Buffer(vc),
        Bind::Buffer(out.written()),
        Bind::Host(&single),
        Bind::Host(&aux),
        Bind::Buffer(oq.as_ref().map_or(&be.dummy_rw, |q| &q.buf.buf)),
        Bind::Buffer(
            fused
                .and_then(|f| f.norms)
                .map_or(&be.dummy, |n| n.0.vector()),
        ),
        Bind::Buffer(
            fused
                .and_then(|f| f.norms)
                .map_or(&be.dummy, |n| n.1.vector()),
        ),
    ];
    let mut rec = be.recorder();
    if !own_kv {
        rec.dispatch(
            &be.gpu,
            Module::Attention(be.gpu.info.native_fma, be.gpu.info.shader_f16),
            "kv_write",
            &binds,
            Grid::Threads(n * kv_dim / 2),
        )?;
    }
    if single_kernel {
        rec.dispatch(
            &be.gpu,
            Module::Attention(be.gpu.info.native_fma, be.gpu.info.shader_f16),
            "attention",
            &binds,
            Grid::Groups(n * p.n_heads),
        )?;
        drop(rec);
        out.int8 = oq.map(Box::new);
        return Ok(());
    }
    drop(rec);
    // Scratch: scores, (max, sum) pairs and value sums of every chunk (attention_split.wgsl).
    let chunks = n * p.n_heads * n_chunks;
    let ml_at = chunks * SPLIT_CHUNK;
    let acc_at = ml_at + 2 * chunks;
    let part = be.alloc(1, acc_at + chunks * p.head_dim)?;
    params[9] = n_chunks as u32;
    params[10] = ml_at as u32;
    params[11] = acc_at as u32;
    let params = words(&params);
    let binds = [
        Bind::Buffer(&q.buf),
        Bind::Buffer(kc),
        Bind::Buffer(vc),
        Bind::Buffer(out.written()),
        Bind::Host(&params),
        Bind::Host(&aux),
        Bind::Buffer(&part.buf),
    ];
    let mut rec = be.recorder();
    for (entry, groups) in [
        ("attn_split_scores", chunks),
        ("attn_split_values", chunks),
        ("attn_split_reduce", n * p.n_heads),
    ] {
        rec.dispatch(
            &be.gpu,
            Module::AttentionSplit(be.gpu.info.native_fma, be.gpu.info.shader_f16),
            entry,
            &binds,
            Grid::Groups(groups),
        )?;
    }
    Ok(())
}

/// Positions per workgroup of the split attention.
const SPLIT_CHUNK: usize = 64;
/// The split attention runs for batches of at most this many tokens (decode steps), where one
/// workgroup per (token, head) is too few; a prompt chunk has enough of them.
const SPLIT_MAX_TOKENS: usize = 8;
/// ... and over at least this many chunks: below it the three dispatches cost more than
/// they save (and short contexts keep the single kernel's order of sums). Decoding 1,024
/// tokens of Qwen3-0.6B on an H100 through Vulkan, from 3 up to 10 chunks measured alike
/// (241-245 tok/s), 16 less (213), the single kernel throughout 205.
const SPLIT_MIN_CHUNKS: usize = 3;

/// The most positions one token of `batch` sees.
fn longest_span(batch: &AttnBatch, window: Option<usize>) -> usize {
    batch
        .seqs
        .iter()
        .filter(|s| s.n_tokens > 0)
        .map(|s| {
            let own = s.first_pos + s.n_tokens; // positions 0..own for the last token
            window.map_or(own, |w| own.min(w))
        })
        .max()
        .unwrap_or(0)
}
