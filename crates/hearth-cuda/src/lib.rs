//! CUDA groundwork for hearth: finding a GPU, compiling the kernels of `kernels/*.cu` with NVRTC
//! (cached on disk), and the first kernels (fused dequantize + GEMV on GGUF blocks, RMSNorm,
//! argmax), each checked against a CPU reference.
//!
//! Every CUDA library is loaded at run time: this crate builds without a CUDA toolkit, and a
//! binary built from it runs everywhere. [`probe`] checks that the driver and NVRTC libraries
//! exist before calling into them (the bindings panic on a missing library), so without a GPU
//! the caller gets a one-line [`CudaUnavailable`] and falls back to the CPU.

mod backend;
mod cache;
mod compile;
pub mod conformance;
mod device;
mod error;
mod ops;
mod probe;
pub mod reference;

pub use backend::{mmq_takes_f16_activations, CudaBackend, CudaKvCache, CudaTensor, CudaWeight};
pub use cache::{CacheKey, CacheMiss, KernelCache};
pub use compile::{compile_cubin, nvrtc_version, KERNEL_SOURCE};
pub use device::{CudaDevice, KernelOrigin, QuantMatrix};
pub use error::CudaError;
pub use ops::{gemv_supported, Q8Activations, DEQUANT_TYPED_TYPES, GEMV_Q8A_TYPES, GEMV_TYPES};
pub use probe::{probe, probe_device, CudaUnavailable, GpuInfo};
