//! The wgpu backend: WGSL kernels that run through Metal on macOS and through Vulkan elsewhere
//! (Mesa's lavapipe, a software Vulkan driver, on a machine without a GPU).
//!
//! Weights stay in their GGUF block form on the device (raw blocks as `array<u32>`, in parts of
//! whole rows where one binding cannot hold them: see `weight.rs`; MLX affine weights as their
//! packed words with each row's scales and biases: see `mlx.rs`), activations are f32, the KV
//! cache is paged and stored as f16. Before a matmul with a Q8_0, Q4_0, Q5_0, Q4_K, Q5_K or
//! Q6_K weight the activations are quantized to 8-bit blocks on the device, as the CPU backend
//! does, and multiplied with integer dot products (see `int8.rs`). Dispatches are recorded
//! into one compute pass of one command encoder per batch of 64, submitted when the batch is
//! full or at a read-back (see [`recorder`]): on Metal each pass ends a command buffer, and
//! hundreds of them per token cost more than the arithmetic, while a few let the GPU start on
//! a step before the host has recorded all of it. Activation buffers are pooled (`pool.rs`) and bind groups cached,
//! so that recording a decode step costs the host little more than wgpu's own bookkeeping.
//! Whether the device's `fma` is fused is found by running it (`fma_probe.rs`).

mod argmax;
mod attention;
mod backend;
mod device;
mod fma_probe;
mod int8;
pub mod kernels;
mod mlx;
mod norm;
mod pool;
mod profile;
mod recorder;
mod top_k;
mod weight;

pub use backend::{WgpuBackend, WgpuKvCache, WgpuTensor, WgpuWeight};
pub use device::{AdapterInfo, FmaChoice};

/// Why the backend could not be opened or an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum WgpuError {
    /// No adapter, or none that can run the kernels.
    #[error("no usable wgpu adapter: {0}")]
    NoAdapter(String),
    /// The device reported an error (validation, out of memory, device lost).
    #[error("wgpu device error: {0}")]
    Device(String),
}

impl From<WgpuError> for hearth_backend::BackendError {
    fn from(e: WgpuError) -> Self {
        hearth_backend::BackendError::Device(e.to_string())
    }
}
