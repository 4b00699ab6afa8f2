//! Host data of a forward pass on its way to the device: staged through pinned memory (see
//! `memory.rs`), each array once per pass.

use hearth_backend::RopeSpec;

use super::memory::Pinned;
use super::state::{Mode, StageKey, State};
use super::CudaBackend;
use crate::error::driver;
use crate::CudaError;
use cudarc::driver::result;

/// Pinned staging bytes at start; grows when a step needs more.
pub(super) const PINNED_START: usize = 1 << 20;

pub(super) fn key_of<T>(s: &[T], what: &'static str) -> Option<StageKey> {
    Some(StageKey {
        ptr: s.as_ptr() as usize,
        len: s.len(),
        what,
    })
}

impl CudaBackend {
    /// Copies host bytes to the device through pinned memory and returns their device address.
    /// `key`: an array staged again in the same pass reuses the first copy.
    pub(super) fn stage(
        &self,
        st: &mut State,
        key: Option<StageKey>,
        bytes: &[u8],
    ) -> Result<u64, CudaError> {
        if let Some(dev) = key.and_then(|k| st.staged_at(k)) {
            return Ok(dev);
        }
        let may_grow = st.mode == Mode::Eager;
        let dev = st.arena.alloc(self.dev.stream(), bytes.len(), may_grow)?;
        // NOTE: checked before pushing: a push that fits copies the bytes, and pushing twice
        // would stage every array twice.
        if !st.pinned.fits(bytes.len()) {
            if !may_grow {
                return Err(CudaError::Driver {
                    during: "graph recording",
                    message: "the step stages more host data than the last one".into(),
                });
            }
            // Copies queued from the old buffer must finish before it goes.
            self.dev.synchronize()?;
            let len = (st.pinned.capacity() * 2).max(bytes.len() * 2);
            st.pinned = Pinned::new(self.dev.context(), len)?;
            st.drop_graphs();
        }
        let src = st.pinned.push(bytes).ok_or_else(|| CudaError::Driver {
            during: "staging",
            message: "pinned buffer too small after growing".into(),
        })?;
        if st.mode.launches() {
            // SAFETY: `src` is page-locked and stays untouched until the pass ends (the next
            // pass synchronizes before reusing it); `dev` holds `bytes.len()` bytes.
            unsafe { result::memcpy_htod_async(dev, src, self.dev.stream().cu_stream()) }
                .map_err(driver("staging copy"))?;
        }
        if let Some(k) = key {
            st.staged.push((k, dev));
        }
        Ok(dev)
    }

    pub(super) fn stage_u32(
        &self,
        st: &mut State,
        key: Option<StageKey>,
        values: &[u32],
    ) -> Result<u64, CudaError> {
        self.stage(st, key, bytemuck::cast_slice(values))
    }

    /// The device addresses of the positions and of the rope frequency divisors (0 when there
    /// are none), each staged once per pass.
    pub(super) fn stage_rope_inputs(
        &self,
        st: &mut State,
        positions: &[u32],
        rope: &RopeSpec,
    ) -> Result<(u64, u64), CudaError> {
        let pos = self.stage_u32(st, key_of(positions, "positions"), positions)?;
        if rope.freq_factors.is_empty() {
            return Ok((pos, 0));
        }
        let k = key_of(&rope.freq_factors, "rope factors");
        let factors = self.stage(st, k, bytemuck::cast_slice(&rope.freq_factors))?;
        Ok((pos, factors))
    }
}
