//! Turning stored tensors into backend weights, with their shapes checked.
//!
//! A [`TensorSource`] answers for tensors under the names llama.cpp's GGUF files use
//! (`blk.0.attn_q.weight`); a GGUF file is one source, a Hugging Face safetensors folder (which
//! maps those names to its own) another. The decoder only ever sees a [`TensorLoader`].

use std::sync::Arc;

use hearth_backend::{Backend, ByteSource, HostWeight};
use hearth_gguf::GgufFile;

use crate::ModelError;

/// Where a model's tensors come from.
pub trait TensorSource: Send + Sync {
    /// The host view of tensor `name`, checked to be `[rows, cols]` (`cols` contiguous).
    fn host(&self, name: &str, rows: usize, cols: usize) -> Result<HostWeight, ModelError>;
    /// Whether the source has tensor `name` (or must have it: a source may answer `true` for
    /// a tensor its config requires, so that loading it names the missing tensor).
    fn contains(&self, name: &str) -> bool;
}

/// The bytes of one tensor of a memory-mapped GGUF file; keeps the file mapped while alive.
pub struct GgufTensorBytes {
    file: Arc<GgufFile>,
    index: usize,
}

impl ByteSource for GgufTensorBytes {
    fn bytes(&self) -> &[u8] {
        self.file.tensor_data(&self.file.tensors()[self.index])
    }
}

impl TensorSource for Arc<GgufFile> {
    fn host(&self, name: &str, rows: usize, cols: usize) -> Result<HostWeight, ModelError> {
        let index = self
            .tensors()
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let info = &self.tensors()[index];
        let dims: Vec<u64> = info.dims.clone();
        let want: Vec<u64> = if rows == 1 {
            vec![cols as u64]
        } else {
            vec![cols as u64, rows as u64]
        };
        // NOTE: trailing dimensions of 1 are allowed (some writers store vectors as [n, 1]).
        let mut trimmed = dims.clone();
        while trimmed.len() > want.len() && trimmed.last() == Some(&1) {
            trimmed.pop();
        }
        if trimmed != want {
            return Err(ModelError::BadTensor {
                name: name.to_string(),
                reason: format!("shape {dims:?}, expected {want:?}"),
            });
        }
        Ok(HostWeight {
            name: name.to_string(),
            ty: info.ty,
            rows,
            cols,
            data: Arc::new(GgufTensorBytes {
                file: self.clone(),
                index,
            }),
            mlx: None,
        })
    }

    fn contains(&self, name: &str) -> bool {
        self.tensor(name).is_some()
    }
}

/// Looks tensors up by name and hands them to a backend.
pub struct TensorLoader<'b, B: Backend> {
    source: Arc<dyn TensorSource>,
    backend: &'b B,
}

impl<'b, B: Backend> TensorLoader<'b, B> {
    /// A loader over the tensors of a GGUF file.
    pub fn new(file: Arc<GgufFile>, backend: &'b B) -> Self {
        Self::from_source(Arc::new(file), backend)
    }

    /// A loader over any tensor source.
    pub fn from_source(source: Arc<dyn TensorSource>, backend: &'b B) -> Self {
        Self { source, backend }
    }

    /// The host view of tensor `name`, checked to be `[rows, cols]` (`cols` contiguous).
    pub fn host(&self, name: &str, rows: usize, cols: usize) -> Result<HostWeight, ModelError> {
        self.source.host(name, rows, cols)
    }

    /// Tensor `name` prepared by the backend.
    pub fn load(&self, name: &str, rows: usize, cols: usize) -> Result<B::Weight, ModelError> {
        Ok(self.backend.load_weight(self.host(name, rows, cols)?)?)
    }

    /// Vector `name` of length `len`, widened to f32 on the host (small tensors such as
    /// biases, which the decoder adds itself).
    pub fn vector_f32(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        let w = self.host(name, 1, len)?;
        let mut out = vec![0.0; len];
        hearth_quant::dequantize_row(w.ty, w.data.bytes(), &mut out).map_err(|e| {
            ModelError::BadTensor {
                name: w.name.clone(),
                reason: e.to_string(),
            }
        })?;
        Ok(out)
    }

    /// Like [`Self::load`], but `None` when the source has no such tensor.
    pub fn load_optional(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Option<B::Weight>, ModelError> {
        if !self.source.contains(name) {
            return Ok(None);
        }
        self.load(name, rows, cols).map(Some)
    }
}
