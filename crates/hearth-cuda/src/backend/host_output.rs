//! The logits of a pass that come back to the host, written by their GEMV straight into the
//! caller's page-locked memory (a `HostValues` kept from step to step) rather than into device
//! memory and copied after the pass: the copy (600 KB for a 152k-token vocabulary, about
//! 13 µs on an H200 machine) waited for the whole GEMV, while the GEMV's stores cross the bus
//! as it runs.
//!
//! The memory is known when the pass begins (`Backend::begin_forward_to_host`): a replayed
//! step's graph goes out before the host reaches its last op, and its GEMV writes the address
//! the recording was given, so a recording aimed at other memory is dropped first.
//!
//! NOTE (H200, `scripts/device/binary_ab.sh`, BENCHMARKS.md 2026-11-29, end of day): Qwen3-0.6B
//! tg128 with the logits back, Q8_0 1,340-1,350 -> 1,361-1,378 tok/s, Q4_K_M 1,381-1,390 ->
//! 1,410-1,432, now level with `--greedy`; a 32-token prompt +2-4%; Llama-3.1-8B Q4_K_M tg128
//! +0.5-0.7%.

use std::sync::atomic::Ordering;

use hearth_backend::{Backend, BackendError, HostValues};

use super::state::HostTarget;
use super::{check, CudaBackend, CudaTensor, CudaWeight};

impl CudaBackend {
    /// Starts a pass whose last op is [`Self::matmul_into_host`] into `out`, `len` values.
    pub(super) fn start_forward_to_host(
        &self,
        key: Option<u64>,
        out: &mut HostValues,
        len: usize,
    ) -> Result<(), BackendError> {
        let target = if self.host_output && len > 0 {
            let ptr = self.locked_values(out, len)?.as_mut_ptr() as u64;
            Some(HostTarget { ptr, len })
        } else {
            None
        };
        self.start_forward(key, false, target);
        Ok(())
    }

    /// `w · x` into `out`: written there by the GEMV where the pass was begun for `out` and an
    /// int8 GEMV computes the product (`launch.rs` `launch_matmul_to_host`), multiplied in
    /// device memory and copied back otherwise.
    pub(super) fn matmul_into_host(
        &self,
        w: &CudaWeight,
        x: &CudaTensor,
        n_out: usize,
        out: &mut HostValues,
    ) -> Result<(), BackendError> {
        check(x.cols == w.cols && n_out == w.rows, || {
            format!(
                "matmul {} to the host: [{}, {}] weights with [{}, {}] input into rows of {n_out}",
                w.name, w.rows, w.cols, x.rows, x.cols
            )
        })?;
        let len = x.rows * w.rows;
        let target = self.state()?.host_target;
        if target.is_some_and(|t| t.len == len) {
            let ptr = self.locked_values(out, len)?.as_mut_ptr() as u64;
            let mut st = self.state()?;
            if target == Some(HostTarget { ptr, len })
                && self.launch_matmul_to_host(&mut st, w, x, ptr)?
            {
                st.gate.set_wrote_host();
                self.finish_pass(&mut st)?;
                self.wait_for_step(&mut st)?;
                self.host_outputs.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        let mut product = self.alloc(x.rows, w.rows)?;
        self.matmul(w, x, &mut product)?;
        self.read_back_values(&product, out)
    }
}
