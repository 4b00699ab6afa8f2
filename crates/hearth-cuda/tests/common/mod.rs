//! What the backend-level GPU tests share.

use std::io::Write;

use hearth_cuda::{probe, CudaBackend};

/// The CUDA backend on GPU 0, or None after printing why the test is skipped (written to the
/// stderr handle, which the test harness does not capture: CI's log must show the skip).
pub fn gpu() -> Option<CudaBackend> {
    if let Err(e) = probe() {
        let _ = writeln!(std::io::stderr(), "skipped: {e}");
        return None;
    }
    Some(CudaBackend::open(0).expect("the GPU probed fine but could not be opened"))
}
