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
    /// Expert `expert` of `name`, a stack of `n_expert` `[rows, cols]` matrices (llama.cpp's
    /// `blk.0.ffn_up_exps.weight`), as a weight of its own: a view of its rows in the stored
    /// type, not a copy.
    fn expert(
        &self,
        name: &str,
        expert: usize,
        n_expert: usize,
        rows: usize,
        cols: usize,
    ) -> Result<HostWeight, ModelError>;
}

/// The bytes of one tensor of a memory-mapped GGUF file (or of a range of its bytes: one
/// expert of a stacked expert tensor); keeps the file mapped while alive.
pub struct GgufTensorBytes {
    file: Arc<GgufFile>,
    index: usize,
    /// `None`: the whole tensor.
    range: Option<std::ops::Range<usize>>,
}

impl ByteSource for GgufTensorBytes {
    fn bytes(&self) -> &[u8] {
        let all = self.file.tensor_data(&self.file.tensors()[self.index]);
        match &self.range {
            Some(r) => all.get(r.clone()).unwrap_or(&[]),
            None => all,
        }
    }
}

/// The name of expert `expert` of stacked tensor `name` in files that store experts one by
/// one: `blk.0.ffn_up_exps.weight` → `blk.0.ffn_up.3.weight`.
fn split_expert_name(name: &str, expert: usize) -> Option<String> {
    let stem = name.strip_suffix("_exps.weight")?;
    Some(format!("{stem}.{expert}.weight"))
}

/// The index of tensor `name` in `file`.
fn tensor_index(file: &GgufFile, name: &str) -> Result<usize, ModelError> {
    file.tensors()
        .iter()
        .position(|t| t.name == name)
        .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
}

/// A byte range of another tensor's bytes (some rows of a fused matrix).
struct RowSlice {
    whole: Arc<dyn ByteSource>,
    start: usize,
    len: usize,
}

impl ByteSource for RowSlice {
    fn bytes(&self) -> &[u8] {
        &self.whole.bytes()[self.start..self.start + self.len]
    }
}

impl TensorSource for Arc<GgufFile> {
    fn host(&self, name: &str, rows: usize, cols: usize) -> Result<HostWeight, ModelError> {
        let index = tensor_index(self, name)?;
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
                range: None,
            }),
            mlx: None,
        })
    }

    fn contains(&self, name: &str) -> bool {
        self.tensor(name).is_some()
    }

    fn expert(
        &self,
        name: &str,
        expert: usize,
        n_expert: usize,
        rows: usize,
        cols: usize,
    ) -> Result<HostWeight, ModelError> {
        let index = match tensor_index(self, name) {
            Ok(i) => i,
            // NOTE: GGUF files converted before llama.cpp stacked the experts (early Mixtral
            // files) store each as `blk.N.ffn_gate.E.weight`.
            Err(missing) => match split_expert_name(name, expert) {
                Some(one) if self.tensor(&one).is_some() => return self.host(&one, rows, cols),
                _ => return Err(missing),
            },
        };
        let info = &self.tensors()[index];
        let bad = |reason: String| ModelError::BadTensor {
            name: name.to_string(),
            reason,
        };
        // GGUF lists dimensions fastest first: [cols, rows, n_expert].
        let want = [cols as u64, rows as u64, n_expert as u64];
        if info.dims != want {
            return Err(bad(format!("shape {:?}, expected {want:?}", info.dims)));
        }
        let row_bytes = info.ty.bytes_for(cols as u64).ok_or_else(|| {
            bad(format!(
                "{cols} columns is not a whole number of {} blocks",
                info.ty
            ))
        })? as usize;
        // NOTE: each expert is `rows` whole rows, so its bytes are one contiguous range and the
        // backend runs it in its stored (possibly quantized) type like any other weight.
        let size = rows * row_bytes;
        Ok(HostWeight {
            name: format!("{name}[{expert}]"),
            ty: info.ty,
            rows,
            cols,
            data: Arc::new(GgufTensorBytes {
                file: self.clone(),
                index,
                range: Some(expert * size..(expert + 1) * size),
            }),
            mlx: None,
        })
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

    /// Expert `expert` of the stacked expert tensor `name` (see [`TensorSource::expert`]),
    /// prepared by the backend.
    pub fn load_expert(
        &self,
        name: &str,
        expert: usize,
        n_expert: usize,
        rows: usize,
        cols: usize,
    ) -> Result<B::Weight, ModelError> {
        let host = self.source.expert(name, expert, n_expert, rows, cols)?;
        Ok(self.backend.load_weight(host)?)
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

    /// Weights that multiply the same input (see [`Backend::load_weight_group`]), from their
    /// host views ([`Self::host`], [`Self::host_rows`]).
    pub fn load_group<const N: usize>(
        &self,
        hosts: [HostWeight; N],
    ) -> Result<[B::Weight; N], ModelError> {
        let loaded = self.backend.load_weight_group(hosts.into())?;
        let n = loaded.len();
        loaded.try_into().map_err(|_| ModelError::BadTensor {
            name: "weight group".into(),
            reason: format!("the backend returned {n} weights for {N}"),
        })
    }

    /// The host view of rows `rows` of tensor `name` (`[n_rows, cols]` in all): one part of a
    /// fused matrix, a view of the stored bytes, not a copy.
    pub fn host_rows(
        &self,
        name: &str,
        n_rows: usize,
        cols: usize,
        rows: std::ops::Range<usize>,
    ) -> Result<HostWeight, ModelError> {
        let w = self.host(name, n_rows, cols)?;
        let bad = |reason: String| ModelError::BadTensor {
            name: name.to_string(),
            reason,
        };
        if w.mlx.is_some() {
            return Err(bad(
                "a fused MLX-quantized matrix cannot be split yet; not supported".into(),
            ));
        }
        if rows.end > n_rows || rows.is_empty() || !cols.is_multiple_of(w.ty.block_size()) {
            return Err(bad(format!(
                "cannot take rows {rows:?} of [{n_rows}, {cols}]"
            )));
        }
        let row_bytes = cols / w.ty.block_size() * w.ty.type_size();
        let part = HostWeight {
            name: format!("{name}[{}..{}]", rows.start, rows.end),
            ty: w.ty,
            rows: rows.len(),
            cols,
            data: Arc::new(RowSlice {
                whole: w.data,
                start: rows.start * row_bytes,
                len: rows.len() * row_bytes,
            }),
            mlx: None,
        };
        Ok(part)
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
