//! Chained greedy decode steps (`Backend::argmax_rows_chained`): a step's argmax ids stay on
//! the device, where the next step's embedding reads them, and come back to the host behind
//! an event that `take_chained_argmax` waits for. The engine queues the next step before the
//! current one has finished, so the GPU goes from one step's graph to the next without
//! waiting for the host (its wait's return, its walk of the model, the graph's launch).
//!
//! Two chained passes may be in flight at once; they alternate between two parities, each
//! with its own staging buffer (a recorded step's host data is copied from there when the
//! stream reaches its graph, so the next pass must not overwrite it) and its own replay key.
//! The argmax kernel stores the ids both where the next embedding reads them and in the
//! parity's page-locked slot: no copy stands between one step's graph and the next.
//! A pass that is not chained synchronizes first, as before.

use std::collections::VecDeque;

use cudarc::driver::CudaEvent;
use hearth_backend::BackendError;

use super::memory::{Kept, Pinned, Staging};
use super::staging::PINNED_START;
use super::state::{Mode, State};
use super::{CudaBackend, CudaTensor};

/// Rows a chained step may have (the ids buffer on the device and each parity's page-locked
/// copy hold this many).
const MAX_ROWS: usize = 4096;

/// Set in the replay key of a chained pass of the second parity.
const PARITY_KEY: u64 = 1 << 63;

/// What chained passes keep between passes.
pub(super) struct Chain {
    /// Staging buffers not in use: slot 0 the plain passes', slot 1 + p chained parity p's.
    /// The one in use is `State::staging`, of slot `in_use`.
    parked: [Option<Staging>; 3],
    in_use: usize,
    /// Chained passes begun: the next one's parity is `begun % 2`.
    begun: u64,
    /// The parity of the chained pass under way.
    parity: usize,
    /// Each parity's ids, copied back: MAX_ROWS u32 a parity.
    ids_host: Option<Pinned>,
    /// Each parity's event, recorded after its ids' copy.
    events: Vec<CudaEvent>,
    /// Chained argmaxes not yet taken, oldest first: (parity, rows).
    waiting: VecDeque<(usize, usize)>,
    /// Rows of the last chained argmax, which the next `embed_chained` reads.
    last_rows: usize,
    /// The last chained argmax's ids on the device.
    ids: Kept,
}

impl Chain {
    /// The staging slot in use: 0 the plain passes', 1 + p chained parity p's.
    pub fn slot(&self) -> usize {
        self.in_use
    }

    pub fn new() -> Self {
        Self {
            parked: [None, None, None],
            in_use: 0,
            begun: 0,
            parity: 0,
            ids_host: None,
            events: Vec::new(),
            waiting: VecDeque::new(),
            last_rows: 0,
            ids: Kept::new("chained ids"),
        }
    }
}

impl CudaBackend {
    /// The start of a pass (`start_forward`) as far as chaining goes: a chained pass takes the
    /// next parity, waits until the pass two before it (same parity) has read its staging
    /// buffer, stages into that buffer, and gets its parity's replay key; any other pass
    /// synchronizes and stages into the plain passes' buffer.
    pub(super) fn start_chain(
        &self,
        st: &mut State,
        key: Option<u64>,
        chained: bool,
    ) -> Option<u64> {
        if !chained {
            let _ = self.synchronize();
            self.use_staging(st, 0);
            return key;
        }
        let parity = (st.chain.begun % 2) as usize;
        st.chain.begun += 1;
        st.chain.parity = parity;
        if let Some(event) = st.chain.events.get(parity) {
            if let Err(e) = event.synchronize() {
                tracing::warn!("waiting for a chained step: {e:?}");
                let _ = self.synchronize();
            }
        }
        if !self.use_staging(st, 1 + parity) {
            // Staged into the buffer in use, whatever the recordings read: none may replay.
            let _ = self.synchronize();
            st.drop_graphs();
            return None;
        }
        key.map(|k| if parity == 1 { k | PARITY_KEY } else { k })
    }

    /// Makes slot `slot`'s staging buffer the one in use; false when it could not be
    /// allocated (the buffer in use stays).
    fn use_staging(&self, st: &mut State, slot: usize) -> bool {
        if st.chain.in_use == slot {
            return true;
        }
        let next = match st.chain.parked[slot].take() {
            Some(p) => p,
            None => match Staging::new(self.dev.context(), self.dev.stream(), PINNED_START) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!("staging for chained steps: {e}");
                    return false;
                }
            },
        };
        let current = std::mem::replace(&mut st.staging, next);
        st.chain.parked[st.chain.in_use] = Some(current);
        st.chain.in_use = slot;
        true
    }

    /// The device address of the chained ids, room for `rows`.
    fn chained_ids(&self, st: &mut State, rows: usize) -> Result<u64, BackendError> {
        if rows > MAX_ROWS {
            return Err(BackendError::Unsupported(format!(
                "a chained step of {rows} rows (at most {MAX_ROWS})"
            )));
        }
        let may_grow = st.mode == Mode::Eager;
        match st
            .chain
            .ids
            .get(self.dev.stream(), MAX_ROWS * 4, may_grow)?
        {
            Some((ptr, replaced)) => {
                if replaced {
                    st.drop_graphs();
                }
                Ok(ptr)
            }
            None => Err(BackendError::Device(
                "the chained ids were first needed while a step was being recorded".into(),
            )),
        }
    }

    pub(super) fn embed_last_chained(
        &self,
        table: &super::CudaWeight,
        out: &CudaTensor,
    ) -> Result<(), BackendError> {
        let mut st = self.state()?;
        if out.rows != st.chain.last_rows || out.cols != table.cols {
            return Err(BackendError::Unsupported(format!(
                "a chained step embedding [{}, {}] after an argmax of {} rows",
                out.rows, out.cols, st.chain.last_rows
            )));
        }
        let ids = self.chained_ids(&mut st, out.rows)?;
        self.launch_embed(&st, table, ids, out)?;
        Ok(())
    }

    pub(super) fn queue_chained_argmax(&self, t: &CudaTensor) -> Result<(), BackendError> {
        let mut st = self.state()?;
        // NOTE: each parity has one page-locked slot for its ids: a third pass in flight
        // would overwrite the first's before it is taken.
        if st.chain.waiting.len() >= 2 {
            return Err(BackendError::Unsupported(
                "a third chained step queued before the first was taken".into(),
            ));
        }
        let chained = self.chained_ids(&mut st, t.rows)?;
        let mut ids_host = match st.chain.ids_host.take() {
            Some(p) => p,
            None => Pinned::new(self.dev.context(), 2 * MAX_ROWS * 4)?,
        };
        let parity = st.chain.parity;
        // NOTE: the slot's address is part of the parity's recorded step: the buffer is made
        // once and never replaced.
        let host = ids_host.as_mut_ptr() as u64 + (parity * MAX_ROWS * 4) as u64;
        st.chain.ids_host = Some(ids_host);
        // The kernel stores the ids where the next step's embedding reads them and in the
        // parity's page-locked slot, read only after the event below has completed.
        self.launch_argmax(&mut st, t, chained, host)?;
        self.finish_pass(&mut st)?;
        let stream = self.dev.stream();
        while st.chain.events.len() < 2 {
            let event = self.dev.context().new_event(None).map_err(|e| {
                BackendError::Device(format!("chained ids: creating an event: {e:?}"))
            })?;
            st.chain.events.push(event);
        }
        st.chain.events[parity]
            .record(stream)
            .map_err(|e| BackendError::Device(format!("chained ids: {e:?}")))?;
        st.chain.waiting.push_back((parity, t.rows));
        st.chain.last_rows = t.rows;
        Ok(())
    }

    pub(super) fn take_chained(&self, out: &mut Vec<u32>) -> Result<(), BackendError> {
        let st = &mut *self.state()?;
        let Some((parity, rows)) = st.chain.waiting.pop_front() else {
            return Err(BackendError::Unsupported(
                "no chained decode step is waiting to be taken".into(),
            ));
        };
        st.chain.events[parity]
            .synchronize()
            .map_err(|e| BackendError::Device(format!("chained step: {e:?}")))?;
        let Some(host) = st.chain.ids_host.as_ref().map(|p| p.as_ptr()) else {
            return Err(BackendError::Device(
                "chained ids read back before any was queued".into(),
            ));
        };
        // SAFETY: the parity's slot holds `rows` u32, written by the argmax the event followed.
        let words = unsafe {
            std::slice::from_raw_parts(host.add(parity * MAX_ROWS * 4) as *const u32, rows)
        };
        out.clear();
        out.extend_from_slice(words);
        Ok(())
    }
}
