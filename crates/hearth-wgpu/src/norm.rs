//! RMSNorm, rotary embedding, and the two fused into one dispatch (kernels/norm.wgsl,
//! kernels/rope.wgsl).

use hearth_backend::{BackendError, RopeKind, RopeRows, RopeSpec};

use crate::backend::{check, words, WgpuBackend, WgpuTensor, WgpuWeight};
use crate::int8::Int8Acts;
use crate::kernels::Module;
use crate::recorder::{Bind, Grid};

/// Where a norm reads its input and what follows it in the same dispatch.
pub(crate) enum NormInput<'a> {
    /// The output tensor itself.
    InPlace,
    /// Another tensor of the same shape (`x` is then only written).
    From(&'a WgpuTensor),
    /// As `From`, and `x` quantized to the Q8_0 blocks of the second.
    FromQuantized(&'a WgpuTensor, &'a Int8Acts),
}

/// cos and sin of each rotation angle of each row, `[n_tokens, n_rot / 2, 2]`, computed as the
/// CPU reference does (angle by repeated multiplication, as ggml does; each row's own base
/// where `rows.theta_scales` gives one).
pub(crate) fn rope_table(rows: RopeRows, rope: &RopeSpec) -> Vec<f32> {
    let half = rope.n_rot / 2;
    let plain = rope.theta_scale();
    let mut out = Vec::with_capacity(rows.positions.len() * half * 2);
    for (r, &pos) in rows.positions.iter().enumerate() {
        let theta_scale = rows.theta_scale(r, plain);
        let mut theta = pos as f32;
        for i in 0..half {
            let factor = rope.freq_factors.get(i).copied().unwrap_or(1.0);
            let t = rope.freq_scale * (theta / factor);
            out.push(t.cos());
            out.push(t.sin());
            theta *= theta_scale;
        }
    }
    out
}

/// `Err` unless rotary embedding `rope` of heads of `head_dim` fits `x` at `rows`.
pub(crate) fn check_rope(
    x: &WgpuTensor,
    rows: RopeRows,
    head_dim: usize,
    rope: &RopeSpec,
) -> Result<(), BackendError> {
    check(
        rows.n_rows() == Some(x.rows)
            && head_dim > 0
            && x.cols.is_multiple_of(head_dim)
            && rope.n_rot <= head_dim
            && rope.n_rot.is_multiple_of(2),
        || {
            format!(
                "rope of [{}, {}] at {} positions, head_dim {head_dim}, n_rot {}",
                x.rows,
                x.cols,
                rows.positions.len(),
                rope.n_rot
            )
        },
    )
}

impl WgpuBackend {
    /// RMSNorm over groups of `group` values of `input` into `x`.
    pub(crate) fn norm(
        &self,
        x: &mut WgpuTensor,
        weight: &WgpuWeight,
        group: usize,
        eps: f32,
        input: NormInput,
    ) -> Result<(), BackendError> {
        check(
            group > 0 && weight.rows == 1 && weight.cols == group && x.cols.is_multiple_of(group),
            || {
                format!(
                    "rms_norm of [{}, {}] in groups of {group} with '{}' [{}, {}]",
                    x.rows, x.cols, weight.name, weight.rows, weight.cols
                )
            },
        )?;
        let n_groups = x.rows * x.cols / group;
        let mut q_out = None;
        let (entry, aux) = match input {
            NormInput::InPlace => ("rms_norm", None),
            NormInput::From(src) | NormInput::FromQuantized(src, _) => {
                check((src.rows, src.cols) == (x.rows, x.cols), || {
                    format!(
                        "rms_norm of [{}, {}] into [{}, {}]",
                        src.rows, src.cols, x.rows, x.cols
                    )
                })?;
                let mut entry = "rms_norm_to";
                if let NormInput::FromQuantized(_, q) = input {
                    check(group == x.cols && group.is_multiple_of(32), || {
                        format!("Q8_0 blocks of rows of {} in groups of {group}", x.cols)
                    })?;
                    entry = "rms_norm_to_q8";
                    q_out = Some(q);
                }
                (entry, Some(Bind::Buffer(&src.buf)))
            }
        };
        let params = words(&[
            group as u32,
            n_groups as u32,
            eps.to_bits(),
            0,
            (x.cols / group) as u32,
            0,
            q_out.map_or(0, |q| q.scales as u32),
            0,
            0,
            0,
            0,
            0,
        ]);
        let binds = [
            Bind::Buffer(x.written()),
            Bind::Buffer(weight.vector()),
            Bind::Host(&params),
            aux.unwrap_or(Bind::Buffer(&self.dummy)),
            Bind::Buffer(q_out.map_or(&self.dummy_rw, |q| &*q.buf.buf)),
            Bind::Buffer(&self.dummy_rw),
            Bind::Buffer(&self.dummy),
        ];
        Ok(self.recorder().dispatch(
            &self.gpu,
            Module::Norm(self.gpu.info.native_fma),
            entry,
            &binds,
            Grid::Groups(n_groups),
        )?)
    }

    /// Per-head RMSNorm of `q` with `qn` and of `k` with `kn`, then rotary embedding of both
    /// with `table` ([`rope_table`]), in one dispatch; shapes are checked by the caller.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn norm_rope_qk(
        &self,
        q: &mut WgpuTensor,
        k: &mut WgpuTensor,
        (qn, kn): (&WgpuWeight, &WgpuWeight),
        head_dim: usize,
        eps: f32,
        table: &[f32],
        rope: &RopeSpec,
    ) -> Result<(), BackendError> {
        for (x, w) in [(&*q, qn), (&*k, kn)] {
            check(w.rows == 1 && w.cols == head_dim, || {
                format!(
                    "QK-norm of [{}, {}] in heads of {head_dim} with '{}' [{}, {}]",
                    x.rows, x.cols, w.name, w.rows, w.cols
                )
            })?;
        }
        let (q_groups, k_groups) = (q.rows * q.cols / head_dim, k.rows * k.cols / head_dim);
        let params = words(&[
            head_dim as u32,
            q_groups as u32,
            eps.to_bits(),
            (rope.n_rot / 2) as u32,
            (q.cols / head_dim) as u32,
            (rope.kind == RopeKind::Neox) as u32,
            0,
            0,
            k_groups as u32,
            (k.cols / head_dim) as u32,
            0,
            0,
        ]);
        let binds = [
            Bind::Buffer(q.written()),
            Bind::Buffer(qn.vector()),
            Bind::Host(&params),
            Bind::Host(bytemuck::cast_slice(table)),
            Bind::Buffer(&self.dummy_rw),
            Bind::Buffer(k.written()),
            Bind::Buffer(kn.vector()),
        ];
        Ok(self.recorder().dispatch(
            &self.gpu,
            Module::Norm(self.gpu.info.native_fma),
            "rms_norm_rope_qk",
            &binds,
            Grid::Groups(q_groups + k_groups),
        )?)
    }

    /// Rotary embedding of `x` in place, one dispatch.
    pub(crate) fn rope_only(
        &self,
        x: &mut WgpuTensor,
        rows: RopeRows,
        head_dim: usize,
        rope: &RopeSpec,
    ) -> Result<(), BackendError> {
        check_rope(x, rows, head_dim, rope)?;
        let half = rope.n_rot / 2;
        let heads = x.cols / head_dim;
        let n = x.rows * heads * half;
        let table = rope_table(rows, rope);
        let neox = (rope.kind == RopeKind::Neox) as u32;
        let params = words(&[
            n as u32,
            x.cols as u32,
            head_dim as u32,
            half as u32,
            heads as u32,
            neox,
            0,
            0,
        ]);
        let binds = [
            Bind::Buffer(x.written()),
            Bind::Host(bytemuck::cast_slice(&table)),
            Bind::Host(&params),
        ];
        Ok(self
            .recorder()
            .dispatch(&self.gpu, Module::Rope, "rope", &binds, Grid::Threads(n))?)
    }
}
