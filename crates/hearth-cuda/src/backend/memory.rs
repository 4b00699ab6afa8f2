//! Transient memory of a forward pass: a bump arena on the device and a pinned host staging
//! area for the step's host data (token ids, positions, block tables).
//!
//! Both are reset at the start of every forward pass and hand out memory in call order, so two
//! passes that make the same calls get the same addresses: what lets a recorded pass (a CUDA
//! graph) be replayed. Chunks are never freed while the backend lives, for the same reason.
//!
//! Within a pass the arena hands out again what dropped tensors gave back (`Lease`), so that
//! a layer's activations take the memory of the layer before's. Two passes that make the same
//! calls and drop the same tensors in the same order still get the same addresses.

use std::sync::{Arc, Mutex};

use cudarc::driver::{result, CudaContext, CudaSlice, CudaStream, DevicePtr};

use crate::error::driver;
use crate::CudaError;

/// Every allocation starts on this boundary (16-byte vector loads, cuBLAS likes 256).
const ALIGN: usize = 256;
/// The first chunk the arena allocates. Each later one is at least as large as all before it
/// together, so that a step needing much more (a long prompt) takes few chunks, while a
/// server that only decodes holds little. NOTE: a decode step of a 1-8B model needs a few
/// MiB; this was 64 MiB for every chunk, 10% of a Qwen3-0.6B's weights.
const MIN_CHUNK: usize = 16 << 20;

struct Chunk {
    _buf: CudaSlice<u8>,
    base: u64,
    len: usize,
}

/// Blocks given back during a pass: (pass, address, bytes).
type Returned = Arc<Mutex<Vec<(u64, u64, usize)>>>;

/// A bump allocator over device chunks, which hands out again the blocks given back in the
/// same pass (of exactly the size asked for).
pub(super) struct Arena {
    chunks: Vec<Chunk>,
    /// Position of the next allocation: chunk index and offset in it.
    chunk: usize,
    offset: usize,
    /// Counts resets: a block given back in an earlier pass is not handed out again.
    pass: u64,
    returned: Returned,
    /// Blocks given back in this pass, by size (a pass allocates few sizes); the last one
    /// given back goes out first.
    free: Vec<(usize, Vec<u64>)>,
}

/// A tensor's hold on its arena block: the block goes back to the arena when the tensor is
/// dropped (if that happens in the pass that allocated it).
pub(super) struct Lease {
    pass: u64,
    ptr: u64,
    bytes: usize,
    to: Returned,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Ok(mut r) = self.to.lock() {
            r.push((self.pass, self.ptr, self.bytes));
        }
    }
}

impl Arena {
    pub fn new() -> Self {
        Self {
            chunks: Vec::new(),
            chunk: 0,
            offset: 0,
            pass: 0,
            returned: Arc::new(Mutex::new(Vec::new())),
            free: Vec::new(),
        }
    }

    pub fn reset(&mut self) {
        self.chunk = 0;
        self.offset = 0;
        self.pass += 1;
        for (_, blocks) in &mut self.free {
            blocks.clear();
        }
        if let Ok(mut r) = self.returned.lock() {
            r.clear();
        }
    }

    /// Where the next allocation goes (chunk, offset): a pass's blocks all lie before it.
    pub fn position(&self) -> (usize, usize) {
        (self.chunk, self.offset)
    }

    /// Moves the next allocation past `mark`, a recorded pass's [`Self::position`] at its
    /// end, and forgets the blocks given back so far in this pass. A replayed pass's tensors
    /// lie where its recording put them, without this arena's bookkeeping: what the pass
    /// allocates after its graph must not be handed their memory.
    pub fn skip_past(&mut self, mark: (usize, usize)) {
        if mark > self.position() {
            (self.chunk, self.offset) = mark;
        }
        for (_, blocks) in &mut self.free {
            blocks.clear();
        }
        if let Ok(mut r) = self.returned.lock() {
            r.clear();
        }
    }

    /// As `alloc`, for a block that goes back to the arena when the lease is dropped.
    pub fn alloc_leased(
        &mut self,
        stream: &Arc<CudaStream>,
        bytes: usize,
        may_grow: bool,
    ) -> Result<(u64, Lease), CudaError> {
        let bytes = bytes.max(1).next_multiple_of(ALIGN);
        let ptr = self.alloc(stream, bytes, may_grow)?;
        let lease = Lease {
            pass: self.pass,
            ptr,
            bytes,
            to: self.returned.clone(),
        };
        Ok((ptr, lease))
    }

    /// Gives a block of this pass back (`bytes` as asked of `alloc`): it must not be used by
    /// anything queued after this call.
    pub fn give_back(&self, ptr: u64, bytes: usize) {
        if let Ok(mut r) = self.returned.lock() {
            r.push((self.pass, ptr, bytes.max(1).next_multiple_of(ALIGN)));
        }
    }

    /// A block given back in this pass of exactly `bytes` bytes, if any.
    fn reuse(&mut self, bytes: usize) -> Option<u64> {
        if let Ok(mut r) = self.returned.lock() {
            for (pass, ptr, len) in r.drain(..) {
                if pass != self.pass {
                    continue;
                }
                match self.free.iter_mut().find(|(size, _)| *size == len) {
                    Some((_, blocks)) => blocks.push(ptr),
                    None => self.free.push((len, vec![ptr])),
                }
            }
        }
        self.free
            .iter_mut()
            .find(|(size, _)| *size == bytes)
            .and_then(|(_, blocks)| blocks.pop())
    }

    /// `bytes` of device memory, valid until the next reset. `may_grow`: whether a new chunk
    /// may be allocated (not while a graph is being recorded: the allocation would be
    /// recorded too).
    pub fn alloc(
        &mut self,
        stream: &Arc<CudaStream>,
        bytes: usize,
        may_grow: bool,
    ) -> Result<u64, CudaError> {
        let bytes = bytes.max(1).next_multiple_of(ALIGN);
        if let Some(ptr) = self.reuse(bytes) {
            return Ok(ptr);
        }
        while let Some(c) = self.chunks.get(self.chunk) {
            if self.offset + bytes <= c.len {
                let ptr = c.base + self.offset as u64;
                self.offset += bytes;
                return Ok(ptr);
            }
            self.chunk += 1;
            self.offset = 0;
        }
        if !may_grow {
            return Err(CudaError::Driver {
                during: "graph recording",
                message: "the step needs more transient memory than the last one".into(),
            });
        }
        let held: usize = self.chunks.iter().map(|c| c.len).sum();
        let len = bytes.max(MIN_CHUNK).max(held);
        let buf = stream
            .alloc_zeros::<u8>(len)
            .map_err(driver("transient memory allocation"))?;
        let base = device_address(&buf, stream);
        tracing::debug!(
            chunk_mib = len >> 20,
            held_mib = (held + len) >> 20,
            "transient GPU memory grew"
        );
        self.chunks.push(Chunk {
            _buf: buf,
            base,
            len,
        });
        self.chunk = self.chunks.len() - 1;
        self.offset = bytes;
        Ok(base)
    }
}

/// A zeroed device buffer kept across passes, so that a recorded graph's address stays valid;
/// replaced only by a larger buffer, and then every graph must be dropped. Holds the GLU
/// GEMV's group counters (which the kernels using them leave at zero again, kernels/gemv_q8a.cu)
/// and the f16 copies of weights that cuBLAS multiplies (`launch.rs`).
pub(super) struct Kept {
    what: &'static str,
    buf: Option<CudaSlice<u8>>,
    base: u64,
    len: usize,
}

impl Kept {
    pub fn new(what: &'static str) -> Self {
        Self {
            what,
            buf: None,
            base: 0,
            len: 0,
        }
    }

    /// The address of at least `bytes` bytes (zeroed when first allocated), and whether the
    /// buffer was replaced to get them (graphs recorded before point at the old one). `None`
    /// when it would have to grow and `may_grow` is false (while recording). Grows to the
    /// next power of two, at least 16 KiB.
    pub fn get(
        &mut self,
        stream: &Arc<CudaStream>,
        bytes: usize,
        may_grow: bool,
    ) -> Result<Option<(u64, bool)>, CudaError> {
        if bytes <= self.len {
            return Ok(Some((self.base, false)));
        }
        if !may_grow {
            return Ok(None);
        }
        let len = bytes.next_power_of_two().max(16 << 10);
        // The old buffer goes first: both at once could be more than the GPU holds.
        self.buf = None;
        self.len = 0;
        let buf = stream.alloc_zeros::<u8>(len).map_err(driver(self.what))?;
        self.base = device_address(&buf, stream);
        self.buf = Some(buf);
        self.len = len;
        Ok(Some((self.base, true)))
    }
}

/// Page-locked host memory: copies from it are asynchronous, and a recorded copy reads it
/// again at every replay.
pub(super) struct Pinned {
    ctx: Arc<CudaContext>,
    ptr: *mut u8,
    len: usize,
    used: usize,
}

// SAFETY: the buffer is plain bytes owned by this struct; access goes through &mut self.
unsafe impl Send for Pinned {}
unsafe impl Sync for Pinned {}

impl Pinned {
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, CudaError> {
        ctx.bind_to_thread().map_err(driver("context"))?;
        // SAFETY: a plain page-locked allocation of `len` bytes, freed in Drop.
        let ptr = unsafe { result::malloc_host(len, 0) }.map_err(driver("pinned allocation"))?;
        Ok(Self {
            ctx: ctx.clone(),
            ptr: ptr as *mut u8,
            len,
            used: 0,
        })
    }

    pub fn reset(&mut self) {
        self.used = 0;
    }

    pub fn capacity(&self) -> usize {
        self.len
    }

    /// Whether `n` more bytes fit.
    pub fn fits(&self, n: usize) -> bool {
        self.used.next_multiple_of(16) + n <= self.len
    }

    /// The start of the buffer, for a copy from the device into its first `capacity()` bytes.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// Bytes pushed since the last reset (the end of the last one).
    pub fn used(&self) -> usize {
        self.used
    }

    /// Copies `data` into the next free bytes; `None` when it does not fit.
    pub fn push(&mut self, data: &[u8]) -> Option<&[u8]> {
        if !self.fits(data.len()) {
            return None;
        }
        let start = self.used.next_multiple_of(16);
        // SAFETY: start + data.len() <= len, inside the allocation; no other reference to
        // these bytes exists (the slice returned below borrows self).
        let dst = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), data.len()) };
        dst.copy_from_slice(data);
        self.used = start + data.len();
        Some(dst)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by malloc_host in `new`; every copy reading it was waited for
            // (the backend synchronizes before replacing or dropping it).
            let _ = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) };
        }
    }
}

/// A pass's host data on its way to the device (token ids, positions, block tables): page-
/// locked bytes, and a device buffer of the same size that holds them at the same offsets.
/// A pass run op by op copies each array as it is staged. A recorded or replayed step copies
/// everything staged in one piece, queued just before its graph (or by the gate of a step
/// queued ahead, `step_gate.rs`), so that the graph holds no copy nodes: a copy node between
/// two kernels ends the overlap of their launches (on an H200, the two that the first layer
/// of a Qwen3-0.6B step held cost about 11 µs a step).
pub(super) struct Staging {
    pub host: Pinned,
    _dev: CudaSlice<u8>,
    dev: u64,
}

impl Staging {
    pub fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        len: usize,
    ) -> Result<Self, CudaError> {
        let host = Pinned::new(ctx, len)?;
        let buf = stream
            .alloc_zeros::<u8>(len)
            .map_err(driver("staging buffer"))?;
        let dev = device_address(&buf, stream);
        Ok(Self {
            host,
            _dev: buf,
            dev,
        })
    }

    /// Copies `data` into the next free bytes: their device address and the page-locked
    /// copy; `None` when it does not fit.
    pub fn push(&mut self, data: &[u8]) -> Option<(u64, &[u8])> {
        let base = self.host.as_ptr() as usize;
        let src = self.host.push(data)?;
        let offset = src.as_ptr() as usize - base;
        Some((self.dev + offset as u64, src))
    }

    /// The device buffer's address: staged bytes land at their page-locked offset from it.
    pub fn device_address(&self) -> u64 {
        self.dev
    }

    /// Queues the copy of everything staged since the last reset to the device.
    pub fn copy_staged(&self, stream: &CudaStream) -> Result<(), CudaError> {
        let used = self.host.used();
        if used == 0 {
            return Ok(());
        }
        // SAFETY: the first `used` bytes of the page-locked buffer were written by `push`;
        // the caller leaves them untouched until the copy has run (the next pass of this
        // buffer waits for it), and the device buffer holds as many bytes.
        unsafe {
            let src = std::slice::from_raw_parts(self.host.as_ptr(), used);
            result::memcpy_htod_async(self.dev, src, stream.cu_stream())
        }
        .map_err(driver("staging copy"))
    }
}

/// Bytes of GPU memory in use by every process (the driver's count), 0 when it cannot say.
pub(super) fn in_use_on_gpu() -> usize {
    result::mem_get_info()
        .map(|(free, total)| total.saturating_sub(free))
        .unwrap_or(0)
}

/// The device address of a buffer (hearth's kernels take raw addresses).
pub(super) fn device_address<T>(buf: &CudaSlice<T>, stream: &Arc<CudaStream>) -> u64 {
    let (ptr, _sync) = buf.device_ptr(stream);
    ptr
}
