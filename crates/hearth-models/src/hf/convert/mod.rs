//! A Hugging Face checkpoint folder to a GGUF file with the tensor names, metadata keys and
//! Q/K row order llama.cpp's `convert_hf_to_gguf.py` writes, so llama.cpp loads it too.
//!
//! The file is streamed: the header first (every tensor's type and shape is known up front),
//! then one tensor at a time, its rows converted in parallel on the current rayon pool.

use std::path::Path;

use hearth_gguf::{GgufWriter, StreamedTensor, Value};
use hearth_quant::GgmlType;
use rayon::prelude::*;

use super::safetensors::{ggml_type, TensorEntry};
use super::{gguf_vocab, hf_name, HfCheckpoint};
use crate::ModelError;

/// How one HF architecture becomes a GGUF one; a new family adds a row to [`CONVERT_ARCHS`].
pub struct ConvertArch {
    /// HF `architectures[0]`.
    pub hf: &'static str,
    /// GGUF `general.architecture`.
    pub gguf: &'static str,
    /// llama.cpp runs this family with adjacent-pair ("normal") rope, so its converter
    /// reorders the rows of each Q / K head from HF's rotate-half layout.
    pub permute_qk: bool,
    /// `tokenizer.ggml.pre` for its byte-level BPE tokenizer.
    pub pre: &'static str,
}

/// Every architecture `hearth convert` writes.
pub const CONVERT_ARCHS: &[ConvertArch] = &[
    ConvertArch {
        hf: "LlamaForCausalLM",
        gguf: "llama",
        permute_qk: true,
        pre: "llama-bpe",
    },
    ConvertArch {
        hf: "Qwen2ForCausalLM",
        gguf: "qwen2",
        permute_qk: false,
        pre: "qwen2",
    },
    ConvertArch {
        hf: "Qwen3ForCausalLM",
        gguf: "qwen3",
        permute_qk: false,
        pre: "qwen2",
    },
];

/// Per-layer tensors in the order llama.cpp writes them (GGUF name without `blk.N.`).
const LAYER_TENSORS: [&str; 11] = [
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "attn_q_norm",
    "attn_k_norm",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

/// What a finished conversion wrote.
#[derive(Debug)]
pub struct ConvertSummary {
    pub arch: &'static str,
    pub n_tensors: usize,
    pub n_bytes: u64,
}

/// Where one output tensor comes from.
enum Source {
    /// A checkpoint tensor; `heads` set: permute its rows over that many heads.
    Hf {
        entry: TensorEntry,
        hf: String,
        heads: Option<usize>,
    },
    /// Values computed here (`rope_freqs.weight`).
    Values(Vec<f32>),
}

/// `general.file_type` of an output type (llama.cpp's `LLAMA_FTYPE_*`).
fn file_type(ty: GgmlType) -> Result<u32, ModelError> {
    match ty {
        GgmlType::F32 => Ok(0),
        GgmlType::F16 => Ok(1),
        GgmlType::Q8_0 => Ok(7),
        GgmlType::BF16 => Ok(32),
        other => Err(ModelError::BadConfig {
            key: "--type".into(),
            reason: format!("{other} is not an output type of convert (f32, f16, bf16, q8_0)"),
        }),
    }
}

/// Converts folder `dir` to GGUF file `out`, matrices as `ty` (F32, F16, BF16 or Q8_0;
/// vectors stay F32 and Q8_0 falls back to F16 for rows that are not whole blocks, as
/// llama.cpp's converter does).
pub fn convert_folder(dir: &Path, out: &Path, ty: GgmlType) -> Result<ConvertSummary, ModelError> {
    let file_type = file_type(ty)?;
    let ck = HfCheckpoint::open(dir)?;
    let arch = CONVERT_ARCHS
        .iter()
        .find(|a| a.hf == ck.hf_arch)
        .ok_or_else(|| {
            let names: Vec<&str> = CONVERT_ARCHS.iter().map(|a| a.hf).collect();
            ModelError::UnknownArchitecture(ck.hf_arch.clone(), names.join(", "))
        })?;
    if ck.tensors.quant.is_some() {
        return Err(ModelError::BadFile {
            path: dir.join("config.json"),
            reason: "converting MLX-quantized checkpoints is not supported yet".into(),
        });
    }
    let mut w = GgufWriter::new();
    add_hparams(&mut w, &ck, arch, file_type, dir)?;
    gguf_vocab::add_tokenizer(&mut w, dir, &ck, arch.pre)?;
    let plan = tensor_plan(&ck, arch, ty)?;
    let heads: Vec<StreamedTensor> = plan.iter().map(|(t, _)| t.clone()).collect();
    let mut stream = w.start_stream(out, &heads)?;
    let mut n_bytes = 0;
    for (t, source) in &plan {
        let data = tensor_bytes(&ck, t, source)?;
        n_bytes += data.len() as u64;
        stream.write_tensor(&data)?;
    }
    stream.finish()?;
    Ok(ConvertSummary {
        arch: arch.gguf,
        n_tensors: plan.len(),
        n_bytes,
    })
}

/// `general.*` and `{arch}.*` keys.
fn add_hparams(
    w: &mut GgufWriter,
    ck: &HfCheckpoint,
    arch: &ConvertArch,
    file_type: u32,
    dir: &Path,
) -> Result<(), ModelError> {
    let c = &ck.config;
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into());
    let a = arch.gguf;
    let u = |n: usize| Value::U32(n as u32);
    let mut kv = vec![
        ("general.architecture".to_string(), Value::String(a.into())),
        ("general.type".into(), Value::String("model".into())),
        ("general.name".into(), Value::String(name)),
        ("general.file_type".into(), Value::U32(file_type)),
        ("general.quantization_version".into(), Value::U32(2)),
        (format!("{a}.vocab_size"), u(c.n_vocab)),
        (format!("{a}.context_length"), u(c.n_ctx_train)),
        (format!("{a}.embedding_length"), u(c.n_embd)),
        (format!("{a}.feed_forward_length"), u(c.n_ff)),
        (format!("{a}.block_count"), u(c.n_layers)),
        (format!("{a}.attention.head_count"), u(c.n_heads)),
        (format!("{a}.attention.head_count_kv"), u(c.n_kv_heads)),
        (format!("{a}.attention.key_length"), u(c.head_dim)),
        (format!("{a}.attention.value_length"), u(c.head_dim)),
        (format!("{a}.rope.dimension_count"), u(c.rope.n_rot)),
        (format!("{a}.rope.freq_base"), Value::F32(c.rope.freq_base)),
        (
            format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(c.rms_eps),
        ),
    ];
    if c.rope.freq_scale != 1.0 {
        kv.push((
            format!("{a}.rope.scaling.type"),
            Value::String("linear".into()),
        ));
        kv.push((
            format!("{a}.rope.scaling.factor"),
            Value::F32(1.0 / c.rope.freq_scale),
        ));
    }
    for (k, v) in kv {
        w.add_kv(k, v)?;
    }
    Ok(())
}

/// Every output tensor with its source; fails on a checkpoint tensor nothing maps to.
fn tensor_plan(
    ck: &HfCheckpoint,
    arch: &ConvertArch,
    ty: GgmlType,
) -> Result<Vec<(StreamedTensor, Source)>, ModelError> {
    let c = &ck.config;
    let folder = &ck.tensors.folder;
    let mut names = vec!["token_embd.weight".to_string()];
    for layer in 0..c.n_layers {
        for t in LAYER_TENSORS {
            names.push(format!("blk.{layer}.{t}.weight"));
            names.push(format!("blk.{layer}.{t}.bias"));
        }
    }
    names.push("output_norm.weight".into());
    names.push("output.weight".into());
    let mut plan = Vec::new();
    if !c.rope.freq_factors.is_empty() {
        let n = c.rope.freq_factors.len() as u64;
        let t = stream_tensor("rope_freqs.weight", vec![n], GgmlType::F32);
        plan.push((t, Source::Values(c.rope.freq_factors.clone())));
    }
    let mut used = std::collections::BTreeSet::new();
    for gguf in names {
        let Some(hf) = hf_name(&gguf, c.post_norms, c.fused_projections) else {
            continue;
        };
        let Some(entry) = folder.get(&hf) else {
            continue;
        };
        used.insert(hf.clone());
        let dims: Vec<u64> = entry.shape.iter().rev().map(|&d| d as u64).collect();
        let out_ty = match dims.as_slice() {
            [_] => GgmlType::F32,
            [cols, _] if ty == GgmlType::Q8_0 && cols % 32 != 0 => GgmlType::F16,
            [_, _] => ty,
            _ => {
                return Err(ModelError::BadTensor {
                    name: hf,
                    reason: format!("shape {:?}: expected a vector or a matrix", entry.shape),
                })
            }
        };
        let heads = match gguf.split('.').nth(2) {
            Some("attn_q") if arch.permute_qk => Some(c.n_heads),
            Some("attn_k") if arch.permute_qk => Some(c.n_kv_heads),
            _ => None,
        };
        let entry = entry.clone();
        plan.push((
            stream_tensor(&gguf, dims, out_ty),
            Source::Hf { entry, hf, heads },
        ));
    }
    if let Some(left) = folder.names().into_iter().find(|n| !used.contains(*n)) {
        return Err(ModelError::BadTensor {
            name: left.to_string(),
            reason: "has no GGUF name for this architecture; converting it is not supported".into(),
        });
    }
    Ok(plan)
}

fn stream_tensor(name: &str, dims: Vec<u64>, ty: GgmlType) -> StreamedTensor {
    StreamedTensor {
        name: name.to_string(),
        dims,
        ty,
    }
}

/// The bytes of one output tensor, rows converted in parallel.
fn tensor_bytes(
    ck: &HfCheckpoint,
    t: &StreamedTensor,
    source: &Source,
) -> Result<Vec<u8>, ModelError> {
    let bad = |name: &str, reason: String| ModelError::BadTensor {
        name: name.to_string(),
        reason,
    };
    let (entry, hf, heads) = match source {
        Source::Values(v) => return Ok(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        Source::Hf { entry, hf, heads } => (entry, hf, *heads),
    };
    let src_ty = ggml_type(entry.dtype).ok_or_else(|| {
        bad(
            hf,
            format!("dtype {:?} is not supported (F32, F16, BF16)", entry.dtype),
        )
    })?;
    let cols = t.dims[0] as usize;
    let rows = t.dims.get(1).copied().unwrap_or(1) as usize;
    let src = ck.tensors.folder.bytes(entry);
    let src_row = src.len() / rows;
    let dst_row = t.ty.bytes_for(cols as u64).unwrap_or(0) as usize;
    let perm = |r: usize| match heads {
        Some(h) => permuted_row(r, rows, h),
        None => r,
    };
    // A vector's "rows" are its elements when it is a permuted bias.
    let (rows, cols, src_row, dst_row) = if rows == 1 && heads.is_some() {
        (cols, 1, src_row / cols, dst_row / cols)
    } else {
        (rows, cols, src_row, dst_row)
    };
    let mut out = vec![0u8; rows * dst_row];
    out.par_chunks_mut(dst_row)
        .enumerate()
        .try_for_each_init(
            || vec![0f32; cols],
            |tmp, (r, o)| {
                let s = perm(r);
                hearth_quant::dequantize_row(src_ty, &src[s * src_row..(s + 1) * src_row], tmp)?;
                hearth_quant::quantize_row(t.ty, tmp, o)
            },
        )
        .map_err(|e| bad(hf, e.to_string()))?;
    Ok(out)
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
