//! A pool of activation buffers, so that a forward step reuses the buffers of the last one.
//!
//! NOTE: why not create a buffer per tensor, as the first version did? A decode step allocates
//! a few hundred small tensors; creating one is cheap in wgpu, but dropping it is not (the
//! buffer waits for the submission and is destroyed later), a new buffer needs a clear before
//! its first use, and the bind groups of the next step cannot be reused when every step binds
//! new buffers (see `recorder.rs`). A buffer handed back here is taken again by the next
//! tensor of its size. Reuse is safe within a batch: dispatches run in recording order and
//! wgpu puts a barrier between a dispatch that reads a buffer and a later one that writes it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Free buffers by size in bytes.
#[derive(Default)]
pub(crate) struct BufferPool {
    free: Mutex<HashMap<u64, Vec<wgpu::Buffer>>>,
}

/// Free bytes the pool keeps; beyond them a returned buffer is destroyed (a long prompt
/// chunk's activations must not stay allocated through decode).
const KEEP_BYTES: u64 = 256 << 20;

impl BufferPool {
    /// A free buffer of exactly `bytes`, if there is one.
    pub fn take(&self, bytes: u64) -> Option<wgpu::Buffer> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        free.get_mut(&bytes).and_then(Vec::pop)
    }

    /// Hand `buf` back for reuse.
    pub fn give(&self, buf: wgpu::Buffer) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let held: u64 = free.iter().map(|(b, v)| b * v.len() as u64).sum();
        if held + buf.size() <= KEEP_BYTES {
            free.entry(buf.size()).or_default().push(buf);
        }
    }
}

/// A pooled buffer: back to its pool when dropped.
pub(crate) struct Pooled {
    buf: wgpu::Buffer,
    pool: Option<Arc<BufferPool>>,
}

impl Pooled {
    /// `buf`, handed back to `pool` (when given) on drop.
    pub fn new(buf: wgpu::Buffer, pool: Option<Arc<BufferPool>>) -> Pooled {
        Pooled { buf, pool }
    }
}

impl std::ops::Deref for Pooled {
    type Target = wgpu::Buffer;

    fn deref(&self) -> &wgpu::Buffer {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            // A handle to the same buffer (wgpu buffers are reference-counted handles).
            pool.give(self.buf.clone());
        }
    }
}
