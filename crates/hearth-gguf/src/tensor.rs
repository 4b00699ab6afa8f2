//! Tensor descriptors from the tensor-info section.

use hearth_quant::GgmlType;

/// One tensor of a GGUF file: name, shape, element type and where its bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in GGML order: `dims[0]` is the row length (ne0), the fastest-varying one.
    /// Between 1 and 4 entries, each nonzero.
    pub dims: Vec<u64>,
    /// The element type.
    pub ty: GgmlType,
    /// Offset of the first byte relative to the start of the data section; a multiple of the
    /// file's alignment.
    pub offset: u64,
    /// Size of the tensor's data in bytes.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Number of elements (the product of the dimensions). For a tensor read from a file this
    /// never overflows (checked at parse time); for a hand-built one it saturates at `u64::MAX`.
    pub fn n_elements(&self) -> u64 {
        self.dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// Elements in one row (`dims[0]`).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(0)
    }

    /// Number of rows (the product of all dimensions but the first).
    pub fn n_rows(&self) -> u64 {
        match self.row_len() {
            0 => 0,
            row_len => self.n_elements() / row_len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        let t = TensorInfo {
            name: "w".into(),
            dims: vec![64, 3, 2],
            ty: GgmlType::Q8_0,
            offset: 0,
            n_bytes: 6 * 2 * 34,
        };
        assert_eq!(t.n_elements(), 384);
        assert_eq!(t.row_len(), 64);
        assert_eq!(t.n_rows(), 6);
    }
}
