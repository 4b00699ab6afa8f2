//! The matmul entry point: `out[t, r] = dot(W[r, :], x[t, :])` for a quantized weight matrix.
//!
//! ```text
//!   x [n_tokens, cols] f32 ──quantize once──► act [n_tokens, act_row_bytes] (vec_dot_type)
//!   W [rows, cols] (row-major blocks)
//!   rows are split into chunks across the rayon pool; each chunk keeps its weight rows hot
//!   while every token passes over them:
//!       for chunk in row_chunks (parallel):
//!           for t in 0..n_tokens (4 at a time where a multi-token kernel exists):
//!               for r in chunk: out[t * rows + r] = dot(W[r], act[t])
//!   types with packed tiles (Q4_0 / Q4_1 / Q5_0 / Q8_0 on AVX-512) instead pack act once and
//!   each chunk's rows once, then run 4-row x 4-token tiles on the packed data.
//! ```
//!
//! Batch invariance: every kernel a (row, token) pair can go through (one-row, one-row x
//! 4-token, packed tile) adds that pair's blocks with the same float operations in the same
//! order, so `out[t, r]` has the same bits whatever `n_tokens`, the token's place among them
//! and the thread count. A request thus gets the same tokens alone or batched with others.

use std::cell::RefCell;

use rayon::prelude::*;

use crate::dot::{fast_kernel_x4, fast_packed, kernel_and_act, vec_dot_type, DotFn, PackedTile};
use crate::error::{check_len, row_bytes};
use crate::quantize_act::quantize_activations;
use crate::{GgmlType, QuantError};

/// A weight matrix in GGUF layout: `rows` rows of `cols` elements (`cols` = ggml `ne0`), each
/// row `ty.bytes_for(cols)` bytes, rows back to back.
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    pub ty: GgmlType,
    pub data: &'a [u8],
    pub rows: usize,
    pub cols: usize,
}

impl<'a> WeightMatrix<'a> {
    /// Checks that `cols` is a whole number of blocks and `data` holds exactly `rows` rows.
    pub fn new(ty: GgmlType, data: &'a [u8], rows: usize, cols: usize) -> Result<Self, QuantError> {
        let row = row_bytes(ty, cols)?;
        let expected = row.checked_mul(rows).ok_or(QuantError::Length {
            ty,
            what: "weight matrix size",
            expected: usize::MAX,
            got: data.len(),
        })?;
        check_len(ty, "weight matrix bytes", expected, data.len())?;
        Ok(WeightMatrix {
            ty,
            data,
            rows,
            cols,
        })
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.data.len().checked_div(self.rows).unwrap_or(0)
    }

    /// The bytes of row `r` (`r < rows`, checked by callers).
    fn row(&self, r: usize, row_bytes: usize) -> &'a [u8] {
        &self.data[r * row_bytes..(r + 1) * row_bytes]
    }
}

/// True when [`matmul`] has a kernel for weight type `ty`.
pub fn supports_matmul(ty: GgmlType) -> bool {
    kernel_and_act(ty, "matmul").is_ok()
}

/// Minimum rows per parallel task: below this the task overhead outweighs the work.
const MIN_CHUNK_ROWS: usize = 16;
/// Most rows per task when several tokens pass over a chunk (keeps the chunk in L2).
const MAX_PREFILL_CHUNK_ROWS: usize = 64;
/// Matrices with fewer multiply-adds than this run on the calling thread.
const SERIAL_WORK: usize = 1 << 16;

thread_local! {
    /// Quantized activations, reused across calls on this thread.
    static ACT_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Packed activations of the prefill tiles, reused across calls on this thread.
    static PACK_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Packed weight rows of the chunk this thread works on.
    static W_PACK_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `out[t * rows + r] = dot(W[r, :], x[t, :])` for `t in 0..n_tokens`; `x` is
/// `[n_tokens, cols]` f32 and `out` is `[n_tokens, rows]`.
///
/// Quantizes `x` once to the weight's `vec_dot_type`, then splits rows across the current
/// rayon pool.
pub fn matmul(
    w: &WeightMatrix,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
) -> Result<(), QuantError> {
    let (dot, act_ty) = kernel_and_act(w.ty, "matmul")?;
    let overflow = |what| QuantError::Length {
        ty: w.ty,
        what,
        expected: usize::MAX,
        got: 0,
    };
    let x_len = n_tokens
        .checked_mul(w.cols)
        .ok_or(overflow("activations"))?;
    check_len(w.ty, "activations (n_tokens * cols)", x_len, x.len())?;
    let out_len = n_tokens.checked_mul(w.rows).ok_or(overflow("output"))?;
    check_len(w.ty, "output (n_tokens * rows)", out_len, out.len())?;
    if n_tokens == 0 || w.rows == 0 {
        return Ok(());
    }
    let act_row = row_bytes(act_ty, w.cols)?;
    ACT_SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => run(w, x, n_tokens, out, dot, act_ty, act_row, &mut scratch),
        // NOTE: re-entered on this thread (a rayon worker stealing another matmul while it
        // waits); use a fresh buffer rather than share one.
        Err(_) => run(w, x, n_tokens, out, dot, act_ty, act_row, &mut Vec::new()),
    })
}

#[allow(clippy::too_many_arguments)]
fn run(
    w: &WeightMatrix,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
    dot: DotFn,
    act_ty: GgmlType,
    act_row: usize,
    scratch: &mut Vec<u8>,
) -> Result<(), QuantError> {
    scratch.resize(n_tokens * act_row, 0);
    for (xr, ar) in x
        .chunks_exact(w.cols)
        .zip(scratch.chunks_exact_mut(act_row))
    {
        quantize_activations(act_ty, xr, ar)?;
    }
    let act: &[u8] = scratch;
    let row_bytes = w.row_bytes();
    let threads = rayon::current_num_threads();
    let serial = threads == 1 || w.rows * w.cols * n_tokens < SERIAL_WORK;
    if n_tokens == 1 {
        let one = |r0: usize, o: &mut [f32]| {
            for (k, v) in o.iter_mut().enumerate() {
                *v = dot(w.row(r0 + k, row_bytes), act);
            }
        };
        if serial {
            one(0, out);
        } else {
            // NOTE: ~4 chunks per thread balances uneven core speeds with little overhead.
            let chunk = w.rows.div_ceil(threads * 4).max(MIN_CHUNK_ROWS);
            out.par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(c, o)| one(c * chunk, o));
        }
        return Ok(());
    }
    let rows = w.rows;
    let chunk = rows
        .div_ceil(threads * 4)
        .clamp(MIN_CHUNK_ROWS, MAX_PREFILL_CHUNK_ROWS)
        .next_multiple_of(4);
    if let Some(pk) = fast_packed(w.ty).filter(|_| n_tokens >= 4) {
        run_packed(w, act, act_ty, act_row, n_tokens, out, &pk, chunk, serial);
        return Ok(());
    }
    let dot4 = fast_kernel_x4(w.ty);
    let act_at = |t: usize| &act[t * act_row..(t + 1) * act_row];
    let tile = |r0: usize, r1: usize, out: &OutPtr| {
        // SAFETY (every write): t < n_tokens and r < rows, so the index is inside `out`; row
        // ranges of different tasks are disjoint, so no element is written twice.
        let put = |t: usize, r: usize, v: f32| unsafe { out.0.add(t * rows + r).write(v) };
        let mut t = 0;
        if let Some(dot4) = dot4 {
            while t + 4 <= n_tokens {
                let a = [act_at(t), act_at(t + 1), act_at(t + 2), act_at(t + 3)];
                for r in r0..r1 {
                    let v = dot4(w.row(r, row_bytes), a);
                    for (k, v) in v.into_iter().enumerate() {
                        put(t + k, r, v);
                    }
                }
                t += 4;
            }
        }
        for t in t..n_tokens {
            for r in r0..r1 {
                put(t, r, dot(w.row(r, row_bytes), act_at(t)));
            }
        }
    };
    let ptr = OutPtr(out.as_mut_ptr());
    // NOTE: rows go in chunks even on one thread, so that a chunk's weights stay in cache
    // while every token passes over them.
    let n_chunks = rows.div_ceil(chunk);
    let run_chunk = |c: usize| tile(c * chunk, ((c + 1) * chunk).min(rows), &ptr);
    if serial {
        (0..n_chunks).for_each(run_chunk);
    } else {
        (0..n_chunks).into_par_iter().for_each(run_chunk);
    }
    Ok(())
}

/// Prefill through packed operands: every activation row is packed once, each row chunk
/// packs its weight rows into a per-thread buffer, and 4 x 4 tiles cover the chunk. Rows and
/// tokens are padded to multiples of 4 with zero rows / tokens, whose outputs are dropped.
#[allow(clippy::too_many_arguments)]
fn run_packed(
    w: &WeightMatrix,
    act: &[u8],
    act_ty: GgmlType,
    act_row: usize,
    n_tokens: usize,
    out: &mut [f32],
    pk: &PackedTile,
    chunk: usize,
    serial: bool,
) {
    let rows = w.rows;
    let row_bytes = w.row_bytes();
    let n_blocks = w.cols / w.ty.block_size();
    let (a_stride, w_stride) = (pk.a_row_bytes(n_blocks), pk.w_row_bytes(n_blocks));
    let t_pad = n_tokens.next_multiple_of(4);
    PACK_SCRATCH.with(|cell| {
        let mut fresh = Vec::new();
        let mut guard = cell.try_borrow_mut();
        // NOTE: a fresh buffer when re-entered on this thread, as for `ACT_SCRATCH`.
        let apack: &mut Vec<u8> = match guard.as_mut() {
            Ok(g) => g,
            Err(_) => &mut fresh,
        };
        // NOTE: the packers overwrite every byte of the real rows; only padding needs zeros.
        apack.resize(t_pad * a_stride, 0);
        apack[n_tokens * a_stride..].fill(0);
        for (a, dst) in act
            .chunks_exact(act_row)
            .zip(apack.chunks_exact_mut(a_stride))
        {
            pk.pack_acts(act_ty, a, n_blocks, dst);
        }
        let apack: &[u8] = apack;
        let ptr = OutPtr(out.as_mut_ptr());
        let run_chunk = |c: usize| {
            let (r0, r1) = (c * chunk, ((c + 1) * chunk).min(rows));
            let r_pad = (r1 - r0).next_multiple_of(4);
            W_PACK_SCRATCH.with(|wcell| {
                let mut fresh = Vec::new();
                let mut guard = wcell.try_borrow_mut();
                let wpack: &mut Vec<u8> = match guard.as_mut() {
                    Ok(g) => g,
                    Err(_) => &mut fresh,
                };
                wpack.resize(r_pad * w_stride, 0);
                wpack[(r1 - r0) * w_stride..].fill(0);
                for (r, dst) in (r0..r1).zip(wpack.chunks_exact_mut(w_stride)) {
                    pk.pack_weights(w.ty, w.row(r, row_bytes), n_blocks, dst);
                }
                let a_at = |t: usize| &apack[t * a_stride..(t + 1) * a_stride];
                for t in (0..t_pad).step_by(4) {
                    let a = [a_at(t), a_at(t + 1), a_at(t + 2), a_at(t + 3)];
                    for rr in (0..r_pad).step_by(4) {
                        let v = pk.tile(
                            &wpack[rr * w_stride..(rr + 4) * w_stride],
                            w_stride,
                            a,
                            n_blocks,
                        );
                        for (i, v) in v.into_iter().enumerate() {
                            let (tk, r) = (t + i % 4, r0 + rr + i / 4);
                            if tk < n_tokens && r < r1 {
                                // SAFETY: tk < n_tokens and r < rows index inside `out`; row
                                // chunks are disjoint, so no element is written twice.
                                unsafe { ptr.write(tk * rows + r, v) };
                            }
                        }
                    }
                }
            })
        };
        let n_chunks = rows.div_ceil(chunk);
        if serial {
            (0..n_chunks).for_each(run_chunk);
        } else {
            (0..n_chunks).into_par_iter().for_each(run_chunk);
        }
    })
}

/// The output pointer shared by the row-chunk tasks, which write disjoint elements.
struct OutPtr(*mut f32);
impl OutPtr {
    /// Writes `v` at element `i`.
    ///
    /// # Safety
    /// `i` is inside the output and no other task writes element `i`.
    unsafe fn write(&self, i: usize, v: f32) {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.0.add(i).write(v) }
    }
}

// SAFETY: tasks write disjoint elements (see `tile`) and `matmul` holds `&mut out` until all
// tasks have finished.
unsafe impl Sync for OutPtr {}

/// Dequantizes `dst.len() / cols` consecutive rows starting at `row` into `dst` (an embedding
/// lookup when `dst.len() == cols`).
pub fn dequantize_rows(w: &WeightMatrix, row: usize, dst: &mut [f32]) -> Result<(), QuantError> {
    if w.cols == 0 || !dst.len().is_multiple_of(w.cols) {
        return Err(QuantError::Length {
            ty: w.ty,
            what: "dequantize_rows output (a multiple of cols)",
            expected: w.cols,
            got: dst.len(),
        });
    }
    let n = dst.len() / w.cols;
    if row.checked_add(n).is_none_or(|end| end > w.rows) {
        return Err(QuantError::RowOutOfRange {
            ty: w.ty,
            row: row.saturating_add(n.saturating_sub(1)),
            rows: w.rows,
        });
    }
    let row_bytes = w.row_bytes();
    for (k, d) in dst.chunks_exact_mut(w.cols).enumerate() {
        crate::dequantize_row(w.ty, w.row(row + k, row_bytes), d)?;
    }
    Ok(())
}

/// The activation type `matmul` quantizes `x` to for weight type `ty`.
pub fn matmul_activation_type(ty: GgmlType) -> Option<GgmlType> {
    vec_dot_type(ty)
}
