//! GPU time per kernel, for finding where a step's time goes on a real GPU.
//!
//! With `HEARTH_WGPU_PROFILE=1`, and an adapter that can write timestamps inside compute
//! passes, the recorder writes one timestamp before and one after every dispatch. After each
//! submit the timestamps are read back (the submit then waits for the device, so profiled runs
//! are slower) and added up by entry point; the table goes to stderr when the backend is
//! dropped.
//!
//! With `HEARTH_WGPU_PROFILE=host` it times the host instead, without timestamps (which make
//! every submit wait): how long recording, submitting and waiting for read-backs take per
//! batch, to see how much of a step the GPU sits idle while the host records it.
//!
//! NOTE: Vulkan writes a pass's timestamps when all earlier work has finished, so a dispatch's
//! time here includes the barrier in front of it and its launch, not only its arithmetic: what
//! it costs the step. "between dispatches" is the rest of the pass's time.

use std::collections::HashMap;

use crate::device::Gpu;
use crate::WgpuError;

/// Dispatches one batch can time; a longer batch is submitted early.
pub(crate) const MAX_TIMED: u32 = 2048;

/// The environment variable that turns profiling on.
pub(crate) const PROFILE_VAR: &str = "HEARTH_WGPU_PROFILE";

/// What profiling was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wanted {
    None,
    /// GPU timestamps around every dispatch.
    Gpu,
    /// Host-side times only.
    Host,
}

/// What profiling `HEARTH_WGPU_PROFILE` asks for.
pub(crate) fn wanted() -> Wanted {
    match std::env::var(PROFILE_VAR).as_deref() {
        Err(_) | Ok("") | Ok("0") => Wanted::None,
        Ok("host") => Wanted::Host,
        Ok(_) => Wanted::Gpu,
    }
}

/// Host time spent on batches of dispatches (see the module note); batches that compiled a
/// kernel are left out.
#[derive(Default)]
pub(crate) struct HostTimes {
    /// From a batch's first dispatch to its submit.
    pub record_ns: u128,
    /// In `Queue::submit` and the arena write before it.
    pub submit_ns: u128,
    /// Waiting for the device in read-backs (all of them).
    pub wait_ns: u128,
    /// Inside `Recorder::dispatch` (the rest of `record_ns` is the caller's own work).
    pub dispatch_ns: u128,
    /// Ending the compute pass, where wgpu checks and encodes the recorded commands.
    pub pass_end_ns: u128,
    pub batches: u64,
    pub dispatches: u64,
    pub read_backs: u64,
    /// Bind groups created.
    pub groups: u64,
}

/// Buffers the backend has created (weights, activations, staging), for [`HostTimes`].
pub(crate) static BUFFERS_CREATED: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

impl HostTimes {
    pub fn report(&self) -> String {
        let per = |ns: u128, n: u64| ns as f64 / 1e3 / n.max(1) as f64;
        format!(
            "wgpu host time: {} batches, {} dispatches, {} read-backs, {} bind groups and {} \
             buffers created\n\
             recording {:.3} ms ({:.2} us/dispatch: {:.2} in dispatch, {:.2} ending passes), \
             submitting {:.3} ms ({:.1} us/batch), waiting {:.3} ms ({:.1} us/read-back)\n",
            self.batches,
            self.dispatches,
            self.read_backs,
            self.groups,
            BUFFERS_CREATED.load(std::sync::atomic::Ordering::Relaxed),
            self.record_ns as f64 / 1e6,
            per(self.record_ns, self.dispatches),
            per(self.dispatch_ns, self.dispatches),
            per(self.pass_end_ns, self.dispatches),
            self.submit_ns as f64 / 1e6,
            per(self.submit_ns, self.batches),
            self.wait_ns as f64 / 1e6,
            per(self.wait_ns, self.read_backs),
        )
    }
}

impl Drop for HostTimes {
    fn drop(&mut self) {
        if self.batches > 0 {
            eprint!("{}", self.report());
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Total {
    calls: u64,
    ns: f64,
}

/// Timestamps of the open batch and the totals of the ones read back.
pub(crate) struct Profiler {
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// What each timed dispatch of the open batch ran: module, entry point and grid.
    entries: Vec<String>,
    totals: HashMap<String, Total>,
    between_ns: f64,
    batches: u64,
    period_ns: f64,
}

impl Profiler {
    pub fn new(gpu: &Gpu) -> Profiler {
        let bytes = 16 * MAX_TIMED as u64;
        let buffer = |label, usage| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        Profiler {
            queries: gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("dispatch timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * MAX_TIMED,
            }),
            resolved: buffer(
                "resolved timestamps",
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            ),
            readback: buffer(
                "timestamp read-back",
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            ),
            entries: Vec::new(),
            totals: HashMap::new(),
            between_ns: 0.0,
            batches: 0,
            period_ns: gpu.queue.get_timestamp_period() as f64,
        }
    }

    /// The open batch has no room for another timed dispatch.
    pub fn full(&self) -> bool {
        self.entries.len() as u32 >= MAX_TIMED
    }

    /// Timestamp in front of a dispatch of `what` (its kernel and grid).
    pub fn before(&mut self, pass: &mut wgpu::ComputePass<'static>, what: String) {
        pass.write_timestamp(&self.queries, 2 * self.entries.len() as u32);
        self.entries.push(what);
    }

    /// Timestamp after the dispatch `before` announced.
    pub fn after(&mut self, pass: &mut wgpu::ComputePass<'static>) {
        pass.write_timestamp(&self.queries, 2 * self.entries.len() as u32 - 1);
    }

    /// Copy the batch's timestamps where `collect` can read them (after the pass has ended).
    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let n = 2 * self.entries.len() as u32;
        if n == 0 {
            return;
        }
        encoder.resolve_query_set(&self.queries, 0..n, &self.resolved, 0);
        encoder.copy_buffer_to_buffer(&self.resolved, 0, &self.readback, 0, 8 * n as u64);
    }

    /// After the submit: wait for the batch and add its times to the totals.
    pub fn collect(&mut self, gpu: &Gpu) -> Result<(), WgpuError> {
        let n = self.entries.len();
        if n == 0 {
            return Ok(());
        }
        let slice = self.readback.slice(..16 * n as u64);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        gpu.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| WgpuError::Device(format!("profiling: {e}")))?;
        {
            let data = slice
                .get_mapped_range()
                .map_err(|e| WgpuError::Device(format!("profiling: {e}")))?;
            let ticks: &[u64] = bytemuck::cast_slice(&data);
            for (i, entry) in self.entries.iter().enumerate() {
                let (start, end) = (ticks[2 * i], ticks[2 * i + 1]);
                let t = self.totals.entry(entry.clone()).or_default();
                t.calls += 1;
                t.ns += end.saturating_sub(start) as f64 * self.period_ns;
                if i > 0 {
                    self.between_ns +=
                        start.saturating_sub(ticks[2 * i - 1]) as f64 * self.period_ns;
                }
            }
        }
        self.readback.unmap();
        self.entries.clear();
        self.batches += 1;
        Ok(())
    }

    /// The totals as a table, slowest kernel first.
    pub fn report(&self) -> String {
        let mut rows: Vec<(&str, Total)> =
            self.totals.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        rows.sort_by(|a, b| b.1.ns.total_cmp(&a.1.ns));
        let timed: f64 = rows.iter().map(|r| r.1.ns).sum::<f64>() + self.between_ns;
        let mut out = format!(
            "wgpu GPU time by kernel ({} submits, {:.3} ms timed):\n{:<52} {:>7} {:>10} {:>9} {:>6}\n",
            self.batches,
            timed / 1e6,
            "kernel",
            "calls",
            "total ms",
            "us/call",
            "%"
        );
        let mut line = |name: &str, calls: u64, ns: f64| {
            out.push_str(&format!(
                "{name:<52} {calls:>7} {:>10.3} {:>9.2} {:>6.1}\n",
                ns / 1e6,
                ns / 1e3 / calls.max(1) as f64,
                100.0 * ns / timed.max(1.0)
            ));
        };
        for (name, t) in &rows {
            line(name, t.calls, t.ns);
        }
        line("(between dispatches)", self.batches, self.between_ns);
        out
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        if self.batches > 0 {
            eprint!("{}", self.report());
        }
    }
}
