//! Sampling's top-k stage on the device (kernels/top_k.wgsl): k candidates per row come back
//! instead of the row of logits.

use hearth_backend::{Backend, BackendError};
use hearth_sampler::Candidate;

use crate::backend::{check, words, WgpuBackend, WgpuTensor};
use crate::kernels::Module;
use crate::recorder::{Bind, Grid};

/// The largest k the kernel selects (`TOP_K_MAX` in kernels/top_k.wgsl); the sampler asks for
/// at most this many.
pub(crate) const TOP_K_MAX: usize = hearth_sampler::MAX_DEVICE_TOP_K;

/// Values of a chunk at least, where the row has that many.
const MIN_CHUNK: usize = 512;

/// How a row of `cols` values is cut for a top-`k` (kernels/top_k.wgsl): (chunks, values a
/// chunk), no chunk empty. A chunk's workgroup reads its values four times over, and the
/// row's merging workgroup reads chunks × k candidates as often, so about sqrt(cols / k)
/// chunks make the two about equal.
///
/// NOTE: one workgroup per row (every row one chunk) was the first version; it left a
/// 151,936-value row's passes to one compute unit, as the CUDA kernel did before it
/// (kernels/top_k.cu, where splitting the row sped Qwen3-0.6B's sampled decode up 19% on an
/// H100).
fn chunks_for(cols: usize, k: usize) -> (usize, usize) {
    let balanced = ((cols / k.max(1)) as f64).sqrt().round() as usize;
    let chunks = balanced.min(cols.div_ceil(MIN_CHUNK)).max(1);
    let chunk = cols.div_ceil(chunks);
    (cols.div_ceil(chunk), chunk)
}

impl WgpuBackend {
    /// The `k` best values of each row of `t` into `out`; see [`Backend::top_k_rows`].
    pub(crate) fn top_k_into(
        &self,
        t: &WgpuTensor,
        k: usize,
        out: &mut Vec<Candidate>,
    ) -> Result<(), BackendError> {
        let (rows, cols) = (t.rows, t.cols);
        check(
            (1..=cols).contains(&k) && u32::try_from(rows * cols.max(2 * k)).is_ok(),
            || format!("top-{k} of [{rows}, {cols}]"),
        )?;
        out.clear();
        if rows == 0 {
            return Ok(());
        }
        if k > TOP_K_MAX {
            // More than the kernel's workgroup arrays hold: selected on the host.
            let values = self.to_host(t)?;
            hearth_sampler::best_of_rows(&values, cols, k, out);
            return Ok(());
        }
        let mut best = self.alloc(rows, 2 * k)?;
        let (chunks, chunk) = chunks_for(cols, k);
        let mut cand = self.alloc(rows, chunks * 2 * k)?;
        {
            let mut rec = self.recorder();
            let dispatches: &[(u32, usize)] = if chunks > 1 {
                &[(0, rows * chunks), (1, rows)]
            } else {
                &[(0, rows)]
            };
            for &(merge, groups) in dispatches {
                let params = words(&[
                    cols as u32,
                    k as u32,
                    rows as u32,
                    chunk as u32,
                    chunks as u32,
                    merge,
                    0,
                    0,
                ]);
                let binds = [
                    Bind::Buffer(&t.buf),
                    Bind::Buffer(best.written()),
                    Bind::Host(&params),
                    Bind::Buffer(cand.written()),
                ];
                rec.dispatch(
                    &self.gpu,
                    Module::TopK,
                    "top_k",
                    &binds,
                    Grid::Groups(groups),
                )?;
            }
        }
        let mut words = Vec::new();
        self.read_back(&best, &mut words)?;
        hearth_backend::unpack_top_k(&words, k, out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::chunks_for;

    #[test]
    fn chunks_cover_the_row() {
        for cols in [1, 7, 300, 511, 512, 513, 5_000, 151_936, 262_144] {
            for k in [1, 5, 40, 128] {
                let (chunks, chunk) = chunks_for(cols, k);
                assert!(chunks >= 1 && (chunks - 1) * chunk < cols && chunks * chunk >= cols);
            }
        }
        assert_eq!(chunks_for(151_936, 40), (62, 2451));
        assert_eq!(chunks_for(300, 5), (1, 300));
    }
}
