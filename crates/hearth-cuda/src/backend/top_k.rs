//! Top-k for sampling over chunks of a row (kernels/top_k.cu `top_k_split_f32`): one block per
//! chunk selects the chunk's best k, and the row's last block selects among those.
//!
//! NOTE: `top_k_f32`, one block of 1,024 threads per row, spent tens of microseconds on a
//! 151,936-value row (Qwen3-0.6B's sampled decode ran 15-20% slower than greedy on an H100):
//! its five passes over the row run on one multiprocessor.

use hearth_backend::BackendError;

use super::launch::Arg;
use super::state::{Mode, State};
use super::{CudaBackend, CudaTensor};

/// Threads of a `top_k_split_f32` block, and the most values of a chunk and candidates of a
/// row it holds (kernels/top_k.cu TOP_K_SPLIT_THREADS, TOP_K_SPLIT_CAP).
const THREADS: u32 = 512;
const CAP: usize = 4096;
/// Values of a chunk at least, where the row has that many.
const MIN_CHUNK: usize = 512;

/// How a row of `cols` values is cut for a top-`k`: (chunks, values a chunk), no chunk empty;
/// `None` where the chunks' candidates would not fit one block.
///
/// The chunk's work grows with its values and the last block's with chunks × k, so the row
/// is cut into about sqrt(cols / k) chunks, which makes the two about equal.
fn chunks_for(cols: usize, k: usize) -> Option<(usize, usize)> {
    if k == 0 || k > cols {
        return None;
    }
    let fewest = cols.div_ceil(CAP);
    let most = CAP / k;
    if fewest > most {
        return None;
    }
    let balanced = ((cols / k) as f64).sqrt().round() as usize;
    let chunks = balanced
        .min(cols.div_ceil(MIN_CHUNK))
        .clamp(fewest, most)
        .max(1);
    let chunk = cols.div_ceil(chunks);
    Some((cols.div_ceil(chunk), chunk))
}

impl CudaBackend {
    /// Queues `top_k_split_f32` for `t`'s rows into `best` (per row the k values best first,
    /// then their indices): false, and nothing queued, where its chunks do not fit a block or
    /// its counters would have to grow while a step is being recorded.
    pub(super) fn launch_top_k_split(
        &self,
        st: &mut State,
        t: &CudaTensor,
        k: usize,
        best: &CudaTensor,
    ) -> Result<bool, BackendError> {
        let Some((chunks, chunk)) = chunks_for(t.cols, k) else {
            return Ok(false);
        };
        if !st.mode.launches() {
            // A replayed step: its recording holds the launch.
            return Ok(true);
        }
        let cand_bytes = t.rows * chunks * k * 8;
        let Some((counts, cand)) = self.row_counters_and_scratch(st, t.rows, cand_bytes)? else {
            return Ok(false);
        };
        let args = [
            Arg::P(t.ptr),
            Arg::P(cand),
            Arg::P(counts),
            Arg::P(best.ptr),
            Arg::I(t.cols as i32),
            Arg::I(chunk as i32),
            Arg::I(k as i32),
        ];
        let grid = (chunks as u32, t.rows as u32);
        self.launch(st, "top_k_split_f32", grid, THREADS, &args)?;
        // The next kernel that could be handed this memory waits for this one before writing.
        st.arena.give_back(cand, cand_bytes);
        Ok(true)
    }

    /// For a kernel whose blocks split rows and whose last block per row merges (top-k and
    /// argmax over chunks): a zeroed counter per row (the kernel leaves them zeroed) and
    /// `scratch_bytes` of transient memory for the blocks' results, which the caller gives
    /// back once the launch is queued. `None` where the counters would have to grow while a
    /// step is being recorded.
    pub(super) fn row_counters_and_scratch(
        &self,
        st: &mut State,
        rows: usize,
        scratch_bytes: usize,
    ) -> Result<Option<(u64, u64)>, BackendError> {
        let stream = self.dev.stream().clone();
        let may_grow = st.mode == Mode::Eager;
        let Some((counts, replaced)) = st.counters.get(&stream, rows * 4, may_grow)? else {
            return Ok(None);
        };
        if replaced {
            // Recorded steps point at the old counters.
            st.drop_graphs();
        }
        let scratch = st.arena.alloc(&stream, scratch_bytes, may_grow)?;
        Ok(Some((counts, scratch)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_row_and_their_candidates_fit_one_block() {
        for cols in [1, 7, 200, 511, 512, 513, 5_000, 32_000, 151_936, 262_144] {
            for k in [1, 2, 5, 40, 104, 128] {
                if k > cols {
                    assert_eq!(chunks_for(cols, k), None);
                    continue;
                }
                let Some((chunks, chunk)) = chunks_for(cols, k) else {
                    // Only rows too wide for k's candidates fall back to one block a row.
                    assert!(cols.div_ceil(CAP) > CAP / k, "{cols} values, k {k}");
                    continue;
                };
                assert!(chunk <= CAP && chunks * k <= CAP, "{cols} values, k {k}");
                assert!((chunks - 1) * chunk < cols && chunks * chunk >= cols);
            }
        }
        // A real vocabulary with Ollama's default top-k: about sqrt(151,936 / 40) chunks.
        assert_eq!(chunks_for(151_936, 40), Some((62, 2451)));
        assert_eq!(chunks_for(151_936, 128), None);
    }
}
