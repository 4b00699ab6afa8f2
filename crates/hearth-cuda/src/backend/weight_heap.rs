//! GPU memory for a model's weights: one reserved range of addresses, backed by physical
//! memory as the weights arrive, so that the weights take their own bytes and not more.
//!
//! NOTE: the driver rounds every allocation of 1 MiB or more up to whole 2 MiB pages (measured
//! on an H100: 20 allocations of 2 MiB + 16 bytes took 80 MiB). One allocation per weight then
//! wasted about 1 MiB a matrix: 225 MiB of a Qwen3-0.6B's 607, where most matrices are a few
//! MiB. Here the weights lie back to back in one range of virtual addresses (the driver's
//! virtual memory management), and physical memory is mapped behind its end in the device's
//! granularity: all the weights together round up to one 2 MiB page.
//!
//! Weights are never freed one by one: a model's backend, and with it the heap, goes as a
//! whole. Each weight holds the heap (`Arc`) so that its memory outlives it.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{
    self, CUdevice_attribute, CUmemAccessDesc, CUmemAccess_flags, CUmemAllocationGranularity_flags,
    CUmemAllocationHandleType, CUmemAllocationProp, CUmemAllocationType,
    CUmemGenericAllocationHandle, CUmemLocation, CUmemLocationType,
};
use cudarc::driver::{CudaContext, CudaSlice};

use crate::CudaError;

/// Every weight starts on this boundary (the kernels' 16-byte loads; cuBLAS likes 256).
const ALIGN: u64 = 256;

/// Where a weight's bytes live.
pub(super) enum WeightMemory {
    /// In the backend's heap (kept alive by the weight).
    Heap(#[allow(dead_code)] Arc<WeightHeap>),
    /// An allocation of its own (GPUs without virtual memory management).
    Own(#[allow(dead_code)] CudaSlice<u8>),
}

pub(super) struct WeightHeap {
    ctx: Arc<CudaContext>,
    inner: Mutex<Inner>,
}

struct Inner {
    prop: CUmemAllocationProp,
    granule: usize,
    base: u64,
    reserved: usize,
    /// Bytes from `base` backed by physical memory.
    mapped: usize,
    /// Bytes from `base` handed out.
    used: usize,
    /// Physical allocations, with where they are mapped and their size.
    handles: Vec<(u64, usize, CUmemGenericAllocationHandle)>,
}

// SAFETY: `prop` holds a null pointer (win32HandleMetaData) that is never dereferenced here;
// everything else is plain data behind the mutex.
unsafe impl Send for Inner {}

fn check(r: sys::CUresult, during: &'static str) -> Result<(), CudaError> {
    r.result().map_err(|e| CudaError::Driver {
        during,
        message: format!("{e:?}"),
    })
}

impl WeightHeap {
    /// A heap on GPU `ordinal` able to hold up to `capacity` bytes, or `None` when the GPU or
    /// driver has no virtual memory management (the caller then allocates weight by weight).
    pub fn new(ctx: &Arc<CudaContext>, ordinal: usize, capacity: usize) -> Option<Arc<Self>> {
        let supported = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED)
            .unwrap_or(0);
        if supported == 0 || ctx.bind_to_thread().is_err() {
            return None;
        }
        let prop = CUmemAllocationProp {
            type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes: CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            location: CUmemLocation {
                type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: ordinal as i32,
            },
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
                compressionType: 0,
                gpuDirectRDMACapable: 0,
                usage: 0,
                reserved: [0; 4],
            },
        };
        let mut granule = 0usize;
        // SAFETY: plain queries and a reservation of addresses (no memory yet), released in
        // Drop; `prop` is fully initialized.
        unsafe {
            check(
                sys::cuMemGetAllocationGranularity(
                    &mut granule,
                    &prop,
                    CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                ),
                "weight memory granularity",
            )
            .ok()?;
            if granule == 0 {
                return None;
            }
            let reserved = capacity.next_multiple_of(granule);
            let mut base = 0u64;
            check(
                sys::cuMemAddressReserve(&mut base, reserved, granule, 0, 0),
                "weight address reservation",
            )
            .ok()?;
            Some(Arc::new(Self {
                ctx: ctx.clone(),
                inner: Mutex::new(Inner {
                    prop,
                    granule,
                    base,
                    reserved,
                    mapped: 0,
                    used: 0,
                    handles: Vec::new(),
                }),
            }))
        }
    }

    /// The address of `bytes` new bytes (contents undefined), backed by physical memory.
    pub fn alloc(&self, bytes: usize) -> Result<u64, CudaError> {
        let mut h = self.inner.lock().map_err(|_| CudaError::Driver {
            during: "weight allocation",
            message: "weight heap poisoned by a panic".into(),
        })?;
        let start = (h.used as u64).next_multiple_of(ALIGN) as usize;
        let end = start + bytes;
        if end > h.reserved {
            return Err(CudaError::Driver {
                during: "weight allocation",
                message: format!(
                    "the weights need more than the {} MiB of GPU memory",
                    h.reserved >> 20
                ),
            });
        }
        if end > h.mapped {
            self.ctx.bind_to_thread().map_err(|e| CudaError::Driver {
                during: "weight allocation",
                message: format!("{e:?}"),
            })?;
            let size = (end - h.mapped).next_multiple_of(h.granule);
            let at = h.base + h.mapped as u64;
            let mut handle: CUmemGenericAllocationHandle = 0;
            // SAFETY: maps `size` new bytes of physical memory at the end of the mapped part
            // of our own reservation (end <= reserved, so it lies inside), and gives this
            // device read and write access to them; undone in Drop.
            unsafe {
                check(
                    sys::cuMemCreate(&mut handle, size, &h.prop, 0),
                    "weight memory allocation",
                )?;
                if let Err(e) = check(sys::cuMemMap(at, size, 0, handle, 0), "weight mapping") {
                    let _ = sys::cuMemRelease(handle);
                    return Err(e);
                }
                h.handles.push((at, size, handle));
                h.mapped += size;
                let access = CUmemAccessDesc {
                    location: h.prop.location,
                    flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                };
                check(
                    sys::cuMemSetAccess(at, size, &access, 1),
                    "weight memory access",
                )?;
            }
        }
        h.used = end;
        Ok(h.base + start as u64)
    }

    /// Bytes handed out (alignment included) and bytes of physical memory behind them.
    pub fn usage(&self) -> (usize, usize) {
        self.inner
            .lock()
            .map(|h| (h.used, h.mapped))
            .unwrap_or((0, 0))
    }
}

impl Drop for WeightHeap {
    fn drop(&mut self) {
        let Ok(h) = self.inner.get_mut() else {
            return;
        };
        // Kernels still queued may read weights: unmapping under them would fault.
        if self.ctx.bind_to_thread().is_err() || self.ctx.synchronize().is_err() {
            return;
        }
        // SAFETY: every weight in the heap holds it, so no weight is left, and no queued work
        // (synchronized above) reads this memory; the ranges and handles are the ones mapped
        // and created in `alloc`.
        unsafe {
            for &(at, size, handle) in &h.handles {
                let _ = sys::cuMemUnmap(at, size);
                let _ = sys::cuMemRelease(handle);
            }
            let _ = sys::cuMemAddressFree(h.base, h.reserved);
        }
    }
}
