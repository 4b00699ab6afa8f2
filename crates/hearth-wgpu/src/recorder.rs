//! Recording dispatches: one command encoder and one compute pass per batch of at most
//! [`DEFAULT_SUBMIT_EVERY`] dispatches, submitted when full or when something is read back.
//!
//! Host data a dispatch needs (its parameter struct, token ids, block tables, rope tables) is
//! appended to a host-side arena and bound at its offset in one device buffer. The arena is
//! written to that buffer right before the submit, so every dispatch of the batch sees its own
//! data although the buffer is written once. When the arena is full the batch is submitted
//! early and a new one begins.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::Arc;

use crate::device::Gpu;
use crate::kernels::{Access, Module};
use crate::profile::{HostTimes, Profiler, Wanted};
use crate::WgpuError;

/// Bytes of host data one batch of dispatches may stage.
const ARENA_BYTES: u64 = 4 << 20;
/// Workgroups per grid dimension (the WebGPU limit every adapter has).
const MAX_GROUPS: u32 = 65_535;

/// A buffer a dispatch binds.
pub(crate) enum Bind<'a> {
    /// A device buffer, whole.
    Buffer(&'a wgpu::Buffer),
    /// `size` bytes of a device buffer from `offset` on (a multiple of the adapter's
    /// `min_storage_buffer_offset_alignment`).
    Range(&'a wgpu::Buffer, u64, u64),
    /// Host bytes, staged for this dispatch.
    Host(&'a [u8]),
}

/// How many workgroups a dispatch needs.
#[derive(Clone, Copy)]
pub(crate) enum Grid {
    /// One thread per item, 64 threads per workgroup.
    Threads(usize),
    /// One workgroup per item.
    Groups(usize),
}

struct Kernel {
    layout: wgpu::BindGroupLayout,
    pipelines: HashMap<&'static str, wgpu::ComputePipeline>,
    module: wgpu::ShaderModule,
    pipeline_layout: wgpu::PipelineLayout,
}

/// What one binding of a bind group is: a device buffer, or a range of the arena.
#[derive(Clone, PartialEq, Eq, Hash)]
enum BindKey {
    Buffer(wgpu::Buffer),
    Range {
        buf: wgpu::Buffer,
        offset: u64,
        size: u64,
    },
    Arena {
        offset: u64,
        size: u64,
    },
}

/// A bind group made for an earlier dispatch, and the batch that last used it.
struct CachedGroup {
    group: wgpu::BindGroup,
    last_batch: u64,
}

/// Batches a cached bind group may go unused before a sweep drops it (and with it the
/// buffers it holds: a dropped tensor's or an unloaded model's).
const GROUP_TTL: u64 = 64;

/// The open batch of dispatches and the compiled kernels.
pub(crate) struct Recorder {
    kernels: HashMap<Module, Kernel>,
    /// Bind groups by what they bind.
    ///
    /// NOTE: creating a bind group is most of the host's cost of a dispatch. A decode step
    /// repeats the last one's dispatches over the same buffers (pooled, see `pool.rs`) and
    /// stages its host data at the same arena offsets, so its bind groups are the last step's.
    groups: HashMap<(Module, Vec<BindKey>), CachedGroup>,
    /// Batches submitted so far.
    batch: u64,
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    arena_host: Vec<u8>,
    arena: Arc<wgpu::Buffer>,
    align: u64,
    /// Dispatches recorded since the last submit.
    pub n_dispatches: usize,
    /// Dispatches recorded since the device was opened.
    pub total_dispatches: u64,
    /// GPU time per kernel, where profiling was asked for (see `profile.rs`).
    profiler: Option<Profiler>,
    /// Host time per batch, where `HEARTH_WGPU_PROFILE=host` asked for it.
    host_times: Option<HostTimes>,
    /// When the open batch's first dispatch was recorded (host profiling only).
    batch_started: Option<std::time::Instant>,
    /// Host time of the open batch's dispatches, and whether it compiled a kernel (its times
    /// are then left out of the host profile, which is about steady-state steps).
    batch_dispatch_ns: u128,
    batch_compiled: bool,
    /// Submit the open batch after this many dispatches (0: only when read back).
    submit_every: usize,
    /// The first batch's size after a read-back (FIRST_BATCH unless [`FIRST_BATCH_VAR`] says
    /// otherwise).
    first_batch: usize,
    /// The open batch's size limit: `first_batch` after a read-back, then doubling up to
    /// `submit_every` (see FIRST_BATCH).
    batch_limit: usize,
}

/// Dispatches in the first batch after a read-back.
///
/// NOTE: the GPU sits idle from a read-back until the host submits the next batch. A step's
/// first batch is small so that the GPU starts early, and each next one twice the size, as
/// the GPU then has work queued while the host records: with 64 from the start the H100
/// waited ~0.37 ms per Qwen3-0.6B decode step (of ~3.1 ms) for the first submit, and decoded
/// at 330-337 tok/s; starting from 8 (up to 128), at 360-366.
const FIRST_BATCH: usize = 8;

/// The environment variable that sets [`Recorder::first_batch`].
const FIRST_BATCH_VAR: &str = "HEARTH_WGPU_FIRST_BATCH";

/// The environment variable that sets [`Recorder::submit_every`] (0: one batch per read-back).
const SUBMIT_EVERY_VAR: &str = "HEARTH_WGPU_SUBMIT_EVERY";

/// Dispatches per batch unless [`SUBMIT_EVERY_VAR`] says otherwise.
///
/// NOTE: why not one batch per forward step? Because the GPU then waits while the host
/// records the whole step. With batches of 64 the GPU runs the first while the host records
/// the next: Qwen3-0.6B Q8_0 decode on an H100 through Vulkan went from 143 to 183 tok/s
/// (32: 181, 128: 177). Since batches grow from FIRST_BATCH, the largest matters less (two
/// runs each, tok/s, first batch 8: up to 128: 360, 366; 256: 355, 349; first 4, up to 64:
/// 360, 355). A step is still a handful of command buffers, not the hundreds (one per
/// dispatch) that cost more than the math on Metal.
const DEFAULT_SUBMIT_EVERY: usize = 128;

impl Recorder {
    pub fn new(gpu: &Gpu) -> Recorder {
        let submit_every = env_count(SUBMIT_EVERY_VAR).unwrap_or(DEFAULT_SUBMIT_EVERY);
        let first_batch = env_count(FIRST_BATCH_VAR)
            .filter(|&n| n > 0)
            .unwrap_or(FIRST_BATCH);
        Recorder {
            kernels: HashMap::new(),
            groups: HashMap::new(),
            batch: 0,
            encoder: None,
            pass: None,
            arena_host: Vec::new(),
            arena: Arc::new(new_arena(gpu)),
            align: gpu
                .device
                .limits()
                .min_storage_buffer_offset_alignment
                .max(16) as u64,
            n_dispatches: 0,
            total_dispatches: 0,
            profiler: gpu.info.timestamps.then(|| Profiler::new(gpu)),
            host_times: (crate::profile::wanted() == Wanted::Host).then(HostTimes::default),
            batch_started: None,
            batch_dispatch_ns: 0,
            batch_compiled: false,
            submit_every,
            first_batch,
            batch_limit: first_batch.min(submit_every),
        }
    }

    /// Record `entry` of `module` over `binds` (in binding order).
    pub fn dispatch(
        &mut self,
        gpu: &Gpu,
        module: Module,
        entry: &'static str,
        binds: &[Bind],
        grid: Grid,
    ) -> Result<(), WgpuError> {
        let entered = self.host_times.is_some().then(std::time::Instant::now);
        let done = self.dispatch_timed(gpu, module, entry, binds, grid);
        if let Some(t) = entered {
            self.batch_dispatch_ns += t.elapsed().as_nanos();
        }
        done
    }

    fn dispatch_timed(
        &mut self,
        gpu: &Gpu,
        module: Module,
        entry: &'static str,
        binds: &[Bind],
        grid: Grid,
    ) -> Result<(), WgpuError> {
        let n = match grid {
            Grid::Threads(n) => n.div_ceil(64),
            Grid::Groups(n) => n,
        };
        if n == 0 {
            return Ok(());
        }
        let x = n.min(MAX_GROUPS as usize);
        let y = n.div_ceil(x);
        if y > MAX_GROUPS as usize {
            return Err(WgpuError::Device(format!(
                "{entry}: {n} workgroups do not fit a 65535 x 65535 grid"
            )));
        }
        let staged: usize = binds
            .iter()
            .map(|b| match b {
                Bind::Host(d) => d.len().max(16) + self.align as usize,
                Bind::Buffer(_) | Bind::Range(..) => 0,
            })
            .sum();
        if staged as u64 > ARENA_BYTES {
            return Err(WgpuError::Device(format!(
                "{entry}: {staged} bytes of host data exceed the {ARENA_BYTES}-byte staging arena"
            )));
        }
        let timings_full = self.profiler.as_ref().is_some_and(|p| p.full());
        let batch_full = self.submit_every > 0 && self.n_dispatches >= self.batch_limit;
        if timings_full || batch_full || (self.arena_host.len() + staged) as u64 > ARENA_BYTES {
            let next = (2 * self.batch_limit).min(self.submit_every);
            self.submit(gpu, |_| {})?;
            self.batch_limit = next;
        }
        if self.host_times.is_some() && self.n_dispatches == 0 {
            self.batch_started = Some(std::time::Instant::now());
        }
        self.ensure_kernel(gpu, module, entry)?;
        let keys: Vec<BindKey> = binds
            .iter()
            .map(|b| match b {
                Bind::Buffer(buf) => BindKey::Buffer((*buf).clone()),
                &Bind::Range(buf, offset, size) => BindKey::Range {
                    buf: buf.clone(),
                    offset,
                    size,
                },
                Bind::Host(data) => {
                    let (offset, size) = self.stage(data);
                    BindKey::Arena { offset, size }
                }
            })
            .collect();
        let kernel = &self.kernels[&module];
        let batch = self.batch;
        let group = match self.groups.entry((module, keys)) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let cached = e.into_mut();
                cached.last_batch = batch;
                &cached.group
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                if let Some(h) = self.host_times.as_mut() {
                    h.groups += 1;
                }
                let group = new_group(gpu, &kernel.layout, &self.arena, &e.key().1, entry);
                &e.insert(CachedGroup {
                    group,
                    last_batch: batch,
                })
                .group
            }
        };
        let pipeline = &kernel.pipelines[entry];
        if self.pass.is_none() {
            let mut encoder = self
                .encoder
                .take()
                .unwrap_or_else(|| gpu.device.create_command_encoder(&Default::default()));
            let pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor::default())
                .forget_lifetime();
            self.encoder = Some(encoder);
            self.pass = Some(pass);
        }
        let pass = self
            .pass
            .as_mut()
            .ok_or_else(|| WgpuError::Device("compute pass missing after it was begun".into()))?;
        if let Some(p) = self.profiler.as_mut() {
            p.before(pass, format!("{module:?} {entry} [{x}x{y}]"));
        }
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, group, &[]);
        pass.dispatch_workgroups(x as u32, y as u32, 1);
        if let Some(p) = self.profiler.as_mut() {
            p.after(pass);
        }
        self.n_dispatches += 1;
        self.total_dispatches += 1;
        Ok(())
    }

    /// A read-back waited `waited` for the device (host profiling).
    pub fn note_wait(&mut self, waited: std::time::Duration) {
        if let Some(h) = self.host_times.as_mut() {
            h.wait_ns += waited.as_nanos();
            h.read_backs += 1;
        }
    }

    /// Copy `data` into the arena; its `(offset, size)` there.
    fn stage(&mut self, data: &[u8]) -> (u64, u64) {
        let offset = (self.arena_host.len() as u64).next_multiple_of(self.align);
        self.arena_host.resize(offset as usize, 0);
        self.arena_host.extend_from_slice(data);
        // Bindings are at least 16 bytes (the smallest parameter struct) and whole words.
        let size = (data.len() as u64).max(16).next_multiple_of(4);
        self.arena_host.resize((offset + size) as usize, 0);
        (offset, size)
    }

    /// End the pass, let `after` record copies, write the arena and submit everything.
    pub fn submit(
        &mut self,
        gpu: &Gpu,
        after: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Result<(), WgpuError> {
        let ending = std::time::Instant::now();
        drop(self.pass.take());
        let submitting = std::time::Instant::now();
        let mut encoder = self
            .encoder
            .take()
            .unwrap_or_else(|| gpu.device.create_command_encoder(&Default::default()));
        after(&mut encoder);
        if let Some(p) = &self.profiler {
            p.resolve(&mut encoder);
        }
        if !self.arena_host.is_empty() {
            gpu.queue.write_buffer(&self.arena, 0, &self.arena_host);
            self.arena_host.clear();
        }
        gpu.queue.submit([encoder.finish()]);
        if let Some(h) = self.host_times.as_mut() {
            if let (Some(started), false) = (self.batch_started.take(), self.batch_compiled) {
                h.submit_ns += submitting.elapsed().as_nanos();
                h.record_ns += submitting.duration_since(started).as_nanos();
                h.pass_end_ns += submitting.duration_since(ending).as_nanos();
                h.dispatch_ns += self.batch_dispatch_ns;
                h.batches += 1;
                h.dispatches += self.n_dispatches as u64;
            }
            self.batch_dispatch_ns = 0;
            self.batch_compiled = false;
        }
        if let Some(p) = self.profiler.as_mut() {
            p.collect(gpu)?;
        }
        self.n_dispatches = 0;
        self.batch += 1;
        // A read-back starts the next step's batches small again (see FIRST_BATCH);
        // `dispatch`, which submits a full batch, then sets the doubled limit itself.
        self.batch_limit = self.first_batch.min(self.submit_every);
        if self.batch.is_multiple_of(GROUP_TTL) {
            let batch = self.batch;
            self.groups.retain(|_, g| g.last_batch + GROUP_TTL >= batch);
        }
        gpu.take_error()
    }

    fn ensure_kernel(
        &mut self,
        gpu: &Gpu,
        module: Module,
        entry: &'static str,
    ) -> Result<(), WgpuError> {
        if let std::collections::hash_map::Entry::Vacant(e) = self.kernels.entry(module) {
            let kernel = compile_module(gpu, module)?;
            e.insert(kernel);
            self.batch_compiled = true;
        }
        let kernel = self
            .kernels
            .get_mut(&module)
            .ok_or_else(|| WgpuError::Device(format!("{module:?} was not compiled")))?;
        if !kernel.pipelines.contains_key(entry) {
            let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
            let pipeline = gpu
                .device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(entry),
                    layout: Some(&kernel.pipeline_layout),
                    module: &kernel.module,
                    entry_point: Some(entry),
                    compilation_options: Default::default(),
                    cache: None,
                });
            if let Some(e) = pollster::block_on(scope.pop()) {
                return Err(WgpuError::Device(format!(
                    "kernel {entry} of {module:?}: {e}"
                )));
            }
            kernel.pipelines.insert(entry, pipeline);
            self.batch_compiled = true;
        }
        Ok(())
    }
}

/// A bind group of `layout` over `keys`.
fn new_group(
    gpu: &Gpu,
    layout: &wgpu::BindGroupLayout,
    arena: &wgpu::Buffer,
    keys: &[BindKey],
    label: &str,
) -> wgpu::BindGroup {
    let entries: Vec<wgpu::BindGroupEntry> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: match k {
                BindKey::Buffer(buf) => buf.as_entire_binding(),
                BindKey::Range { buf, offset, size } => {
                    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: buf,
                        offset: *offset,
                        size: NonZeroU64::new(*size),
                    })
                }
                &BindKey::Arena { offset, size } => {
                    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: arena,
                        offset,
                        size: NonZeroU64::new(size),
                    })
                }
            },
        })
        .collect();
    gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(label),
        layout,
        entries: &entries,
    })
}

/// The whole number environment variable `var` holds, if it is set to one.
fn env_count(var: &str) -> Option<usize> {
    std::env::var(var).ok().and_then(|v| v.parse().ok())
}

fn new_arena(gpu: &Gpu) -> wgpu::Buffer {
    gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("staging arena"),
        size: ARENA_BYTES,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

fn compile_module(gpu: &Gpu, module: Module) -> Result<Kernel, WgpuError> {
    let entries: Vec<wgpu::BindGroupLayoutEntry> = module
        .bindings()
        .iter()
        .enumerate()
        .map(|(i, &a)| wgpu::BindGroupLayoutEntry {
            binding: i as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage {
                    read_only: a == Access::Read,
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let layout = gpu
        .device
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &entries,
        });
    let pipeline_layout = gpu
        .device
        .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some("hearth kernels"),
        source: wgpu::ShaderSource::Wgsl(module.source().into()),
    };
    // NOTE: naga's SPIR-V and MSL writers guard every loop with an iteration counter by
    // default (`force_loop_bounding`), so that a shader whose loop never ends cannot be
    // miscompiled into undefined behaviour. naga 30's counter cost Qwen3-0.6B Q8_0 decode
    // through NVIDIA's Vulkan on an H100 about 15% (347 tok/s against 392-412 without it; the
    // decode 8-bit matmul took 25.0 µs a dispatch against 16.8 with wgpu 26): it sits in the
    // hot loops. Bounds checks and integer-division checks stay on.
    let checks = wgpu::ShaderRuntimeChecks {
        force_loop_bounding: false,
        ..wgpu::ShaderRuntimeChecks::checked()
    };
    // SAFETY: the checks left out guard against loops that never end, and every loop of
    // kernels/*.wgsl ends by construction: each counts up (or halves down) to a bound the host
    // sets from tensor sizes, block counts or sequence positions, all far below u32::MAX.
    let shader = unsafe { gpu.device.create_shader_module_trusted(desc, checks) };
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Err(WgpuError::Device(format!("{module:?}: {e}")));
    }
    Ok(Kernel {
        layout,
        pipelines: HashMap::new(),
        module: shader,
        pipeline_layout,
    })
}
