//! The start and end of a forward pass: choosing eager, record or replay mode (`state.rs`),
//! and reading the result back, which ends a recording and launches the graph.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use hearth_backend::{BackendError, DeviceVisible, HostValues};

use super::memory::Pinned;
use super::state::{self, EarlyLaunch, HostTarget, Mode, State};
use super::step_gate::{self, SharedGate};
use super::{CudaBackend, CudaTensor};

impl CudaBackend {
    /// Starts a pass with replay key `key`; `chained`: one that ends in a chained argmax
    /// (`chained.rs`), which may begin while the passes before it still run; `host_target`:
    /// where its last matmul may write on the host (`host_output.rs`).
    pub(super) fn start_forward(
        &self,
        key: Option<u64>,
        chained: bool,
        host_target: Option<HostTarget>,
    ) {
        let Ok(mut guard) = self.state() else {
            return;
        };
        let st = &mut *guard;
        let _ = self.dev.context().bind_to_thread();
        // A pass that failed while recording left the capture open: close and discard it.
        if let Mode::Record(k) = st.mode {
            let _ = self
                .dev
                .stream()
                .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0));
            st.unrecordable.insert(k);
        }
        // The last pass may have ended without reading anything back (a prompt chunk that
        // wants no logits): its copies must finish before the staging buffer is reused. A
        // chained pass waits only for the pass whose buffer it takes, and one that releases
        // the step queued ahead for it (`step_gate.rs`) for nothing: the pass before waited.
        let key = if self.keep_ahead(st, key, chained, host_target) {
            key
        } else {
            self.start_chain(st, key, chained)
        };
        if !st.retired_staging.is_empty() {
            // Passes before this one may still read them.
            let _ = self.synchronize();
            st.retired_staging.clear();
        }
        st.arena.reset();
        st.staging.host.reset();
        st.staged.clear();
        st.forget_copies();
        st.host_target = host_target;
        if let Some(k) = key.filter(|k| {
            st.graphs
                .get(k)
                .is_some_and(|g| g.host_target != host_target)
        }) {
            // Its kernel writes the memory the recording was aimed at.
            st.drop_graph(k);
        }
        st.mode = st.mode_for(key);
        // NOTE: not for chained steps, which are queued ahead of the device anyway.
        st.early_launch = match st.mode {
            Mode::Replay(k) if !chained => st
                .graphs
                .get(&k)
                .map_or(EarlyLaunch::Off, |g| EarlyLaunch::At(g.staged)),
            _ => EarlyLaunch::Off,
        };
        st.start_tensor_log();
        if let Mode::Record(k) = st.mode {
            let mode = cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
            if let Err(e) = self.dev.stream().begin_capture(mode) {
                tracing::warn!(batch = k, "cannot record decode steps: {e:?}");
                st.unrecordable.insert(k);
                st.mode = Mode::Eager;
            }
        }
    }

    /// Ends the pass's queueing before something is read back: a recording is closed and
    /// instantiated, and a recorded step (new or replayed) is launched.
    pub(super) fn finish_pass(&self, st: &mut State) -> Result<(), BackendError> {
        let stream = self.dev.stream();
        match st.mode {
            Mode::Eager => {}
            Mode::Record(k) => {
                st.mode = Mode::Eager;
                let flags = cudarc::driver::sys::CUgraphInstantiate_flags(0);
                match stream.end_capture(flags) {
                    Ok(Some(exec)) => {
                        tracing::debug!(batch = k, "decode step recorded as a CUDA graph");
                        let staged = st.staging.host.used();
                        let arena_end = st.arena.position();
                        st.graphs.insert(
                            k,
                            state::Graph {
                                exec,
                                staged,
                                arena_end,
                                host_target: st.host_target,
                                writes_host: st.gate.wrote_host(),
                            },
                        );
                    }
                    other => {
                        let why = match other {
                            Err(e) => format!("{e:?}"),
                            _ => "the capture was empty".into(),
                        };
                        tracing::warn!(batch = k, "recording a decode step failed: {why}");
                        st.unrecordable.insert(k);
                        return Err(BackendError::Device(format!(
                            "recording a decode step failed ({why}); later steps run op by op"
                        )));
                    }
                }
                self.send_step(st, k)?;
            }
            Mode::Replay(k) => {
                st.mode = Mode::Eager;
                let early = std::mem::replace(&mut st.early_launch, EarlyLaunch::Off);
                if early != EarlyLaunch::Done {
                    self.send_step(st, k)?;
                }
                // The pass may go on op by op: its tensors must not take the replayed ones'
                // memory.
                if let Some(g) = st.graphs.get(&k) {
                    let mark = g.arena_end;
                    st.arena.skip_past(mark);
                }
            }
        }
        Ok(())
    }

    /// [`Self::read_back`] into page-locked memory that `out` keeps from pass to pass: the
    /// device copies straight into what the caller reads (see [`HostValues`]).
    pub(super) fn read_back_values(
        &self,
        t: &CudaTensor,
        out: &mut HostValues,
    ) -> Result<(), BackendError> {
        let mut st = self.state()?;
        self.finish_pass(&mut st)?;
        let dst = self.locked_values(out, t.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` holds t.len() f32 in page-locked memory, not read before this returns.
        unsafe { self.copy_back_and_wait(t, dst.as_mut_ptr()) }
    }

    /// `len` values of page-locked memory in `out` (kept from pass to pass) for the device to
    /// write into; their contents are unspecified until it has.
    pub(super) fn locked_values<'a>(
        &self,
        out: &'a mut HostValues,
        len: usize,
    ) -> Result<&'a mut [f32], BackendError> {
        let ctx = self.dev.context();
        out.device_visible(len, |n| {
            // NOTE: rounded up so that a step of a few more rows does not allocate again.
            let pinned = Pinned::new(ctx, (n * 4).next_power_of_two())?;
            let values = LockedValues::zeroed(pinned, self.dev.stream().clone(), self.gate.clone());
            Ok::<_, BackendError>(Box::new(values) as Box<dyn DeviceVisible>)
        })
    }

    /// Copies `t` to `dst` and waits for the copy.
    ///
    /// # Safety
    /// `dst` must have room for `t.len()` f32 and stay untouched until this returns.
    unsafe fn copy_back_and_wait(&self, t: &CudaTensor, dst: *mut f32) -> Result<(), BackendError> {
        // SAFETY: `t` lies in the arena and holds t.len() f32; `dst` as the caller promises.
        unsafe {
            cudarc::driver::sys::cuMemcpyDtoHAsync_v2(
                dst as *mut std::ffi::c_void,
                t.ptr,
                t.len() * 4,
                self.dev.stream().cu_stream(),
            )
        }
        .result()
        .map_err(|e| BackendError::Device(format!("read back: {e:?}")))?;
        self.synchronize()?;
        Ok(())
    }

    pub(super) fn read_back(&self, t: &CudaTensor, out: &mut Vec<f32>) -> Result<(), BackendError> {
        let mut st = self.state()?;
        self.finish_pass(&mut st)?;
        out.clear();
        out.reserve(t.len());
        if t.len() * 4 >= PINNED_READ_BACK {
            return self.read_back_pinned(&mut st, t, out);
        }
        // NOTE: straight into the vector's spare capacity: clearing tens of MB first would cost
        // as much as the copy.
        let spare = &mut out.spare_capacity_mut()[..t.len()];
        // SAFETY: `spare` has room for t.len() f32; the length is set only after the copy.
        unsafe { self.copy_back_and_wait(t, spare.as_mut_ptr() as *mut f32)? };
        // SAFETY: the first t.len() values were written by the completed copy.
        unsafe { out.set_len(t.len()) };
        Ok(())
    }

    /// A large read-back (the logits of many sequences): from the device into page-locked
    /// memory in chunks, each copied on into `out` (empty, with room for `t`) by one of the
    /// cores as soon as it has arrived, while the later chunks are still on their way.
    ///
    /// NOTE: a copy into pageable memory ran at about 9 GB/s on an H100 machine: 4.2 ms of a
    /// 7.8 ms step for 64 rows of a 152k vocabulary. Into page-locked memory the device
    /// copies at the link's speed, and the host copy splits over the cores: 64 streams of
    /// Qwen3-0.6B went from 8,283-9,679 to 11,978-12,121 tok/s. The host copy then still
    /// followed the whole device copy; in chunks the two overlap.
    fn read_back_pinned(
        &self,
        st: &mut State,
        t: &CudaTensor,
        out: &mut Vec<f32>,
    ) -> Result<(), BackendError> {
        use rayon::prelude::*;
        // The copies below would queue behind a step waiting for the next pass.
        self.settle_ahead();
        let bytes = t.len() * 4;
        let mut buf = match st.read_back.take() {
            Some(b) if b.capacity() >= bytes => b,
            _ => Pinned::new(self.dev.context(), bytes.next_power_of_two())?,
        };
        let n_chunks = t.len().div_ceil(COPY_CHUNK);
        while st.read_back_events.len() < n_chunks {
            let event = self.dev.context().new_event(None).map_err(|e| {
                BackendError::Device(format!("read back: creating an event: {e:?}"))
            })?;
            st.read_back_events.push(event);
        }
        let stream = self.dev.stream();
        let host = buf.as_mut_ptr() as usize;
        // Kept in the state before any copy is queued: on an error below, copies may still be
        // in flight into it.
        st.read_back = Some(buf);
        for (i, event) in st.read_back_events[..n_chunks].iter().enumerate() {
            let at = i * COPY_CHUNK * 4;
            let len = (bytes - at).min(COPY_CHUNK * 4);
            // SAFETY: `t` lies in the arena and holds `bytes` bytes, `buf` has room for them;
            // no byte of the chunk is read before its event has completed.
            unsafe {
                cudarc::driver::sys::cuMemcpyDtoHAsync_v2(
                    (host + at) as *mut std::ffi::c_void,
                    t.ptr + at as u64,
                    len,
                    stream.cu_stream(),
                )
            }
            .result()
            .map_err(|e| BackendError::Device(format!("read back: {e:?}")))?;
            event
                .record(stream)
                .map_err(|e| BackendError::Device(format!("read back: {e:?}")))?;
        }
        let events = &st.read_back_events[..n_chunks];
        let spare = &mut out.spare_capacity_mut()[..t.len()];
        spare
            .par_chunks_mut(COPY_CHUNK)
            .zip(events.par_iter())
            .enumerate()
            .try_for_each(|(i, (dst, event))| {
                event
                    .synchronize()
                    .map_err(|e| BackendError::Device(format!("read back: {e:?}")))?;
                // SAFETY: the chunk's copy has completed (its event), and it wrote dst.len()
                // f32 at this offset of the page-aligned buffer.
                let src = unsafe {
                    std::slice::from_raw_parts((host as *const f32).add(i * COPY_CHUNK), dst.len())
                };
                for (d, &s) in dst.iter_mut().zip(src) {
                    d.write(s);
                }
                Ok::<(), BackendError>(())
            })?;
        // SAFETY: every one of the first t.len() values was written above.
        unsafe { out.set_len(t.len()) };
        Ok(())
    }
}

/// Read-backs of at least this many bytes go through page-locked memory (see
/// `read_back_pinned`); smaller ones (one sequence's logits) go straight into the vector.
const PINNED_READ_BACK: usize = 4 << 20;
/// f32 values per chunk of a read-back through page-locked memory: a device copy, an event
/// and a task of the host copy each.
const COPY_CHUNK: usize = 1 << 18;

/// Page-locked memory as [`HostValues`] hold it: f32 values, zeroed when allocated, the
/// stream whose work writes them and the backend's gate (`step_gate.rs`).
struct LockedValues(Pinned, Arc<CudaStream>, SharedGate);

impl Drop for LockedValues {
    fn drop(&mut self) {
        // A pass that failed after its graph went out may still be writing its last matmul
        // into this memory (`host_output.rs`), and a step queued ahead would write it again
        // once released: that is called off, and the stream's work must end before the
        // memory is freed.
        // NOTE: the stream, not the context: a context-wide wait fails, and spoils the
        // recording, while another backend's stream records a graph.
        step_gate::lock(&self.2).call_off();
        let _ = self.1.synchronize();
    }
}

impl LockedValues {
    fn zeroed(mut p: Pinned, stream: Arc<CudaStream>, gate: SharedGate) -> Self {
        // SAFETY: the allocation holds capacity() bytes, owned by `p`.
        unsafe { std::ptr::write_bytes(p.as_mut_ptr(), 0, p.capacity()) };
        Self(p, stream, gate)
    }
}

// SAFETY: the memory is owned by the Pinned allocation (page-aligned, so f32-aligned), holds
// capacity() f32 (zeroed when made, then written by copies or by a pass's last GEMV, whose
// work ends before the memory is freed), and lives as long as this does.
unsafe impl DeviceVisible for LockedValues {
    fn capacity(&self) -> usize {
        self.0.capacity() / 4
    }
    fn as_ptr(&self) -> *const f32 {
        self.0.as_ptr() as *const f32
    }
    fn as_mut_ptr(&mut self) -> *mut f32 {
        self.0.as_mut_ptr() as *mut f32
    }
}
