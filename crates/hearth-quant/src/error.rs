//! The one error type of this crate.

use crate::GgmlType;

/// Why a quantization, dequantization or matmul call was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuantError {
    /// The operation has no implementation for this tensor type.
    Unsupported { ty: GgmlType, op: &'static str },
    /// A buffer does not have the length the shape implies.
    Length {
        ty: GgmlType,
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// A row length that is not a whole number of blocks of the type.
    NotBlockMultiple { ty: GgmlType, n_elements: usize },
    /// A row index past the end of a matrix.
    RowOutOfRange {
        ty: GgmlType,
        row: usize,
        rows: usize,
    },
}

impl std::fmt::Display for QuantError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuantError::Unsupported { ty, op } => write!(f, "{op} is not supported for type {ty}"),
            QuantError::Length {
                ty,
                what,
                expected,
                got,
            } => write!(f, "{ty}: {what} has length {got}, expected {expected}"),
            QuantError::NotBlockMultiple { ty, n_elements } => write!(
                f,
                "{ty}: {n_elements} elements is not a whole number of {}-element blocks",
                ty.block_size()
            ),
            QuantError::RowOutOfRange { ty, row, rows } => {
                write!(
                    f,
                    "{ty}: row {row} is out of range for a matrix of {rows} rows"
                )
            }
        }
    }
}

impl std::error::Error for QuantError {}

/// Checks that `got == expected`, naming the buffer in the error.
pub(crate) fn check_len(
    ty: GgmlType,
    what: &'static str,
    expected: usize,
    got: usize,
) -> Result<(), QuantError> {
    if expected == got {
        Ok(())
    } else {
        Err(QuantError::Length {
            ty,
            what,
            expected,
            got,
        })
    }
}

/// The bytes `n_elements` of `ty` take, or an error when that is not a whole number of blocks.
pub(crate) fn row_bytes(ty: GgmlType, n_elements: usize) -> Result<usize, QuantError> {
    ty.bytes_for(n_elements as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or(QuantError::NotBlockMultiple { ty, n_elements })
}
