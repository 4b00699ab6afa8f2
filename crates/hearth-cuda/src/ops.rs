//! Kernel launches: GEMV over quantized weights, RMSNorm, argmax. Each checks its operands
//! (sizes, alignment rules of the kernels) before launching; none waits for the GPU.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use hearth_quant::GgmlType;

use crate::error::{driver, shape};
use crate::{CudaDevice, CudaError, QuantMatrix};

/// Weight types with a fused dequantize + GEMV kernel.
pub const GEMV_TYPES: [GgmlType; 5] = [
    GgmlType::F16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// Weight types with an int8-activation GEMV kernel (kernels/gemv_q8a.cu).
pub const GEMV_Q8A_TYPES: [GgmlType; 4] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// Weight types with a type-specialized f16 dequantizer (kernels/dequant.cu,
/// `dequant_to_f16_typed`); the others go through the element-wise `dequant_to_f16`.
pub const DEQUANT_TYPED_TYPES: [GgmlType; 4] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// The f16 dequantizer kernel for `ty`: the specialized one where it exists.
pub(crate) fn dequant_f16_kernel_name(ty: GgmlType) -> &'static str {
    if DEQUANT_TYPED_TYPES.contains(&ty) {
        "dequant_to_f16_typed"
    } else {
        "dequant_to_f16"
    }
}

/// Threads per block of the f16 dequantizers (one 32-value group per thread).
pub(crate) const DEQUANT_THREADS: u32 = 256;

/// Blocks of [`DEQUANT_THREADS`] for an `n_rows x n_cols` matrix (grid-stride beyond 65536).
pub(crate) fn dequant_blocks(n_rows: usize, n_cols: usize) -> u32 {
    (n_rows * n_cols / 32)
        .div_ceil(DEQUANT_THREADS as usize)
        .clamp(1, 1 << 16) as u32
}

/// Warps per thread block of the GEMV kernels and output rows per warp (F16 kernel: one row
/// per warp); kernels/gemv.cu agrees.
const GEMV_WARPS_PER_BLOCK: u32 = 4;
const GEMV_ROWS_PER_WARP: u32 = 2;
const NORM_THREADS: u32 = 256;
pub(crate) const ARGMAX_THREADS: u32 = 1024;

/// True when [`CudaDevice::gemv`] has a kernel for `ty`.
pub fn gemv_supported(ty: GgmlType) -> bool {
    GEMV_TYPES.contains(&ty)
}

/// The fused GEMV kernel for `ty`, if there is one.
pub(crate) fn gemv_kernel_name(ty: GgmlType) -> Option<&'static str> {
    Some(match ty {
        GgmlType::F16 => "gemv_f16",
        GgmlType::Q8_0 => "gemv_q8_0",
        GgmlType::Q4_0 => "gemv_q4_0",
        GgmlType::Q4_K => "gemv_q4_k",
        GgmlType::Q6_K => "gemv_q6_k",
        _ => return None,
    })
}

/// The int8-activation GEMV kernel for `ty` and its three-matrix (q, k, v) sibling.
pub(crate) fn gemv_q8a_kernel_names(ty: GgmlType) -> Option<(&'static str, &'static str)> {
    Some(match ty {
        GgmlType::Q8_0 => ("gemv_q8a_q8_0", "gemv3_q8a_q8_0"),
        GgmlType::Q4_0 => ("gemv_q8a_q4_0", "gemv3_q8a_q4_0"),
        GgmlType::Q4_K => ("gemv_q8a_q4_k", "gemv3_q8a_q4_k"),
        GgmlType::Q6_K => ("gemv_q8a_q6_k", "gemv3_q8a_q6_k"),
        _ => return None,
    })
}

/// The int8-activation GEMV kernel for `ty` that takes four rows a warp, and the most columns
/// the host gives it: rows that fit the kernel's shared-memory window whole (kernels/gemv_q8a.cu
/// `gemv_rows4_q8a`; `q8a_windows` with the default `Q8A_WINDOW_BYTES`, whose 1,664 bytes
/// would take Q8_0 rows of up to 1,536 columns; 1,024, the output matrix of a small model, is
/// what was measured). Past those columns, or with other windows, it still computes the right
/// rows, two a warp.
pub(crate) fn gemv_q8a_rows4_kernel(ty: GgmlType) -> Option<(&'static str, usize)> {
    Some(match ty {
        GgmlType::Q8_0 => ("gemv_q8a_rows4_q8_0", 32 * 32),
        GgmlType::Q4_0 => ("gemv_q8a_rows4_q4_0", 80 * 32),
        GgmlType::Q6_K => ("gemv_q8a_rows4_q6_k", 4 * 256),
        _ => return None,
    })
}

/// The int8-activation GEMV kernel for `ty` that quantizes its f32 activations itself, a
/// block its own copy (kernels/gemv_q8a.cu `OwnQ8`).
pub(crate) fn gemv_q8a_own_kernel_name(ty: GgmlType) -> Option<&'static str> {
    Some(match ty {
        GgmlType::Q8_0 => "gemv_q8a_own_q8_0",
        GgmlType::Q4_0 => "gemv_q8a_own_q4_0",
        GgmlType::Q4_K => "gemv_q8a_own_q4_k",
        GgmlType::Q6_K => "gemv_q8a_own_q6_k",
        _ => return None,
    })
}

/// Threads per block of the activation quantizer: one warp per 32-value group.
pub(crate) const QUANTIZE_THREADS: u32 = 256;

/// Activations quantized to int8 for the int8-activation GEMV kernels: the values of one
/// activation row, and (d, d · Σq) per 32-value group (kernels/gemv_q8a.cu).
pub struct Q8Activations {
    xq: CudaSlice<i8>,
    xds: CudaSlice<f32>,
}

fn as_i32(op: &'static str, what: &str, v: usize) -> Result<i32, CudaError> {
    i32::try_from(v).map_err(|_| shape(op, format!("{what} {v} exceeds the kernels' 32-bit range")))
}

fn grid(n: usize, per_block: u32) -> u32 {
    n.div_ceil(per_block as usize) as u32
}

impl CudaDevice {
    /// `y = W · x`: `x` holds `w.n_cols()` values, `y` receives `w.n_rows()`.
    pub fn gemv(
        &self,
        w: &QuantMatrix,
        x: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
    ) -> Result<(), CudaError> {
        let op = "gemv";
        let name = gemv_kernel_name(w.ty).ok_or(CudaError::Unsupported { op, ty: w.ty })?;
        if w.ty == GgmlType::F16 && !w.n_cols.is_multiple_of(8) {
            return Err(shape(
                op,
                format!("F16 rows need a multiple of 8 columns, got {}", w.n_cols),
            ));
        }
        if x.len() < w.n_cols || y.len() < w.n_rows {
            return Err(shape(
                op,
                format!(
                    "{}x{} weights need x of {} and y of {} values, got {} and {}",
                    w.n_rows,
                    w.n_cols,
                    w.n_cols,
                    w.n_rows,
                    x.len(),
                    y.len()
                ),
            ));
        }
        let (rows, cols) = (
            as_i32(op, "rows", w.n_rows)?,
            as_i32(op, "columns", w.n_cols)?,
        );
        let rows_per_warp = if w.ty == GgmlType::F16 {
            1
        } else {
            GEMV_ROWS_PER_WARP
        };
        let cfg = LaunchConfig {
            grid_dim: (grid(w.n_rows, GEMV_WARPS_PER_BLOCK * rows_per_warp), 1, 1),
            block_dim: (GEMV_WARPS_PER_BLOCK * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let f = self.function(name)?;
        let mut launch = self.stream().launch_builder(f);
        // No second matrix, mode 0: y = W·x (kernels/gemv.cu).
        let (no_w2, mode) = (0u64, 0i32);
        launch
            .arg(&w.data)
            .arg(&no_w2)
            .arg(x)
            .arg(y)
            .arg(&rows)
            .arg(&cols)
            .arg(&mode);
        // SAFETY: argument types and order match the kernel; the sizes were checked above and
        // the weight buffer carries the padding the kernel's last loads may touch.
        unsafe { launch.launch(cfg) }.map_err(driver("gemv launch"))?;
        Ok(())
    }

    /// The whole of `w` as row-major f16 bits into `out` (`n_rows * n_cols` values) with the
    /// specialized kernel (`typed`, for [`DEQUANT_TYPED_TYPES`]) or the element-wise one.
    pub fn dequant_to_f16(
        &self,
        w: &QuantMatrix,
        typed: bool,
        out: &mut CudaSlice<u16>,
    ) -> Result<(), CudaError> {
        let op = "dequant_to_f16";
        if !w.n_cols.is_multiple_of(32) || out.len() < w.n_rows * w.n_cols {
            return Err(shape(
                op,
                format!(
                    "{}x{} weights (whole 32-value groups) into {} values",
                    w.n_rows,
                    w.n_cols,
                    out.len()
                ),
            ));
        }
        if typed && !DEQUANT_TYPED_TYPES.contains(&w.ty) {
            return Err(CudaError::Unsupported { op, ty: w.ty });
        }
        let name = if typed {
            "dequant_to_f16_typed"
        } else {
            "dequant_to_f16"
        };
        let (ty, rows, cols) = (
            w.ty.id() as i32,
            as_i32(op, "rows", w.n_rows)?,
            as_i32(op, "columns", w.n_cols)?,
        );
        let cfg = LaunchConfig {
            grid_dim: (dequant_blocks(w.n_rows, w.n_cols), 1, 1),
            block_dim: (DEQUANT_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let f = self.function(name)?;
        let mut launch = self.stream().launch_builder(f);
        launch.arg(&w.data).arg(&ty).arg(&rows).arg(&cols).arg(out);
        // SAFETY: argument types and order match the kernel; sizes checked above.
        unsafe { launch.launch(cfg) }.map_err(driver("dequant_to_f16 launch"))?;
        Ok(())
    }

    /// Room for one quantized activation row of `n_cols` values (a multiple of 32).
    pub fn alloc_q8_activations(&self, n_cols: usize) -> Result<Q8Activations, CudaError> {
        if n_cols == 0 || !n_cols.is_multiple_of(32) {
            return Err(shape(
                "gemv_q8a",
                format!("{n_cols} columns are not whole 32-value groups"),
            ));
        }
        let stream = self.stream();
        Ok(Q8Activations {
            xq: stream
                .alloc_zeros::<i8>(n_cols)
                .map_err(driver("activation buffer"))?,
            xds: stream
                .alloc_zeros::<f32>(n_cols / 16)
                .map_err(driver("activation buffer"))?,
        })
    }

    /// `y = W · x` with `x` quantized to int8 into `act` first (both kernels are launched).
    pub fn gemv_q8a(
        &self,
        w: &QuantMatrix,
        x: &CudaSlice<f32>,
        act: &mut Q8Activations,
        y: &mut CudaSlice<f32>,
    ) -> Result<(), CudaError> {
        let op = "gemv_q8a";
        let (name, _) =
            gemv_q8a_kernel_names(w.ty).ok_or(CudaError::Unsupported { op, ty: w.ty })?;
        if x.len() < w.n_cols || y.len() < w.n_rows || act.xq.len() != w.n_cols {
            return Err(shape(
                op,
                format!(
                    "{}x{} weights need x and activations of {} and y of {} values, got {}, {} and {}",
                    w.n_rows,
                    w.n_cols,
                    w.n_cols,
                    w.n_rows,
                    x.len(),
                    act.xq.len(),
                    y.len()
                ),
            ));
        }
        let (rows, cols) = (
            as_i32(op, "rows", w.n_rows)?,
            as_i32(op, "columns", w.n_cols)?,
        );
        let groups = w.n_cols / 32;
        let cfg = LaunchConfig {
            grid_dim: (grid(groups, QUANTIZE_THREADS / 32), 1, 1),
            block_dim: (QUANTIZE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self
            .stream()
            .launch_builder(self.function("quantize_q8_1")?);
        launch.arg(x).arg(&mut act.xq).arg(&mut act.xds).arg(&cols);
        // SAFETY: argument types and order match the kernel; x holds n_cols values and the
        // activation buffers n_cols bytes and n_cols / 32 pairs.
        unsafe { launch.launch(cfg) }.map_err(driver("quantize launch"))?;
        let cfg = LaunchConfig {
            grid_dim: (
                grid(w.n_rows, GEMV_WARPS_PER_BLOCK * GEMV_ROWS_PER_WARP),
                1,
                1,
            ),
            block_dim: (GEMV_WARPS_PER_BLOCK * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream().launch_builder(self.function(name)?);
        // No second matrix, plain store, no 8-bit copy of the output.
        let (null, mode) = (0u64, 0i32);
        launch
            .arg(&w.data)
            .arg(&null)
            .arg(&act.xq)
            .arg(&act.xds)
            .arg(y)
            .arg(&rows)
            .arg(&cols)
            .arg(&mode)
            .arg(&null)
            .arg(&null)
            .arg(&null);
        // SAFETY: as for `gemv`, with the quantized activations sized above.
        unsafe { launch.launch(cfg) }.map_err(driver("gemv_q8a launch"))?;
        Ok(())
    }

    /// RMSNorm of `n_rows` rows of `w.len()` values: `y = x / sqrt(mean(x²) + eps) * w`.
    pub fn rms_norm(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
        n_rows: usize,
        eps: f32,
    ) -> Result<(), CudaError> {
        let op = "rms_norm";
        let dim = w.len();
        let total = n_rows.checked_mul(dim);
        if dim == 0 || total.is_none_or(|t| x.len() < t || y.len() < t) {
            return Err(shape(
                op,
                format!(
                    "{n_rows} rows of {dim} need x and y of that many values, got {} and {}",
                    x.len(),
                    y.len()
                ),
            ));
        }
        let dim_i = as_i32(op, "dim", dim)?;
        let cfg = LaunchConfig {
            grid_dim: (as_i32(op, "rows", n_rows)? as u32, 1, 1),
            block_dim: (NORM_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream().launch_builder(self.function("rms_norm_f32")?);
        launch.arg(x).arg(w).arg(y).arg(&dim_i).arg(&eps);
        // SAFETY: argument types and order match the kernel; sizes checked above.
        unsafe { launch.launch(cfg) }.map_err(driver("rms_norm launch"))?;
        Ok(())
    }

    /// Index of the largest value of each of `n_rows` rows of `n_cols` logits (ties to the
    /// lower index, NaN never wins, an all-NaN row gives 0), written to `out`.
    pub fn argmax(
        &self,
        logits: &CudaSlice<f32>,
        n_rows: usize,
        n_cols: usize,
        out: &mut CudaSlice<u32>,
    ) -> Result<(), CudaError> {
        let op = "argmax";
        let total = n_rows.checked_mul(n_cols);
        if n_cols == 0 || total.is_none_or(|t| logits.len() < t) || out.len() < n_rows {
            return Err(shape(
                op,
                format!("{n_rows} rows of {n_cols} need that many logits and {n_rows} outputs, got {} and {}", logits.len(), out.len()),
            ));
        }
        let cols = as_i32(op, "columns", n_cols)?;
        let cfg = LaunchConfig {
            grid_dim: (as_i32(op, "rows", n_rows)? as u32, 1, 1),
            block_dim: (ARGMAX_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream().launch_builder(self.function("argmax_f32")?);
        let no_host_copy = 0u64;
        launch.arg(logits).arg(out).arg(&no_host_copy).arg(&cols);
        // SAFETY: argument types and order match the kernel; sizes checked above.
        unsafe { launch.launch(cfg) }.map_err(driver("argmax launch"))?;
        Ok(())
    }
}
