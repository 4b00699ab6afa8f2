//! MLX affine-quantized weights on the GPU (kernels/mlx.cu): the packed words, scales and
//! biases go up as they are, in one buffer; decode runs a GEMV over the packed words, larger
//! batches dequantize to f16 for cuBLAS, as the GGUF types do.

use hearth_backend::{BackendError, HostWeight};
use hearth_quant::GgmlType;

use super::launch::Arg;
use super::state::State;
use super::{CudaBackend, CudaTensor, CudaWeight};
use crate::CudaError;

/// Warps per block of `gemv_mlx` (its `MLX_WARPS`).
const MLX_WARPS: u32 = 4;
/// Scales and biases start at multiples of this in the weight's buffer.
const PARAM_ALIGN: usize = 256;

/// How to read an MLX weight on the device: its bit width and group size, and where its
/// scales and biases (of GGML type code `scale_type`) sit.
#[derive(Clone, Copy, Debug)]
pub(super) struct MlxLayout {
    bits: i32,
    group: i32,
    scale_type: i32,
    scales: u64,
    biases: u64,
}

impl MlxLayout {
    /// The kernels' arguments: packed words, scales, biases, type, bits, group, then `rest`.
    fn args(&self, w: &CudaWeight, rest: &[Arg]) -> Vec<Arg> {
        let mut args = vec![
            Arg::P(w.ptr),
            Arg::P(self.scales),
            Arg::P(self.biases),
            Arg::I(self.scale_type),
            Arg::I(self.bits),
            Arg::I(self.group),
        ];
        args.extend_from_slice(rest);
        args
    }
}

impl CudaBackend {
    /// Upload `w` (which carries MLX groups) as packed words, then scales, then biases.
    pub(super) fn upload_mlx_weight(&self, w: HostWeight) -> Result<CudaWeight, BackendError> {
        let Some(groups) = &w.mlx else {
            return Err(BackendError::Unsupported(format!(
                "tensor '{}' is not MLX-quantized",
                w.name
            )));
        };
        let packed = w.data.bytes();
        // Checks the spec and every length against the shape.
        groups
            .matrix(packed, w.rows, w.cols)
            .map_err(|reason| BackendError::BadWeight {
                name: w.name.clone(),
                reason,
            })?;
        let (scales, biases) = (groups.scales.bytes(), groups.biases.bytes());
        let scales_at = packed.len().next_multiple_of(PARAM_ALIGN);
        let biases_at = (scales_at + scales.len()).next_multiple_of(PARAM_ALIGN);
        let (ptr, mem) = self.weight_memory(
            &w.name,
            &[(0, packed), (scales_at, scales), (biases_at, biases)],
            biases_at + biases.len(),
        )?;
        let spec = groups.spec;
        Ok(CudaWeight {
            name: w.name,
            ty: GgmlType::I32,
            rows: w.rows,
            cols: w.cols,
            ptr,
            mlx: Some(MlxLayout {
                bits: spec.bits as i32,
                group: spec.group_size as i32,
                scale_type: spec.scale_ty.id() as i32,
                scales: ptr + scales_at as u64,
                biases: ptr + biases_at as u64,
            }),
            _mem: mem,
        })
    }

    /// `out (+)= W · x` over the packed words, one warp per row and token.
    pub(super) fn launch_mlx_gemv(
        &self,
        st: &State,
        w: &CudaWeight,
        m: &MlxLayout,
        x: &CudaTensor,
        out: &CudaTensor,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let args = m.args(
            w,
            &[
                Arg::P(x.ptr),
                Arg::P(out.ptr),
                Arg::I(w.rows as i32),
                Arg::I(w.cols as i32),
                Arg::I(accumulate as i32),
            ],
        );
        let blocks = (w.rows as u32).div_ceil(MLX_WARPS);
        self.launch(
            st,
            "gemv_mlx",
            (blocks, x.rows as u32),
            MLX_WARPS * 32,
            &args,
        )
    }

    /// The whole of `w` as row-major f16 at `dst` (`rows * cols` values), for cuBLAS.
    pub(super) fn launch_mlx_dequant(
        &self,
        st: &State,
        w: &CudaWeight,
        m: &MlxLayout,
        dst: u64,
    ) -> Result<(), CudaError> {
        let args = m.args(
            w,
            &[Arg::I(w.rows as i32), Arg::I(w.cols as i32), Arg::P(dst)],
        );
        let words = w.rows * w.cols * m.bits as usize / 32;
        let blocks = words.div_ceil(256).clamp(1, 1 << 16) as u32;
        self.launch(st, "dequant_mlx_to_f16", (blocks, 1), 256, &args)
    }

    /// `out[t] = table[ids[t]]`, dequantized.
    pub(super) fn launch_mlx_embed(
        &self,
        st: &State,
        table: &CudaWeight,
        m: &MlxLayout,
        ids: u64,
        out: &CudaTensor,
    ) -> Result<(), CudaError> {
        let args = m.args(
            table,
            &[Arg::I(table.cols as i32), Arg::P(ids), Arg::P(out.ptr)],
        );
        self.launch(st, "embed_mlx_rows", (out.rows as u32, 1), 256, &args)
    }
}
