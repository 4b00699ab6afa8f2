//! The CPU backend: the reference every other backend is tested against, and a fast path in its
//! own right (SIMD kernels from `hearth-quant`, rayon for threads).

mod attention;
mod ops;
mod simd;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use hearth_quant::{GgmlType, WeightMatrix};

use crate::{
    Activation, AttnBatch, AttnParams, Backend, BackendError, ByteSource, HostWeight, KvSpec,
    MlxGroups, RopeRows, RopeSpec,
};

/// A dense row-major f32 matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTensor {
    pub data: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
}

impl CpuTensor {
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

/// A weight kept where it is on the host (usually the file mapping): no copy.
pub struct CpuWeight {
    name: String,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    data: Arc<dyn ByteSource>,
    /// Norm vectors and other small tensors are dequantized once at load.
    dense: Option<Vec<f32>>,
    /// MLX affine groups: `data` is then the packed words, used as they are.
    mlx: Option<MlxGroups>,
}

impl CpuWeight {
    fn matrix(&self) -> Result<WeightMatrix<'_>, BackendError> {
        WeightMatrix::new(self.ty, self.data.bytes(), self.rows, self.cols).map_err(|e| {
            BackendError::BadWeight {
                name: self.name.clone(),
                reason: e.to_string(),
            }
        })
    }

    fn mlx_matrix<'a>(
        &'a self,
        groups: &'a MlxGroups,
    ) -> Result<hearth_quant::MlxMatrix<'a>, BackendError> {
        groups
            .matrix(self.data.bytes(), self.rows, self.cols)
            .map_err(|reason| BackendError::BadWeight {
                name: self.name.clone(),
                reason,
            })
    }

    fn dense(&self) -> &[f32] {
        // NOTE: `load_weight` fills `dense` for every 1-row weight, and only those reach here.
        self.dense.as_deref().unwrap_or(&[])
    }
}

/// Keys and values of every layer in `n_blocks * block_size` token slots, stored as the
/// [`KvSpec`]'s dtype asks.
pub struct CpuKvCache {
    layers: attention::KvLayers,
    kv_dims: Vec<usize>,
    block_size: usize,
}

/// The CPU backend with its own thread pool.
pub struct CpuBackend {
    pool: rayon::ThreadPool,
    n_threads: usize,
    chained: Mutex<ChainedIds>,
}

/// What chained decode steps leave behind: the CPU finds each argmax at once, so chaining
/// only keeps the engine's pipelined greedy loop the same on every backend.
#[derive(Default)]
struct ChainedIds {
    /// The last chained argmax's ids, which the next `embed_chained` reads.
    last: Vec<u32>,
    /// Ids not yet taken, oldest first.
    waiting: VecDeque<Vec<u32>>,
}

impl CpuBackend {
    /// A backend running on `n_threads` threads (0 = one per physical core as rayon counts them).
    pub fn new(n_threads: usize) -> Result<Self, BackendError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n_threads)
            .thread_name(|i| format!("hearth-cpu-{i}"))
            .build()
            .map_err(|e| BackendError::Unsupported(format!("cannot start threads: {e}")))?;
        let n_threads = pool.current_num_threads();
        Ok(Self {
            pool,
            n_threads,
            chained: Mutex::default(),
        })
    }

    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    fn chained(&self) -> Result<MutexGuard<'_, ChainedIds>, BackendError> {
        self.chained
            .lock()
            .map_err(|_| BackendError::Unsupported("chained ids poisoned by a panic".into()))
    }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Weight = CpuWeight;
    type KvCache = CpuKvCache;

    fn name(&self) -> String {
        format!(
            "cpu ({}, {} threads)",
            hearth_quant::kernel_name(),
            self.n_threads
        )
    }

    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    fn load_weight(&self, w: HostWeight) -> Result<CpuWeight, BackendError> {
        let bad = |reason: String| BackendError::BadWeight {
            name: w.name.clone(),
            reason,
        };
        if let Some(groups) = &w.mlx {
            // Checks bits, group size and every length once, here.
            groups.matrix(w.data.bytes(), w.rows, w.cols).map_err(bad)?;
            return Ok(CpuWeight {
                name: w.name,
                ty: w.ty,
                rows: w.rows,
                cols: w.cols,
                data: w.data,
                dense: None,
                mlx: w.mlx,
            });
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
        if w.data.bytes().len() as u64 != expected {
            return Err(bad(format!(
                "holds {} bytes, its shape and type need {expected}",
                w.data.bytes().len()
            )));
        }
        let dense = if w.rows == 1 {
            let mut v = vec![0.0; w.cols];
            hearth_quant::dequantize_row(w.ty, w.data.bytes(), &mut v)
                .map_err(|e| bad(e.to_string()))?;
            Some(v)
        } else {
            if !hearth_quant::supports_matmul(w.ty) {
                return Err(bad(format!(
                    "type {} is not supported by the CPU backend",
                    w.ty
                )));
            }
            None
        };
        Ok(CpuWeight {
            name: w.name,
            ty: w.ty,
            rows: w.rows,
            cols: w.cols,
            data: w.data,
            dense,
            mlx: None,
        })
    }

    fn new_kv_cache(&self, spec: &KvSpec) -> Result<CpuKvCache, BackendError> {
        Ok(CpuKvCache {
            layers: attention::KvLayers::new(spec)?,
            kv_dims: spec.kv_dims.clone(),
            block_size: spec.block_size,
        })
    }

    fn alloc(&self, rows: usize, cols: usize) -> Result<CpuTensor, BackendError> {
        Ok(CpuTensor {
            data: vec![0.0; rows * cols],
            rows,
            cols,
        })
    }

    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> Result<CpuTensor, BackendError> {
        assert_eq!(data.len(), rows * cols, "upload: data does not match shape");
        Ok(CpuTensor {
            data: data.to_vec(),
            rows,
            cols,
        })
    }

    fn to_host(&self, t: &CpuTensor) -> Result<Vec<f32>, BackendError> {
        Ok(t.data.clone())
    }

    fn to_host_into(&self, t: &CpuTensor, out: &mut Vec<f32>) -> Result<(), BackendError> {
        out.clear();
        out.extend_from_slice(&t.data);
        Ok(())
    }

    fn copy(&self, t: &CpuTensor) -> Result<CpuTensor, BackendError> {
        Ok(t.clone())
    }

    fn shape(&self, t: &CpuTensor) -> (usize, usize) {
        (t.rows, t.cols)
    }

    fn chains_argmax(&self) -> bool {
        true
    }

    fn embed_chained(&self, table: &CpuWeight, out: &mut CpuTensor) -> Result<(), BackendError> {
        let tokens = self.chained()?.last.clone();
        if tokens.len() != out.rows {
            return Err(BackendError::Unsupported(format!(
                "a chained step of {} rows after an argmax of {}",
                out.rows,
                tokens.len()
            )));
        }
        self.embed(table, &tokens, out)
    }

    fn argmax_rows_chained(&self, t: &CpuTensor) -> Result<(), BackendError> {
        let mut ids = Vec::new();
        self.argmax_rows(t, &mut ids)?;
        let mut chained = self.chained()?;
        chained.last.clone_from(&ids);
        chained.waiting.push_back(ids);
        Ok(())
    }

    fn take_chained_argmax(&self, out: &mut Vec<u32>) -> Result<(), BackendError> {
        *out = self.chained()?.waiting.pop_front().ok_or_else(|| {
            BackendError::Unsupported("no chained decode step is waiting to be taken".into())
        })?;
        Ok(())
    }

    fn embed(
        &self,
        table: &CpuWeight,
        tokens: &[u32],
        out: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        assert_eq!((out.rows, out.cols), (tokens.len(), table.cols));
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= table.rows) {
            return Err(BackendError::BadWeight {
                name: table.name.clone(),
                reason: format!("token id {t} is outside the vocabulary of {}", table.rows),
            });
        }
        if let Some(groups) = &table.mlx {
            let m = table.mlx_matrix(groups)?;
            for (&t, o) in tokens.iter().zip(out.data.chunks_exact_mut(table.cols)) {
                m.dequantize_row(t as usize, o)
                    .map_err(|reason| BackendError::BadWeight {
                        name: table.name.clone(),
                        reason,
                    })?;
            }
            return Ok(());
        }
        let m = table.matrix()?;
        for (i, &t) in tokens.iter().enumerate() {
            hearth_quant::dequantize_rows(
                &m,
                t as usize,
                &mut out.data[i * out.cols..][..out.cols],
            )?;
        }
        Ok(())
    }

    fn matmul(
        &self,
        w: &CpuWeight,
        x: &CpuTensor,
        out: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        assert_eq!(x.cols, w.cols, "matmul {}: input width", w.name);
        assert_eq!(
            (out.rows, out.cols),
            (x.rows, w.rows),
            "matmul {}: output shape",
            w.name
        );
        if let Some(groups) = &w.mlx {
            let m = w.mlx_matrix(groups)?;
            return hearth_quant::mlx_matmul(&m, &x.data, x.rows, &mut out.data).map_err(
                |reason| BackendError::BadWeight {
                    name: w.name.clone(),
                    reason,
                },
            );
        }
        hearth_quant::matmul(&w.matrix()?, &x.data, x.rows, &mut out.data)?;
        Ok(())
    }

    fn rms_norm(
        &self,
        x: &mut CpuTensor,
        weight: &CpuWeight,
        group: usize,
        eps: f32,
    ) -> Result<(), BackendError> {
        let w = weight.dense();
        if w.len() != group || !x.cols.is_multiple_of(group) {
            return Err(BackendError::BadWeight {
                name: weight.name.clone(),
                reason: format!("norm of {} values applied to groups of {group}", w.len()),
            });
        }
        ops::rms_norm(&mut x.data, w, eps);
        Ok(())
    }

    fn rope(
        &self,
        x: &mut CpuTensor,
        rows: RopeRows,
        head_dim: usize,
        rope: &RopeSpec,
    ) -> Result<(), BackendError> {
        if rows.n_rows() != Some(x.rows)
            || !x.cols.is_multiple_of(head_dim)
            || rope.n_rot > head_dim
            || !rope.n_rot.is_multiple_of(2)
        {
            return Err(BackendError::Unsupported(format!(
                "rope over {} of {head_dim} values in {} rows of {} ({} positions)",
                rope.n_rot,
                x.rows,
                x.cols,
                rows.positions.len()
            )));
        }
        ops::rope(&mut x.data, x.cols, rows, head_dim, rope);
        Ok(())
    }

    fn add(&self, x: &mut CpuTensor, y: &CpuTensor) -> Result<(), BackendError> {
        assert_eq!(x.data.len(), y.data.len());
        x.data.iter_mut().zip(&y.data).for_each(|(a, b)| *a += b);
        Ok(())
    }

    fn scale(&self, x: &mut CpuTensor, s: f32) -> Result<(), BackendError> {
        x.data.iter_mut().for_each(|a| *a *= s);
        Ok(())
    }

    fn glu(
        &self,
        gate: &mut CpuTensor,
        up: &CpuTensor,
        act: Activation,
    ) -> Result<(), BackendError> {
        assert_eq!(gate.data.len(), up.data.len());
        ops::glu(&mut gate.data, &up.data, act);
        Ok(())
    }

    fn gather_rows(&self, x: &CpuTensor, rows: &[usize]) -> Result<CpuTensor, BackendError> {
        let mut data = Vec::with_capacity(rows.len() * x.cols);
        for &r in rows {
            data.extend_from_slice(x.row(r));
        }
        Ok(CpuTensor {
            data,
            rows: rows.len(),
            cols: x.cols,
        })
    }

    fn scatter_add_rows(
        &self,
        x: &mut CpuTensor,
        y: &CpuTensor,
        rows: &[usize],
        weights: &[f32],
    ) -> Result<(), BackendError> {
        crate::check_scatter(x.rows, x.cols, y.rows, y.cols, rows, weights)?;
        let cols = x.cols;
        for (i, (&r, &w)) in rows.iter().zip(weights).enumerate() {
            let dst = &mut x.data[r * cols..(r + 1) * cols];
            dst.iter_mut().zip(y.row(i)).for_each(|(d, s)| *d += w * s);
        }
        Ok(())
    }

    fn attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        cache: &mut CpuKvCache,
        layer: usize,
        batch: &AttnBatch,
        params: &AttnParams,
        out: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        attention::attention(q, k, v, cache, layer, batch, params, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_add_rows_adds_weighted_rows_to_their_targets() {
        let be = CpuBackend::new(1).expect("cpu backend");
        let mut x = be.upload(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3, 2).expect("x");
        let y = be.upload(&[10.0, 20.0, 30.0, 40.0], 2, 2).expect("y");
        // Row 2 twice: contributions to one row accumulate.
        be.scatter_add_rows(&mut x, &y, &[2, 2], &[0.5, 0.25])
            .expect("scatter");
        assert_eq!(
            x.data,
            vec![1.0, 2.0, 3.0, 4.0, 5.0 + 5.0 + 7.5, 6.0 + 10.0 + 10.0]
        );
        let e = be
            .scatter_add_rows(&mut x, &y, &[0, 3], &[1.0, 1.0])
            .expect_err("row 3 of 3");
        assert!(e.to_string().contains("target row 3 of 3"), "{e}");
        let e = be
            .scatter_add_rows(&mut x, &y, &[0], &[1.0])
            .expect_err("one target for two rows");
        assert!(e.to_string().contains("1 targets"), "{e}");
    }
}
