//! What the backend-level GPU tests share.

use std::io::Write;

use std::sync::Arc;

use hearth_backend::HostWeight;
use hearth_cuda::reference::random_weights;
use hearth_cuda::{probe, CudaBackend};
use hearth_quant::GgmlType;
use rand::Rng;

/// The CUDA backend on GPU 0, or None after printing why the test is skipped (written to the
/// stderr handle, which the test harness does not capture: CI's log must show the skip).
pub fn gpu() -> Option<CudaBackend> {
    if let Err(e) = probe() {
        let _ = writeln!(std::io::stderr(), "skipped: {e}");
        return None;
    }
    Some(CudaBackend::open(0).expect("the GPU probed fine but could not be opened"))
}

/// A random `rows` x `cols` weight of type `ty` on the host.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn random_host_weight(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    rng: &mut impl Rng,
) -> HostWeight {
    HostWeight {
        name: "w".into(),
        ty,
        rows,
        cols,
        data: Arc::new(random_weights(ty, rows, cols, rng)),
        mlx: None,
    }
}

/// Bytes of GPU memory in use (every process's, as the driver counts it).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn gpu_memory_in_use() -> usize {
    let (free, total) = cudarc::driver::result::mem_get_info().expect("cuMemGetInfo");
    total - free
}

/// Asserts that `got` holds `want`'s values bit for bit (`what` names the case).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn assert_same_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let diff = got
        .iter()
        .zip(want)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(diff, 0, "{what}: {diff} of {} values differ", got.len());
}
