//! Quantized matrix times int8 activations on tensor cores (kernels/mmq.cu) for batches
//! between the GEMVs' and cuBLAS's: decode steps of many sequences and short prompts.

use std::sync::OnceLock;

use hearth_quant::GgmlType;

use super::launch::{Arg, GEMV_MAX_TOKENS};
use super::state::State;
use super::{CudaBackend, CudaTensor, CudaWeight};
use crate::CudaError;

/// Tile of the kernels: weight rows by tokens, and threads per block.
const MMQ_ROWS: usize = 32;
const MMQ_TOKENS: usize = 32;
const MMQ_THREADS: u32 = 128;

/// Up to this many tokens a matmul with an MMQ kernel takes it instead of dequantizing the
/// weights to f16 for cuBLAS. `HEARTH_CUDA_MMQ_MAX_TOKENS` overrides it (0: never), so that
/// the crossover can be measured on other GPUs.
///
/// NOTE (H100, 2026-11-24, one call): a 32-token prompt step gained (Qwen3-0.6B Q8_0 7,194 vs
/// 6,141 tok/s, Llama-3.1-8B Q4_K_M 2,067 vs 1,729), 64-sequence decode lost (0.6B Q8_0 8,502
/// vs 8,785, 8B 2,560 vs 2,967): the 32x32 tiles leave most SMs idle on small matrices.
fn mmq_max_tokens() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("HEARTH_CUDA_MMQ_MAX_TOKENS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(48)
    })
}

/// Whether the projections of `n` token rows may read them as 8-bit activations (the GEMVs'
/// or MMQ's), so that their producers should quantize them on the way: a wasted copy only
/// when the weights turn out to have neither kernel.
pub(super) fn takes_int8_activations(n: usize) -> bool {
    n <= GEMV_MAX_TOKENS || n <= mmq_max_tokens()
}

/// The MMQ kernel for `n` tokens times weight `w`, if it takes them.
pub(super) fn mmq_kernel(w: &CudaWeight, n: usize) -> Option<&'static str> {
    if w.mlx.is_some() || !w.cols.is_multiple_of(32) || n > mmq_max_tokens() {
        return None;
    }
    match w.ty {
        GgmlType::Q8_0 => Some("mmq_q8_0"),
        GgmlType::Q4_K if w.cols.is_multiple_of(256) => Some("mmq_q4_k"),
        _ => None,
    }
}

impl CudaBackend {
    /// `out (+)= W · x` for every token of `x`, the activations quantized to 8 bits first (or
    /// their copy kept from an earlier projection of the same rows).
    /// `name` is the weight's kernel from [`mmq_kernel`].
    pub(super) fn launch_mmq(
        &self,
        st: &mut State,
        name: &'static str,
        w: &CudaWeight,
        x: &CudaTensor,
        out: &CudaTensor,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let (xq, xds) = self.quantize_activations(st, x)?;
        let grid = (
            w.rows.div_ceil(MMQ_ROWS) as u32,
            x.rows.div_ceil(MMQ_TOKENS) as u32,
        );
        let args = [
            Arg::P(w.ptr),
            Arg::P(xq),
            Arg::P(xds),
            Arg::P(out.ptr),
            Arg::I(w.rows as i32),
            Arg::I(w.cols as i32),
            Arg::I(x.rows as i32),
            Arg::I(accumulate as i32),
        ];
        self.launch(st, name, grid, MMQ_THREADS, &args)
    }
}
