//! Turning GGUF tensors into backend weights, with their shapes checked.

use std::sync::Arc;

use hearth_backend::{Backend, ByteSource, HostWeight};
use hearth_gguf::GgufFile;

use crate::ModelError;

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

/// Looks tensors up by name and hands them to a backend.
pub struct TensorLoader<'b, B: Backend> {
    file: Arc<GgufFile>,
    backend: &'b B,
}

impl<'b, B: Backend> TensorLoader<'b, B> {
    pub fn new(file: Arc<GgufFile>, backend: &'b B) -> Self {
        Self { file, backend }
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The host view of tensor `name`, checked to be `[rows, cols]` (`cols` contiguous).
    pub fn host(&self, name: &str, rows: usize, cols: usize) -> Result<HostWeight, ModelError> {
        let index = self
            .file
            .tensors()
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let info = &self.file.tensors()[index];
        let dims: Vec<u64> = info.dims.clone();
        let want: Vec<u64> = if rows == 1 {
            vec![cols as u64]
        } else {
            vec![cols as u64, rows as u64]
        };
        // NOTE: trailing dimensions of 1 are allowed (some writers store vectors as [n, 1]).
        let trimmed: Vec<u64> = {
            let mut d = dims.clone();
            while d.len() > want.len() && d.last() == Some(&1) {
                d.pop();
            }
            d
        };
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
                file: self.file.clone(),
                index,
            }),
        })
    }

    /// Tensor `name` prepared by the backend.
    pub fn load(&self, name: &str, rows: usize, cols: usize) -> Result<B::Weight, ModelError> {
        Ok(self.backend.load_weight(self.host(name, rows, cols)?)?)
    }

    /// Like [`Self::load`], but `None` when the file has no such tensor.
    pub fn load_optional(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Option<B::Weight>, ModelError> {
        if self.file.tensor(name).is_none() {
            return Ok(None);
        }
        self.load(name, rows, cols).map(Some)
    }

    /// The dims of tensor `name` as stored.
    pub fn dims(&self, name: &str) -> Result<&[u64], ModelError> {
        self.file
            .tensor(name)
            .map(|t| t.dims.as_slice())
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
    }
}
