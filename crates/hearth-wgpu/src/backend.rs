//! [`WgpuBackend`]: the [`Backend`] trait over wgpu buffers and the WGSL kernels.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use hearth_backend::{
    Activation, AttnBatch, AttnParams, Backend, BackendError, HostWeight, KvSpec, RopeKind,
    RopeRows, RopeSpec,
};
use hearth_quant::GgmlType;
use wgpu::util::DeviceExt;

use crate::device::{AdapterInfo, FmaChoice, Gpu};
use crate::int8::{Epilogue, Inputs, Int8Acts};
use crate::kernels::{int8_reader, Module};
use crate::norm::{check_rope, rope_table, NormInput};
use crate::pool::{BufferPool, Pooled};
use crate::recorder::{Bind, Grid, Recorder};
use crate::weight::WeightPart;
use crate::WgpuError;

/// A dense f32 activation matrix in a device buffer.
pub struct WgpuTensor {
    pub(crate) buf: Pooled,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// The values quantized to Q8_0 blocks by the kernel that wrote them (a norm in front of
    /// projections), for the 8-bit matmuls that read the tensor; cleared by any write.
    pub(crate) int8: Option<Box<Int8Acts>>,
}

impl WgpuTensor {
    pub(crate) fn new(buf: Pooled, rows: usize, cols: usize) -> WgpuTensor {
        WgpuTensor {
            buf,
            rows,
            cols,
            int8: None,
        }
    }

    /// The buffer, for a dispatch that writes it: forms derived from the old values go.
    pub(crate) fn written(&mut self) -> &wgpu::Buffer {
        self.int8 = None;
        &self.buf
    }
}

pub use crate::attention::WgpuKvCache;
pub use crate::weight::WgpuWeight;

/// The wgpu backend: one device, its kernels and the batch of dispatches being recorded.
pub struct WgpuBackend {
    pub(crate) gpu: Gpu,
    pub(crate) rec: Mutex<Recorder>,
    /// Bound where a kernel's layout has a buffer that an entry point does not read.
    pub(crate) dummy: wgpu::Buffer,
    /// The same for a second unused binding that is read-write (one buffer cannot be bound
    /// read-only and read-write in one dispatch).
    pub(crate) dummy_rw: wgpu::Buffer,
    /// Activation buffers for reuse.
    pool: Arc<BufferPool>,
    /// The read-back staging buffer, for reuse.
    staging: Mutex<Option<wgpu::Buffer>>,
    /// A matmul has quantized its input to Q8_0 blocks: norms in front of projections then
    /// quantize their output in the same dispatch (see `rms_norm_copy`).
    pub(crate) norms_quantize: AtomicBool,
    /// The most bytes of one weight part (see `weight.rs`): the adapter's largest binding,
    /// or less where a test asks for it.
    pub(crate) weight_part_limit: u64,
}

/// `Err(Unsupported(msg()))` unless `ok`.
pub(crate) fn check(ok: bool, msg: impl FnOnce() -> String) -> Result<(), BackendError> {
    if ok {
        Ok(())
    } else {
        Err(BackendError::Unsupported(msg()))
    }
}

/// Set to `0`, the kernels keep to u32 words where the adapter offers `f16` types.
const F16_VAR: &str = "HEARTH_WGPU_F16";

/// Whether `f16` types may be used where the adapter has them (`HEARTH_WGPU_F16`).
fn f16_allowed() -> bool {
    std::env::var(F16_VAR).as_deref() != Ok("0")
}

/// The bytes of a parameter struct of u32 / f32 fields.
pub(crate) fn words(w: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(w).to_vec()
}

impl WgpuBackend {
    /// Open the first Vulkan (Metal on macOS) adapter; an error says why there is none.
    pub fn open() -> Result<WgpuBackend, WgpuError> {
        Self::open_with(true)
    }

    /// As [`open`](Self::open); `subgroups: false` keeps to the kernels without subgroup
    /// operations even where the adapter has them (the path for adapters that lack them).
    pub fn open_with(subgroups: bool) -> Result<WgpuBackend, WgpuError> {
        Self::open_with_fma(subgroups, FmaChoice::Probe)
    }

    /// As [`open_with`](Self::open_with), with the multiply-add of the 8-bit matmuls chosen
    /// by `fma` (tests run both kinds on one device).
    pub fn open_with_fma(subgroups: bool, fma: FmaChoice) -> Result<WgpuBackend, WgpuError> {
        Self::open_with_options(subgroups, f16_allowed(), fma)
    }

    /// As [`open_with_fma`](Self::open_with_fma); `f16: false` keeps the kernels off `f16`
    /// types even where the adapter has them (the path for adapters that lack them).
    pub fn open_with_options(
        subgroups: bool,
        f16: bool,
        fma: FmaChoice,
    ) -> Result<WgpuBackend, WgpuError> {
        let gpu = Gpu::open(subgroups, f16, fma)?;
        let rec = Mutex::new(Recorder::new(&gpu));
        let unused = |label| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: 16,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        };
        let (dummy, dummy_rw) = (
            unused("unused binding"),
            unused("unused read-write binding"),
        );
        Ok(WgpuBackend {
            rec,
            dummy,
            dummy_rw,
            pool: Arc::default(),
            staging: Mutex::new(None),
            norms_quantize: AtomicBool::new(false),
            weight_part_limit: gpu_limit(&gpu),
            gpu,
        })
    }

    /// Store weights loaded from now on in parts of at most `bytes` (never more than the
    /// adapter allows), as a weight larger than one binding is stored: for tests of split
    /// weights on small tensors.
    pub fn with_weight_part_limit(mut self, bytes: u64) -> WgpuBackend {
        self.weight_part_limit = bytes.min(gpu_limit(&self.gpu));
        self
    }

    /// What the adapter offers.
    pub fn adapter(&self) -> &AdapterInfo {
        &self.gpu.info
    }

    /// Dispatches recorded since the device was opened (for benchmarks).
    pub fn dispatches_recorded(&self) -> u64 {
        self.recorder().total_dispatches
    }

    pub(crate) fn recorder(&self) -> MutexGuard<'_, Recorder> {
        self.rec.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn buffer(&self, bytes: u64) -> Result<wgpu::Buffer, BackendError> {
        check(bytes <= self.gpu.info.max_binding, || {
            format!(
                "a {bytes}-byte buffer is larger than this adapter's largest binding ({} bytes)",
                self.gpu.info.max_binding
            )
        })?;
        crate::profile::BUFFERS_CREATED.fetch_add(1, Ordering::Relaxed);
        Ok(self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes.max(16).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }))
    }

    pub(crate) fn init_buffer(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Result<wgpu::Buffer, BackendError> {
        check(bytes.len() as u64 <= self.gpu.info.max_binding, || {
            format!(
                "tensor '{name}': {} bytes are more than this adapter's largest binding \
                 ({} bytes)",
                bytes.len(),
                self.gpu.info.max_binding
            )
        })?;
        crate::profile::BUFFERS_CREATED.fetch_add(1, Ordering::Relaxed);
        let mut padded;
        let mut contents = bytes;
        let len = bytes.len().max(16).next_multiple_of(4);
        if len != bytes.len() {
            padded = bytes.to_vec();
            padded.resize(len, 0);
            contents = &padded;
        }
        Ok(self
            .gpu
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: None,
                contents,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
            }))
    }

    /// Record one dispatch of the element-wise module over `(n, cols)`: `n` items (values or
    /// blocks) of rows of `cols`.
    pub(crate) fn elementwise(
        &self,
        entry: &'static str,
        x: &wgpu::Buffer,
        y: Option<&wgpu::Buffer>,
        (n, cols): (usize, usize),
        s: f32,
        idx: &[u32],
    ) -> Result<(), BackendError> {
        let params = words(&[n as u32, cols as u32, s.to_bits(), 0]);
        let idx_bytes = words(idx);
        let idx_bind = if idx.is_empty() {
            Bind::Buffer(&self.dummy)
        } else {
            Bind::Host(&idx_bytes)
        };
        let binds = [
            Bind::Buffer(x),
            Bind::Buffer(y.unwrap_or(&self.dummy)),
            Bind::Host(&params),
            idx_bind,
        ];
        let mut rec = self.recorder();
        Ok(rec.dispatch(
            &self.gpu,
            Module::Elementwise(self.gpu.info.native_fma),
            entry,
            &binds,
            Grid::Threads(n),
        )?)
    }

    /// `out (+)= W · x`, taking `x` from `inputs` in the form the weight type needs
    /// (quantized or rounded once per form, however many weights read it).
    fn matmul_with(
        &self,
        w: &WgpuWeight,
        inputs: &mut Inputs,
        out: &mut WgpuTensor,
        accumulate: bool,
    ) -> Result<(), BackendError> {
        let x = inputs.x;
        check_matmul(w, x, out)?;
        if let Some(spec) = &w.mlx {
            return self.matmul_mlx(w, spec, x, out, accumulate);
        }
        let epilogue = if accumulate {
            Epilogue::Add
        } else {
            Epilogue::Store
        };
        if self.matmul_int8(w, inputs, out, epilogue)?.is_some() {
            return Ok(());
        }
        let x = self.rounded_input(w.ty, inputs)?.unwrap_or(x);
        let y = out.written();
        let module = Module::Matmul(w.ty, self.gpu.info.subgroups);
        let mut rec = self.recorder();
        // One dispatch per part of the weight, each writing its rows' output features.
        for part in &w.parts {
            let rows = &part.rows;
            let params = words(&[
                w.rows as u32,
                w.cols as u32,
                x.rows as u32,
                w.row_bytes as u32,
                accumulate as u32,
                rows.start as u32,
                rows.len() as u32,
                0,
            ]);
            let binds = [
                part.bind(),
                Bind::Buffer(&x.buf),
                Bind::Buffer(y),
                Bind::Host(&params),
            ];
            // One workgroup per (row, tile of 4 tokens): see kernels/matmul.wgsl.
            let groups = Grid::Groups(rows.len() * x.rows.div_ceil(4));
            rec.dispatch(&self.gpu, module, "matmul", &binds, groups)?;
        }
        Ok(())
    }

    /// Wait for every submission. wgpu's wait gives up after a while, which a software
    /// device (lavapipe) can need for one prompt chunk of a real model: keep waiting up to
    /// [`WAIT_LIMIT`], then fail the request with a clear error instead of hanging.
    fn wait(&self) -> Result<(), BackendError> {
        let start = std::time::Instant::now();
        loop {
            match self.gpu.device.poll(wgpu::PollType::wait_indefinitely()) {
                Ok(_) => break,
                Err(wgpu::PollError::Timeout) if start.elapsed() < WAIT_LIMIT => {}
                Err(e) => {
                    return Err(WgpuError::Device(format!(
                        "waiting for the device ({:.0} s): {e}",
                        start.elapsed().as_secs_f64()
                    ))
                    .into())
                }
            }
        }
        Ok(self.gpu.take_error()?)
    }

    pub(crate) fn read_back(&self, t: &WgpuTensor, out: &mut Vec<f32>) -> Result<(), BackendError> {
        let bytes = (t.rows * t.cols * 4) as u64;
        out.clear();
        if bytes == 0 {
            return Ok(());
        }
        // The last read-back's staging buffer, when it is large enough (decode reads the
        // same logits every step); a failed read-back drops its buffer.
        let kept = self
            .staging
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let staging = match kept {
            Some(b) if b.size() >= bytes => b,
            _ => self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("read-back"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        };
        self.recorder().submit(&self.gpu, |enc| {
            enc.copy_buffer_to_buffer(&t.buf, 0, &staging, 0, bytes);
        })?;
        let slice = staging.slice(..bytes);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        let waiting = std::time::Instant::now();
        self.wait()?;
        self.recorder().note_wait(waiting.elapsed());
        match rx.try_recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(WgpuError::Device(format!("read-back: {e}")).into()),
            Err(_) => return Err(WgpuError::Device("read-back did not complete".into()).into()),
        }
        let mapped = slice
            .get_mapped_range()
            .map_err(|e| WgpuError::Device(format!("read-back: {e}")))?;
        out.extend_from_slice(bytemuck::cast_slice(&mapped));
        drop(mapped);
        staging.unmap();
        *self.staging.lock().unwrap_or_else(|p| p.into_inner()) = Some(staging);
        Ok(())
    }

    /// Rows `tokens` of `table` into `out` through entry point `entry`: one dispatch per part
    /// that holds one of the tokens' rows (each writes those rows), with the parameter bytes
    /// `params` makes for the part's rows.
    pub(crate) fn embed_parts(
        &self,
        table: &WgpuWeight,
        tokens: &[u32],
        out: &mut WgpuTensor,
        (module, entry): (Module, &'static str),
        params: impl Fn(&std::ops::Range<usize>) -> Vec<u8>,
    ) -> Result<(), BackendError> {
        let ids = words(tokens);
        let n = tokens.len() * table.cols;
        let out = out.written();
        let mut rec = self.recorder();
        for part in &table.parts {
            let rows = &part.rows;
            if !tokens.iter().any(|&t| rows.contains(&(t as usize))) {
                continue;
            }
            let params = params(rows);
            let binds = [
                part.bind(),
                Bind::Host(&ids),
                Bind::Buffer(out),
                Bind::Host(&params),
            ];
            rec.dispatch(&self.gpu, module, entry, &binds, Grid::Threads(n))?;
        }
        Ok(())
    }
}

/// An error unless `out = w · x` has matching shapes.
fn check_matmul(w: &WgpuWeight, x: &WgpuTensor, out: &WgpuTensor) -> Result<(), BackendError> {
    check(
        x.cols == w.cols && (out.rows, out.cols) == (x.rows, w.rows),
        || {
            format!(
                "matmul of '{}' [{}, {}] with [{}, {}] into [{}, {}]",
                w.name, w.rows, w.cols, x.rows, x.cols, out.rows, out.cols
            )
        },
    )
}

/// The largest weight part the adapter allows: one binding, and one buffer.
fn gpu_limit(gpu: &Gpu) -> u64 {
    gpu.info.max_binding.min(gpu.info.max_buffer)
}

/// How long one read-back may wait for the device before the request fails.
const WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

impl Backend for WgpuBackend {
    type Tensor = WgpuTensor;
    type Weight = WgpuWeight;
    type KvCache = WgpuKvCache;

    fn name(&self) -> String {
        let i = &self.gpu.info;
        let mut extras = Vec::new();
        if i.shader_f16 {
            extras.push("f16");
        }
        if i.subgroups {
            extras.push("subgroups");
        }
        if i.native_fma {
            extras.push("fused fma");
        }
        format!("wgpu ({}; {})", i.name, extras.join(", "))
    }

    fn load_weight_group(&self, ws: Vec<HostWeight>) -> Result<Vec<WgpuWeight>, BackendError> {
        self.load_group(ws)
    }

    fn load_weight(&self, w: HostWeight) -> Result<WgpuWeight, BackendError> {
        if w.rows == 1 && w.mlx.is_none() {
            // Vectors (norm weights) are read as f32 by the element-wise kernels.
            let mut vals = vec![0f32; w.cols];
            hearth_quant::dequantize_row(w.ty, w.data.bytes(), &mut vals).map_err(|e| {
                BackendError::BadWeight {
                    name: w.name.clone(),
                    reason: e.to_string(),
                }
            })?;
            let buf = self.init_buffer(&w.name, bytemuck::cast_slice(&vals))?;
            return Ok(WgpuWeight {
                parts: vec![WeightPart::whole(buf, 0..1)],
                name: w.name,
                ty: GgmlType::F32,
                rows: 1,
                cols: w.cols,
                row_bytes: 4 * w.cols,
                mlx: None,
            });
        }
        self.load_matrix(w)
    }

    fn new_kv_cache(&self, spec: &KvSpec) -> Result<WgpuKvCache, BackendError> {
        WgpuKvCache::new(self, spec)
    }

    fn alloc(&self, rows: usize, cols: usize) -> Result<WgpuTensor, BackendError> {
        let bytes = ((rows * cols * 4) as u64).max(16).next_multiple_of(4);
        let buf = match self.pool.take(bytes) {
            Some(b) => b,
            None => self.buffer(bytes)?,
        };
        let buf = Pooled::new(buf, Some(self.pool.clone()));
        Ok(WgpuTensor::new(buf, rows, cols))
    }

    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> Result<WgpuTensor, BackendError> {
        check(data.len() == rows * cols, || {
            format!("upload of {} values as [{rows}, {cols}]", data.len())
        })?;
        let buf = self.init_buffer("activation", bytemuck::cast_slice(data))?;
        let buf = Pooled::new(buf, None);
        Ok(WgpuTensor::new(buf, rows, cols))
    }

    fn to_host(&self, t: &WgpuTensor) -> Result<Vec<f32>, BackendError> {
        let mut out = Vec::new();
        self.read_back(t, &mut out)?;
        Ok(out)
    }

    fn to_host_into(&self, t: &WgpuTensor, out: &mut Vec<f32>) -> Result<(), BackendError> {
        self.read_back(t, out)
    }

    fn argmax_rows(&self, t: &WgpuTensor, out: &mut Vec<u32>) -> Result<(), BackendError> {
        self.argmax_into(t, out)
    }

    fn top_k_rows(
        &self,
        t: &WgpuTensor,
        k: usize,
        out: &mut Vec<hearth_sampler::Candidate>,
    ) -> Result<(), BackendError> {
        self.top_k_into(t, k, out)
    }

    fn copy(&self, t: &WgpuTensor) -> Result<WgpuTensor, BackendError> {
        let mut out = self.alloc(t.rows, t.cols)?;
        let n = t.rows * t.cols;
        self.elementwise("copy", out.written(), Some(&t.buf), (n, t.cols), 0.0, &[])?;
        Ok(out)
    }

    fn shape(&self, t: &WgpuTensor) -> (usize, usize) {
        (t.rows, t.cols)
    }

    fn embed(
        &self,
        table: &WgpuWeight,
        tokens: &[u32],
        out: &mut WgpuTensor,
    ) -> Result<(), BackendError> {
        check((out.rows, out.cols) == (tokens.len(), table.cols), || {
            format!(
                "embedding of {} tokens from '{}' into [{}, {}]",
                tokens.len(),
                table.name,
                out.rows,
                out.cols
            )
        })?;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= table.rows) {
            return Err(BackendError::Unsupported(format!(
                "token {bad} is outside the {} rows of '{}'",
                table.rows, table.name
            )));
        }
        if let Some(spec) = &table.mlx {
            return self.embed_mlx(table, spec, tokens, out);
        }
        let entry = (Module::Embed(table.ty), "embed");
        self.embed_parts(table, tokens, out, entry, |rows| {
            words(&[
                table.cols as u32,
                tokens.len() as u32,
                table.row_bytes as u32,
                rows.start as u32,
                rows.len() as u32,
                0,
                0,
                0,
            ])
        })
    }

    fn matmul(
        &self,
        w: &WgpuWeight,
        x: &WgpuTensor,
        out: &mut WgpuTensor,
    ) -> Result<(), BackendError> {
        self.matmul_with(w, &mut Inputs::new(x), out, false)
    }

    fn matmul3(
        &self,
        w: [&WgpuWeight; 3],
        x: &WgpuTensor,
        out: [&mut WgpuTensor; 3],
    ) -> Result<(), BackendError> {
        let mut inputs = Inputs::new(x);
        for (w, o) in w.iter().zip(&out) {
            check_matmul(w, x, o)?;
        }
        // One dispatch for the three where they were loaded side by side (a group).
        let [o0, o1, o2] = out;
        if self
            .matmul_int8_qkv(w, &mut inputs, None, [&mut *o0, &mut *o1, &mut *o2])?
            .is_some()
            || self
                .matmul_mlx_qkv(w, x, [&mut *o0, &mut *o1, &mut *o2])?
                .is_some()
        {
            return Ok(());
        }
        for (w, o) in w.into_iter().zip([o0, o1, o2]) {
            self.matmul_with(w, &mut inputs, o, false)?;
        }
        Ok(())
    }

    fn gated_matmul(
        &self,
        gate: &WgpuWeight,
        up: &WgpuWeight,
        x: &WgpuTensor,
        act: Activation,
        out: &mut WgpuTensor,
    ) -> Result<(), BackendError> {
        let mut inputs = Inputs::new(x);
        if act == Activation::Silu {
            check_matmul(gate, x, out)?;
            check_matmul(up, x, out)?;
            // Both projections and the SwiGLU in one dispatch where they were loaded side by
            // side (a group).
            if self
                .matmul_int8_glu(gate, up, &mut inputs, None, out)?
                .is_some()
                || self.matmul_mlx_glu(gate, up, x, out)?.is_some()
            {
                return Ok(());
            }
            if int8_reader(gate.ty).is_some() && int8_reader(up.ty).is_some() {
                // SwiGLU in the up projection's epilogue: out = silu(gate · x) · (up · x).
                self.matmul_with(gate, &mut inputs, out, false)?;
                self.matmul_int8(up, &mut inputs, out, Epilogue::SiluGate)?;
                return Ok(());
            }
        }
        let mut u = self.alloc(out.rows, out.cols)?;
        self.matmul_with(gate, &mut inputs, out, false)?;
        self.matmul_with(up, &mut inputs, &mut u, false)?;
        self.glu(out, &u, act)
    }

    fn rms_norm_matmul3(
        &self,
        x: &WgpuTensor,
        norm: &WgpuWeight,
        eps: f32,
        w: [&WgpuWeight; 3],
        out: [&mut WgpuTensor; 3],
    ) -> Result<(), BackendError> {
        for (w, o) in w.iter().zip(&out) {
            check_matmul(w, x, o)?;
        }
        // NOTE: for decode, the 8-bit q/k/v kernel norms and quantizes the row itself: the
        // norm's dispatch is saved, one per layer (see kernels/int8_input_normed.wgsl).
        let [o0, o1, o2] = out;
        let fused = [&mut *o0, &mut *o1, &mut *o2];
        if self
            .matmul_int8_qkv(w, &mut Inputs::new(x), Some((norm, eps)), fused)?
            .is_some()
        {
            return Ok(());
        }
        let h = self.rms_norm_copy(x, norm, eps)?;
        self.matmul3(w, &h, [o0, o1, o2])
    }

    fn rms_norm_gated_matmul(
        &self,
        x: &WgpuTensor,
        norm: &WgpuWeight,
        eps: f32,
        gate: &WgpuWeight,
        up: &WgpuWeight,
        act: Activation,
        out: &mut WgpuTensor,
    ) -> Result<(), BackendError> {
        if act == Activation::Silu {
            check_matmul(gate, x, out)?;
            check_matmul(up, x, out)?;
            // As in `rms_norm_matmul3`: the gate/up kernel norms the row itself in decode.
            let norm = Some((norm, eps));
            if self
                .matmul_int8_glu(gate, up, &mut Inputs::new(x), norm, out)?
                .is_some()
            {
                return Ok(());
            }
        }
        let h = self.rms_norm_copy(x, norm, eps)?;
        self.gated_matmul(gate, up, &h, act, out)
    }

    fn matmul_add(
        &self,
        w: &WgpuWeight,
        x: &WgpuTensor,
        out: &mut WgpuTensor,
    ) -> Result<(), BackendError> {
        self.matmul_with(w, &mut Inputs::new(x), out, true)
    }

    fn rms_norm(
        &self,
        x: &mut WgpuTensor,
        weight: &WgpuWeight,
        group: usize,
        eps: f32,
    ) -> Result<(), BackendError> {
        self.norm(x, weight, group, eps, NormInput::InPlace)
    }

    fn rms_norm_copy(
        &self,
        x: &WgpuTensor,
        weight: &WgpuWeight,
        eps: f32,
    ) -> Result<WgpuTensor, BackendError> {
        let mut out = self.alloc(x.rows, x.cols)?;
        // NOTE: the norm in front of the projections writes their Q8_0 input too, once a Q8_0
        // matmul has been seen (a model of 8-bit-activation weights): a quantize dispatch fewer
        // per projection group. The matmuls take it from the tensor (same bits as quantizing
        // it apart); K-quant weights (Q8_K activations) still quantize apart.
        if self.norms_quantize.load(Ordering::Relaxed) && x.cols.is_multiple_of(32) {
            let q = self.alloc_int8(GgmlType::Q8_0, x.rows, x.cols)?;
            self.norm(
                &mut out,
                weight,
                x.cols,
                eps,
                NormInput::FromQuantized(x, &q),
            )?;
            out.int8 = Some(Box::new(q));
        } else {
            self.norm(&mut out, weight, x.cols, eps, NormInput::From(x))?;
        }
        Ok(out)
    }

    fn rope(
        &self,
        x: &mut WgpuTensor,
        rows: RopeRows,
        head_dim: usize,
        rope: &RopeSpec,
    ) -> Result<(), BackendError> {
        self.rope_only(x, rows, head_dim, rope)
    }

    fn qk_norm_rope(
        &self,
        q: &mut WgpuTensor,
        k: &mut WgpuTensor,
        norms: Option<(&WgpuWeight, &WgpuWeight)>,
        rows: RopeRows,
        head_dim: usize,
        rope: &RopeSpec,
        eps: f32,
    ) -> Result<(), BackendError> {
        let Some((qn, kn)) = norms else {
            self.rope_only(q, rows, head_dim, rope)?;
            return self.rope_only(k, rows, head_dim, rope);
        };
        check_rope(q, rows, head_dim, rope)?;
        check_rope(k, rows, head_dim, rope)?;
        let table = rope_table(rows, rope);
        self.norm_rope_qk(q, k, (qn, kn), head_dim, eps, &table, rope)
    }

    fn add(&self, x: &mut WgpuTensor, y: &WgpuTensor) -> Result<(), BackendError> {
        check((x.rows, x.cols) == (y.rows, y.cols), || {
            format!(
                "add of [{}, {}] and [{}, {}]",
                x.rows, x.cols, y.rows, y.cols
            )
        })?;
        let (n, cols) = (x.rows * x.cols, x.cols);
        self.elementwise("add", x.written(), Some(&y.buf), (n, cols), 0.0, &[])
    }

    fn scale(&self, x: &mut WgpuTensor, s: f32) -> Result<(), BackendError> {
        let (n, cols) = (x.rows * x.cols, x.cols);
        self.elementwise("scale", x.written(), None, (n, cols), s, &[])
    }

    fn glu(
        &self,
        gate: &mut WgpuTensor,
        up: &WgpuTensor,
        act: Activation,
    ) -> Result<(), BackendError> {
        check((gate.rows, gate.cols) == (up.rows, up.cols), || {
            format!(
                "glu of [{}, {}] and [{}, {}]",
                gate.rows, gate.cols, up.rows, up.cols
            )
        })?;
        let entry = match act {
            Activation::Silu => "glu_silu",
            Activation::GeluTanh => "glu_gelu",
        };
        let n = gate.rows * gate.cols;
        let cols = gate.cols;
        self.elementwise(entry, gate.written(), Some(&up.buf), (n, cols), 0.0, &[])
    }

    fn gather_rows(&self, x: &WgpuTensor, rows: &[usize]) -> Result<WgpuTensor, BackendError> {
        if let Some(&bad) = rows.iter().find(|&&r| r >= x.rows) {
            return Err(BackendError::Unsupported(format!(
                "gather of row {bad} from a tensor of {} rows",
                x.rows
            )));
        }
        let out = self.alloc(rows.len(), x.cols)?;
        let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        let n = rows.len() * x.cols;
        self.elementwise(
            "gather_rows",
            &out.buf,
            Some(&x.buf),
            (n, x.cols),
            0.0,
            &idx,
        )?;
        Ok(out)
    }

    fn attention(
        &self,
        q: &WgpuTensor,
        k: &WgpuTensor,
        v: &WgpuTensor,
        cache: &mut WgpuKvCache,
        layer: usize,
        batch: &AttnBatch,
        params: &AttnParams,
        out: &mut WgpuTensor,
    ) -> Result<(), BackendError> {
        crate::attention::attention(self, q, k, v, cache, layer, batch, params, out, None)
    }

    fn qk_norm_rope_attention(
        &self,
        q: &mut WgpuTensor,
        k: &mut WgpuTensor,
        v: &WgpuTensor,
        norms: Option<(&WgpuWeight, &WgpuWeight)>,
        rows: RopeRows,
        rope: &RopeSpec,
        eps: f32,
        cache: &mut WgpuKvCache,
        layer: usize,
        batch: &AttnBatch,
        params: &AttnParams,
        out: &mut WgpuTensor,
    ) -> Result<(), BackendError> {
        // NOTE: in a decode step the attention kernel norms and rotates the step's query and
        // key heads itself (attention.wgsl's `norm_rope_qk`, the bits of the separate
        // kernels): a dispatch fewer per layer (two without QK-norm).
        let head_dim = params.head_dim;
        let fits = |w: &WgpuWeight| w.rows == 1 && w.cols == head_dim;
        let norms_fit = norms.is_none_or(|(qn, kn)| fits(qn) && fits(kn));
        let own_kv = crate::attention::plan(batch, params, q.rows).own_kv;
        if norms_fit && own_kv && head_dim <= 256 && rope.n_rot <= head_dim {
            check_rope(q, rows, head_dim, rope)?;
            check_rope(k, rows, head_dim, rope)?;
            let fused = crate::attention::FusedQk {
                norms,
                table: rope_table(rows, rope),
                n_rot: rope.n_rot,
                neox: rope.kind == RopeKind::Neox,
                eps,
            };
            return crate::attention::attention(
                self,
                q,
                k,
                v,
                cache,
                layer,
                batch,
                params,
                out,
                Some(&fused),
            );
        }
        self.qk_norm_rope(q, k, norms, rows, head_dim, rope, eps)?;
        self.attention(q, k, v, cache, layer, batch, params, out)
    }
}
