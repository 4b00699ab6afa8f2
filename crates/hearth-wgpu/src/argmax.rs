//! Greedy decoding's argmax on the device (kernels/argmax.wgsl): one word per row comes back
//! instead of the row of logits.

use hearth_backend::{Backend, BackendError};

use crate::backend::{check, words, WgpuBackend, WgpuTensor};
use crate::kernels::Module;
use crate::recorder::{Bind, Grid};

/// Values per workgroup of the first pass (`PART_VALUES` in kernels/argmax.wgsl).
const PART_VALUES: usize = 2048;

impl WgpuBackend {
    /// The index of the largest value of each row of `t` into `out`; see
    /// [`Backend::argmax_rows`] for the rules.
    pub(crate) fn argmax_into(
        &self,
        t: &WgpuTensor,
        out: &mut Vec<u32>,
    ) -> Result<(), BackendError> {
        let (rows, cols) = (t.rows, t.cols);
        let parts = cols.div_ceil(PART_VALUES);
        check(
            cols > 0
                && u32::try_from(rows * cols).is_ok()
                && u32::try_from(2 * rows * parts).is_ok(),
            || format!("argmax over [{rows}, {cols}]"),
        )?;
        out.clear();
        if rows == 0 {
            return Ok(());
        }
        let mut part_best = self.alloc(rows * parts, 2)?;
        let mut ids = self.alloc(rows, 1)?;
        let params = words(&[cols as u32, parts as u32, rows as u32, 0]);
        {
            let binds = [
                Bind::Buffer(&t.buf),
                Bind::Buffer(part_best.written()),
                Bind::Buffer(ids.written()),
                Bind::Host(&params),
            ];
            let mut rec = self.recorder();
            let grid = Grid::Groups(rows * parts);
            rec.dispatch(&self.gpu, Module::Argmax, "argmax_parts", &binds, grid)?;
            rec.dispatch(
                &self.gpu,
                Module::Argmax,
                "argmax_rows",
                &binds,
                Grid::Groups(rows),
            )?;
        }
        // The kernel writes u32 indices into the f32 slots of `ids`; the read-back keeps bits.
        let mut values = Vec::new();
        self.read_back(&ids, &mut values)?;
        out.extend(values.iter().map(|v| v.to_bits()));
        Ok(())
    }
}
