//! cuBLAS, created at its first use rather than when the GPU is opened.
//!
//! Its handle and workspace hold about 100 MiB of GPU memory (68 MiB for the handle on an
//! H100), and only batches past the MMQ kernels' sizes (prompts past 128 tokens, or weights
//! MMQ does not take) multiply through it: a loaded model that has only decoded never needs
//! it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaSlice;

use super::measurement_setting;
use super::memory::{self, device_address};
use super::state::Mode;
use crate::error::driver;
use crate::{CudaDevice, CudaError};

/// cuBLAS workspace: set explicitly so that cuBLAS never allocates inside a graph recording.
/// `HEARTH_CUDA_BLAS_WORKSPACE_MIB` sets its size in MiB (at least 1), for measurements.
const BLAS_WORKSPACE: usize = 32 << 20;

fn blas_workspace_bytes() -> usize {
    measurement_setting("HEARTH_CUDA_BLAS_WORKSPACE_MIB", 1..=4096)
        .map_or(BLAS_WORKSPACE, |mib| mib << 20)
}

pub(super) struct Blas {
    pub handle: CudaBlas,
    _workspace: CudaSlice<u8>,
}

/// cuBLAS as the backend holds it: absent, not created yet, created, or failed to create.
pub(super) struct LazyBlas {
    installed: bool,
    created: OnceLock<Option<Blas>>,
    /// GPU memory its creation took.
    bytes: AtomicUsize,
}

impl LazyBlas {
    pub fn new() -> Self {
        // SAFETY: checks that the library can be loaded before the bindings touch it.
        let installed = unsafe { cudarc::cublas::sys::is_culib_present() };
        Self {
            installed,
            created: OnceLock::new(),
            bytes: AtomicUsize::new(0),
        }
    }

    /// Whether a GEMM may go through cuBLAS in a pass of `mode`: it is installed, and either
    /// created or creatable now. It is not created while a step is recorded (creating it
    /// allocates memory, which a graph capture must not do): a step is recorded only on its
    /// second sighting, so its first, eager, run created cuBLAS if the step needs it.
    pub fn usable(&self, dev: &CudaDevice, mode: Mode) -> bool {
        self.get(dev, mode).is_some()
    }

    /// The handle, created on the first call in an eager pass.
    pub fn get(&self, dev: &CudaDevice, mode: Mode) -> Option<&Blas> {
        if !self.installed {
            return None;
        }
        if let Some(b) = self.created.get() {
            return b.as_ref();
        }
        if mode != Mode::Eager {
            return None;
        }
        self.created
            .get_or_init(|| {
                let before = memory::in_use_on_gpu();
                match create(dev) {
                    Ok(b) => {
                        let bytes = memory::in_use_on_gpu().saturating_sub(before);
                        self.bytes.store(bytes, Ordering::Relaxed);
                        tracing::debug!(cublas_mib = bytes >> 20, "cuBLAS created at first use");
                        Some(b)
                    }
                    Err(e) => {
                        tracing::warn!("cuBLAS unusable, long prompts use hearth's kernels: {e}");
                        None
                    }
                }
            })
            .as_ref()
    }

    /// GPU memory cuBLAS holds: 0 before its first use.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

fn create(dev: &CudaDevice) -> Result<Blas, CudaError> {
    let stream = dev.stream();
    let handle = CudaBlas::new(stream.clone()).map_err(|e| CudaError::Driver {
        during: "cuBLAS initialization",
        message: format!("{e:?}"),
    })?;
    let workspace_bytes = blas_workspace_bytes();
    let workspace = stream
        .alloc_zeros::<u8>(workspace_bytes)
        .map_err(driver("cuBLAS workspace"))?;
    let ptr = device_address(&workspace, stream);
    // SAFETY: the workspace outlives the handle (both live in `Blas`, handle first).
    unsafe {
        cudarc::cublas::sys::cublasSetWorkspace_v2(
            *handle.handle(),
            ptr as *mut std::ffi::c_void,
            workspace_bytes,
        )
    }
    .result()
    .map_err(|e| CudaError::Driver {
        during: "cuBLAS workspace",
        message: format!("{e:?}"),
    })?;
    Ok(Blas {
        handle,
        _workspace: workspace,
    })
}
