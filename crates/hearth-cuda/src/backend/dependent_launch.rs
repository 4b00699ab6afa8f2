//! Programmatic dependent launch (Hopper and later): each kernel is queued so that it may start
//! while the one before it still runs. Its blocks start as the previous kernel's blocks leave,
//! copy their weights (which no kernel writes) while the last of those finish, then wait in
//! `await_previous_kernels` (kernels/common.cuh) for that kernel's results. A decode step is a
//! few hundred short kernels, and the gap between two of them is a large part of each.
//!
//! NOTE (H100, one call, two rounds, ordinary launches → these): Qwen3-0.6B Q8_0 tg128
//! 720/714 → 772/747 tok/s, pp512 79.4k/77.8k → 93.6k/90.5k; Llama-3.1-8B Q4_K_M tg128
//! 290.9/288.8 → 294.4/297.9, a 32-token prompt 2,103/2,118 → 2,222/2,225.
//!
//! Inside a recorded decode step the same attribute becomes a programmatic edge of the graph.

use std::ffi::c_void;

use cudarc::driver::sys;

use super::launch::Arg;
use crate::error::driver;
use crate::CudaError;

/// `HEARTH_CUDA_OVERLAP=0` launches every kernel the ordinary way (to compare).
const OVERLAP_VAR: &str = "HEARTH_CUDA_OVERLAP";

/// The most arguments one kernel takes (`decode_layers`: 29).
const MAX_ARGS: usize = 32;

/// Whether kernels are launched overlapping on a GPU of compute capability `cc`: from 9.0 on,
/// unless turned off.
pub(super) fn overlap_launches(cc: (u32, u32)) -> bool {
    cc.0 >= 9 && std::env::var(OVERLAP_VAR).map_or(true, |v| v != "0")
}

/// One kernel parameter's bytes, as the driver reads them through a pointer.
#[repr(C)]
#[derive(Clone, Copy)]
union Param {
    p: u64,
    i: i32,
    f: f32,
}

/// Queues `f` on `stream` with the programmatic stream serialization attribute.
///
/// # Safety
/// `args` must be `f`'s parameters in order with matching types, device addresses of buffers
/// sized for the launch, and `f` must call `await_previous_kernels` before it reads what an
/// earlier kernel wrote or writes anything.
pub(super) unsafe fn launch_overlapping(
    f: sys::CUfunction,
    stream: sys::CUstream,
    grid: (u32, u32),
    threads: u32,
    shared_bytes: u32,
    args: &[Arg],
) -> Result<(), CudaError> {
    // SAFETY: an all-zero attribute is a valid value of this plain C union.
    let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    launch_with(f, stream, grid, threads, shared_bytes, args, attr)
}

/// Queues `f` on `stream` as a cooperative launch: the driver refuses it unless every block
/// of the grid can be resident at once, which kernels that wait for each other need.
///
/// # Safety
/// As [`launch_overlapping`], with `shared_bytes` of dynamic shared memory allowed for `f`.
pub(super) unsafe fn launch_cooperative(
    f: sys::CUfunction,
    stream: sys::CUstream,
    blocks: u32,
    threads: u32,
    shared_bytes: u32,
    args: &[Arg],
) -> Result<(), CudaError> {
    // SAFETY: an all-zero attribute is a valid value of this plain C union.
    let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attr.value.cooperative = 1;
    launch_with(f, stream, (blocks, 1), threads, shared_bytes, args, attr)
}

unsafe fn launch_with(
    f: sys::CUfunction,
    stream: sys::CUstream,
    grid: (u32, u32),
    threads: u32,
    shared_bytes: u32,
    args: &[Arg],
    mut attr: sys::CUlaunchAttribute,
) -> Result<(), CudaError> {
    if args.len() > MAX_ARGS {
        return Err(CudaError::Driver {
            during: "kernel launch",
            message: format!("{} arguments, at most {MAX_ARGS} supported", args.len()),
        });
    }
    let mut params = [Param { p: 0 }; MAX_ARGS];
    for (slot, a) in params.iter_mut().zip(args) {
        *slot = match *a {
            Arg::P(p) => Param { p },
            Arg::I(i) => Param { i },
            Arg::F(f) => Param { f },
        };
    }
    let mut pointers = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
    for (ptr, slot) in pointers.iter_mut().zip(params.iter_mut()) {
        *ptr = slot as *mut Param as *mut c_void;
    }
    let config = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: 1,
        blockDimX: threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: shared_bytes,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    sys::cuLaunchKernelEx(&config, f, pointers.as_mut_ptr(), std::ptr::null_mut())
        .result()
        .map_err(driver("kernel launch"))
}
