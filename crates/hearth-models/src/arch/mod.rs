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

use hearth_gguf::GgufFile;

use crate::ModelError;

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
