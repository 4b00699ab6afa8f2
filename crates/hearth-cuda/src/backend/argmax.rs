//! Greedy decoding's argmax on the device: one word per row comes back instead of the row.
//! Rows longer than a block's chunk are cut into chunks (kernels/reduce.cu
//! `argmax_split_f32`): a block per chunk, and the row's last block takes the best of theirs.

use hearth_backend::BackendError;

use super::launch::Arg;
use super::state::State;
use super::{CudaBackend, CudaTensor};

/// Threads of an `argmax_split_f32` block and the values of its chunk (kernels/reduce.cu
/// ARGMAX_SPLIT_THREADS, ARGMAX_SPLIT_CHUNK).
const SPLIT_THREADS: u32 = 256;
const SPLIT_CHUNK: usize = 16 * SPLIT_THREADS as usize;

impl CudaBackend {
    /// Queues the argmax of each of `t`'s rows into `ids` (device memory, one u32 per row)
    /// and, unless 0, into `ids_host` (page-locked host memory, as many).
    pub(super) fn launch_argmax(
        &self,
        st: &mut State,
        t: &CudaTensor,
        ids: u64,
        ids_host: u64,
    ) -> Result<(), BackendError> {
        if t.cols > SPLIT_CHUNK && self.launch_argmax_split(st, t, ids, ids_host)? {
            return Ok(());
        }
        let args = [
            Arg::P(t.ptr),
            Arg::P(ids),
            Arg::P(ids_host),
            Arg::I(t.cols as i32),
        ];
        let grid = (t.rows as u32, 1);
        self.launch(st, "argmax_f32", grid, crate::ops::ARGMAX_THREADS, &args)?;
        Ok(())
    }

    /// `argmax_split_f32`: false, and nothing queued, where its counters would have to grow
    /// while a step is being recorded.
    fn launch_argmax_split(
        &self,
        st: &mut State,
        t: &CudaTensor,
        ids: u64,
        ids_host: u64,
    ) -> Result<bool, BackendError> {
        if !st.mode.launches() {
            // A replayed step: its recording holds the launch.
            return Ok(true);
        }
        let chunks = t.cols.div_ceil(SPLIT_CHUNK);
        let part_bytes = t.rows * chunks * 8;
        let Some((counts, part)) = self.row_counters_and_scratch(st, t.rows, part_bytes)? else {
            return Ok(false);
        };
        let args = [
            Arg::P(t.ptr),
            Arg::P(part),
            Arg::P(counts),
            Arg::P(ids),
            Arg::P(ids_host),
            Arg::I(t.cols as i32),
        ];
        self.launch(
            st,
            "argmax_split_f32",
            (chunks as u32, t.rows as u32),
            SPLIT_THREADS,
            &args,
        )?;
        // The next kernel that could be handed this memory waits for this one before writing.
        st.arena.give_back(part, part_bytes);
        Ok(true)
    }
}
