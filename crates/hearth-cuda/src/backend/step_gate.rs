//! Decode steps queued ahead of the host. A pass whose logits its own GEMV writes into host
//! memory (`host_output.rs`) cannot be queued before the pass ahead of it has come back: the
//! host needs those logits to choose the token. Its graph, though, reads the token only from
//! the staged data. So once such a step has gone out, the same recorded step is queued again
//! behind a gate (kernels/step_gate.cu): a one-block kernel that waits until the next pass
//! has staged its data and written the gate's release header, copies that data to the
//! device, and lets the graph behind it run.
//!
//! ```text
//!  pass N    stage data, release gate N ... walk ... wait for step N's event
//!            (queued after step N: gate N+1, step N+1's graph)
//!  pass N+1  stage data, release gate N+1, queue gate N+2 and step N+2, ...
//! ```
//!
//! Between two plain steps the GPU then waits only for the host's own work (taking the
//! logits, staging the next token's data) and the gate's reads over the bus, not for the
//! graph's launch and the staging copy's own stream operation.
//!
//! A step queued ahead that its pass does not release (the next pass is another step, or
//! none comes) is called off: its gate copies nothing, and the step runs again on the data
//! the device holds, which is the same step the same way (the same token at the same
//! position, so the same keys, values and logits written where they already are). Anything
//! else that would queue work or wait on the stream calls it off first (`settle_ahead`).
//!
//! NOTE (H200, `scripts/device/binary_ab.sh`, three rounds, BENCHMARKS.md 2026-11-30):
//! Qwen3-0.6B tg128 with the logits back, Q8_0 1,394-1,415 -> 1,422-1,428 tok/s, Q4_K_M
//! 1,469-1,484 -> 1,477-1,488; `--greedy`, 64 sequences, prompts and Llama-3.1-8B even.
//! The gate as every recording's first kernel, copying every replay's data instead of the
//! copy before the graph, cost `--greedy` 0.4% and 64 sequences 1%: the copy before the
//! graph overlaps the graph's start, the gate's reads over the bus do not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use hearth_backend::BackendError;

use super::memory::{device_address, Pinned};
use super::state::{Graph, HostTarget, State};
use super::CudaBackend;
use crate::error::driver;
use crate::CudaError;

/// Threads of the gate's one block: each copies 16 bytes a round.
const GATE_THREADS: u32 = 256;
/// How long a gate waits for its release before it runs its step again on the data the
/// device holds. Long enough for any host's work between two steps (sampling 64 rows of
/// logits included); a step so late is sent again (`wait_for_step`).
const GATE_TIMEOUT_NS: u64 = 100_000_000;
/// `HEARTH_CUDA_AHEAD=0` turns queueing steps ahead off (for measurements).
const AHEAD_VAR: &str = "HEARTH_CUDA_AHEAD";

/// Whether steps whose logits come back are queued ahead of the host, unless turned off.
pub(super) fn ahead_by_default() -> bool {
    super::measurement_setting(AHEAD_VAR, 0..=1) != Some(0)
}

/// The gate's words in page-locked memory, in order (kernels/step_gate.cu reads them so).
#[derive(Clone, Copy)]
enum Word {
    /// `(bytes << 32) | ticket`, written after the staged bytes.
    Release,
    /// The last ticket called off.
    CallOff,
    /// The release word the gate acted on, written by the gate.
    Ack,
}

/// A step launched ahead of its pass, its gate waiting.
#[derive(Clone, Copy, Debug)]
struct Ahead {
    key: u64,
    ticket: u32,
    host_target: Option<HostTarget>,
    /// Whether the pass that queued it waited for its own step: the stream then holds
    /// nothing before this one, and the staging buffer is free.
    after_wait: bool,
}

/// The words the gates and the host share, the gates' ticket counter, and the step queued
/// ahead, if any. Shared with the page-locked logits (`forward.rs` `LockedValues`), which
/// call it off before they wait on the stream.
pub(super) struct StepGate {
    words: Pinned,
    _ticket: CudaSlice<u32>,
    ticket: u64,
    /// Gates launched so far: the last ticket handed out.
    launches: u32,
    ahead: Option<Ahead>,
    /// How long a gate waits (ns).
    timeout_ns: u64,
    /// Steps queued ahead, those that their pass released, and steps sent again after their
    /// gate had given up waiting (for tests and measurements).
    queued: usize,
    released: usize,
    sent_again: usize,
}

impl StepGate {
    pub fn new(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Result<Self, CudaError> {
        let mut words = Pinned::new(ctx, 3 * 8)?;
        // SAFETY: the allocation holds 24 bytes, owned by `words`.
        unsafe { std::ptr::write_bytes(words.as_mut_ptr(), 0, 3 * 8) };
        let buf = stream
            .alloc_zeros::<u32>(1)
            .map_err(driver("gate ticket"))?;
        let ticket = device_address(&buf, stream);
        Ok(Self {
            words,
            _ticket: buf,
            ticket,
            launches: 0,
            ahead: None,
            timeout_ns: GATE_TIMEOUT_NS,
            queued: 0,
            released: 0,
            sent_again: 0,
        })
    }

    fn word(&self, w: Word) -> &AtomicU64 {
        // SAFETY: inside the allocation, 8-byte aligned (page-aligned base); the device and
        // this struct only ever access these words whole, through atomics or volatile ops.
        unsafe { &*(self.words.as_ptr().add(w as usize * 8) as *const AtomicU64) }
    }

    /// Calls off the step queued ahead, if any: it runs again on the data the device holds.
    pub fn call_off(&mut self) {
        if let Some(a) = self.ahead.take() {
            self.word(Word::CallOff)
                .store(u64::from(a.ticket), Ordering::Release);
        }
    }
}

/// The gate of a backend, shared.
pub(super) type SharedGate = Arc<Mutex<StepGate>>;

pub(super) fn lock(gate: &SharedGate) -> MutexGuard<'_, StepGate> {
    gate.lock().unwrap_or_else(|e| e.into_inner())
}

fn recorded(st: &State, key: u64) -> Result<&Graph, BackendError> {
    st.graphs
        .get(&key)
        .ok_or_else(|| BackendError::Device("recorded decode step missing".into()))
}

/// The current pass's dealings with the gate.
#[derive(Default)]
pub(super) struct GatePass {
    /// The ticket of the step queued ahead that this pass releases.
    kept: Option<u32>,
    /// The release word this pass wrote for a step queued ahead, and the step's key:
    /// checked against the gate's ack once the step has ended.
    released: Option<(u64, u64)>,
    /// Whether the pass's step is followed by `done` and a step queued ahead.
    queued_ahead: bool,
    done: Option<CudaEvent>,
    /// Whether the pass's last matmul wrote its product straight into host memory.
    wrote_host: bool,
}

impl GatePass {
    pub fn set_wrote_host(&mut self) {
        self.wrote_host = true;
    }

    pub fn wrote_host(&self) -> bool {
        self.wrote_host
    }
}

impl CudaBackend {
    /// Queues steps whose logits come back ahead of the next pass, or not, whatever
    /// `HEARTH_CUDA_AHEAD` says.
    pub fn with_steps_ahead(mut self, on: bool) -> Self {
        self.ahead = on;
        self
    }

    /// How long the gates of steps queued ahead wait for their pass before running their
    /// step again on the data the device holds (a step so late is then sent again).
    pub fn with_gate_timeout(self, timeout: std::time::Duration) -> Self {
        lock(&self.gate).timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// Steps queued ahead of their pass so far.
    pub fn steps_queued_ahead(&self) -> usize {
        lock(&self.gate).queued
    }

    /// Steps queued ahead that their pass released so far.
    pub fn steps_released_ahead(&self) -> usize {
        lock(&self.gate).released
    }

    /// Steps sent again so far because their gate had given up waiting.
    pub fn steps_sent_again(&self) -> usize {
        lock(&self.gate).sent_again
    }

    /// The start of a pass as far as the gate goes: whether the step queued ahead is this
    /// pass's (a replay of its key aimed at the same host memory, after a pass that waited
    /// for its own step), which it then releases instead of launching. Any other pass calls
    /// the step off.
    pub(super) fn keep_ahead(
        &self,
        st: &mut State,
        key: Option<u64>,
        chained: bool,
        host_target: Option<HostTarget>,
    ) -> bool {
        let mut gate = lock(&self.gate);
        let kept = gate.ahead.filter(|a| {
            !chained
                && key == Some(a.key)
                && a.after_wait
                && a.host_target == host_target
                && st.chain.slot() == 0
                && st.retired_staging.is_empty()
                && st
                    .graphs
                    .get(&a.key)
                    .is_some_and(|g| g.host_target == host_target)
        });
        st.gate.kept = kept.map(|a| a.ticket);
        st.gate.released = None;
        st.gate.queued_ahead = false;
        st.gate.wrote_host = false;
        if kept.is_none() {
            gate.call_off();
        }
        kept.is_some()
    }

    /// Calls off the step queued ahead, if any (before anything else is queued or waited for).
    pub(super) fn settle_ahead(&self) {
        lock(&self.gate).call_off();
    }

    /// Waits for all queued work, having called off any step queued ahead.
    pub(super) fn synchronize(&self) -> Result<(), CudaError> {
        self.settle_ahead();
        self.dev.synchronize()
    }

    /// Sends recorded step `key` on its way with the data the pass staged: releases the step
    /// queued ahead for this pass, or copies the data and launches the graph. A step whose
    /// logits its GEMV writes to the host is then queued again, ahead of the next pass.
    pub(super) fn send_step(&self, st: &mut State, key: u64) -> Result<(), BackendError> {
        let mut gate = lock(&self.gate);
        match st.gate.kept.take() {
            Some(ticket) => {
                let bytes = u32::try_from(st.staging.host.used()).map_err(|_| {
                    BackendError::Unsupported("a decode step staging 4 GiB of host data".into())
                })?;
                let h = (u64::from(bytes) << 32) | u64::from(ticket);
                // NOTE: Release: the staged bytes, written before, are visible to a gate
                // that sees it.
                gate.word(Word::Release).store(h, Ordering::Release);
                gate.ahead = None;
                gate.released += 1;
                st.gate.released = Some((h, key));
            }
            None => self.launch_step(st, key)?,
        }
        let g = recorded(st, key)?;
        // NOTE: only a step whose product needs no copy after it: a copy queued behind the
        // step ahead would wait for the next pass.
        let ahead = self.ahead
            && st.chain.slot() == 0
            && g.writes_host
            && st.host_target.is_some()
            && g.host_target == st.host_target;
        if ahead {
            self.queue_ahead(st, &mut gate, key)?;
        }
        Ok(())
    }

    /// Queues the copy of the pass's staged data and recorded step `key`.
    fn launch_step(&self, st: &State, key: u64) -> Result<(), BackendError> {
        let g = recorded(st, key)?;
        st.staging
            .copy_staged(self.dev.stream())
            .map_err(|e| BackendError::Device(e.to_string()))?;
        g.exec
            .launch()
            .map_err(|e| BackendError::Device(format!("graph launch: {e:?}")))
    }

    /// Marks the end of the step just sent with the pass's event, then queues a gate and
    /// the step again behind it: the gate waits for the next pass's release.
    fn queue_ahead(
        &self,
        st: &mut State,
        gate: &mut StepGate,
        key: u64,
    ) -> Result<(), BackendError> {
        let stream = self.dev.stream();
        if st.gate.done.is_none() {
            st.gate.done = Some(self.dev.context().new_event(None).map_err(|e| {
                BackendError::Device(format!("decode step: creating an event: {e:?}"))
            })?);
        }
        if let Some(done) = &st.gate.done {
            done.record(stream)
                .map_err(|e| BackendError::Device(format!("decode step: {e:?}")))?;
        }
        let f = self.dev.function("step_gate")?;
        let words = gate.words.as_ptr() as u64;
        let (src, dst) = (st.staging.host.as_ptr() as u64, st.staging.device_address());
        let mut b = stream.launch_builder(f);
        b.arg(&words)
            .arg(&src)
            .arg(&dst)
            .arg(&gate.ticket)
            .arg(&gate.timeout_ns);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (GATE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: step_gate's parameters in order: the gate's page-locked words, the
        // staging buffer's page-locked bytes and its device copy (as large), the device
        // ticket counter, the timeout.
        unsafe { b.launch(cfg) }
            .map_err(|e| BackendError::Device(format!("step gate launch: {e:?}")))?;
        gate.launches = gate.launches.wrapping_add(1);
        let g = recorded(st, key)?;
        // NOTE: the ticket is taken once the gate is queued: the graph's launch failing
        // below leaves a gate that a call-off ends.
        gate.ahead = Some(Ahead {
            key,
            ticket: gate.launches,
            host_target: st.host_target,
            after_wait: false,
        });
        g.exec
            .launch()
            .map_err(|e| BackendError::Device(format!("graph launch: {e:?}")))?;
        gate.queued += 1;
        st.gate.queued_ahead = true;
        Ok(())
    }

    /// Waits for the pass's step: for its event where a step was queued ahead after it (the
    /// stream holds that one too), for the stream otherwise. A step released from ahead whose
    /// gate had given up waiting ran on the data before: it is sent again and waited for.
    pub(super) fn wait_for_step(&self, st: &mut State) -> Result<(), BackendError> {
        if !std::mem::take(&mut st.gate.queued_ahead) {
            self.synchronize()?;
            return Ok(());
        }
        self.wait_for_done(st)?;
        let mut gate = lock(&self.gate);
        if let Some((h, key)) = st.gate.released.take() {
            if gate.word(Word::Ack).load(Ordering::Acquire) != h {
                tracing::debug!(key, "a decode step's gate gave up waiting: sent again");
                gate.sent_again += 1;
                // NOTE: the step queued after it goes first, on the data before; then the
                // step again with this pass's data, still staged, and the next one ahead.
                gate.call_off();
                self.launch_step(st, key)?;
                self.queue_ahead(st, &mut gate, key)?;
                drop(gate);
                self.wait_for_done(st)?;
                gate = lock(&self.gate);
            }
        }
        if let Some(a) = gate.ahead.as_mut() {
            a.after_wait = true;
        }
        Ok(())
    }

    fn wait_for_done(&self, st: &State) -> Result<(), BackendError> {
        match &st.gate.done {
            Some(done) => done
                .synchronize()
                .map_err(|e| BackendError::Device(format!("decode step: {e:?}"))),
            None => Ok(()),
        }
    }
}
