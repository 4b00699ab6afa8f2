//! Quantized matrix times int8 activations on tensor cores (kernels/mmq.cu), or times f16
//! activations with the weights dequantized in registers (kernels/mmq_f16.cu), for batches
//! between the GEMVs' and cuBLAS's: decode steps of many sequences and short prompts.

use std::sync::OnceLock;

use hearth_quant::GgmlType;

use super::launch::{Arg, GEMV_MAX_TOKENS};
use super::state::{Mode, State};
use super::{measurement_setting, CudaBackend, CudaTensor, CudaWeight};
use crate::CudaError;

/// Tile of the kernels: weight rows by tokens (the f16 kernels' rows: [`MMF_ROWS`]), and
/// threads per block.
const MMQ_ROWS: usize = 32;
const MMF_ROWS: usize = 64;
const MMQ_TOKENS: usize = 32;
const MMQ_THREADS: u32 = 128;

/// The f16 kernels (kernels/mmq_f16.cu) take the place of the int8 ones for matrices of at
/// least `MMF_MIN_VALUES` values, or as `HEARTH_CUDA_MMQ_F16` says for every matrix (1: f16,
/// 0: int8).
///
/// NOTE (H100, 2026-11-26, `scripts/device/binary_ab.sh`, two rounds, tok/s, int8 -> f16 for
/// every matrix): Llama-3.1-8B Q4_K_M 32-token prompt 3,668 / 3,689 -> 4,278 / 4,330, 64
/// sequences 3,575 / 3,578 -> 4,855 / 4,865; Qwen3-0.6B Q8_0 32-token prompt 16,423 /
/// 16,692 -> 14,019 / 14,028, 64 sequences 16,977 / 16,440 -> 15,270 / 15,508; 0.6B Q4_K_M
/// 14,582 / 15,017 -> 13,438 / 13,373 and 15,503 / 15,314 -> 15,056 / 15,181. The 0.6B's
/// matrices (at most 3.1M values) make few 64-row tiles over short rows.
const MMF_MIN_VALUES: usize = 4 << 20;

/// `HEARTH_CUDA_MMQ_F16`, read once.
fn mmq_f16_set() -> Option<bool> {
    static SET: OnceLock<Option<bool>> = OnceLock::new();
    *SET.get_or_init(|| measurement_setting("HEARTH_CUDA_MMQ_F16", 0..=1).map(|v| v == 1))
}

/// Which kernels take a matrix of `rows` by `cols` in this process: `true` for the f16 ones
/// (kernels/mmq_f16.cu), `false` for the int8 ones (kernels/mmq.cu).
pub fn mmq_takes_f16_activations(rows: usize, cols: usize) -> bool {
    mmq_f16_set().unwrap_or(rows * cols >= MMF_MIN_VALUES)
}

/// Dynamic shared memory of an f16 kernel's block for a weight type whose 256 values take
/// `w_stride` bytes of a staged row: two stages of [`MMF_ROWS`] rows and 32 tokens' 264 f16
/// activations (kernels/mmq_f16.cu `MmfStage`).
const fn mmf_shared_bytes(w_stride: usize) -> u32 {
    (2 * (MMF_ROWS * w_stride + MMQ_TOKENS * 264 * 2)) as u32
}

/// Up to how many tokens a matmul with an MMQ kernel takes it instead of dequantizing the
/// weights to f16 for cuBLAS: `HEARTH_CUDA_MMQ_MAX_TOKENS` for every matrix (0: never), so
/// that the crossover can be measured on other GPUs; by default [`MMQ_MAX_TOKENS_SMALL`]
/// for matrices of at most [`MMQ_SMALL_MATRIX`] values and for the f16 kernels, and
/// [`MMQ_MAX_TOKENS`] for the int8 kernels on larger matrices.
///
/// NOTE (H100, 2026-11-25, kernels/mmq.cu's ring of copies): a 32-token prompt step gained
/// (Qwen3-0.6B Q8_0 10,389 vs 4,958 tok/s, Llama-3.1-8B Q4_K_M 2,520 vs 1,889; one call),
/// 64-sequence decode was even (0.6B Q8_0 12,300 vs 12,514, 8B 3,171 vs 3,121), a 512-token
/// prompt lost by far (8B 5,035 vs 19,473). With q, k, v and gate, up each in one launch
/// (`launch_mmq_segments`), the 0.6B Q8_0 32-token prompt ran at 13,291 tok/s against 8,807
/// through cuBLAS (another call). By prompt length (scripts/device/mmq_crossover.sh, MMQ vs
/// cuBLAS, tok/s): 0.6B Q8_0 pp128 38,236 vs 35,164, pp192 45,738 vs 48,871; 0.6B Q4_K_M pp128
/// 33,100 vs 29,009, pp192 38,616 vs 44,676; 8B Q4_K_M pp64 3,963 vs 3,730, pp96 4,445 vs
/// 5,450. The 0.6B matrices hold up to 3.1M values, the 8B ones from 4.2M.
/// With the f16 kernels (2026-11-26, same script): 8B pp64 6,346 vs 3,572, pp96 6,903 vs
/// 5,273, pp128 7,230 vs 6,823, pp192 7,826 vs 9,518.
fn mmq_max_tokens(w: &CudaWeight) -> usize {
    let small = w.rows * w.cols <= MMQ_SMALL_MATRIX;
    mmq_max_tokens_set().unwrap_or(if small || mmq_takes_f16_activations(w.rows, w.cols) {
        MMQ_MAX_TOKENS_SMALL
    } else {
        MMQ_MAX_TOKENS
    })
}
const MMQ_MAX_TOKENS: usize = 64;
const MMQ_MAX_TOKENS_SMALL: usize = 128;
const MMQ_SMALL_MATRIX: usize = 4 << 20;

/// Split-K (kernels/mmq.cu `MmqSplit`): a launch whose tiles would give the GPU fewer than
/// `HEARTH_CUDA_MMQ_SPLIT` blocks per multiprocessor (default [`MMQ_SPLIT_BLOCKS_PER_SM`]; 0:
/// never split) splits each tile's columns between up to [`MMQ_MAX_SPLITS`] blocks of at
/// least [`MMQ_MIN_SPLIT_STEPS`] steps of 256 values each.
///
/// NOTE (H100, 2026-11-26): without it, Llama-3.1-8B's q, o and down projections of a
/// 64-sequence decode step ran 256 blocks (two a multiprocessor), k and v 64, and Nsight
/// Compute found 7.7 warps active per multiprocessor, no warp eligible 61% of cycles.
/// `scripts/device/binary_ab.sh`, one binary with the setting at 0 / 2 / 4 / 8, two rounds
/// (tok/s): 8B 32-token prompt 2,793 and 2,801 / 3,648 and 3,675 / 3,473 and 3,470 / 3,517
/// and 3,591, 64 sequences 3,319 and 3,329 / 3,611 and 3,609 / 3,512 and 3,495 / 3,470 and
/// 3,416; Qwen3-0.6B Q8_0 32-token prompt 13,208 and 13,251 / 16,564 and 16,138 / 16,417
/// and 16,382 / 16,379 and 16,358, Q4_K_M 10,851 (and 8,475, a disturbed run) / 14,729 and
/// 14,962 / 14,923 and 14,771 / 14,749 and 14,498; the 0.6B's 64 sequences within their
/// spread (13,500-16,900 in every setting).
fn mmq_split_blocks_per_sm() -> usize {
    static SET: OnceLock<usize> = OnceLock::new();
    *SET.get_or_init(|| {
        measurement_setting("HEARTH_CUDA_MMQ_SPLIT", 0..=64).unwrap_or(MMQ_SPLIT_BLOCKS_PER_SM)
    })
}
const MMQ_SPLIT_BLOCKS_PER_SM: usize = 2;
const MMQ_MAX_SPLITS: usize = 8;
const MMQ_MIN_SPLIT_STEPS: usize = 2;

/// Into how many blocks each of `tiles` tiles over `cols` columns is split, on `sms`
/// multiprocessors, wanting `per_sm` blocks on each.
fn mmq_splits(tiles: usize, cols: usize, sms: usize, per_sm: usize) -> usize {
    let steps = cols.div_ceil(256);
    let wanted = (sms * per_sm).div_ceil(tiles.max(1));
    wanted
        .min(MMQ_MAX_SPLITS)
        .min(steps / MMQ_MIN_SPLIT_STEPS)
        .max(1)
}

/// A launch's split-K: the kernels' `splits, part, counts` arguments, and the transient
/// block holding the parts (given back once the launch is queued).
struct Split {
    count: usize,
    part: u64,
    part_bytes: usize,
    counts: u64,
}

impl Split {
    const NONE: Split = Split {
        count: 1,
        part: 0,
        part_bytes: 0,
        counts: 0,
    };

    fn args(&self) -> [Arg; 3] {
        [
            Arg::I(self.count as i32),
            Arg::P(self.part),
            Arg::P(self.counts),
        ]
    }
}

/// Whether the projections of `n` token rows may read them as 8-bit activations (the GEMVs'
/// or MMQ's), so that their producers should quantize them on the way: a wasted copy only
/// when the weights turn out to have neither kernel (or, from 65 tokens, are large).
pub(super) fn takes_int8_activations(n: usize) -> bool {
    n <= GEMV_MAX_TOKENS || n <= mmq_max_tokens_set().unwrap_or(MMQ_MAX_TOKENS_SMALL)
}

/// `HEARTH_CUDA_MMQ_MAX_TOKENS`, read once.
fn mmq_max_tokens_set() -> Option<usize> {
    static MAX: OnceLock<Option<usize>> = OnceLock::new();
    *MAX.get_or_init(|| measurement_setting("HEARTH_CUDA_MMQ_MAX_TOKENS", 0..=4096))
}

/// A weight type's MMQ kernels: of one matrix, and of up to three sharing the activations;
/// for the f16 ones, the dynamic shared memory of a block.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct MmqKernel {
    one: &'static str,
    three: &'static str,
    f16_shared: Option<u32>,
}

impl MmqKernel {
    fn rows(&self) -> usize {
        if self.f16_shared.is_some() {
            MMF_ROWS
        } else {
            MMQ_ROWS
        }
    }

    /// Floats a thread keeps per tile (4 per 8-token column of fragments).
    fn sums_per_thread(&self) -> usize {
        if self.f16_shared.is_some() {
            16
        } else {
            8
        }
    }
}

/// The MMQ kernels for `n` tokens times weight `w`, if they take them.
fn mmq_kernel(w: &CudaWeight, n: usize) -> Option<MmqKernel> {
    if w.mlx.is_some() || !w.cols.is_multiple_of(32) || n > mmq_max_tokens(w) {
        return None;
    }
    // (int8 kernels, f16 kernels, bytes a staged row's 256 values take: kernels/mmq.cu's
    // W_STRIDE)
    let (int8, f16, w_stride) = match w.ty {
        GgmlType::Q8_0 => (("mmq_q8_0", "mmq3_q8_0"), ("mmf_q8_0", "mmf3_q8_0"), 304),
        GgmlType::Q4_K if w.cols.is_multiple_of(256) => {
            (("mmq_q4_k", "mmq3_q4_k"), ("mmf_q4_k", "mmf3_q4_k"), 176)
        }
        GgmlType::Q6_K if w.cols.is_multiple_of(256) => {
            (("mmq_q6_k", "mmq3_q6_k"), ("mmf_q6_k", "mmf3_q6_k"), 240)
        }
        _ => return None,
    };
    Some(if mmq_takes_f16_activations(w.rows, w.cols) {
        MmqKernel {
            one: f16.0,
            three: f16.1,
            f16_shared: Some(mmf_shared_bytes(w_stride)),
        }
    } else {
        MmqKernel {
            one: int8.0,
            three: int8.1,
            f16_shared: None,
        }
    })
}

impl CudaBackend {
    /// The MMQ kernels that take all of `ws` (same type and columns) times `n` tokens on this
    /// device, if any: batches past the GEMVs' ([`GEMV_MAX_TOKENS`]), on GPUs with int8 tensor
    /// cores.
    pub(super) fn mmq_for(&self, ws: &[&CudaWeight], n: usize) -> Option<MmqKernel> {
        if n <= GEMV_MAX_TOKENS || !self.dev.info().has_mma() {
            return None;
        }
        let first = ws.first()?;
        let kernel = mmq_kernel(first, n)?;
        ws.iter()
            .all(|w| w.cols == first.cols && mmq_kernel(w, n) == Some(kernel))
            .then_some(kernel)
    }

    /// `out (+)= W · x` for every token of `x`, the activations quantized to 8 bits first (or
    /// their copy kept from an earlier projection of the same rows).
    /// `kernel` is the weight's from [`Self::mmq_for`].
    pub(super) fn launch_mmq(
        &self,
        st: &mut State,
        kernel: MmqKernel,
        w: &CudaWeight,
        x: &CudaTensor,
        out: &CudaTensor,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let mut args = vec![Arg::P(w.ptr)];
        args.extend(self.mmq_activations(st, kernel, x)?);
        let (row_tiles, tok_tiles) = (w.rows.div_ceil(kernel.rows()), x.rows.div_ceil(MMQ_TOKENS));
        let split = self.mmq_split(st, kernel, row_tiles * tok_tiles, w.cols)?;
        let grid = (row_tiles as u32, (tok_tiles * split.count) as u32);
        args.extend([
            Arg::P(out.ptr),
            Arg::I(w.rows as i32),
            Arg::I(w.cols as i32),
            Arg::I(x.rows as i32),
            Arg::I(accumulate as i32),
        ]);
        args.extend(split.args());
        let launched = self.launch_mmq_kernel(st, kernel, kernel.one, grid, &args);
        self.end_split(st, split);
        launched
    }

    /// The activation arguments of `kernel`: `x` quantized to 8 bits (values, scales), or
    /// rounded to f16; either made once for all projections of the same rows.
    fn mmq_activations(
        &self,
        st: &mut State,
        kernel: MmqKernel,
        x: &CudaTensor,
    ) -> Result<Vec<Arg>, CudaError> {
        Ok(if kernel.f16_shared.is_some() {
            vec![Arg::P(self.halve_activations(st, x)?)]
        } else {
            let (xq, xds) = self.quantize_activations(st, x)?;
            vec![Arg::P(xq), Arg::P(xds)]
        })
    }

    fn launch_mmq_kernel(
        &self,
        st: &State,
        kernel: MmqKernel,
        name: &'static str,
        grid: (u32, u32),
        args: &[Arg],
    ) -> Result<(), CudaError> {
        let shared = kernel.f16_shared.unwrap_or(0);
        self.launch_with_shared(st, name, grid, MMQ_THREADS, shared, args)
    }

    /// The split-K of a launch of `tiles` tiles over `cols` columns: none where the tiles fill
    /// the GPU, the columns are short, nothing is launched (a replayed step) or the counters
    /// would have to grow while a step is being recorded.
    fn mmq_split(
        &self,
        st: &mut State,
        kernel: MmqKernel,
        tiles: usize,
        cols: usize,
    ) -> Result<Split, CudaError> {
        let sms = self.dev.info().sm_count as usize;
        let count = mmq_splits(tiles, cols, sms, mmq_split_blocks_per_sm());
        if count == 1 || !st.mode.launches() {
            return Ok(Split::NONE);
        }
        let stream = self.dev.stream().clone();
        let may_grow = st.mode == Mode::Eager;
        let Some((counts, replaced)) = st.counters.get(&stream, tiles * 4, may_grow)? else {
            return Ok(Split::NONE);
        };
        if replaced {
            // Recorded steps point at the old counters.
            st.drop_graphs();
        }
        let part_bytes = tiles * count * MMQ_THREADS as usize * kernel.sums_per_thread() * 4;
        let part = st.arena.alloc(&stream, part_bytes, may_grow)?;
        Ok(Split {
            count,
            part,
            part_bytes,
            counts,
        })
    }

    /// The parts' memory goes back once their launch is queued: the next kernel that could
    /// be handed it waits for this one (await_previous_kernels) before writing.
    fn end_split(&self, st: &mut State, split: Split) {
        if split.count > 1 {
            st.arena.give_back(split.part, split.part_bytes);
        }
    }

    /// `outs[i] = ws[i] · x` for two or three weights in one launch (q, k and v; gate and up),
    /// `kernel` from [`Self::mmq_for`] of them.
    pub(super) fn launch_mmq_segments(
        &self,
        st: &mut State,
        kernel: MmqKernel,
        ws: &[&CudaWeight],
        x: &CudaTensor,
        outs: &[&CudaTensor],
    ) -> Result<(), CudaError> {
        debug_assert!((2..=3).contains(&ws.len()) && ws.len() == outs.len());
        let activations = self.mmq_activations(st, kernel, x)?;
        let part = |i: usize| match (ws.get(i), outs.get(i)) {
            (Some(w), Some(o)) => (w.ptr, o.ptr, w.rows),
            _ => (0, 0, 0), // no third matrix: a segment of no blocks
        };
        let parts = [part(0), part(1), part(2)];
        let row_tiles: usize = parts.iter().map(|p| p.2.div_ceil(kernel.rows())).sum();
        let tok_tiles = x.rows.div_ceil(MMQ_TOKENS);
        let split = self.mmq_split(st, kernel, row_tiles * tok_tiles, ws[0].cols)?;
        let grid = (row_tiles as u32, (tok_tiles * split.count) as u32);
        let mut args = vec![Arg::P(parts[0].0), Arg::P(parts[1].0), Arg::P(parts[2].0)];
        args.extend(activations);
        args.extend([
            Arg::P(parts[0].1),
            Arg::P(parts[1].1),
            Arg::P(parts[2].1),
            Arg::I(parts[0].2 as i32),
            Arg::I(parts[1].2 as i32),
            Arg::I(parts[2].2 as i32),
            Arg::I(ws[0].cols as i32),
            Arg::I(x.rows as i32),
        ]);
        args.extend(split.args());
        let launched = self.launch_mmq_kernel(st, kernel, kernel.three, grid, &args);
        self.end_split(st, split);
        launched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fill_the_gpu_within_the_columns_steps() {
        // Llama-3.1-8B on an H100 (132 multiprocessors), 64 tokens (two token tiles).
        let sms = 132;
        assert_eq!(mmq_splits(128 * 2, 4096, sms, 2), 2, "q, o");
        assert_eq!(mmq_splits(32 * 2, 4096, sms, 2), 5, "k, v");
        assert_eq!(mmq_splits(896 * 2, 4096, sms, 2), 1, "gate and up");
        assert_eq!(mmq_splits(128 * 2, 14336, sms, 2), 2, "down");
        assert_eq!(mmq_splits(32 * 2, 4096, sms, 8), 8, "at most 8");
        // Short rows: at least two steps of 256 values a split.
        assert_eq!(mmq_splits(32, 1024, sms, 2), 2);
        assert_eq!(mmq_splits(32, 256, sms, 2), 1);
        // Off.
        assert_eq!(mmq_splits(32, 4096, sms, 0), 1);
    }

    #[test]
    fn f16_kernels_take_the_matrices_of_8b_models_not_those_of_sub_1b_ones() {
        if mmq_f16_set().is_some() {
            eprintln!("skipped: HEARTH_CUDA_MMQ_F16 is set");
            return;
        }
        // Llama-3.1-8B's k (the smallest) and gate; Qwen3-0.6B's gate (the largest) and q.
        assert!(mmq_takes_f16_activations(1024, 4096));
        assert!(mmq_takes_f16_activations(14336, 4096));
        assert!(!mmq_takes_f16_activations(3072, 1024));
        assert!(!mmq_takes_f16_activations(2048, 1024));
    }
}
