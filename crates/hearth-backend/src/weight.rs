//! Weights as they come from a file, before a backend prepares them.

use std::sync::Arc;

use hearth_quant::{GgmlType, MlxSpec};

/// Something that owns the bytes of a tensor (a memory-mapped file, a buffer).
///
/// NOTE: a trait object rather than a lifetime keeps models free of borrow plumbing: the weight
/// holds an `Arc` of its file, and the mapping lives as long as any weight needs it.
pub trait ByteSource: Send + Sync {
    fn bytes(&self) -> &[u8];
}

impl ByteSource for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// A tensor on the host: its name (for errors), element type, shape and bytes.
#[derive(Clone)]
pub struct HostWeight {
    pub name: String,
    pub ty: GgmlType,
    /// `[rows, cols]`; a vector is `[1, n]`. `cols` is the contiguous dimension (GGUF `ne0`).
    pub rows: usize,
    pub cols: usize,
    pub data: Arc<dyn ByteSource>,
    /// Set when the weight is MLX affine-quantized: `data` then holds the packed u32 words and
    /// `ty` is [`GgmlType::I32`] (what those words are); the groups' scales and biases live here.
    pub mlx: Option<MlxGroups>,
}

/// Scales and biases of an MLX affine-quantized weight (see [`hearth_quant::MlxMatrix`]).
#[derive(Clone)]
pub struct MlxGroups {
    pub spec: MlxSpec,
    /// `[rows, cols / group_size]` of `spec.scale_ty`.
    pub scales: Arc<dyn ByteSource>,
    /// Same shape and type as `scales`.
    pub biases: Arc<dyn ByteSource>,
}

impl MlxGroups {
    /// The matrix view of weight bytes `packed` with these groups.
    pub fn matrix<'a>(
        &'a self,
        packed: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<hearth_quant::MlxMatrix<'a>, String> {
        hearth_quant::MlxMatrix::new(
            self.spec,
            packed,
            self.scales.bytes(),
            self.biases.bytes(),
            rows,
            cols,
        )
    }
}

impl std::fmt::Debug for HostWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.mlx {
            Some(m) => write!(
                f,
                "{} MLX {}-bit g{} [{}, {}]",
                self.name, m.spec.bits, m.spec.group_size, self.rows, self.cols
            ),
            None => write!(
                f,
                "{} {} [{}, {}]",
                self.name, self.ty, self.rows, self.cols
            ),
        }
    }
}
