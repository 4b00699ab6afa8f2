//! Which tensors the GGUF file holds, where each comes from, and their converted bytes.

use std::collections::BTreeSet;

use hearth_gguf::StreamedTensor;
use hearth_quant::GgmlType;
use rayon::prelude::*;

use super::hparams::ExtraTensor;
use super::ConvertArch;
use crate::hf::safetensors::{ggml_type, TensorEntry};
use crate::hf::{hf_expert_name, hf_name, HfCheckpoint};
use crate::ModelError;

/// Per-layer tensors in the order llama.cpp writes them (GGUF name without `blk.N.`).
const LAYER_TENSORS: [&str; 15] = [
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_qkv",
    "attn_output",
    "attn_q_norm",
    "attn_k_norm",
    "post_attention_norm",
    "ffn_norm",
    "ffn_gate_inp",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
    "post_ffw_norm",
];

/// The stacked expert tensors of a mixture-of-experts layer.
const EXPERT_TENSORS: [&str; 3] = ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"];

/// Where one output tensor comes from.
pub enum Source {
    /// Checkpoint tensors laid end to end (one, or one per expert). `heads` set: permute the
    /// rows over that many heads. `offset` is added to every value (Gemma norms).
    Hf {
        parts: Vec<(String, TensorEntry)>,
        heads: Option<usize>,
        offset: f32,
    },
    /// Values computed here (rope factors).
    Values(Vec<f32>),
}

/// Every output tensor with its source; fails on a checkpoint tensor nothing maps to.
pub fn tensor_plan(
    ck: &HfCheckpoint,
    arch: &ConvertArch,
    ty: GgmlType,
    extra: Vec<ExtraTensor>,
) -> Result<Vec<(StreamedTensor, Source)>, ModelError> {
    let c = &ck.config;
    let mut plan = Vec::new();
    for t in extra {
        let dims = vec![t.values.len() as u64];
        plan.push((
            stream_tensor(t.name, dims, GgmlType::F32),
            Source::Values(t.values),
        ));
    }
    let mut names = vec!["token_embd.weight".to_string()];
    for layer in 0..c.n_layers {
        for t in LAYER_TENSORS {
            names.push(format!("blk.{layer}.{t}.weight"));
            names.push(format!("blk.{layer}.{t}.bias"));
        }
    }
    names.push("output_norm.weight".into());
    names.push("output.weight".into());
    let mut used = BTreeSet::new();
    if ck.tensors.tied {
        // A tied checkpoint's lm_head, where present, is the embedding table again; llama.cpp
        // reads token_embd in its place.
        used.insert("lm_head.weight".to_string());
    }
    for gguf in names {
        let Some(hf) = hf_name(&gguf, c.post_norms, c.fused_projections) else {
            continue;
        };
        let Ok(hf) = ck.tensors.resolve(hf) else {
            continue;
        };
        if used.contains(&hf) {
            continue;
        }
        let Some(entry) = ck.tensors.folder.get(&hf) else {
            continue;
        };
        let heads = match gguf.split('.').nth(2) {
            Some("attn_q") if arch.permute_qk => Some(c.n_heads),
            Some("attn_k") if arch.permute_qk => Some(c.n_kv_heads),
            _ => None,
        };
        let offset = if hf.ends_with("norm.weight") {
            arch.norm_offset
        } else {
            0.0
        };
        used.insert(hf.clone());
        let parts = vec![(hf, entry.clone())];
        plan.push(planned(gguf, parts, heads, offset, ty)?);
    }
    if let Some(moe) = &c.moe {
        for layer in 0..c.n_layers {
            for t in EXPERT_TENSORS {
                let gguf = format!("blk.{layer}.{t}.weight");
                let mut parts = Vec::with_capacity(moe.n_expert);
                for e in 0..moe.n_expert {
                    let hf = hf_expert_name(&gguf, e)
                        .ok_or_else(|| ModelError::MissingTensor(gguf.clone()))?;
                    let hf = ck.tensors.resolve(hf)?;
                    let entry = ck.tensors.folder.get(&hf).cloned();
                    let entry = entry.ok_or_else(|| ModelError::MissingTensor(hf.clone()))?;
                    used.insert(hf.clone());
                    parts.push((hf, entry));
                }
                plan.push(planned(gguf, parts, None, 0.0, ty)?);
            }
        }
    }
    let folder = &ck.tensors.folder;
    if let Some(left) = folder.names().into_iter().find(|n| !used.contains(*n)) {
        return Err(ModelError::BadTensor {
            name: left.to_string(),
            reason: "has no GGUF name for this architecture; converting it is not supported".into(),
        });
    }
    Ok(plan)
}

/// The output tensor `gguf` made of `parts` (all of one shape): a vector stays F32, as does
/// an expert router (llama.cpp keeps `ffn_gate_inp` in F32); matrices become `ty`, and
/// Q8_0 falls back to F16 for rows that are not whole 32-value blocks.
fn planned(
    gguf: String,
    parts: Vec<(String, TensorEntry)>,
    heads: Option<usize>,
    offset: f32,
    ty: GgmlType,
) -> Result<(StreamedTensor, Source), ModelError> {
    let (hf, entry) = &parts[0];
    if let Some((other, _)) = parts.iter().find(|(_, e)| e.shape != entry.shape) {
        return Err(ModelError::BadTensor {
            name: other.clone(),
            reason: format!("shape differs from {hf}'s {:?}", entry.shape),
        });
    }
    let mut dims: Vec<u64> = entry.shape.iter().rev().map(|&d| d as u64).collect();
    let out_ty = match dims.as_slice() {
        [_] => GgmlType::F32,
        [_, _] if gguf.contains(".ffn_gate_inp.") => GgmlType::F32,
        [cols, _] if ty == GgmlType::Q8_0 && cols % 32 != 0 => GgmlType::F16,
        [_, _] => ty,
        _ => {
            return Err(ModelError::BadTensor {
                name: hf.clone(),
                reason: format!("shape {:?}: expected a vector or a matrix", entry.shape),
            })
        }
    };
    if parts.len() > 1 {
        dims.push(parts.len() as u64);
    }
    let source = Source::Hf {
        parts,
        heads,
        offset,
    };
    Ok((stream_tensor(&gguf, dims, out_ty), source))
}

fn stream_tensor(name: &str, dims: Vec<u64>, ty: GgmlType) -> StreamedTensor {
    StreamedTensor {
        name: name.to_string(),
        dims,
        ty,
    }
}

/// The bytes of one output tensor, rows converted in parallel.
pub fn tensor_bytes(
    ck: &HfCheckpoint,
    t: &StreamedTensor,
    source: &Source,
) -> Result<Vec<u8>, ModelError> {
    let (parts, heads, offset) = match source {
        Source::Values(v) => return Ok(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        Source::Hf {
            parts,
            heads,
            offset,
        } => (parts, *heads, *offset),
    };
    let cols = t.dims[0] as usize;
    let rows = t.dims.get(1).copied().unwrap_or(1) as usize;
    let dst_row = t.ty.bytes_for(cols as u64).unwrap_or(0) as usize;
    if dst_row == 0 {
        return Err(ModelError::BadTensor {
            name: t.name.clone(),
            reason: format!("rows of {cols} values cannot be stored as {}", t.ty),
        });
    }
    let mut out = vec![0u8; parts.len() * rows * dst_row];
    for ((hf, entry), dst) in parts.iter().zip(out.chunks_mut(rows * dst_row)) {
        let part = Part {
            src: ck.tensors.folder.bytes(entry),
            entry,
            rows,
            cols,
            heads,
            offset,
        };
        part.convert(t.ty, dst)
            .map_err(|reason| ModelError::BadTensor {
                name: hf.clone(),
                reason,
            })?;
    }
    Ok(out)
}

/// One checkpoint tensor being converted.
struct Part<'a> {
    src: &'a [u8],
    entry: &'a TensorEntry,
    /// `[rows, cols]` (a vector: one row).
    rows: usize,
    cols: usize,
    heads: Option<usize>,
    offset: f32,
}

impl Part<'_> {
    /// Converts the rows into `out` (`rows` rows of type `ty`).
    fn convert(&self, ty: GgmlType, out: &mut [u8]) -> Result<(), String> {
        let src_ty = ggml_type(self.entry.dtype).ok_or_else(|| {
            format!(
                "dtype {:?} is not supported (F32, F16, BF16)",
                self.entry.dtype
            )
        })?;
        let (mut rows, mut cols) = (self.rows, self.cols);
        // A vector's "rows" are its elements when it is a permuted bias.
        if rows == 1 && self.heads.is_some() {
            (rows, cols) = (cols, 1);
        }
        let src_row = self.src.len() / rows;
        let dst_row = out.len() / rows;
        let perm = |r: usize| match self.heads {
            Some(h) => permuted_row(r, rows, h),
            None => r,
        };
        out.par_chunks_mut(dst_row)
            .enumerate()
            .try_for_each_init(
                || vec![0f32; cols],
                |tmp, (r, o)| {
                    let s = perm(r);
                    let src = &self.src[s * src_row..(s + 1) * src_row];
                    hearth_quant::dequantize_row(src_ty, src, tmp)?;
                    if self.offset != 0.0 {
                        tmp.iter_mut().for_each(|v| *v += self.offset);
                    }
                    hearth_quant::quantize_row(ty, tmp, o)
                },
            )
            .map_err(|e| e.to_string())
    }
}

/// The HF row that lands at row `r` of a Q / K matrix of `rows` rows over `n_heads` heads:
/// llama.cpp's converter turns each head's `[2, head_dim / 2]` rotate-half halves into
/// `[head_dim / 2, 2]` adjacent pairs.
fn permuted_row(r: usize, rows: usize, n_heads: usize) -> usize {
    let head_dim = rows / n_heads;
    let half = head_dim / 2;
    let (h, i) = (r / head_dim, r % head_dim);
    // Output [h, i / 2, i % 2] comes from input [h, i % 2, i / 2].
    h * head_dim + (i % 2) * half + i / 2
}

#[cfg(test)]
mod tests {
    use super::permuted_row;

    #[test]
    fn rows_of_a_head_interleave_its_two_halves() {
        // One head of 8: HF rows [0 1 2 3 | 4 5 6 7] become [0 4 1 5 2 6 3 7].
        let got: Vec<usize> = (0..8).map(|r| permuted_row(r, 8, 1)).collect();
        assert_eq!(got, [0, 4, 1, 5, 2, 6, 3, 7]);
        // The second of two heads keeps to its own rows.
        assert_eq!(permuted_row(9, 16, 2), 12);
    }
}
