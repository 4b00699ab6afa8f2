//! Weights and the KV cache into GPU memory.

use std::sync::atomic::Ordering;

use cudarc::driver::result;
use hearth_backend::{BackendError, HostWeight, KvSpec, KvType};
use hearth_quant::GgmlType;

use super::memory::device_address;
use super::weight_heap::WeightMemory;
use super::{launch, CudaBackend, CudaKvCache, CudaWeight};
use crate::device::WEIGHT_PADDING;

impl CudaBackend {
    pub(super) fn upload_weight(&self, w: HostWeight) -> Result<CudaWeight, BackendError> {
        let bad = |reason: String| BackendError::BadWeight {
            name: w.name.clone(),
            reason,
        };
        if w.mlx.is_some() {
            return self.upload_mlx_weight(w);
        }
        let expected =
            w.ty.bytes_for(w.cols as u64)
                .and_then(|b| b.checked_mul(w.rows as u64))
                .ok_or_else(|| {
                    bad(format!(
                        "{} columns is not a whole number of {} blocks",
                        w.cols, w.ty
                    ))
                })?;
        let bytes = w.data.bytes();
        if bytes.len() as u64 != expected {
            return Err(bad(format!(
                "holds {} bytes, its shape and type need {expected}",
                bytes.len()
            )));
        }
        if !launch::dequant_supported(w.ty) {
            return Err(bad(format!("type {} has no CUDA kernels", w.ty)));
        }
        // Vectors (norm weights) are used as f32; matrices stay in their block layout.
        let (ty, upload): (GgmlType, Vec<u8>) = if w.rows == 1 {
            let mut v = vec![0f32; w.cols];
            hearth_quant::dequantize_row(w.ty, bytes, &mut v).map_err(|e| bad(e.to_string()))?;
            (GgmlType::F32, bytemuck::cast_slice(&v).to_vec())
        } else {
            (w.ty, Vec::new())
        };
        let host: &[u8] = if w.rows == 1 { &upload } else { bytes };
        let (ptr, mem) = self.weight_memory(&w.name, &[(0, host)], host.len())?;
        Ok(CudaWeight {
            name: w.name,
            ty,
            rows: w.rows,
            cols: w.cols,
            ptr,
            mlx: None,
            _mem: mem,
        })
    }

    /// Memory for a weight of `len` bytes (plus WEIGHT_PADDING), holding each `(offset,
    /// bytes)` of `parts` and zeros everywhere else: its address and what keeps it.
    pub(super) fn weight_memory(
        &self,
        name: &str,
        parts: &[(usize, &[u8])],
        len: usize,
    ) -> Result<(u64, WeightMemory), BackendError> {
        // Its copies would queue behind a step waiting for the next pass (`step_gate.rs`).
        self.settle_ahead();
        let stream = self.dev.stream();
        let oom = |e: String| BackendError::OutOfMemory(format!("weight {name}: {e}"));
        let total = len + WEIGHT_PADDING;
        let (ptr, mem) = match &self.weights {
            Some(heap) => {
                let ptr = heap.alloc(total).map_err(|e| oom(e.to_string()))?;
                // SAFETY: the heap just handed out these `total` bytes to this weight alone.
                unsafe { result::memset_d8_async(ptr, 0, total, stream.cu_stream()) }
                    .map_err(|e| oom(format!("{e:?}")))?;
                (ptr, WeightMemory::Heap(heap.clone()))
            }
            None => {
                let buf = stream
                    .alloc_zeros::<u8>(total)
                    .map_err(|e| oom(format!("{e:?}")))?;
                (device_address(&buf, stream), WeightMemory::Own(buf))
            }
        };
        self.weight_bytes.fetch_add(total, Ordering::Relaxed);
        for &(at, bytes) in parts {
            if at + bytes.len() > len {
                return Err(BackendError::Device(format!(
                    "weight {name}: a part of {} bytes at {at} past its {len} bytes",
                    bytes.len()
                )));
            }
            // SAFETY: inside the weight's memory (checked above); the source is pageable host
            // memory, which the driver stages before this call returns.
            unsafe { result::memcpy_htod_async(ptr + at as u64, bytes, stream.cu_stream()) }
                .map_err(|e| BackendError::Device(format!("weight {name} upload: {e:?}")))?;
        }
        Ok((ptr, mem))
    }

    pub(super) fn alloc_kv_cache(&self, spec: &KvSpec) -> Result<CudaKvCache, BackendError> {
        if spec.dtype != KvType::F16 {
            return Err(BackendError::Unsupported(format!(
                "a {} KV cache on CUDA (its attention kernels read f16 keys and values; \
                 use an f16 cache or the CPU)",
                spec.dtype
            )));
        }
        let n_slots = spec.n_blocks * spec.block_size;
        let stream = self.dev.stream();
        let mut bufs = Vec::new();
        let mut layers = Vec::new();
        for &d in &spec.kv_dims {
            let oom = |e| {
                BackendError::OutOfMemory(format!(
                    "KV cache needs {} MiB: {e:?}",
                    spec.bytes() >> 20
                ))
            };
            let k = stream.alloc_zeros::<u16>(n_slots * d).map_err(oom)?;
            let v = stream.alloc_zeros::<u16>(n_slots * d).map_err(oom)?;
            layers.push((device_address(&k, stream), device_address(&v, stream)));
            bufs.push(k);
            bufs.push(v);
        }
        self.log_memory(spec.bytes() as usize);
        Ok(CudaKvCache {
            layers,
            _bufs: bufs,
            kv_dims: spec.kv_dims.clone(),
            block_size: spec.block_size,
            n_blocks: spec.n_blocks,
        })
    }

    /// Once the KV cache is in place (after the weights): where the GPU's memory went.
    fn log_memory(&self, kv_bytes: usize) {
        let mib = |b: usize| b.div_ceil(1 << 20);
        let weights = self.weight_bytes.load(Ordering::Relaxed);
        // Without the heap each weight is rounded up on its own: not known here.
        let weights_mapped = self.weights.as_ref().map(|h| mib(h.usage().1));
        tracing::info!(
            weights_mib = mib(weights),
            weights_mapped_mib = weights_mapped,
            kv_cache_mib = mib(kv_bytes),
            cublas_mib = mib(self.blas.bytes()),
            in_use_on_gpu_mib = mib(super::memory::in_use_on_gpu()),
            "GPU memory after loading (in use on the GPU: all processes, the CUDA context too)"
        );
    }
}
