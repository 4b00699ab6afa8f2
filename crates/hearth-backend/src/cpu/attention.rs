//! Causal attention over the paged KV cache (f16 or f32 slots).
//!
//! ```text
//!  cache slots (per layer):  [ block 0 | block 1 | block 2 | ... ]   each block = block_size slots
//!  sequence A block table:   [ 2, 0 ]      positions 0..bs in block 2, bs..2bs in block 0
//!  sequence B block table:   [ 1 ]
//! ```
//! For each sequence of the batch: the new tokens' K/V are written to their slots, then every
//! (token, head) pair is an independent task: scores, softmax, weighted sum of values.
//!
//! NOTE: with an f16 cache, like ggml's (non-flash) attention, queries are rounded to f16
//! before q·k (ggml converts the f32 operand of a matmul to the f16 weight's type) and the
//! softmax weights are rounded to f16 before they multiply V. This keeps greedy decoding
//! aligned with llama.cpp. An f32 cache rounds nothing.

use half::f16;
use rayon::prelude::*;

use super::{simd, CpuKvCache, CpuTensor};
use crate::{AttnBatch, AttnParams, AttnSeq, BackendError, KvSpec, KvType};

/// A value type the cache stores keys and values in.
pub(super) trait KvValue: Copy + Send + Sync {
    const ZERO: Self;
    fn from_f32(x: f32) -> Self;
    /// `x` rounded as this type rounds it (queries and softmax weights; see the module note).
    fn round(x: f32) -> f32;
    /// Σ a[i]·b[i].
    fn dot(a: &[f32], b: &[Self]) -> f32;
    /// y += a·x.
    fn axpy(y: &mut [f32], a: f32, x: &[Self]);
}

impl KvValue for f16 {
    const ZERO: Self = f16::ZERO;
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn round(x: f32) -> f32 {
        f16::from_f32(x).to_f32()
    }
    fn dot(a: &[f32], b: &[Self]) -> f32 {
        simd::dot_f16(a, b)
    }
    fn axpy(y: &mut [f32], a: f32, x: &[Self]) {
        simd::axpy_f16(y, a, x)
    }
}

impl KvValue for f32 {
    const ZERO: Self = 0.0;
    fn from_f32(x: f32) -> Self {
        x
    }
    fn round(x: f32) -> f32 {
        x
    }
    fn dot(a: &[f32], b: &[Self]) -> f32 {
        simd::dot_f32(a, b)
    }
    fn axpy(y: &mut [f32], a: f32, x: &[Self]) {
        for (yi, &xi) in y.iter_mut().zip(x) {
            *yi = a.mul_add(xi, *yi);
        }
    }
}

/// Per layer: (keys, values), each `[n_slots, kv_dim]`.
type LayerSlots<T> = Vec<(Vec<T>, Vec<T>)>;

/// Every layer's slots, in the cache's dtype.
pub(super) enum KvLayers {
    F16(LayerSlots<f16>),
    F32(LayerSlots<f32>),
}

impl KvLayers {
    pub(super) fn new(spec: &KvSpec) -> Result<Self, BackendError> {
        Ok(match spec.dtype {
            KvType::F16 => KvLayers::F16(alloc_layers(spec)?),
            KvType::F32 => KvLayers::F32(alloc_layers(spec)?),
        })
    }
}

fn alloc_layers<T: KvValue>(spec: &KvSpec) -> Result<LayerSlots<T>, BackendError> {
    let n_slots = spec.n_blocks * spec.block_size;
    let too_big = || {
        BackendError::OutOfMemory(format!(
            "a {} KV cache of {n_slots} slots needs {} MiB",
            spec.dtype,
            spec.bytes() >> 20
        ))
    };
    let mut layers = Vec::with_capacity(spec.kv_dims.len());
    for &d in &spec.kv_dims {
        let len = n_slots.checked_mul(d).ok_or_else(too_big)?;
        let (mut k, mut v) = (Vec::new(), Vec::new());
        k.try_reserve_exact(len)
            .and_then(|_| v.try_reserve_exact(len))
            .map_err(|_| too_big())?;
        k.resize(len, T::ZERO);
        v.resize(len, T::ZERO);
        layers.push((k, v));
    }
    Ok(layers)
}

#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &CpuTensor,
    k: &CpuTensor,
    v: &CpuTensor,
    cache: &mut CpuKvCache,
    layer: usize,
    batch: &AttnBatch,
    p: &AttnParams,
    out: &mut CpuTensor,
) -> Result<(), BackendError> {
    let kv_dim = p.n_kv_heads * p.head_dim;
    let q_dim = p.n_heads * p.head_dim;
    if cache.kv_dims.get(layer) != Some(&kv_dim) || batch.block_size != cache.block_size {
        return Err(BackendError::Unsupported(format!(
            "layer {layer}: KV cache shape does not match the attention parameters"
        )));
    }
    if p.n_kv_heads == 0 || !p.n_heads.is_multiple_of(p.n_kv_heads) {
        return Err(BackendError::Unsupported(format!(
            "{} query heads cannot share {} KV heads",
            p.n_heads, p.n_kv_heads
        )));
    }
    assert_eq!(
        (q.cols, k.cols, v.cols, out.cols),
        (q_dim, kv_dim, kv_dim, q_dim)
    );
    match &mut cache.layers {
        KvLayers::F16(layers) => {
            let (kc, vc) = &mut layers[layer];
            attend_batch(q, k, v, kc, vc, batch, p, out);
        }
        KvLayers::F32(layers) => {
            let (kc, vc) = &mut layers[layer];
            attend_batch(q, k, v, kc, vc, batch, p, out);
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn attend_batch<T: KvValue>(
    q: &CpuTensor,
    k: &CpuTensor,
    v: &CpuTensor,
    kc: &mut [T],
    vc: &mut [T],
    batch: &AttnBatch,
    p: &AttnParams,
    out: &mut CpuTensor,
) {
    let kv_dim = p.n_kv_heads * p.head_dim;
    let bs = batch.block_size;
    for seq in batch.seqs {
        write_new_kv(seq, k, v, kc, vc, kv_dim, bs);
    }
    for seq in batch.seqs {
        attend_sequence(seq, q, kc, vc, bs, p, out);
    }
}

fn write_new_kv<T: KvValue>(
    seq: &AttnSeq,
    k: &CpuTensor,
    v: &CpuTensor,
    kc: &mut [T],
    vc: &mut [T],
    kv_dim: usize,
    bs: usize,
) {
    for i in 0..seq.n_tokens {
        let slot = seq.slot(seq.first_pos + i, bs);
        let row = seq.token_start + i;
        let dst_k = &mut kc[slot * kv_dim..][..kv_dim];
        let dst_v = &mut vc[slot * kv_dim..][..kv_dim];
        for (d, &s) in dst_k.iter_mut().zip(k.row(row)) {
            *d = T::from_f32(s);
        }
        for (d, &s) in dst_v.iter_mut().zip(v.row(row)) {
            *d = T::from_f32(s);
        }
    }
}

/// First position visible from `pos`.
fn window_start(pos: usize, window: Option<usize>) -> usize {
    match window {
        Some(w) if pos + 1 > w => pos + 1 - w,
        _ => 0,
    }
}

fn attend_sequence<T: KvValue>(
    seq: &AttnSeq,
    q: &CpuTensor,
    kc: &[T],
    vc: &[T],
    bs: usize,
    p: &AttnParams,
    out: &mut CpuTensor,
) {
    let kv_dim = p.n_kv_heads * p.head_dim;
    let hd = p.head_dim;
    let group = p.n_heads / p.n_kv_heads;
    let q_dim = p.n_heads * hd;
    let rows = &mut out.data[seq.token_start * q_dim..(seq.token_start + seq.n_tokens) * q_dim];
    // NOTE: keys and values are read straight from their slots (converted in registers);
    // gathering them into f32 rows first would cost as much as the attention itself in decode.
    rows.par_chunks_mut(hd).enumerate().for_each(|(task, dst)| {
        let (t, h) = (task / p.n_heads, task % p.n_heads);
        let pos = seq.first_pos + t;
        let head = (h / group) * hd;
        let query: Vec<f32> = q.row(seq.token_start + t)[h * hd..][..hd]
            .iter()
            .map(|&x| T::round(x))
            .collect();
        let visible = window_start(pos, p.window)..pos + 1;
        let mut scores: Vec<f32> = visible
            .clone()
            .map(|j| {
                let key = &kc[seq.slot(j, bs) * kv_dim + head..][..hd];
                let s = T::dot(&query, key) * p.scale;
                match p.softcap {
                    Some(c) => c * (s / c).tanh(),
                    None => s,
                }
            })
            .collect();
        softmax_rounded::<T>(&mut scores);
        dst.fill(0.0);
        for (w, j) in scores.iter().zip(visible) {
            T::axpy(dst, *w, &vc[seq.slot(j, bs) * kv_dim + head..][..hd]);
        }
    });
}

/// In-place softmax whose results are rounded as the cache's type rounds (see the module note).
fn softmax_rounded<T: KvValue>(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v = T::round(*v * inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{cpu::CpuBackend, Backend, KvSpec};

    /// Plain attention over explicit K/V lists, f32 throughout.
    fn naive(q: &[f32], keys: &[Vec<f32>], values: &[Vec<f32>], scale: f32) -> Vec<f32> {
        let s: Vec<f32> = keys
            .iter()
            .map(|k| k.iter().zip(q).map(|(a, b)| a * b).sum::<f32>() * scale)
            .collect();
        let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f32 = e.iter().sum();
        let mut out = vec![0.0; q.len()];
        for (w, v) in e.iter().zip(values) {
            for (o, x) in out.iter_mut().zip(v) {
                *o += w / z * x;
            }
        }
        out
    }

    fn rand_row(seed: &mut u64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    /// Two sequences with scattered block tables, fed in two steps (a prompt chunk, then one
    /// token each), give the same outputs as naive attention over their own tokens only.
    #[test]
    fn paged_batched_attention_matches_naive() {
        // f16 storage of K, V, q and the weights: ~1e-3 relative.
        paged_batched_attention(KvType::F16, 3e-3);
    }

    /// The same with f32 slots: nothing is rounded, so only the order of f32 sums differs.
    #[test]
    fn f32_cache_attention_matches_naive_to_f32_rounding() {
        paged_batched_attention(KvType::F32, 2e-6);
    }

    fn paged_batched_attention(dtype: KvType, bound: f32) {
        let be = CpuBackend::new(2).unwrap();
        let (n_heads, n_kv, hd, bs) = (4, 2, 8, 4);
        let kv_dim = n_kv * hd;
        let mut cache = be
            .new_kv_cache(&KvSpec {
                kv_dims: vec![kv_dim],
                n_blocks: 8,
                block_size: bs,
                dtype,
            })
            .unwrap();
        let tables: [Vec<u32>; 2] = [vec![5, 1, 6], vec![2, 7, 0]];
        let params = AttnParams {
            n_heads,
            n_kv_heads: n_kv,
            head_dim: hd,
            scale: 0.35,
            window: None,
            softcap: None,
        };
        let mut seed = 7u64;
        let mut hist_k: [Vec<Vec<f32>>; 2] = [vec![], vec![]];
        let mut hist_v: [Vec<Vec<f32>>; 2] = [vec![], vec![]];
        for (step, lens) in [[6usize, 3], [1, 1]].iter().enumerate() {
            let n = lens[0] + lens[1];
            let q = be
                .upload(&rand_row(&mut seed, n * n_heads * hd), n, n_heads * hd)
                .unwrap();
            let k = be
                .upload(&rand_row(&mut seed, n * kv_dim), n, kv_dim)
                .unwrap();
            let v = be
                .upload(&rand_row(&mut seed, n * kv_dim), n, kv_dim)
                .unwrap();
            let firsts = if step == 0 { [0, 0] } else { [6, 3] };
            let seqs = [
                AttnSeq {
                    token_start: 0,
                    n_tokens: lens[0],
                    first_pos: firsts[0],
                    block_table: &tables[0],
                },
                AttnSeq {
                    token_start: lens[0],
                    n_tokens: lens[1],
                    first_pos: firsts[1],
                    block_table: &tables[1],
                },
            ];
            let mut out = be.alloc(n, n_heads * hd).unwrap();
            let batch = AttnBatch {
                seqs: &seqs,
                block_size: bs,
            };
            be.attention(&q, &k, &v, &mut cache, 0, &batch, &params, &mut out)
                .unwrap();
            for (s, seq) in seqs.iter().enumerate() {
                for t in 0..seq.n_tokens {
                    let row = seq.token_start + t;
                    hist_k[s].push(k.row(row).to_vec());
                    hist_v[s].push(v.row(row).to_vec());
                    for h in 0..n_heads {
                        let kvh = h / (n_heads / n_kv);
                        let ks: Vec<Vec<f32>> = hist_k[s]
                            .iter()
                            .map(|r| r[kvh * hd..][..hd].to_vec())
                            .collect();
                        let vs: Vec<Vec<f32>> = hist_v[s]
                            .iter()
                            .map(|r| r[kvh * hd..][..hd].to_vec())
                            .collect();
                        let e = naive(&q.row(row)[h * hd..][..hd], &ks, &vs, 0.35);
                        for (a, b) in out.row(row)[h * hd..][..hd].iter().zip(&e) {
                            assert!(
                                (a - b).abs() < bound,
                                "step {step} seq {s} t {t} h {h}: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn sliding_window_limits_what_is_seen() {
        assert_eq!(window_start(10, Some(4)), 7);
        assert_eq!(window_start(3, Some(4)), 0);
        assert_eq!(window_start(3, None), 0);
    }
}
