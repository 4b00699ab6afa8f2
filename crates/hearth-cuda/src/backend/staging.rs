//! Host data of a forward pass on its way to the device: staged through pinned memory (see
//! `memory.rs`), each array once per pass.

use hearth_backend::{RopeRows, RopeSpec};

use super::memory::Staging;
use super::state::{EarlyLaunch, Mode, StageKey, State};
use super::CudaBackend;
use crate::error::driver;
use crate::CudaError;
use cudarc::driver::result;

/// A replayed step staging more host data than its recording did: its graph reads the
/// recording's layout, so the step cannot run.
fn replay_mismatch() -> CudaError {
    CudaError::Driver {
        during: "replaying a decode step",
        message: "the step stages more host data than its recording".into(),
    }
}

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
        if st.early_launch == EarlyLaunch::Done {
            return Err(replay_mismatch());
        }
        let may_grow = st.mode == Mode::Eager;
        if may_grow {
            // Its copy would queue behind a step waiting for the next pass, and the
            // pass that releases that step would overwrite these bytes first.
            self.settle_ahead();
        }
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
            self.synchronize()?;
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
        self.launch_when_staged(st)?;
        Ok(dev)
    }

    /// Launches a replayed step's graph once the pass has staged what its recording staged
    /// (see [`EarlyLaunch`]).
    ///
    /// NOTE (H200, Qwen3-0.6B Q8_0, `hearth bench` tg128 with the logits back): the host's
    /// walk through a replayed step took 48.5 us of its 848 (230 ops, about 210 ns each),
    /// the device idle meanwhile. A decode step stages its last array in its first layer,
    /// so the walk now overlaps the graph: tg128 1,172-1,220 -> 1,252-1,271 tok/s (Q4_K_M
    /// 1,238-1,240 -> 1,319-1,333), 64 sequences +2-3%, Llama-3.1-8B Q4_K_M +2.9%
    /// (`scripts/device/binary_ab.sh`, BENCHMARKS.md 2026-11-29, night).
    fn launch_when_staged(&self, st: &mut State) -> Result<(), CudaError> {
        let (Mode::Replay(k), EarlyLaunch::At(total)) = (st.mode, st.early_launch) else {
            return Ok(());
        };
        match st.staging.host.used().cmp(&total) {
            std::cmp::Ordering::Less => Ok(()),
            std::cmp::Ordering::Equal => {
                st.early_launch = EarlyLaunch::Done;
                self.send_step(st, k).map_err(|e| CudaError::Driver {
                    during: "replaying a decode step",
                    message: e.to_string(),
                })
            }
            std::cmp::Ordering::Greater => Err(replay_mismatch()),
        }
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
