//! One file per architecture: how its GGUF metadata becomes a [`crate::DecoderConfig`].

pub mod gemma3;
pub mod llama;
pub mod mixtral;
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
