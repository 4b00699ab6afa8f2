//! GGML tensor types: block layouts, reference dequantization and fast dot-product kernels.

mod types;

pub use types::GgmlType;
