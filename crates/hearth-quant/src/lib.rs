//! GGML tensor types: block layouts, reference dequantization and fast dot-product kernels.
//!
//! - [`blocks`]: `#[repr(C)]` block structs, byte-exact with GGUF files.
//! - [`dequantize_row`]: scalar reference dequantization, bit-exact with ggml.
//! - [`quantize_row_q8_0`] and friends: activation quantization, rounding as ggml does.
//! - [`quantize_row`], [`choose_types`], [`convert_tensors`]: weight quantization with the bytes
//!   and per-tensor type mixes of llama.cpp's `llama-quantize`.
//! - [`vec_dot`]: one weight row · one activation row, with AVX2 / AVX-512 VNNI kernels picked
//!   at run time and scalar references ([`dot::scalar`]) everywhere else.
//! - [`mlx_matmul`]: MLX affine group-quantized weights (4/8 bits), kept packed.
//! - [`matmul`]: the engine's entry point, quantizing activations once and splitting rows over
//!   the current rayon pool.

pub mod blocks;
mod cpu;
mod dequant;
pub mod dot;
mod error;
mod f16_conv;
mod matmul;
mod mlx;
mod quantize;
mod quantize_act;
#[cfg(target_arch = "x86_64")]
mod quantize_simd;
mod types;

pub use cpu::{amx_usable, kernel_level, KernelLevel};
pub use dequant::{dequantize_row, supports_dequantize};
pub use dot::{vec_dot, vec_dot_reference, vec_dot_type};
pub use error::QuantError;
pub use f16_conv::{f16_to_f32_slice, f32_to_f16_slice};
pub use matmul::{dequantize_rows, matmul, matmul_activation_type, supports_matmul, WeightMatrix};
pub use mlx::{mlx_matmul, MlxMatrix, MlxSpec};
pub use quantize::{
    choose_types, convert_tensor, convert_tensors, is_quantizable, llama_tensor_order,
    quantize_row, supports_quantize, MixError, ModelShape, Preset, TensorJob, TensorSpec,
    TypeChoice, QUANTIZATION_VERSION,
};
pub use quantize_act::{
    quantize_activations, quantize_row_q8_0, quantize_row_q8_1, quantize_row_q8_k,
};
pub use types::GgmlType;

/// The dot-kernel family this CPU uses: `"avx512-vnni"`, `"avx2"` or `"scalar"`.
pub fn kernel_name() -> &'static str {
    kernel_level().name()
}

#[cfg(test)]
mod matmul_invariance_tests;
#[cfg(test)]
mod matmul_tests;
