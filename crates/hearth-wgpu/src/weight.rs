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

use std::borrow::Cow;
use std::ops::Range;

use hearth_backend::{Backend, BackendError, HostWeight};
use hearth_quant::{GgmlType, MlxSpec};

use crate::backend::WgpuBackend;
use crate::kernels::{block_reader, int8_reader};
use crate::mlx::mlx_rows;
use crate::recorder::Bind;

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
    /// Bytes of one row of blocks (for an MLX weight: packed values, scales and biases).
    pub(crate) row_bytes: usize,
    /// Set for an MLX affine-quantized weight (`ty` is then I32; rows laid out as `mlx.rs`
    /// describes).
    pub(crate) mlx: Option<MlxSpec>,
}

/// Rows `rows` of a weight: bytes `offset ..` of `buf`, whole or (for a weight of a group,
/// see `WgpuBackend::load_group`) shared with the other weights of its group.
pub(crate) struct WeightPart {
    pub buf: wgpu::Buffer,
    pub rows: Range<usize>,
    /// Where the part's first row starts in `buf` (a multiple of the binding alignment), and
    /// its size in bytes (whole words).
    pub offset: u64,
    pub bytes: u64,
}

impl WeightPart {
    /// A part that is all of `buf`.
    pub fn whole(buf: wgpu::Buffer, rows: Range<usize>) -> WeightPart {
        let bytes = buf.size();
        WeightPart {
            buf,
            rows,
            offset: 0,
            bytes,
        }
    }

    /// How a kernel binds the part.
    pub fn bind(&self) -> Bind<'_> {
        if self.offset == 0 && self.bytes == self.buf.size() {
            Bind::Buffer(&self.buf)
        } else {
            Bind::Range(&self.buf, self.offset, self.bytes)
        }
    }
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

/// The bytes of one row of matrix `w`, once its type and size are checked against its shape.
fn checked_row_bytes(w: &HostWeight) -> Result<usize, BackendError> {
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
    Ok(row_bytes)
}

/// A matrix's rows as the device stores them, checked against its shape: GGUF blocks as they
/// are, MLX rows with their scales and biases (see `mlx.rs`).
pub(crate) struct DeviceRows<'a> {
    bytes: Cow<'a, [u8]>,
    row_bytes: usize,
    mlx: Option<MlxSpec>,
}

fn device_rows(w: &HostWeight) -> Result<DeviceRows<'_>, BackendError> {
    if w.mlx.is_some() {
        let (bytes, row_bytes, spec) = mlx_rows(w)?;
        return Ok(DeviceRows {
            bytes: Cow::Owned(bytes),
            row_bytes,
            mlx: Some(spec),
        });
    }
    Ok(DeviceRows {
        row_bytes: checked_row_bytes(w)?,
        bytes: Cow::Borrowed(w.data.bytes()),
        mlx: None,
    })
}

impl WgpuWeight {
    /// Matrix `w`, stored in `parts` with its rows laid out as `rows`.
    fn stored(w: &HostWeight, parts: Vec<WeightPart>, rows: &DeviceRows) -> WgpuWeight {
        WgpuWeight {
            parts,
            name: w.name.clone(),
            ty: w.ty,
            rows: w.rows,
            cols: w.cols,
            row_bytes: rows.row_bytes,
            mlx: rows.mlx,
        }
    }
}

/// What the weights of a group share so that one fused dispatch reads them all: one 8-bit
/// matmul type, or one MLX spec, and one width.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Fusable {
    Int8(GgmlType, usize),
    Mlx(MlxSpec, usize),
}

impl Fusable {
    /// How `w` could join a group, or `None` for a weight no fused kernel reads.
    fn of(w: &HostWeight) -> Option<Fusable> {
        if w.rows <= 1 {
            return None;
        }
        match &w.mlx {
            Some(m) => Some(Fusable::Mlx(m.spec, w.cols)),
            None => int8_reader(w.ty).map(|_| Fusable::Int8(w.ty, w.cols)),
        }
    }
}

/// Where each weight of a group starts in one buffer (at multiples of `align`), and the
/// buffer's size, for weights of `bytes` each; `None` when the group is not for one buffer:
/// fewer than two weights, some that no fused kernel reads or that differ in what it needs,
/// or more than `limit` bytes.
pub(crate) fn plan_group(
    weights: &[(Option<Fusable>, usize)],
    align: u64,
    limit: u64,
) -> Option<(Vec<u64>, u64)> {
    let &(kind, _) = weights.first()?;
    if weights.len() < 2 || kind.is_none() || weights.iter().any(|&(k, _)| k != kind) {
        return None;
    }
    let mut offsets = Vec::with_capacity(weights.len());
    let mut end = 0u64;
    for &(_, bytes) in weights {
        let offset = end.next_multiple_of(align);
        offsets.push(offset);
        end = offset + (bytes as u64).next_multiple_of(4);
    }
    (end <= limit).then_some((offsets, end))
}

impl WgpuBackend {
    /// Weights that multiply the same input, side by side in one buffer where [`plan_group`]
    /// allows (so that one dispatch of the fused 8-bit or MLX matmuls reads them all), else
    /// one by one.
    pub(crate) fn load_group(&self, ws: Vec<HostWeight>) -> Result<Vec<WgpuWeight>, BackendError> {
        let kinds: Vec<Option<Fusable>> = ws.iter().map(Fusable::of).collect();
        if kinds.iter().any(Option::is_none) {
            return ws.into_iter().map(|w| self.load_weight(w)).collect();
        }
        let rows = ws.iter().map(device_rows).collect::<Result<Vec<_>, _>>()?;
        let sizes: Vec<(Option<Fusable>, usize)> = kinds
            .into_iter()
            .zip(&rows)
            .map(|(k, r)| (k, r.bytes.len()))
            .collect();
        let align = self.gpu.device.limits().min_storage_buffer_offset_alignment as u64;
        let Some((offsets, size)) = plan_group(&sizes, align, self.weight_part_limit) else {
            return ws
                .iter()
                .zip(&rows)
                .map(|(w, r)| self.upload_matrix(w, r))
                .collect();
        };
        let mut host = vec![0u8; size as usize];
        for (r, &o) in rows.iter().zip(&offsets) {
            host[o as usize..][..r.bytes.len()].copy_from_slice(&r.bytes);
        }
        let name = ws
            .iter()
            .map(|w| w.name.as_str())
            .collect::<Vec<_>>()
            .join(" + ");
        let buf = self.init_weight_buffer(&name, &host)?;
        Ok(ws
            .iter()
            .zip(&rows)
            .zip(offsets)
            .map(|((w, r), offset)| {
                let part = WeightPart {
                    buf: buf.clone(),
                    rows: 0..w.rows,
                    offset,
                    bytes: (w.rows as u64 * r.row_bytes as u64).next_multiple_of(4),
                };
                WgpuWeight::stored(w, vec![part], r)
            })
            .collect())
    }

    /// A buffer holding `bytes`, or an error naming tensor `name` where device memory is short.
    fn init_weight_buffer(&self, name: &str, bytes: &[u8]) -> Result<wgpu::Buffer, BackendError> {
        let device = &self.gpu.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buf = self.init_buffer(name, bytes);
        let oom = pollster::block_on(scope.pop());
        let buf = buf?;
        if let Some(e) = oom {
            return Err(BackendError::Device(format!(
                "tensor '{name}': {} bytes do not fit in device memory: {e}",
                bytes.len()
            )));
        }
        Ok(buf)
    }

    /// Check a matrix weight's bytes against its type (or MLX spec) and shape and upload it in
    /// parts.
    pub(crate) fn load_matrix(&self, w: HostWeight) -> Result<WgpuWeight, BackendError> {
        self.upload_matrix(&w, &device_rows(&w)?)
    }

    /// Matrix `w` laid out as `rows`, uploaded in parts.
    fn upload_matrix(&self, w: &HostWeight, rows: &DeviceRows) -> Result<WgpuWeight, BackendError> {
        let parts = self.upload_rows(&w.name, &rows.bytes, w.rows, rows.row_bytes)?;
        Ok(WgpuWeight::stored(w, parts, rows))
    }

    /// `rows` rows of `row_bytes` bytes each, uploaded in parts of whole rows (see the module
    /// note); an error names tensor `name` where device memory is short.
    pub(crate) fn upload_rows(
        &self,
        name: &str,
        bytes: &[u8],
        rows: usize,
        row_bytes: usize,
    ) -> Result<Vec<WeightPart>, BackendError> {
        let plan = plan_parts(name, rows, row_bytes, self.weight_part_limit)?;
        let mut parts = Vec::with_capacity(plan.len());
        // NOTE: parts are buffers of their own, so no single limit caps a weight's total: the
        // device's memory does, and running out of it is an error about this tensor rather
        // than a device error at the next submit.
        let device = &self.gpu.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let uploaded = plan.into_iter().try_for_each(|rows| {
            let part = &bytes[rows.start * row_bytes..rows.end * row_bytes];
            let buf = self.init_buffer(name, part)?;
            parts.push(WeightPart::whole(buf, rows));
            Ok::<(), BackendError>(())
        });
        let oom = pollster::block_on(scope.pop());
        uploaded?;
        if let Some(e) = oom {
            return Err(BackendError::Device(format!(
                "tensor '{name}': {} bytes in {} part(s) do not fit in device memory: {e}",
                bytes.len(),
                parts.len()
            )));
        }
        Ok(parts)
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
    fn a_group_is_laid_out_at_aligned_offsets_or_not_at_all() {
        let q8 = Some(Fusable::Int8(GgmlType::Q8_0, 64));
        // q, k, v of 2 176, 1 088 and 1 090 bytes: starts rounded up to 256 bytes.
        let (offsets, size) =
            plan_group(&[(q8, 2176), (q8, 1088), (q8, 1090)], 256, 1 << 20).expect("one buffer");
        assert_eq!(offsets, vec![0, 2304, 3584]);
        assert_eq!(size, 3584 + 1092);
        // Over the limit, of two types, widths or MLX specs, of a type without a fused
        // kernel, or alone.
        assert!(plan_group(&[(q8, 2176), (q8, 1088)], 256, 3000).is_none());
        let q4 = Some(Fusable::Int8(GgmlType::Q4_0, 64));
        assert!(plan_group(&[(q8, 2176), (q4, 1152)], 256, 1 << 20).is_none());
        let narrow = Some(Fusable::Int8(GgmlType::Q8_0, 32));
        assert!(plan_group(&[(q8, 2176), (narrow, 1088)], 256, 1 << 20).is_none());
        assert!(plan_group(&[(None, 128), (None, 128)], 256, 1 << 20).is_none());
        assert!(plan_group(&[(q8, 2176)], 256, 1 << 20).is_none());
        let mlx = |bits| {
            let spec = MlxSpec {
                bits,
                group_size: 64,
                scale_ty: GgmlType::F16,
            };
            Some(Fusable::Mlx(spec, 64))
        };
        assert!(plan_group(&[(mlx(4), 400), (mlx(4), 400)], 256, 1 << 20).is_some());
        assert!(plan_group(&[(mlx(4), 400), (mlx(8), 400)], 256, 1 << 20).is_none());
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
