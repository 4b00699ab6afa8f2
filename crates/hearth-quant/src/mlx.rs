//! MLX affine group quantization (the mlx-community checkpoint layout) and its matmul.
//!
//! ```text
//!   weight  [rows, cols * bits / 32] u32   q values packed little-endian, value j of a word in
//!                                          bits [j*bits, (j+1)*bits), element 32/bits*word + j
//!   scales  [rows, cols / group_size]      f16 / bf16 / f32
//!   biases  [rows, cols / group_size]      same type as scales
//!   w[r, c] = scales[r, g] * q[r, c] + biases[r, g],   g = c / group_size
//! ```
//!
//! The matmul never widens the weight: per (row, token) pair it adds, group by group,
//! `scale * Σ q·x + bias * Σ x`, with `Σ x` per group computed once per token and `Σ q·x`
//! unpacked 32 values at a time into a register-sized buffer.
//!
//! Batch invariance: every (row, token) pair goes through the same function with the same
//! float operations in the same order, whatever `n_tokens`, the thread count or the kernel
//! (the AVX2 build of the same code does no fused multiply-adds Rust did not write).

use half::{bf16, f16};
use rayon::prelude::*;

use crate::GgmlType;

/// How a weight is quantized: bits per value, values per group and the scale/bias type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlxSpec {
    /// 4 or 8.
    pub bits: u32,
    /// 32, 64 or 128 values along a row share one scale and bias.
    pub group_size: usize,
    /// F16, BF16 or F32.
    pub scale_ty: GgmlType,
}

impl MlxSpec {
    /// Bit widths this module implements.
    pub const BITS: [u32; 2] = [4, 8];
    /// Group sizes this module implements.
    pub const GROUP_SIZES: [usize; 3] = [32, 64, 128];

    /// Checks bits, group size and scale type; the message names what is wrong.
    pub fn check(&self) -> Result<(), String> {
        if !Self::BITS.contains(&self.bits) {
            return Err(format!(
                "MLX quantization with {} bits is not supported (4 or 8)",
                self.bits
            ));
        }
        if !Self::GROUP_SIZES.contains(&self.group_size) {
            return Err(format!(
                "MLX group size {} is not supported (32, 64 or 128)",
                self.group_size
            ));
        }
        if !matches!(
            self.scale_ty,
            GgmlType::F16 | GgmlType::BF16 | GgmlType::F32
        ) {
            return Err(format!(
                "MLX scales of type {} are not supported (F16, BF16, F32)",
                self.scale_ty
            ));
        }
        Ok(())
    }

    /// Bytes of packed values in a row of `cols`.
    pub fn packed_row_bytes(&self, cols: usize) -> usize {
        cols * self.bits as usize / 8
    }

    /// Bytes of one scale (or bias).
    fn scale_bytes(&self) -> usize {
        if self.scale_ty == GgmlType::F32 {
            4
        } else {
            2
        }
    }
}

/// A quantized matrix borrowed from its three tensors.
#[derive(Clone, Copy, Debug)]
pub struct MlxMatrix<'a> {
    pub spec: MlxSpec,
    /// `[rows, cols * bits / 8]` bytes (the u32 words, little-endian; no alignment needed).
    pub packed: &'a [u8],
    /// `[rows, cols / group_size]` values of `spec.scale_ty`.
    pub scales: &'a [u8],
    /// Same shape and type as `scales`.
    pub biases: &'a [u8],
    pub rows: usize,
    pub cols: usize,
}

impl<'a> MlxMatrix<'a> {
    /// Checks the spec, that `cols` is whole groups, and every length.
    pub fn new(
        spec: MlxSpec,
        packed: &'a [u8],
        scales: &'a [u8],
        biases: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, String> {
        spec.check()?;
        if !cols.is_multiple_of(spec.group_size) {
            return Err(format!(
                "{cols} columns is not a whole number of groups of {}",
                spec.group_size
            ));
        }
        let want = |what: &str, expected: usize, got: usize| {
            if expected == got {
                Ok(())
            } else {
                Err(format!(
                    "{what} hold {got} bytes, [{rows}, {cols}] needs {expected}"
                ))
            }
        };
        want(
            "packed weights",
            rows * spec.packed_row_bytes(cols),
            packed.len(),
        )?;
        let per_row = cols / spec.group_size * spec.scale_bytes();
        want("scales", rows * per_row, scales.len())?;
        want("biases", rows * per_row, biases.len())?;
        Ok(Self {
            spec,
            packed,
            scales,
            biases,
            rows,
            cols,
        })
    }

    fn groups(&self) -> usize {
        self.cols / self.spec.group_size
    }

    /// Scale and bias of group `g` in row `r`.
    fn scale_bias(&self, r: usize, g: usize) -> (f32, f32) {
        let i = r * self.groups() + g;
        (
            read_half(self.scales, i, self.spec.scale_ty),
            read_half(self.biases, i, self.spec.scale_ty),
        )
    }

    fn packed_row(&self, r: usize) -> &'a [u8] {
        let n = self.spec.packed_row_bytes(self.cols);
        &self.packed[r * n..(r + 1) * n]
    }

    /// Row `r` widened to f32 (embedding lookups and the reference).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), String> {
        if r >= self.rows || out.len() != self.cols {
            return Err(format!(
                "row {r} of {} into {} values (rows are {})",
                self.rows,
                out.len(),
                self.cols
            ));
        }
        let bits = self.spec.bits;
        let per = (32 / bits) as usize;
        let mask = (1u32 << bits) - 1;
        for (w, chunk) in self
            .packed_row(r)
            .chunks_exact(4)
            .zip(out.chunks_exact_mut(per))
        {
            let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            for (j, o) in chunk.iter_mut().enumerate() {
                *o = ((word >> (bits as usize * j)) & mask) as f32;
            }
        }
        for (g, chunk) in out.chunks_exact_mut(self.spec.group_size).enumerate() {
            let (s, b) = self.scale_bias(r, g);
            chunk.iter_mut().for_each(|v| *v = s * *v + b);
        }
        Ok(())
    }
}

/// Value `i` of a half/float array stored as little-endian bytes.
fn read_half(bytes: &[u8], i: usize, ty: GgmlType) -> f32 {
    match ty {
        GgmlType::F32 => f32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ]),
        GgmlType::BF16 => bf16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
        _ => f16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
    }
}

/// `Σ q·x` over one group: `words` holds `x.len() * BITS / 8` bytes of packed values.
#[inline(always)]
fn group_dot<const BITS: usize>(words: &[u8], x: &[f32]) -> f32 {
    let per = 32 / BITS;
    let mask = (1u32 << BITS) - 1;
    let mut acc = [0f32; 8];
    let mut buf = [0f32; 32];
    // 32 values are BITS words (4 * BITS bytes).
    for (xc, wc) in x.chunks_exact(32).zip(words.chunks_exact(4 * BITS)) {
        for (k, w) in wc.chunks_exact(4).enumerate() {
            let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            for j in 0..per {
                buf[k * per + j] = ((word >> (BITS * j)) & mask) as f32;
            }
        }
        for (q8, x8) in buf.chunks_exact(8).zip(xc.chunks_exact(8)) {
            for l in 0..8 {
                acc[l] += q8[l] * x8[l];
            }
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// `dot(W[r, :], x)` for rows `r0..r0 + out.len()`; `xsum` holds `Σ x` per group.
#[inline(always)]
fn rows_dot<const BITS: usize>(w: &MlxMatrix, r0: usize, x: &[f32], xsum: &[f32], out: &mut [f32]) {
    let gs = w.spec.group_size;
    let gbytes = gs * BITS / 8;
    for (k, o) in out.iter_mut().enumerate() {
        let r = r0 + k;
        let row = w.packed_row(r);
        let mut sum = 0f32;
        for (g, (wg, xg)) in row.chunks_exact(gbytes).zip(x.chunks_exact(gs)).enumerate() {
            let (s, b) = w.scale_bias(r, g);
            sum += s * group_dot::<BITS>(wg, xg) + b * xsum[g];
        }
        *o = sum;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rows_dot_avx2<const BITS: usize>(
    w: &MlxMatrix,
    r0: usize,
    x: &[f32],
    xsum: &[f32],
    out: &mut [f32],
) {
    rows_dot::<BITS>(w, r0, x, xsum, out)
}

type RowsFn = fn(&MlxMatrix, usize, &[f32], &[f32], &mut [f32]);

/// The rows kernel for `bits`, compiled for AVX2 when the CPU has it.
fn rows_kernel(bits: u32) -> RowsFn {
    #[cfg(target_arch = "x86_64")]
    if crate::kernel_level() != crate::KernelLevel::Scalar {
        // SAFETY: kernel_level() is not Scalar only when the CPU has AVX2.
        return match bits {
            4 => |w, r0, x, s, o| unsafe { rows_dot_avx2::<4>(w, r0, x, s, o) },
            _ => |w, r0, x, s, o| unsafe { rows_dot_avx2::<8>(w, r0, x, s, o) },
        };
    }
    match bits {
        4 => rows_dot::<4>,
        _ => rows_dot::<8>,
    }
}

/// Rows per parallel task.
const CHUNK_ROWS: usize = 32;

/// `out[t * rows + r] = dot(W[r, :], x[t, :])`; `x` is `[n_tokens, cols]`, `out` is
/// `[n_tokens, rows]`. Splits rows over the current rayon pool.
pub fn mlx_matmul(
    w: &MlxMatrix,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
) -> Result<(), String> {
    if x.len() != n_tokens * w.cols || out.len() != n_tokens * w.rows {
        return Err(format!(
            "matmul of [{}, {}] with {} inputs into {} outputs for {n_tokens} tokens",
            w.rows,
            w.cols,
            x.len(),
            out.len()
        ));
    }
    if n_tokens == 0 || w.rows == 0 {
        return Ok(());
    }
    let kernel = rows_kernel(w.spec.bits);
    let gs = w.spec.group_size;
    // [n_tokens, groups]: Σ x per group, shared by every row.
    let xsum: Vec<f32> = x.chunks_exact(gs).map(|g| g.iter().sum()).collect();
    let groups = w.groups();
    if n_tokens == 1 {
        out.par_chunks_mut(CHUNK_ROWS)
            .enumerate()
            .for_each(|(c, o)| kernel(w, c * CHUNK_ROWS, x, &xsum, o));
        return Ok(());
    }
    // Each task computes a [chunk_rows, n_tokens] tile (weights stay hot while the tokens
    // pass over them), then the tiles are scattered into the [n_tokens, rows] output.
    let n_chunks = w.rows.div_ceil(CHUNK_ROWS);
    let tiles: Vec<Vec<f32>> = (0..n_chunks)
        .into_par_iter()
        .map(|c| {
            let r0 = c * CHUNK_ROWS;
            let n = CHUNK_ROWS.min(w.rows - r0);
            let mut tile = vec![0f32; n_tokens * n]; // [n_tokens, n]
            for (t, o) in tile.chunks_exact_mut(n).enumerate() {
                let xt = &x[t * w.cols..(t + 1) * w.cols];
                kernel(w, r0, xt, &xsum[t * groups..(t + 1) * groups], o);
            }
            tile
        })
        .collect();
    for (c, tile) in tiles.iter().enumerate() {
        let r0 = c * CHUNK_ROWS;
        let n = tile.len() / n_tokens;
        for (t, o) in tile.chunks_exact(n).enumerate() {
            out[t * w.rows + r0..][..n].copy_from_slice(o);
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "mlx_tests.rs"]
mod tests;
