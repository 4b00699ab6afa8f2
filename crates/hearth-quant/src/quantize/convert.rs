//! Whole-tensor conversion: dequantize each row with the scalar reference and quantize it to
//! the target type, in parallel over tensors and over row chunks of large tensors.

use rayon::prelude::*;

use super::quantize_row;
use crate::error::row_bytes;
use crate::{dequantize_row, GgmlType, QuantError};

/// Elements a parallel work item covers at least (whole rows).
const CHUNK_ELEMENTS: usize = 1 << 16;

/// One tensor to convert.
#[derive(Clone, Copy, Debug)]
pub struct TensorJob<'a> {
    /// The tensor's current type.
    pub src_ty: GgmlType,
    /// Its bytes: whole rows of `src_ty`.
    pub src: &'a [u8],
    /// Elements per row (`dims[0]`).
    pub row_len: usize,
    /// The type to write.
    pub dst_ty: GgmlType,
}

/// Converts one tensor on the current rayon pool, splitting it into chunks of whole rows.
///
/// The output is the same for any split: every block is quantized on its own.
pub fn convert_tensor(job: &TensorJob<'_>) -> Result<Vec<u8>, QuantError> {
    let src_row = row_bytes(job.src_ty, job.row_len)?;
    let dst_row = row_bytes(job.dst_ty, job.row_len)?;
    if src_row == 0 || !job.src.len().is_multiple_of(src_row) {
        return Err(QuantError::Length {
            ty: job.src_ty,
            what: "tensor bytes (a whole number of rows)",
            expected: job.src.len().next_multiple_of(src_row.max(1)),
            got: job.src.len(),
        });
    }
    let n_rows = job.src.len() / src_row;
    let rows_per_chunk = CHUNK_ELEMENTS.div_ceil(job.row_len).max(1);
    let mut dst = vec![0u8; n_rows * dst_row];
    dst.par_chunks_mut(rows_per_chunk * dst_row)
        .zip(job.src.par_chunks(rows_per_chunk * src_row))
        .try_for_each(|(out, src)| {
            let mut row = vec![0f32; job.row_len];
            for (o, s) in out.chunks_exact_mut(dst_row).zip(src.chunks_exact(src_row)) {
                dequantize_row(job.src_ty, s, &mut row)?;
                quantize_row(job.dst_ty, &row, o)?;
            }
            Ok(())
        })?;
    Ok(dst)
}

/// Converts every job, in parallel over jobs and within each, on a pool of `n_threads`
/// threads (0: one per core). Results come back in job order.
pub fn convert_tensors(
    jobs: &[TensorJob<'_>],
    n_threads: usize,
) -> Vec<Result<Vec<u8>, QuantError>> {
    let run = || jobs.par_iter().map(convert_tensor).collect();
    // NOTE: a pool that cannot be built (no threads left) is not worth failing a conversion
    // for; the global pool does the same work.
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n_threads)
        .build()
    {
        Ok(pool) => pool.install(run),
        Err(_) => run(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_conversion_equals_one_pass() {
        let row_len = 512;
        let n_rows = 300; // more than one chunk
        let x: Vec<f32> = (0..row_len * n_rows)
            .map(|i| ((i as f32) * 0.37).sin() * (1.0 + (i % 7) as f32))
            .collect();
        let src: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        for ty in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16] {
            let job = TensorJob {
                src_ty: GgmlType::F32,
                src: &src,
                row_len,
                dst_ty: ty,
            };
            let got = convert_tensor(&job).unwrap();
            let mut want = vec![0u8; row_bytes(ty, x.len()).unwrap()];
            quantize_row(ty, &x, &mut want).unwrap();
            assert_eq!(got, want, "{ty}");
        }
    }

    #[test]
    fn rejects_partial_rows() {
        let job = TensorJob {
            src_ty: GgmlType::F32,
            src: &[0u8; 4 * 33],
            row_len: 32,
            dst_ty: GgmlType::Q8_0,
        };
        let err = convert_tensor(&job).unwrap_err();
        assert!(err.to_string().contains("whole number of rows"), "{err}");
        let job = TensorJob {
            row_len: 33,
            src: &[0u8; 4 * 33],
            ..job
        };
        let err = convert_tensor(&job).unwrap_err();
        assert!(err.to_string().contains("Q8_0"), "{err}");
    }
}
