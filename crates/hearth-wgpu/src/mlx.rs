//! MLX affine-quantized weights (the mlx-community checkpoint layout) on the device.
//!
//! A weight keeps its packed values, and its scales and biases in their own type (f16, bf16
//! or f32), one row after another so that a weight split by rows keeps each row's groups with
//! it (kernels/mlx_common.wgsl):
//!
//! ```text
//!  row r:  packed values (cols·bits/8 bytes) │ scales (padded to 4 bytes) │ biases (padded)
//! ```
//!
//! The matmuls (kernels/mlx_matmul_common.wgsl: one weight, a q/k/v group, a gate/up group
//! with the SwiGLU) and the embedding lookup give the CPU backend's bits: the same products,
//! rounded on their own, added in the same order.

use hearth_backend::{BackendError, HostWeight};
use hearth_quant::{GgmlType, MlxSpec};

use crate::backend::{words, WgpuBackend, WgpuTensor};
use crate::int8::side_by_side;
use crate::kernels::Module;
use crate::recorder::{Bind, Grid};
use crate::weight::WgpuWeight;

/// Tokens per workgroup of the matmul (`TILE` in mlx_matmul_common.wgsl).
const TILE: usize = 4;
/// (row, group) jobs a pass of one workgroup holds (`JOBS` in mlx_matmul_common.wgsl).
const JOBS: usize = 256;
/// Threads per workgroup.
const WG: usize = 64;

/// Where a row's parts start and how long it is: `(scales_at, biases_at, row_bytes)`.
fn row_layout(spec: &MlxSpec, cols: usize) -> (usize, usize, usize) {
    let packed = spec.packed_row_bytes(cols);
    let size = if spec.scale_ty == GgmlType::F32 { 4 } else { 2 };
    let table = (cols / spec.group_size * size).next_multiple_of(4);
    (packed, packed + table, packed + 2 * table)
}

/// The kernels' code for a scale type (`scale_kind` in mlx_common.wgsl).
fn scale_kind(ty: GgmlType) -> u32 {
    match ty {
        GgmlType::BF16 => 1,
        GgmlType::F32 => 2,
        _ => 0,
    }
}

/// Rows per workgroup: about one (row, group) job per thread, at most 16 rows (the threads
/// that add the terms, one per row and token of the tile, are 64).
fn rows_per_workgroup(groups: usize) -> usize {
    (WG / groups.max(1)).clamp(1, WG / TILE)
}

/// The parameters of the MLX kernels (`MlxParams` in mlx_common.wgsl), as the host sets them.
#[derive(Clone, Copy)]
struct Params {
    rows: usize,
    cols: usize,
    n_tokens: usize,
    row_bytes: usize,
    accumulate: bool,
    /// The weight's rows in this dispatch: `row0 .. row0 + part_rows`.
    row0: usize,
    part_rows: usize,
    group_size: usize,
    scale_kind: u32,
    scales_at: usize,
    biases_at: usize,
    bits: u32,
    rows_per_wg: usize,
    groups_per_pass: usize,
    /// A group's second and third weights: their rows and the byte where they start.
    rows1: usize,
    rows2: usize,
    base1: u64,
    base2: u64,
}

impl Params {
    /// For weight `w` (all its rows) and `n_tokens` tokens.
    fn new(w: &WgpuWeight, spec: &MlxSpec, n_tokens: usize, accumulate: bool) -> Params {
        let (scales_at, biases_at, _) = row_layout(spec, w.cols);
        let groups = w.cols / spec.group_size;
        let rows_per_wg = rows_per_workgroup(groups);
        Params {
            rows: w.rows,
            cols: w.cols,
            n_tokens,
            row_bytes: w.row_bytes,
            accumulate,
            row0: 0,
            part_rows: w.rows,
            group_size: spec.group_size,
            scale_kind: scale_kind(spec.scale_ty),
            scales_at,
            biases_at,
            bits: spec.bits,
            rows_per_wg,
            groups_per_pass: groups.min(JOBS / rows_per_wg),
            rows1: 0,
            rows2: 0,
            base1: 0,
            base2: 0,
        }
    }

    /// The struct's bytes, in field order.
    fn bytes(&self) -> Vec<u8> {
        words(&[
            self.rows as u32,
            self.cols as u32,
            self.n_tokens as u32,
            self.row_bytes as u32,
            self.accumulate as u32,
            self.row0 as u32,
            self.part_rows as u32,
            0, // zero, for `keep`
            self.group_size as u32,
            self.scale_kind,
            self.scales_at as u32,
            self.biases_at as u32,
            self.bits,
            self.rows_per_wg as u32,
            self.groups_per_pass as u32,
            0,
            self.rows1 as u32,
            self.rows2 as u32,
            self.base1 as u32,
            self.base2 as u32,
        ])
    }
}

/// An MLX weight's rows in the layout above, once its tensors are checked against its shape;
/// the bytes of a row, and the weight's spec.
pub(crate) fn mlx_rows(w: &HostWeight) -> Result<(Vec<u8>, usize, MlxSpec), BackendError> {
    let bad = |reason: String| BackendError::BadWeight {
        name: w.name.clone(),
        reason,
    };
    let Some(groups) = &w.mlx else {
        return Err(bad("not an MLX weight".into()));
    };
    let m = groups.matrix(w.data.bytes(), w.rows, w.cols).map_err(bad)?;
    let spec = m.spec;
    let (scales_at, biases_at, row_bytes) = row_layout(&spec, w.cols);
    let packed = spec.packed_row_bytes(w.cols);
    let table = m.scales.len() / w.rows.max(1);
    let mut host = vec![0u8; w.rows * row_bytes];
    for (r, row) in host.chunks_exact_mut(row_bytes).enumerate() {
        row[..packed].copy_from_slice(&m.packed[r * packed..][..packed]);
        row[scales_at..][..table].copy_from_slice(&m.scales[r * table..][..table]);
        row[biases_at..][..table].copy_from_slice(&m.biases[r * table..][..table]);
    }
    Ok((host, row_bytes, spec))
}

impl WgpuBackend {
    /// `out (+)= W · x` for an MLX weight: one dispatch per part, each of one workgroup per
    /// (rows of the part, tile of 4 tokens).
    pub(crate) fn matmul_mlx(
        &self,
        w: &WgpuWeight,
        spec: &MlxSpec,
        x: &WgpuTensor,
        out: &mut WgpuTensor,
        accumulate: bool,
    ) -> Result<(), BackendError> {
        let mut p = Params::new(w, spec, x.rows, accumulate);
        let y = out.written();
        let mut rec = self.recorder();
        for part in &w.parts {
            (p.row0, p.part_rows) = (part.rows.start, part.rows.len());
            let bytes = p.bytes();
            let binds = [
                part.bind(),
                Bind::Buffer(&x.buf),
                Bind::Buffer(y),
                Bind::Host(&bytes),
            ];
            let grid =
                Grid::Groups(part.rows.len().div_ceil(p.rows_per_wg) * x.rows.div_ceil(TILE));
            rec.dispatch(
                &self.gpu,
                Module::MatmulMlx(spec.bits, spec.group_size as u32),
                "matmul_mlx",
                &binds,
                grid,
            )?;
        }
        Ok(())
    }

    /// `out[i] = W[i] · x` in one dispatch where the weights are MLX weights of one group side
    /// by side (`Some(())`), else `None` and nothing is done. Shapes are checked by the caller.
    pub(crate) fn matmul_mlx_qkv(
        &self,
        w: [&WgpuWeight; 3],
        x: &WgpuTensor,
        out: [&mut WgpuTensor; 3],
    ) -> Result<Option<()>, BackendError> {
        let (Some(spec), Some((binding, bases))) = (&w[0].mlx, side_by_side(&w)) else {
            return Ok(None);
        };
        let mut p = Params::new(w[0], spec, x.rows, false);
        (p.rows1, p.rows2) = (w[1].rows, w[2].rows);
        (p.base1, p.base2) = (bases[1], bases[2]);
        let blocks: usize = w.iter().map(|w| w.rows.div_ceil(p.rows_per_wg)).sum();
        let bytes = p.bytes();
        let [o0, o1, o2] = out;
        let binds = [
            binding,
            Bind::Buffer(&x.buf),
            Bind::Buffer(o0.written()),
            Bind::Buffer(o1.written()),
            Bind::Buffer(o2.written()),
            Bind::Host(&bytes),
        ];
        let module = Module::MatmulMlxQkv(spec.bits, spec.group_size as u32);
        let grid = Grid::Groups(blocks * x.rows.div_ceil(TILE));
        self.recorder()
            .dispatch(&self.gpu, module, "matmul_mlx_qkv", &binds, grid)?;
        Ok(Some(()))
    }

    /// `out = silu(gate · x) · (up · x)` in one dispatch where gate and up are MLX weights of
    /// one group side by side (`Some(())`), else `None` and nothing is done. Shapes are
    /// checked by the caller.
    pub(crate) fn matmul_mlx_glu(
        &self,
        gate: &WgpuWeight,
        up: &WgpuWeight,
        x: &WgpuTensor,
        out: &mut WgpuTensor,
    ) -> Result<Option<()>, BackendError> {
        let pair = [gate, up];
        let (Some(spec), Some((binding, bases))) = (&gate.mlx, side_by_side(&pair)) else {
            return Ok(None);
        };
        if gate.rows != up.rows {
            return Ok(None);
        }
        let mut p = Params::new(gate, spec, x.rows, false);
        p.base1 = bases[1];
        let bytes = p.bytes();
        let binds = [
            binding,
            Bind::Buffer(&x.buf),
            Bind::Buffer(out.written()),
            Bind::Host(&bytes),
        ];
        let module =
            Module::MatmulMlxGlu(spec.bits, spec.group_size as u32, self.gpu.info.native_fma);
        let grid = Grid::Groups(gate.rows.div_ceil(p.rows_per_wg) * x.rows.div_ceil(TILE));
        self.recorder()
            .dispatch(&self.gpu, module, "matmul_mlx_glu", &binds, grid)?;
        Ok(Some(()))
    }

    /// Rows `tokens` of an MLX embedding table into `out` (shapes checked by the caller).
    pub(crate) fn embed_mlx(
        &self,
        table: &WgpuWeight,
        spec: &MlxSpec,
        tokens: &[u32],
        out: &mut WgpuTensor,
    ) -> Result<(), BackendError> {
        let p = Params::new(table, spec, tokens.len(), false);
        let entry = (Module::EmbedMlx, "embed_mlx");
        self.embed_parts(table, tokens, out, entry, |rows| {
            let mut p = p;
            (p.row0, p.part_rows) = (rows.start, rows.len());
            p.bytes()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_keep_their_groups_at_word_offsets() {
        let spec = |bits, group_size, scale_ty| MlxSpec {
            bits,
            group_size,
            scale_ty,
        };
        // 96 columns of 4 bits in groups of 32: 48 packed bytes, 3 f16 scales (6 bytes,
        // padded to 8), 3 biases.
        assert_eq!(row_layout(&spec(4, 32, GgmlType::F16), 96), (48, 56, 64));
        // 8 bits, groups of 128, f32: 1024 bytes, 8 scales of 4 bytes.
        assert_eq!(
            row_layout(&spec(8, 128, GgmlType::F32), 1024),
            (1024, 1056, 1088)
        );
    }

    #[test]
    fn workgroups_hold_one_job_per_thread_where_rows_are_short() {
        assert_eq!(rows_per_workgroup(16), 4); // 1024 columns in groups of 64
        assert_eq!(rows_per_workgroup(48), 1);
        assert_eq!(rows_per_workgroup(1), 16);
        assert_eq!(rows_per_workgroup(1000), 1);
    }
}
