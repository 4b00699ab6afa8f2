//! Sampling's top-k stage on the device (kernels/top_k.wgsl): k candidates per row come back
//! instead of the row of logits.

use hearth_backend::{Backend, BackendError};
use hearth_sampler::Candidate;

use crate::backend::{check, words, WgpuBackend, WgpuTensor};
use crate::kernels::Module;
use crate::recorder::{Bind, Grid};

/// The largest k the kernel selects (`TOP_K_MAX` in kernels/top_k.wgsl); the sampler asks for
/// at most this many.
pub(crate) const TOP_K_MAX: usize = hearth_sampler::MAX_DEVICE_TOP_K;

impl WgpuBackend {
    /// The `k` best values of each row of `t` into `out`; see [`Backend::top_k_rows`].
    pub(crate) fn top_k_into(
        &self,
        t: &WgpuTensor,
        k: usize,
        out: &mut Vec<Candidate>,
    ) -> Result<(), BackendError> {
        let (rows, cols) = (t.rows, t.cols);
        check(
            (1..=cols).contains(&k) && u32::try_from(rows * cols.max(2 * k)).is_ok(),
            || format!("top-{k} of [{rows}, {cols}]"),
        )?;
        out.clear();
        if rows == 0 {
            return Ok(());
        }
        if k > TOP_K_MAX {
            // More than the kernel's workgroup arrays hold: selected on the host.
            let values = self.to_host(t)?;
            hearth_sampler::best_of_rows(&values, cols, k, out);
            return Ok(());
        }
        let mut best = self.alloc(rows, 2 * k)?;
        let params = words(&[cols as u32, k as u32, rows as u32, 0]);
        {
            let binds = [
                Bind::Buffer(&t.buf),
                Bind::Buffer(best.written()),
                Bind::Host(&params),
            ];
            let mut rec = self.recorder();
            rec.dispatch(&self.gpu, Module::TopK, "top_k", &binds, Grid::Groups(rows))?;
        }
        let mut words = Vec::new();
        self.read_back(&best, &mut words)?;
        hearth_backend::unpack_top_k(&words, k, out);
        Ok(())
    }
}
