//! Kernel launches of the CUDA backend: argument packing and the matmul strategy.

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::driver::{sys, CudaFunction, LaunchConfig, PushKernelArg};
use hearth_quant::GgmlType;

use super::dependent_launch;
use super::state::{Halved, Mode, Quantized, State};
use super::{CudaBackend, CudaTensor, CudaWeight};
use crate::error::driver;
use crate::{gemv_supported, CudaError};

pub(super) const ELEMENTWISE_THREADS: u32 = 256;
/// Warps per block of the fused GEMV kernels and rows per warp (kernels/gemv.cu).
const GEMV_WARPS: u32 = 4;
const GEMV_ROWS_PER_WARP: u32 = 2;
/// Rows per warp of the int8 GEMV for short rows (`CudaBackend::q8a_rows4`).
const GEMV_ROWS4_PER_WARP: u32 = 4;
/// Up to this many tokens a matmul reads the weights once per token with the GEMV kernels;
/// beyond, it dequantizes them to f16 once and runs a cuBLAS GEMM on tensor cores.
pub(super) const GEMV_MAX_TOKENS: usize = 4;
/// The `mode` argument of the fused GEMV kernels (kernels/gemv.cu).
const GEMV_STORE_BLOCK: i32 = -1;
const GEMV_STORE: i32 = 0;
const GEMV_ACCUMULATE: i32 = 1;
const GEMV_GLU_SILU: i32 = 2;
const GEMV_GLU_GELU: i32 = 3;

/// The int8-activation GEMV kernels (single, three-matrix) for weight `w`, when its type has
/// them (kernels/gemv_q8a.cu).
///
/// NOTE (measured on an H100, 2026-11-22): against the f32-activation kernels, which are
/// bound by instruction issue, they take 1.4-2x less time on 8B-model matrices (cuda-conformance)
/// and up to 4 us more on 1024x1024 ones (the quantization launch); inside a decode graph both
/// sizes still gained (Llama-3.1-8B Q4_K_M tg128 162 -> 222 tok/s, Qwen3-0.6B 527 -> 551), so
/// every size uses them.
fn q8a_gemv(w: &CudaWeight) -> Option<(&'static str, &'static str)> {
    if !w.cols.is_multiple_of(32) {
        return None;
    }
    crate::ops::gemv_q8a_kernel_names(w.ty)
}

/// Columns up to which an int8 GEMV may quantize its activations itself, a block its own copy
/// (`CudaBackend::own_q8_fits`): the copy's shared memory (a byte a value and 8 a 32-value
/// group, 20 KiB here) next to the weight windows' 24 KiB stays within a block's default 48 KiB.
const OWN_Q8_MAX_COLS: usize = 16 << 10;

/// The most bytes of f32 activations the blocks of an int8 GEMV that quantize their own copy
/// read in all (blocks × tokens × columns × 4) by default: each block reads the whole row
/// again through L2 (`HEARTH_CUDA_OWN_Q8_BYTES` for measurements; 0: never).
///
/// NOTE (H200, `scripts/device/binary_ab.sh`, tg128 `--greedy`, tok/s, own copies off → on):
/// the down projections of Qwen3-0.6B Q8_0 (1.5 MB read) 1,318 / 1,314 → 1,340 / 1,344,
/// Qwen3-1.7B Q8_0 (6.3 MB) 840 / 839 → 858 / 859, Llama-3.2-1B Q8_0 (8.4 MB) 1,336 / 1,339
/// → 1,367 / 1,365; Llama-3.1-8B Q4_K_M (29 MB) 442.6 / 441.9 → 431.9 / 432.0.
pub(super) const OWN_Q8_BYTES: usize = 16 << 20;

/// The fused GEMV kernel for a weight of type `ty` with `cols` columns, if there is one.
fn fused_gemv(ty: GgmlType, cols: usize) -> Option<&'static str> {
    let ok = gemv_supported(ty) && (ty != GgmlType::F16 || cols.is_multiple_of(8));
    ok.then(|| crate::ops::gemv_kernel_name(ty)).flatten()
}

/// Weight types the element-wise dequantizer (kernels/dequant.cu) reads: those the CPU
/// dequantizes, less Q8_K (an activation format, never a stored weight).
pub(super) fn dequant_supported(ty: GgmlType) -> bool {
    hearth_quant::supports_dequantize(ty) && ty != GgmlType::Q8_K
}

pub(super) fn elementwise_blocks(n: usize) -> u32 {
    (n.div_ceil(ELEMENTWISE_THREADS as usize)).clamp(1, 4096) as u32
}

/// One kernel argument, by value.
#[derive(Clone, Copy)]
pub(super) enum Arg {
    /// A device address.
    P(u64),
    I(i32),
    F(f32),
}

/// Lets `f`'s blocks take `shared_bytes` of dynamic shared memory (a kernel must be allowed
/// more than the default 48 KiB first).
fn allow_shared(f: &CudaFunction, shared_bytes: u32) -> Result<(), CudaError> {
    if shared_bytes > 48 << 10 {
        f.set_attribute(
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared_bytes as i32,
        )
        .map_err(driver("kernel shared memory"))?;
    }
    Ok(())
}

/// GGML's number for the type, as kernels/dequant.cu switches on it.
fn type_code(ty: GgmlType) -> i32 {
    ty.id() as i32
}

impl CudaBackend {
    /// Launch `name` on a `grid` of `threads`-thread blocks, unless the pass replays a graph.
    pub(super) fn launch(
        &self,
        st: &State,
        name: &'static str,
        grid: (u32, u32),
        threads: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        self.launch_with_shared(st, name, grid, threads, 0, args)
    }

    /// How many `threads`-thread blocks of `name` with `shared_bytes` of dynamic shared memory
    /// a multiprocessor runs at once (the driver's occupancy; 0 when none fits).
    pub(super) fn resident_per_sm(
        &self,
        st: &mut State,
        name: &'static str,
        threads: u32,
        shared_bytes: u32,
    ) -> Result<usize, CudaError> {
        let key = (name, threads, shared_bytes);
        if let Some(&(_, n)) = st.resident.iter().find(|(k, _)| *k == key) {
            return Ok(n);
        }
        let f = self.dev.function(name)?;
        allow_shared(f, shared_bytes)?;
        let n = f
            .occupancy_max_active_blocks_per_multiprocessor(threads, shared_bytes as usize, None)
            .map_err(driver("kernel occupancy"))? as usize;
        st.resident.push((key, n));
        Ok(n)
    }

    /// As [`Self::launch`], with `shared_bytes` of dynamic shared memory a block (allowed for
    /// the kernel first where that is more than the default 48 KiB).
    pub(super) fn launch_with_shared(
        &self,
        st: &State,
        name: &'static str,
        grid: (u32, u32),
        threads: u32,
        shared_bytes: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        // A kernel handed the rows behind a kept copy may change them: the copy goes.
        for a in args {
            if let Arg::P(p) = a {
                st.forget_copies_of(*p);
            }
        }
        if !st.mode.launches() || grid.0 == 0 || grid.1 == 0 {
            return Ok(());
        }
        if st.mode == Mode::Eager {
            // It would queue behind a step waiting for the next pass (`step_gate.rs`).
            self.settle_ahead();
        }
        let f = self.dev.function(name)?;
        allow_shared(f, shared_bytes)?;
        if self.overlap_launches {
            let stream = self.dev.stream().cu_stream();
            // SAFETY: as below; every kernel calls await_previous_kernels (checked by
            // compile.rs's tests) before it reads another kernel's results or writes.
            return unsafe {
                dependent_launch::launch_overlapping(
                    f.cu_function(),
                    stream,
                    grid,
                    threads,
                    shared_bytes,
                    args,
                )
            };
        }
        let mut b = self.dev.stream().launch_builder(f);
        for a in args {
            match a {
                Arg::P(v) => b.arg(v),
                Arg::I(v) => b.arg(v),
                Arg::F(v) => b.arg(v),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: (grid.0, grid.1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: shared_bytes,
        };
        // SAFETY: every caller passes the kernel's parameters in order with matching types,
        // and device addresses of buffers sized for the launch (checked by the callers).
        unsafe { b.launch(cfg) }.map_err(driver("kernel launch"))?;
        Ok(())
    }

    /// An element-wise kernel over `n` values: its arguments, then n.
    pub(super) fn launch_elementwise(
        &self,
        st: &State,
        name: &'static str,
        args: &[Arg],
        n: usize,
    ) -> Result<(), CudaError> {
        // The arguments, then n, without allocating (this runs for every element-wise op).
        let mut all = [Arg::I(0); 4];
        all[..args.len()].copy_from_slice(args);
        all[args.len()] = Arg::I(n as i32);
        let all = &all[..=args.len()];
        self.launch(
            st,
            name,
            (elementwise_blocks(n), 1),
            ELEMENTWISE_THREADS,
            all,
        )
    }

    pub(super) fn launch_embed(
        &self,
        st: &State,
        table: &CudaWeight,
        ids: u64,
        out: &CudaTensor,
    ) -> Result<(), CudaError> {
        if let Some(m) = &table.mlx {
            return self.launch_mlx_embed(st, table, m, ids, out);
        }
        self.launch(
            st,
            "embed_rows",
            (out.rows as u32, 1),
            256,
            &[
                Arg::P(table.ptr),
                Arg::I(type_code(table.ty)),
                Arg::I(table.cols as i32),
                Arg::P(ids),
                Arg::P(out.ptr),
            ],
        )
    }

    /// Whether an int8 GEMV of `rows` × `cols` weights times `tokens` rows whose 8-bit copy
    /// no kernel has made quantizes them itself, each block its own copy (kernels/gemv_q8a.cu
    /// `OwnQ8`), rather than after a quantize_q8_1 launch: where the rows fill whole blocks
    /// (every warp takes part in the copy), the copy fits OWN_Q8_MAX_COLS, and the blocks'
    /// reads of the f32 rows stay within `own_q8_bytes`.
    pub(super) fn own_q8_fits(&self, rows: usize, cols: usize, tokens: usize) -> bool {
        let per_block = (GEMV_WARPS * GEMV_ROWS_PER_WARP) as usize;
        let reads = (rows / per_block)
            .saturating_mul(tokens)
            .saturating_mul(cols * 4);
        rows.is_multiple_of(per_block)
            && cols.is_multiple_of(32)
            && cols <= OWN_Q8_MAX_COLS
            && tokens <= GEMV_MAX_TOKENS
            && reads <= self.own_q8_bytes
    }

    /// The int8 GEMV that takes four rows a warp, for a weight whose rows fit its window
    /// whole (`ops::gemv_q8a_rows4_kernel`), unless turned off.
    ///
    /// NOTE: what it measured is at `gemv_rows4_q8a` (kernels/gemv_q8a.cu).
    pub(super) fn q8a_rows4(&self, w: &CudaWeight) -> Option<&'static str> {
        let (name, max_cols) = crate::ops::gemv_q8a_rows4_kernel(w.ty)?;
        (self.rows4 && w.cols <= max_cols && w.mlx.is_none()).then_some(name)
    }

    /// Transient room for `n` values quantized to 8 bits: the values and a (d, d·Σq) pair of
    /// f32 per 32-value group.
    pub(super) fn alloc_q8(&self, st: &mut State, n: usize) -> Result<(u64, u64), CudaError> {
        let may_grow = st.mode == Mode::Eager;
        let stream = self.dev.stream().clone();
        let q = st.arena.alloc(&stream, n, may_grow)?;
        let ds = st.arena.alloc(&stream, n / 32 * 8, may_grow)?;
        Ok((q, ds))
    }

    /// Room for a GLU GEMV's output quantized to 8 bits, and its group counters: `None` when
    /// the rows do not form whole 32-value groups, or the counters would have to grow while
    /// a graph is being recorded.
    fn glu_output_q8(
        &self,
        st: &mut State,
        rows: usize,
        tokens: usize,
    ) -> Result<Option<(u64, u64, u64)>, CudaError> {
        if !rows.is_multiple_of(32) {
            return Ok(None);
        }
        let stream = self.dev.stream().clone();
        let may_grow = st.mode == Mode::Eager;
        let Some((counts, replaced)) =
            st.counters.get(&stream, rows / 32 * tokens * 4, may_grow)?
        else {
            return Ok(None);
        };
        if replaced {
            // Recorded steps point at the old counters.
            st.drop_graphs();
        }
        let (yq, yds) = self.alloc_q8(st, rows * tokens)?;
        Ok(Some((yq, yds, counts)))
    }

    /// `x` quantized to int8 per 32-value group in transient memory, for the int8-activation
    /// GEMV kernels: the device addresses of the values and of the (d, d·Σq) pairs.
    pub(super) fn quantize_activations(
        &self,
        st: &mut State,
        x: &CudaTensor,
    ) -> Result<(u64, u64), CudaError> {
        if let Some(kept) = st.quantized.get().filter(|k| k.of == x.ptr) {
            return Ok((kept.q, kept.ds));
        }
        let n = x.len();
        let (xq, xds) = self.alloc_q8(st, n)?;
        let groups = (n / 32) as u32;
        let threads = crate::ops::QUANTIZE_THREADS;
        self.launch(
            st,
            "quantize_q8_1",
            (groups.div_ceil(threads / 32), 1),
            threads,
            &[Arg::P(x.ptr), Arg::P(xq), Arg::P(xds), Arg::I(n as i32)],
        )?;
        // The next projection of the same rows (k and v after q) reuses the copy.
        st.quantized.set(Some(Quantized {
            of: x.ptr,
            q: xq,
            ds: xds,
        }));
        Ok((xq, xds))
    }

    /// `out[t] = W · x[t]` for every token t; see [`GEMV_MAX_TOKENS`] for the strategy.
    /// `out (+)= W · x`; `accumulate` adds to what `out` holds.
    pub(super) fn launch_matmul(
        &self,
        st: &mut State,
        w: &CudaWeight,
        x: &CudaTensor,
        out: &CudaTensor,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let n = x.rows;
        if let Some(m) = &w.mlx {
            if n > GEMV_MAX_TOKENS && self.blas.usable(&self.dev, st.mode) {
                return self.gemm(st, w, x, out, accumulate);
            }
            return self.launch_mlx_gemv(st, w, m, x, out, accumulate);
        }
        if let Some(kernel) = self.mmq_for(&[w], n) {
            return self.launch_mmq(st, kernel, w, x, out, accumulate);
        }
        // The GEMM path dequantizes whole 32-value groups (kernels/dequant.cu).
        if n > GEMV_MAX_TOKENS && w.cols.is_multiple_of(32) && self.blas.usable(&self.dev, st.mode)
        {
            return self.gemm(st, w, x, out, accumulate);
        }
        let mode = if accumulate {
            GEMV_ACCUMULATE
        } else {
            GEMV_STORE
        };
        if let Some((name, _)) = q8a_gemv(w) {
            return self.launch_q8a_gemv(st, name, w, x, out.ptr, mode);
        }
        if let Some(name) = fused_gemv(w.ty, w.cols) {
            let per_warp = if w.ty == GgmlType::F16 {
                1
            } else {
                GEMV_ROWS_PER_WARP
            };
            let blocks = (w.rows as u32).div_ceil(GEMV_WARPS * per_warp);
            let args = [
                Arg::P(w.ptr),
                Arg::P(0),
                Arg::P(x.ptr),
                Arg::P(out.ptr),
                Arg::I(w.rows as i32),
                Arg::I(w.cols as i32),
                Arg::I(mode),
            ];
            self.launch(st, name, (blocks, n as u32), GEMV_WARPS * 32, &args)
        } else {
            let blocks = (w.rows as u32).div_ceil(GEMV_WARPS);
            self.launch(
                st,
                "gemv_any",
                (blocks, n as u32),
                GEMV_WARPS * 32,
                &[
                    Arg::P(w.ptr),
                    Arg::I(type_code(w.ty)),
                    Arg::P(x.ptr),
                    Arg::P(out.ptr),
                    Arg::I(w.rows as i32),
                    Arg::I(w.cols as i32),
                    Arg::I(accumulate as i32),
                ],
            )
        }
    }

    /// `y (+)= W · x` by the int8-activation GEMV `name` (`q8a_gemv`), `mode` one of the
    /// GEMV_* modes; `y` any address the device writes (the arena, or page-locked memory).
    fn launch_q8a_gemv(
        &self,
        st: &mut State,
        name: &'static str,
        w: &CudaWeight,
        x: &CudaTensor,
        y: u64,
        mode: i32,
    ) -> Result<(), CudaError> {
        // NOTE (H200, BENCHMARKS.md, 2026-11-29, closing): the output matrix's 19k
        // blocks run as one grid the GPU holds at once instead, each warp taking row pairs
        // in turn and copying the next pair's weights in while it decoded the last, were no
        // faster: Qwen3-0.6B tg128 `--greedy` 1,384 either way, Llama-3.2-1B Q8_0 1,366
        // against 1,378 tok/s; asking L2 for the pair after next as well, 1,328.
        // NOTE (H200, BENCHMARKS.md, 2026-11-30, small hours): part of the output matrix kept in
        // L2 from step to step (an L2 set-aside for persisting accesses, its kernels launched
        // with an access-policy window over the matrix) gained at most 0.3% with 16 MiB and
        // lost 0.5% with 32 MiB; a set-aside of 32 MiB cost pp512 14%. Not kept.
        let blocks = (w.rows as u32).div_ceil(GEMV_WARPS * GEMV_ROWS_PER_WARP);
        let kept = st.quantized.get().is_some_and(|k| k.of == x.ptr);
        let own = crate::ops::gemv_q8a_own_kernel_name(w.ty);
        if let Some(own) = own.filter(|_| !kept && self.own_q8_fits(w.rows, w.cols, x.rows)) {
            // A byte a value and a (d, d·Σq) pair a group, as quantize_q8_1 writes them.
            let shared = (w.cols + w.cols / 32 * 8) as u32;
            let args = [
                Arg::P(w.ptr),
                Arg::P(x.ptr),
                Arg::P(y),
                Arg::I(w.rows as i32),
                Arg::I(w.cols as i32),
                Arg::I(mode),
            ];
            let grid = (blocks, x.rows as u32);
            return self.launch_with_shared(st, own, grid, GEMV_WARPS * 32, shared, &args);
        }
        let (xq, xds) = self.quantize_activations(st, x)?;
        // GEMV_STORE_BLOCK stores whole blocks: 16 rows of these kernels.
        let whole_blocks = w
            .rows
            .is_multiple_of((GEMV_WARPS * GEMV_ROWS4_PER_WARP) as usize);
        let rows4 = self
            .q8a_rows4(w)
            .filter(|_| mode != GEMV_STORE_BLOCK || whole_blocks);
        if let Some(rows4) = rows4 {
            self.rows4_launches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let args = [
                Arg::P(w.ptr),
                Arg::P(xq),
                Arg::P(xds),
                Arg::P(y),
                Arg::I(w.rows as i32),
                Arg::I(w.cols as i32),
                Arg::I(mode),
            ];
            let blocks = (w.rows as u32).div_ceil(GEMV_WARPS * GEMV_ROWS4_PER_WARP);
            return self.launch(st, rows4, (blocks, x.rows as u32), GEMV_WARPS * 32, &args);
        }
        let args = [
            Arg::P(w.ptr),
            Arg::P(0),
            Arg::P(xq),
            Arg::P(xds),
            Arg::P(y),
            Arg::I(w.rows as i32),
            Arg::I(w.cols as i32),
            Arg::I(mode),
            Arg::P(0),
            Arg::P(0),
            Arg::P(0),
        ];
        self.launch(st, name, (blocks, x.rows as u32), GEMV_WARPS * 32, &args)
    }

    /// `out = W · x` into page-locked host memory at `out` (`x.rows * w.rows` f32), each
    /// block's rows as one store (GEMV_STORE_BLOCK), where an int8 GEMV computes it: a few
    /// tokens, rows in whole blocks. `Ok(false)`: nothing launched, the caller multiplies
    /// into device memory instead.
    pub(super) fn launch_matmul_to_host(
        &self,
        st: &mut State,
        w: &CudaWeight,
        x: &CudaTensor,
        out: u64,
    ) -> Result<bool, CudaError> {
        let whole_blocks = w
            .rows
            .is_multiple_of((GEMV_WARPS * GEMV_ROWS_PER_WARP) as usize);
        let gemv = x.rows <= GEMV_MAX_TOKENS && w.mlx.is_none() && whole_blocks;
        let Some((name, _)) = q8a_gemv(w).filter(|_| gemv) else {
            return Ok(false);
        };
        self.launch_q8a_gemv(st, name, w, x, out, GEMV_STORE_BLOCK)?;
        Ok(true)
    }

    /// The three projections in one launch when their weights share a fused GEMV type and the
    /// batch is small; `Ok(false)` when the caller must run them one by one.
    pub(super) fn launch_matmul3(
        &self,
        st: &mut State,
        w: [&CudaWeight; 3],
        x: &CudaTensor,
        out: [&CudaTensor; 3],
    ) -> Result<bool, CudaError> {
        if let Some(kernel) = self.mmq_for(&w, x.rows) {
            self.launch_mmq_segments(st, kernel, &w, x, &out)?;
            return Ok(true);
        }
        if x.rows <= GEMV_MAX_TOKENS && self.launch_matmul3_mixed(st, w, x, out)? {
            return Ok(true);
        }
        let same = w.iter().all(|m| m.ty == w[0].ty && m.cols == w[0].cols);
        let quantized = w[0].ty != GgmlType::F16;
        if !same
            || !quantized
            || x.rows > GEMV_MAX_TOKENS
            || fused_gemv(w[0].ty, w[0].cols).is_none()
        {
            return Ok(false);
        }
        let name = match w[0].ty {
            GgmlType::Q8_0 => "gemv3_q8_0",
            GgmlType::Q4_0 => "gemv3_q4_0",
            GgmlType::Q4_K => "gemv3_q4_k",
            GgmlType::Q6_K => "gemv3_q6_k",
            _ => return Ok(false),
        };
        let per_block = GEMV_WARPS * GEMV_ROWS_PER_WARP;
        let blocks: u32 = w.iter().map(|m| (m.rows as u32).div_ceil(per_block)).sum();
        if let Some((_, name3)) = q8a_gemv(w[0]).filter(|_| w.iter().all(|m| q8a_gemv(m).is_some()))
        {
            self.launch_gemv3_q8a(st, name3, w, x, out, false)?;
            return Ok(true);
        }
        let args = [
            Arg::P(w[0].ptr),
            Arg::P(w[1].ptr),
            Arg::P(w[2].ptr),
            Arg::P(x.ptr),
            Arg::P(out[0].ptr),
            Arg::P(out[1].ptr),
            Arg::P(out[2].ptr),
            Arg::I(w[0].rows as i32),
            Arg::I(w[1].rows as i32),
            Arg::I(w[2].rows as i32),
            Arg::I(w[0].cols as i32),
        ];
        self.launch(st, name, (blocks, x.rows as u32), GEMV_WARPS * 32, &args)?;
        Ok(true)
    }

    /// The three projections in one int8-activation GEMV launch when their types differ but
    /// each has such a kernel (Q4_K_M files keep v, and some layers' k, in Q6_K): otherwise
    /// they are three launches, two of them too small to fill the GPU. `Ok(false)` when the
    /// types are all the same (the typed kernel takes them) or one lacks an int8 kernel.
    ///
    /// NOTE (H100, `hearth bench` tg128, two rounds in one call): Llama-3.1-8B Q4_K_M 291.7 /
    /// 291.9 -> 300.9 / 302.4 tok/s, Qwen3-0.6B Q4_K_M 752.7 / 764.0 -> 797.7 / 802.6.
    fn launch_matmul3_mixed(
        &self,
        st: &mut State,
        w: [&CudaWeight; 3],
        x: &CudaTensor,
        out: [&CudaTensor; 3],
    ) -> Result<bool, CudaError> {
        let mixed = w.iter().any(|m| m.ty != w[0].ty);
        let int8 = w
            .iter()
            .all(|m| q8a_gemv(m).is_some() && m.cols == w[0].cols);
        if !mixed || !int8 {
            return Ok(false);
        }
        self.launch_gemv3_q8a(st, "gemv3_q8a_mixed", w, x, out, true)?;
        Ok(true)
    }

    /// A three-matrix int8-activation GEMV kernel (kernels/gemv_q8a.cu) after quantizing `x`;
    /// `with_types`: the kernel also takes the matrices' GGML type codes.
    fn launch_gemv3_q8a(
        &self,
        st: &mut State,
        name: &'static str,
        w: [&CudaWeight; 3],
        x: &CudaTensor,
        out: [&CudaTensor; 3],
        with_types: bool,
    ) -> Result<(), CudaError> {
        let per_block = GEMV_WARPS * GEMV_ROWS_PER_WARP;
        let blocks: u32 = w.iter().map(|m| (m.rows as u32).div_ceil(per_block)).sum();
        let (xq, xds) = self.quantize_activations(st, x)?;
        let args = [
            Arg::P(w[0].ptr),
            Arg::P(w[1].ptr),
            Arg::P(w[2].ptr),
            Arg::P(xq),
            Arg::P(xds),
            Arg::P(out[0].ptr),
            Arg::P(out[1].ptr),
            Arg::P(out[2].ptr),
            Arg::I(w[0].rows as i32),
            Arg::I(w[1].rows as i32),
            Arg::I(w[2].rows as i32),
            Arg::I(w[0].cols as i32),
            Arg::I(type_code(w[0].ty)),
            Arg::I(type_code(w[1].ty)),
            Arg::I(type_code(w[2].ty)),
        ];
        let n_args = if with_types { 15 } else { 12 };
        let grid = (blocks, x.rows as u32);
        self.launch(st, name, grid, GEMV_WARPS * 32, &args[..n_args])
    }

    /// `out = act(G · x) * (U · x)` in one GEMV pass when both weights have the same type
    /// with a fused kernel and the batch is small; `Ok(false)` when the caller must compose it.
    pub(super) fn launch_gated(
        &self,
        st: &mut State,
        gate: &CudaWeight,
        up: &CudaWeight,
        x: &CudaTensor,
        gelu: bool,
        out: &CudaTensor,
    ) -> Result<bool, CudaError> {
        let same = gate.ty == up.ty && (gate.rows, gate.cols) == (up.rows, up.cols);
        let name = match fused_gemv(gate.ty, gate.cols) {
            Some(name) if same && x.rows <= GEMV_MAX_TOKENS => name,
            _ => return Ok(false),
        };
        let mode = if gelu { GEMV_GLU_GELU } else { GEMV_GLU_SILU };
        let blocks = (gate.rows as u32).div_ceil(GEMV_WARPS);
        if let Some((q8a_name, _)) = q8a_gemv(gate) {
            let (xq, xds) = self.quantize_activations(st, x)?;
            // The output's 8-bit copy for the down projection, written by the same launch,
            // unless the down projection (gate.cols rows of gate.rows columns) will quantize
            // its blocks' own copies: the copy's last step (quantize_when_complete, after a
            // fence and an atomic) ends this kernel later than that costs the down kernel.
            let out_q8 = if self.own_q8_fits(gate.cols, gate.rows, x.rows) {
                None
            } else {
                self.glu_output_q8(st, gate.rows, x.rows)?
            };
            let (yq, yds, counts) = out_q8.unwrap_or((0, 0, 0));
            let args = [
                Arg::P(gate.ptr),
                Arg::P(up.ptr),
                Arg::P(xq),
                Arg::P(xds),
                Arg::P(out.ptr),
                Arg::I(gate.rows as i32),
                Arg::I(gate.cols as i32),
                Arg::I(mode),
                Arg::P(yq),
                Arg::P(yds),
                Arg::P(counts),
            ];
            self.launch(
                st,
                q8a_name,
                (blocks, x.rows as u32),
                GEMV_WARPS * 32,
                &args,
            )?;
            if out_q8.is_some() {
                st.quantized.set(Some(Quantized {
                    of: out.ptr,
                    q: yq,
                    ds: yds,
                }));
            }
            return Ok(true);
        }
        let args = [
            Arg::P(gate.ptr),
            Arg::P(up.ptr),
            Arg::P(x.ptr),
            Arg::P(out.ptr),
            Arg::I(gate.rows as i32),
            Arg::I(gate.cols as i32),
            Arg::I(mode),
        ];
        self.launch(st, name, (blocks, x.rows as u32), GEMV_WARPS * 32, &args)?;
        Ok(true)
    }

    /// Weights (dequantized to f16 unless they are f16) times activations (rounded to f16) on
    /// tensor cores, f32 accumulation and output.
    pub(super) fn gemm(
        &self,
        st: &mut State,
        w: &CudaWeight,
        x: &CudaTensor,
        out: &CudaTensor,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        // cuBLAS writes `out` outside `launch`, which forgets a kept 8-bit copy of it.
        st.forget_copies_of(out.ptr);
        let may_grow = st.mode == Mode::Eager;
        let stream = self.dev.stream().clone();
        if w.ty == GgmlType::F32 {
            // f32 weights stay exact: an f32 GEMM on the activations as they are.
            return self.gemm_rows(
                st,
                w,
                (x.ptr, w.ptr),
                cudaDataType::CUDA_R_32F,
                x.rows,
                out,
                accumulate,
                GemmRows::all(w),
            );
        }
        if w.ty == GgmlType::F16 {
            let b = self.halve_activations(st, x)?;
            return self.gemm_rows(
                st,
                w,
                (b, w.ptr),
                cudaDataType::CUDA_R_16F,
                x.rows,
                out,
                accumulate,
                GemmRows::all(w),
            );
        }
        // The weights' f16 values go through one kept buffer, a chunk of rows at a time.
        // NOTE: they were allocated from the pass's transient memory, matrix after matrix, so a
        // prompt step held an f16 copy of the whole model at its end: 2 GB more GPU memory
        // after one 600-token prompt to a Qwen3-0.6B (H100, nvidia-smi).
        let chunk = match &w.mlx {
            // The MLX dequantizer takes whole matrices.
            Some(_) => w.rows,
            None => dequant_chunk_rows(w.rows, w.cols),
        };
        let Some((a, replaced)) = st.dequantized.get(&stream, chunk * w.cols * 2, may_grow)? else {
            return Err(CudaError::Driver {
                during: "graph recording",
                message: "the step needs a larger f16 weight buffer than the last one".into(),
            });
        };
        if replaced {
            // Recorded steps point at the old buffer.
            st.drop_graphs();
        }
        let b = self.halve_activations(st, x)?;
        let row_bytes = w.ty.bytes_for(w.cols as u64).unwrap_or(0) as usize;
        for r0 in (0..w.rows).step_by(chunk) {
            let rows = chunk.min(w.rows - r0);
            if let Some(m) = &w.mlx {
                self.launch_mlx_dequant(st, w, m, a)?;
            } else {
                self.launch(
                    st,
                    crate::ops::dequant_f16_kernel_name(w.ty),
                    (crate::ops::dequant_blocks(rows, w.cols), 1),
                    crate::ops::DEQUANT_THREADS,
                    &[
                        Arg::P(w.ptr + (r0 * row_bytes) as u64),
                        Arg::I(type_code(w.ty)),
                        Arg::I(rows as i32),
                        Arg::I(w.cols as i32),
                        Arg::P(a),
                    ],
                )?;
            }
            let part = GemmRows {
                first: r0,
                count: rows,
            };
            self.gemm_rows(
                st,
                w,
                (b, a),
                cudaDataType::CUDA_R_16F,
                x.rows,
                out,
                accumulate,
                part,
            )?;
        }
        Ok(())
    }

    /// `x` rounded to f16 in transient memory for a cuBLAS GEMM, or the copy made for an
    /// earlier projection of the same rows.
    pub(super) fn halve_activations(
        &self,
        st: &mut State,
        x: &CudaTensor,
    ) -> Result<u64, CudaError> {
        if let Some(kept) = st.halved.get().filter(|h| h.of == x.ptr) {
            return Ok(kept.at);
        }
        let may_grow = st.mode == Mode::Eager;
        let stream = self.dev.stream().clone();
        let bytes = x.len() * 2;
        let at = st.arena.alloc(&stream, bytes, may_grow)?;
        self.launch_elementwise(st, "f32_to_f16", &[Arg::P(x.ptr), Arg::P(at)], x.len())?;
        // The copy this one replaces was used by GEMMs already queued: its memory may go to
        // later work, which the stream orders after them.
        if let Some(old) = st.halved.replace(Some(Halved {
            of: x.ptr,
            at,
            bytes,
        })) {
            st.arena.give_back(old.at, old.bytes);
        }
        Ok(at)
    }

    /// `out (+)= A · B` through cuBLAS for `part` of the weight's rows: A = those rows' values
    /// at `a` (from the part's first row), B = the activations at `b`, both of type `ab`; f32
    /// accumulation, the outputs of those rows.
    #[allow(clippy::too_many_arguments)]
    fn gemm_rows(
        &self,
        st: &State,
        w: &CudaWeight,
        (b, a): (u64, u64),
        ab: cudaDataType,
        n_tokens: usize,
        out: &CudaTensor,
        accumulate: bool,
        part: GemmRows,
    ) -> Result<(), CudaError> {
        if !st.mode.launches() {
            return Ok(());
        }
        let Some(blas) = self.blas.get(&self.dev, st.mode) else {
            return Err(CudaError::Unsupported {
                op: "gemm without cuBLAS",
                ty: w.ty,
            });
        };
        let (alpha, beta) = (1f32, if accumulate { 1f32 } else { 0f32 });
        // Row-major out[n, rows] is column-major [rows, n] = Wᵀ-view · x-view (see the note in
        // the module of the GEMV kernels for the layouts): A = W as [cols, rows] transposed.
        // A part of the rows is a block of `part.count` rows of that column-major view, whose
        // columns stay `w.rows` apart.
        let c = out.ptr + (part.first * 4) as u64;
        // SAFETY: a holds part.count*cols values and b n*cols values of type `ab`; out holds
        // n*rows f32, of which the part writes rows first..first+count of each token.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *blas.handle.handle(),
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                part.count as i32,
                n_tokens as i32,
                w.cols as i32,
                &alpha as *const f32 as *const _,
                a as *const _,
                ab,
                w.cols as i32,
                b as *const _,
                ab,
                w.cols as i32,
                &beta as *const f32 as *const _,
                c as *mut _,
                cudaDataType::CUDA_R_32F,
                w.rows as i32,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| CudaError::Driver {
            during: "cuBLAS GEMM",
            message: format!("{e:?}"),
        })
    }
}

/// A range of a weight's rows for one cuBLAS call.
#[derive(Clone, Copy)]
struct GemmRows {
    first: usize,
    count: usize,
}

impl GemmRows {
    fn all(w: &CudaWeight) -> Self {
        Self {
            first: 0,
            count: w.rows,
        }
    }
}

/// f16 values of a weight dequantized for cuBLAS at once: 64 MiB of memory kept for it.
const DEQUANT_CHUNK_VALUES: usize = 32 << 20;

/// Rows of an `n_rows x n_cols` weight per dequantized chunk: as many as DEQUANT_CHUNK_VALUES
/// holds, a multiple of 128 (whole tiles of cuBLAS, and 16-byte aligned starts in every block
/// layout, whose block sizes are even) unless the whole matrix fits.
fn dequant_chunk_rows(n_rows: usize, n_cols: usize) -> usize {
    let fit = DEQUANT_CHUNK_VALUES / n_cols.max(1);
    if fit >= n_rows {
        n_rows
    } else {
        (fit / 128 * 128).max(128)
    }
}
