//! Weights and the KV cache into GPU memory.

use hearth_backend::{BackendError, HostWeight, KvSpec, KvType};
use hearth_quant::GgmlType;

use super::memory::device_address;
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
        let stream = self.dev.stream();
        let mut buf = stream
            .alloc_zeros::<u8>(host.len() + WEIGHT_PADDING)
            .map_err(|e| BackendError::OutOfMemory(format!("weight {}: {e:?}", w.name)))?;
        stream
            .memcpy_htod(host, &mut buf.slice_mut(..host.len()))
            .map_err(|e| BackendError::Device(format!("weight {} upload: {e:?}", w.name)))?;
        let ptr = device_address(&buf, stream);
        Ok(CudaWeight {
            name: w.name,
            ty,
            rows: w.rows,
            cols: w.cols,
            ptr,
            mlx: None,
            _buf: buf,
        })
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
        Ok(CudaKvCache {
            layers,
            _bufs: bufs,
            kv_dims: spec.kv_dims.clone(),
            block_size: spec.block_size,
            n_blocks: spec.n_blocks,
        })
    }
}
