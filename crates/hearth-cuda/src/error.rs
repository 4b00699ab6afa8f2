//! Errors of the CUDA backend.

use hearth_quant::GgmlType;

use crate::CudaUnavailable;

/// Anything that can go wrong once a GPU is being used.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// No usable GPU (see [`CudaUnavailable`]).
    #[error(transparent)]
    Unavailable(#[from] CudaUnavailable),
    /// A driver call failed.
    #[error("CUDA driver call failed during {during}: {message}")]
    Driver {
        during: &'static str,
        message: String,
    },
    /// NVRTC could not compile the kernels.
    #[error("CUDA kernel compilation failed: {0}")]
    Compile(String),
    /// Operands do not fit the operation.
    #[error("{op}: {message}")]
    Shape { op: &'static str, message: String },
    /// The operation has no kernel for this weight type.
    #[error("{op} has no CUDA kernel for {ty}")]
    Unsupported { op: &'static str, ty: GgmlType },
}

/// Maps a driver error to [`CudaError::Driver`] naming what was being done.
pub(crate) fn driver(during: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CudaError {
    move |e| CudaError::Driver {
        during,
        message: format!("{e:?}"),
    }
}

/// A [`CudaError::Shape`] for `op`.
pub(crate) fn shape(op: &'static str, message: impl Into<String>) -> CudaError {
    CudaError::Shape {
        op,
        message: message.into(),
    }
}
