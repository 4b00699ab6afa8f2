//! Weights as they come from a file, before a backend prepares them.

use std::sync::Arc;

use hearth_quant::GgmlType;

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
}

impl std::fmt::Debug for HostWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} [{}, {}]",
            self.name, self.ty, self.rows, self.cols
        )
    }
}
