//! Host data of a forward pass on its way to the device: staged through pinned memory (see
//! `memory.rs`), each array once per pass.

use hearth_backend::{RopeRows, RopeSpec};

use super::memory::Staging;
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
    /// `key`: an array staged again in the same pass reuses the first copy. A pass run op by
    /// op copies the array now; a recorded or replayed one copies all its staged bytes at once
    /// before its graph (`Staging`).
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
        // NOTE: checked before pushing: a push that fits copies the bytes, and pushing twice
        // would stage every array twice.
        if !st.staging.host.fits(bytes.len()) {
            if !may_grow {
                return Err(CudaError::Driver {
                    during: "graph recording",
                    message: "the step stages more host data than the last one".into(),
                });
            }
            // Copies queued from the old buffers must finish before they go.
            self.dev.synchronize()?;
            // NOTE: at least doubled, so that a pass staging more and more grows it rarely;
            // an array larger than that gets just its own room (a long prompt's upload would
            // otherwise hold twice its size on the device for good).
            let len = (st.staging.host.capacity() * 2).max(bytes.len().next_multiple_of(1 << 16));
            let grown = Staging::new(self.dev.context(), self.dev.stream(), len)?;
            // NOTE: kept what was staged so far: this pass's earlier arrays are read from
            // the old device buffer, which must live until the pass ends.
            st.retired_staging
                .push(std::mem::replace(&mut st.staging, grown));
            st.drop_graphs();
        }
        let (dev, src) = st.staging.push(bytes).ok_or_else(|| CudaError::Driver {
            during: "staging",
            message: "pinned buffer too small after growing".into(),
        })?;
        if st.mode == Mode::Eager {
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

    /// The device addresses of a rope call's host data, each staged once per pass.
    pub(super) fn stage_rope_inputs(
        &self,
        st: &mut State,
        rows: RopeRows,
        rope: &RopeSpec,
    ) -> Result<RopeInputs, CudaError> {
        let positions = self.stage_u32(st, key_of(rows.positions, "positions"), rows.positions)?;
        let mut out = RopeInputs {
            positions,
            factors: 0,
            theta_scales: 0,
        };
        if !rope.freq_factors.is_empty() {
            let k = key_of(&rope.freq_factors, "rope factors");
            out.factors = self.stage(st, k, bytemuck::cast_slice(&rope.freq_factors))?;
        }
        // NOTE: staged like the positions (not passed by value) so that a replayed decode
        // step reads this step's bases.
        if let Some(t) = rows.theta_scales {
            let k = key_of(t, "rope theta scales");
            out.theta_scales = self.stage(st, k, bytemuck::cast_slice(t))?;
        }
        Ok(out)
    }
}

/// Device addresses of a rope call's inputs; 0 for an absent one.
pub(super) struct RopeInputs {
    /// `[n_tokens]` u32.
    pub positions: u64,
    /// `[n_rot / 2]` f32 frequency divisors.
    pub factors: u64,
    /// `[n_tokens]` f32: each row's `base^(-2 / n_rot)` (dynamic NTK).
    pub theta_scales: u64,
}
