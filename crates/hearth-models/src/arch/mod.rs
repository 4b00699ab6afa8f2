//! One file per architecture: how its GGUF metadata becomes a [`crate::DecoderConfig`].

pub mod gemma;
pub mod gemma2;
pub mod gemma3;
pub mod llama;
pub mod mistral;
pub mod mixtral;
pub mod phi3;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3moe;

use hearth_gguf::{GgufFile, Metadata, Value};

use crate::{LayerKind, ModelError};

/// The vocabulary size, taken from the embedding table (the metadata key is optional).
pub(crate) fn n_vocab(file: &GgufFile) -> Result<usize, ModelError> {
    let name = "token_embd.weight";
    let t = file
        .tensor(name)
        .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
    match t.dims.as_slice() {
        [_, v] if *v > 0 => Ok(*v as usize),
        d => Err(ModelError::BadTensor {
            name: name.into(),
            reason: format!("shape {d:?} is not [n_embd, n_vocab]"),
        }),
    }
}

/// Vector `name` of `len` values widened to f32, or `None` when the file has no such tensor.
pub(crate) fn vector_f32(
    file: &GgufFile,
    name: &str,
    len: usize,
) -> Result<Option<Vec<f32>>, ModelError> {
    let Some(info) = file.tensor(name) else {
        return Ok(None);
    };
    let bad = |reason: String| ModelError::BadTensor {
        name: name.into(),
        reason,
    };
    if info.n_elements() != len as u64 {
        return Err(bad(format!("{} values, expected {len}", info.n_elements())));
    }
    let mut out = vec![0.0; len];
    hearth_quant::dequantize_row(info.ty, file.tensor_data(info), &mut out)
        .map_err(|e| bad(e.to_string()))?;
    Ok(Some(out))
}

/// The layer kinds of a file whose architecture has a fixed sliding-window layout in llama.cpp
/// (every `pattern`-th layer global, the others sliding), unless
/// `{arch}.attention.sliding_window_pattern` lists them (one bool per layer, true: sliding),
/// which `hearth convert` writes where a checkpoint's `layer_types` differ from that layout.
pub(crate) fn sliding_layers(
    meta: &Metadata,
    arch: &str,
    n_layers: usize,
    pattern: usize,
) -> Result<Vec<LayerKind>, ModelError> {
    let key = format!("{arch}.attention.sliding_window_pattern");
    let Some(value) = meta.get(&key) else {
        return Ok((0..n_layers)
            .map(|il| {
                if il % pattern < pattern - 1 {
                    LayerKind::Sliding
                } else {
                    LayerKind::Global
                }
            })
            .collect());
    };
    let bad = |reason: String| ModelError::BadConfig {
        key: key.clone(),
        reason,
    };
    let items = value
        .as_array()
        .ok_or_else(|| bad(format!("is {value}, expected a list of booleans")))?;
    if items.len() != n_layers {
        return Err(bad(format!(
            "has {} entries for {n_layers} layers",
            items.len()
        )));
    }
    items
        .iter()
        .map(|v| match v {
            Value::Bool(true) => Ok(LayerKind::Sliding),
            Value::Bool(false) => Ok(LayerKind::Global),
            other => Err(bad(format!("holds {other}, expected booleans"))),
        })
        .collect()
}

/// `{arch}.attention.scale` (what multiplies q·k) when the file sets it: llama.cpp derives
/// Gemma's from the head size, and `hearth convert` writes the key where a checkpoint's
/// `query_pre_attn_scalar` says otherwise.
pub(crate) fn attention_scale(meta: &Metadata, arch: &str) -> Result<Option<f32>, ModelError> {
    let key = format!("{arch}.attention.scale");
    match meta.get_f32(&key)? {
        Some(s) if s > 0.0 && s.is_finite() => Ok(Some(s)),
        Some(s) => Err(ModelError::BadConfig {
            key,
            reason: format!("{s} must be positive"),
        }),
        None => Ok(None),
    }
}
