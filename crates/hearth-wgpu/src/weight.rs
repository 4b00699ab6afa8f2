//! Weights on the device, stored in parts of whole rows where one binding cannot hold them.
//!
//! NOTE: a storage binding holds at most the adapter's `max_storage_buffer_binding_size`
//! bytes (128 MiB on lavapipe and on many GPUs), less than the embedding table or output
//! projection of real models (Gemma 3 270M's Q8_0 table is 170 MiB, an 8B model's Q6_K output
//! matrix 410 MiB). Such a weight is stored as parts of whole rows (output features, so whole
//! blocks of any type), each in a buffer of its own; a matmul runs one dispatch per part, each
//! writing its slice of the output features, and an embedding lookup one per part that holds a
//! requested token. A weight that fits is one part: one dispatch and one binding, as always.
//!
//! ```text
//!  W [rows, cols]                              y [n_tokens, rows] (one dispatch per part)
//!  rows 0 .. r1      part 0, buffer 0  ──►   ┌─────────────┬──────────────┐
//!  rows r1 .. rows   part 1, buffer 1  ──►   │ y[.., 0..r1] │ y[.., r1..]  │
//!                                            └─────────────┴──────────────┘
//! ```
//!
//! Separate buffers rather than ranges of one: a bound range must start at a multiple of
//! `min_storage_buffer_offset_alignment` (256 bytes on many adapters), which rows of 18- or
//! 34-byte blocks rarely do, and one buffer would also need the whole weight under
//! `max_buffer_size`.

use std::ops::Range;

use hearth_backend::{BackendError, HostWeight};
use hearth_quant::GgmlType;

use crate::backend::WgpuBackend;
use crate::kernels::block_reader;

/// A weight on the device: raw GGUF blocks for a matrix, f32 values for a vector.
pub struct WgpuWeight {
    /// The rows in buffers of at most the weight binding limit, in row order; one part for a
    /// weight that fits one binding (every vector does).
    pub(crate) parts: Vec<WeightPart>,
    pub(crate) name: String,
    pub(crate) ty: GgmlType,
    /// `[rows, cols]`, as in the file.
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// Bytes of one row of blocks.
    pub(crate) row_bytes: usize,
}

/// Rows `rows` of a weight, in a buffer of their own (the part's first row at byte 0).
pub(crate) struct WeightPart {
    pub buf: wgpu::Buffer,
    pub rows: Range<usize>,
}

impl WgpuWeight {
    /// How many parts (buffers, and bindings of a matmul) hold the weight: 1 unless it is
    /// larger than the weight part limit.
    pub fn n_parts(&self) -> usize {
        self.parts.len()
    }

    /// The buffer of a vector (a norm weight): one row, so always one part.
    pub(crate) fn vector(&self) -> &wgpu::Buffer {
        &self.parts[0].buf
    }
}

/// The row ranges of parts of at most `limit` bytes for `rows` rows of `row_bytes` bytes, or
/// an error naming the tensor where one row alone is larger.
pub(crate) fn plan_parts(
    name: &str,
    rows: usize,
    row_bytes: usize,
    limit: u64,
) -> Result<Vec<Range<usize>>, BackendError> {
    // Kernels read weights as words: a part's buffer is padded to whole words, and the padded
    // size must still fit.
    let usable = (limit / 4 * 4) as usize;
    if row_bytes > usable {
        return Err(BackendError::Unsupported(format!(
            "tensor '{name}': one row is {row_bytes} bytes, more than this adapter's largest \
             storage binding ({limit} bytes); a weight is split across bindings by whole rows only"
        )));
    }
    let per_part = usable.checked_div(row_bytes).unwrap_or(rows).max(1);
    let mut parts: Vec<Range<usize>> = (0..rows)
        .step_by(per_part)
        .map(|r0| r0..(r0 + per_part).min(rows))
        .collect();
    if parts.is_empty() {
        // No rows: still one (empty) part, for the buffer a kernel binds.
        parts.push(0..0);
    }
    Ok(parts)
}

impl WgpuBackend {
    /// Check a matrix weight's bytes against its type and shape and upload it in parts.
    pub(crate) fn load_matrix(&self, w: HostWeight) -> Result<WgpuWeight, BackendError> {
        // Every type of the 8-bit matmuls also has an f32 kernel (and an embedding reader).
        let Some((block, block_bytes, _)) = block_reader(w.ty) else {
            return Err(BackendError::Unsupported(format!(
                "tensor '{}': {} weights are not supported by the wgpu backend yet",
                w.name, w.ty
            )));
        };
        let (block, block_bytes) = (block as usize, block_bytes as usize);
        let row_bytes = w.cols / block * block_bytes;
        let bytes = w.data.bytes();
        if !w.cols.is_multiple_of(block) || bytes.len() != w.rows * row_bytes {
            return Err(BackendError::BadWeight {
                name: w.name.clone(),
                reason: format!(
                    "{} bytes for [{}, {}] {} (blocks of {block})",
                    bytes.len(),
                    w.rows,
                    w.cols,
                    w.ty
                ),
            });
        }
        let plan = plan_parts(&w.name, w.rows, row_bytes, self.weight_part_limit)?;
        let mut parts = Vec::with_capacity(plan.len());
        // NOTE: parts are buffers of their own, so no single limit caps a weight's total: the
        // device's memory does, and running out of it is an error about this tensor rather
        // than a device error at the next submit.
        let device = &self.gpu.device;
        device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let uploaded = plan.into_iter().try_for_each(|rows| {
            let part = &bytes[rows.start * row_bytes..rows.end * row_bytes];
            let buf = self.init_buffer(&w.name, part)?;
            parts.push(WeightPart { buf, rows });
            Ok::<(), BackendError>(())
        });
        let oom = pollster::block_on(device.pop_error_scope());
        uploaded?;
        if let Some(e) = oom {
            return Err(BackendError::Device(format!(
                "tensor '{}': {} bytes in {} part(s) do not fit in device memory: {e}",
                w.name,
                bytes.len(),
                parts.len()
            )));
        }
        Ok(WgpuWeight {
            parts,
            name: w.name,
            ty: w.ty,
            rows: w.rows,
            cols: w.cols,
            row_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weight_that_fits_is_one_part() {
        let plan = plan_parts("w", 100, 34, 3400).expect("plan");
        assert_eq!(plan, vec![0..100]);
    }

    #[test]
    fn parts_are_whole_rows_within_the_limit() {
        // 10 rows of 18 bytes in 40-byte parts: two rows each (36 bytes, 9 words).
        let plan = plan_parts("w", 10, 18, 40).expect("plan");
        assert_eq!(plan, vec![0..2, 2..4, 4..6, 6..8, 8..10]);
        // 7 rows of 34 bytes under a limit of 103 bytes: 100 usable bytes (whole words),
        // two rows a part, and a last part of one row.
        let plan = plan_parts("w", 7, 34, 103).expect("plan");
        assert_eq!(plan, vec![0..2, 2..4, 4..6, 6..7]);
        for r in &plan {
            assert!((r.len() * 34).next_multiple_of(4) <= 103);
        }
    }

    #[test]
    fn a_row_larger_than_the_limit_is_an_error_naming_the_tensor() {
        let err = plan_parts("token_embd.weight", 4, 680, 512)
            .expect_err("too large")
            .to_string();
        assert!(
            err.contains("token_embd.weight") && err.contains("680") && err.contains("512"),
            "{err}"
        );
    }
}
