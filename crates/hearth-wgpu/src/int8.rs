//! The 8-bit matmul path: activations quantized on the device to the blocks the CPU backend
//! uses (Q8_0, Q8_K), then integer block dot products (kernels/quantize.wgsl,
//! kernels/matmul_int8.wgsl), for the weight types of [`INT8_TYPES`](crate::kernels::INT8_TYPES).
//!
//! NOTE: why not dequantize and multiply in f32, with the activations rounded to what the
//! 8-bit blocks stand for (as the other weight types still do)? Because that rounds in other
//! places than the CPU backend, which (as llama.cpp on x86) sums integers per lane and block and
//! scales them with fused multiply-adds in a fixed order, and the small golden models amplify
//! such last-bit differences past their bounds (0.14 against 0.03 on the tiny Q8_0 Qwen3). This
//! path repeats the CPU's steps exactly, so its outputs have the CPU's bits.

use hearth_backend::{Backend, BackendError};
use std::sync::atomic::Ordering;

use hearth_quant::GgmlType;

use crate::backend::{check, words, WgpuBackend, WgpuTensor, WgpuWeight};
use crate::kernels::{int8_reader, row_words, Int8Input, Module, INT8_NORMED_OVERHEAD};
use crate::recorder::{Bind, Grid};

/// What the 8-bit matmul does with each output value (`epilogue` in matmul_int8.wgsl).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Epilogue {
    /// `out = W · x`.
    Store = 0,
    /// `out += W · x`.
    Add = 1,
    /// `out = silu(out) · (W · x)`: `out` holds the gate projection and `W` is the up one
    /// (a SwiGLU in the up projection's dispatch instead of one of its own).
    SiluGate = 2,
}

/// Activations quantized on the device, in quantize.wgsl's layout.
pub(crate) struct Int8Acts {
    /// The activation type (Q8_0 or Q8_K).
    pub act: GgmlType,
    /// The words, as a `[1, n_words]` tensor.
    pub buf: WgpuTensor,
    pub n_tokens: usize,
    /// First word of the per-block scales.
    pub scales: usize,
    /// First word of the Q8_K group sums (16 per block).
    pub sums: usize,
}

/// Tokens up to which the q/k/v and gate/up matmuls norm and quantize their input rows
/// themselves (`Int8Input::NormedRow`): decode batches. Every workgroup does its token's row,
/// so for longer inputs one norm dispatch is cheaper.
const NORMED_INPUT_MAX_TOKENS: usize = 8;

/// Jobs per workgroup of the kernels that norm and quantize their own input rows.
const NORMED_JOBS: usize = Int8Input::NormedRow { words: 0 }.jobs();

/// The activations one 8-bit matmul dispatch binds.
struct Acts<'b> {
    input: Int8Input,
    buf: &'b wgpu::Buffer,
    n_tokens: usize,
    /// First word of the block scales (and of the Q8_K group sums) in the layout.
    scales: usize,
    sums: usize,
    /// The RMSNorm weight and epsilon of `Int8Input::NormedRow`.
    norm: Option<(&'b wgpu::Buffer, f32)>,
}

impl<'b> Acts<'b> {
    fn quantized(q: &'b Int8Acts) -> Acts<'b> {
        Acts {
            input: Int8Input::Quantized,
            buf: &q.buf.buf,
            n_tokens: q.n_tokens,
            scales: q.scales,
            sums: q.sums,
            norm: None,
        }
    }

    /// f32 rows `x`, which each workgroup norms with `norm` (weight, epsilon) and quantizes.
    fn normed(x: &'b WgpuTensor, (w, eps): (&'b WgpuWeight, f32)) -> Acts<'b> {
        Acts {
            input: Int8Input::NormedRow {
                words: row_words(x.cols) as u32,
            },
            buf: &x.buf,
            n_tokens: x.rows,
            // The workgroup's copy holds one token: its quants, then its scales.
            scales: x.cols / 4,
            sums: 0,
            norm: Some((w.vector(), eps)),
        }
    }

    fn eps_bits(&self) -> u32 {
        self.norm.map_or(0, |(_, eps)| eps.to_bits())
    }

    /// `binds` with the norm weight's binding appended where the kernel has one.
    fn with_norm<'c>(&self, mut binds: Vec<Bind<'c>>) -> Vec<Bind<'c>>
    where
        'b: 'c,
    {
        if let Some((w, _)) = self.norm {
            binds.push(Bind::Buffer(w));
        }
        binds
    }
}

/// Elements per block of an activation type of the 8-bit path.
fn act_block(act: GgmlType) -> usize {
    if act == GgmlType::Q8_K {
        256
    } else {
        32
    }
}

/// One matmul input and the forms the weights seen so far needed it in (rounded for the f32
/// kernels, quantized for the 8-bit ones), so that matmul3 and the gated pair quantize once.
pub(crate) struct Inputs<'a> {
    pub x: &'a WgpuTensor,
    rounded: Vec<(&'static str, WgpuTensor)>,
    int8: Vec<Int8Acts>,
}

impl<'a> Inputs<'a> {
    pub fn new(x: &'a WgpuTensor) -> Inputs<'a> {
        Inputs {
            x,
            rounded: Vec::new(),
            int8: Vec::new(),
        }
    }
}

impl WgpuBackend {
    /// `x` quantized to `act` blocks (Q8_0 or Q8_K); `x.cols` a whole number of blocks.
    pub(crate) fn quantize_acts(
        &self,
        act: GgmlType,
        x: &WgpuTensor,
    ) -> Result<Int8Acts, BackendError> {
        let size = act_block(act);
        let n_blocks = x.rows * x.cols / size;
        // Q8_0: 8 threads per block, 8 blocks per workgroup; Q8_K: a thread per block.
        let (entry, grid) = match act {
            GgmlType::Q8_0 => ("quantize_q8_0", Grid::Groups(n_blocks.div_ceil(8))),
            GgmlType::Q8_K => ("quantize_q8_k", Grid::Threads(n_blocks)),
            _ => return Err(BackendError::Unsupported(format!("{act} activations"))),
        };
        let mut q = self.alloc_int8(act, x.rows, x.cols)?;
        let params = words(&[n_blocks as u32, q.scales as u32, q.sums as u32, 0]);
        let binds = [
            Bind::Buffer(&x.buf),
            Bind::Buffer(q.buf.written()),
            Bind::Host(&params),
        ];
        self.recorder().dispatch(
            &self.gpu,
            Module::Quantize(self.gpu.info.native_fma),
            entry,
            &binds,
            grid,
        )?;
        Ok(q)
    }

    /// Room for `[rows, cols]` values quantized to `act` blocks (Q8_0 or Q8_K).
    pub(crate) fn alloc_int8(
        &self,
        act: GgmlType,
        rows: usize,
        cols: usize,
    ) -> Result<Int8Acts, BackendError> {
        let size = act_block(act);
        check(cols.is_multiple_of(size), || {
            format!("{act} activations of {cols} columns")
        })?;
        let n_blocks = rows * cols / size;
        let scales = rows * cols / 4;
        let sums = scales + n_blocks;
        let n_words = sums
            + if act == GgmlType::Q8_K {
                16 * n_blocks
            } else {
                0
            };
        Ok(Int8Acts {
            act,
            buf: self.alloc(1, n_words)?,
            n_tokens: rows,
            scales,
            sums,
        })
    }

    /// `W · x` into `out` as `epilogue` says for a weight with an 8-bit matmul (`Some(())`),
    /// or `None` for other weight types. Shapes are checked by the caller.
    pub(crate) fn matmul_int8<'a>(
        &self,
        w: &WgpuWeight,
        inputs: &mut Inputs<'a>,
        out: &mut WgpuTensor,
        epilogue: Epilogue,
    ) -> Result<Option<()>, BackendError> {
        let Some(act) = int8_reader(w.ty).map(|r| r.act) else {
            return Ok(None);
        };
        self.saw_int8(act);
        let q = self.int8_input(act, inputs)?;
        let y = out.written();
        let module = Module::MatmulInt8(w.ty, self.gpu.info.native_fma);
        let mut rec = self.recorder();
        // One dispatch per part of the weight, each writing its rows' output features (the
        // SwiGLU epilogue reads the gate at the same places it writes).
        for part in &w.parts {
            let rows = &part.rows;
            let params = words(&[
                w.rows as u32,
                w.cols as u32,
                q.n_tokens as u32,
                w.row_bytes as u32,
                epilogue as u32,
                q.scales as u32,
                q.sums as u32,
                rows.start as u32,
                rows.len() as u32,
                0,
                0,
                0,
            ]);
            let binds = [
                part.bind(),
                Bind::Buffer(&q.buf.buf),
                Bind::Buffer(y),
                Bind::Host(&params),
            ];
            // One workgroup per 4 (row, token) outputs: see kernels/matmul_int8.wgsl.
            let jobs = Int8Input::Quantized.jobs();
            let groups = Grid::Groups((rows.len() * q.n_tokens).div_ceil(jobs));
            rec.dispatch(&self.gpu, module, "matmul", &binds, groups)?;
        }
        Ok(Some(()))
    }

    /// Notes an 8-bit matmul with `act` activations: once one with Q8_0 activations has been
    /// seen, the norms in front of projections and the attention kernel also write their
    /// output as Q8_0 blocks (a model of such weights).
    fn saw_int8(&self, act: GgmlType) {
        if act == GgmlType::Q8_0 {
            self.norms_quantize.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the 8-bit matmuls of a group of weights of `rows` rows each can norm and
    /// quantize `x`'s rows to `act` blocks themselves (`Int8Input::NormedRow`): Q8_0
    /// activations, a decode batch, weights of whole workgroups of rows per token (see
    /// matmul_int8_qkv.wgsl), and room in workgroup memory.
    fn normed_input_fits(&self, act: GgmlType, x: &WgpuTensor, rows: &[usize]) -> bool {
        let memory = 4 * row_words(x.cols) + INT8_NORMED_OVERHEAD;
        act == GgmlType::Q8_0
            && x.rows <= NORMED_INPUT_MAX_TOKENS
            && x.cols.is_multiple_of(32)
            && rows.iter().all(|&r| r.is_multiple_of(NORMED_JOBS))
            && memory <= self.gpu.info.max_workgroup_memory
    }

    /// `inputs.x` quantized to `act` blocks: by the kernel that wrote it, by an earlier matmul
    /// of `inputs`, or now.
    fn int8_input<'a, 'b>(
        &self,
        act: GgmlType,
        inputs: &'b mut Inputs<'a>,
    ) -> Result<&'b Int8Acts, BackendError>
    where
        'a: 'b,
    {
        let x: &'a WgpuTensor = inputs.x;
        Ok(match x.int8.as_deref().filter(|q| q.act == act) {
            Some(q) => q,
            None => match inputs.int8.iter().position(|q| q.act == act) {
                Some(i) => &inputs.int8[i],
                None => {
                    let q = self.quantize_acts(act, x)?;
                    inputs.int8.push(q);
                    &inputs.int8[inputs.int8.len() - 1]
                }
            },
        })
    }

    /// The activations of an 8-bit matmul of a group (weights of `rows` rows each) over
    /// `inputs`: with `norm` (an RMSNorm weight and epsilon), `inputs.x` normed and quantized
    /// by each workgroup, or `None` where that path is not open; without, as `matmul_int8`
    /// reads them.
    fn group_acts<'a, 'b>(
        &self,
        act: GgmlType,
        inputs: &'b mut Inputs<'a>,
        rows: &[usize],
        norm: Option<(&'b WgpuWeight, f32)>,
    ) -> Result<Option<Acts<'b>>, BackendError>
    where
        'a: 'b,
    {
        self.saw_int8(act);
        let x: &'a WgpuTensor = inputs.x;
        match norm {
            Some((w, eps)) => {
                let fits = w.rows == 1 && w.cols == x.cols && self.normed_input_fits(act, x, rows);
                Ok(fits.then(|| Acts::normed(x, (w, eps))))
            }
            None => Ok(Some(Acts::quantized(self.int8_input(act, inputs)?))),
        }
    }

    /// `out[i] = W[i] · x` in one dispatch where the weights are of one group side by side
    /// (`Some(())`), else `None` and nothing is done; `x` is `inputs.x`, or RMSNorm of it
    /// with `norm` (then `None` also where the kernel cannot norm it). Shapes are checked by
    /// the caller.
    pub(crate) fn matmul_int8_qkv<'a>(
        &self,
        w: [&WgpuWeight; 3],
        inputs: &mut Inputs<'a>,
        norm: Option<(&WgpuWeight, f32)>,
        out: [&mut WgpuTensor; 3],
    ) -> Result<Option<()>, BackendError> {
        let (Some(r), Some((binding, bases))) = (int8_reader(w[0].ty), side_by_side(&w)) else {
            return Ok(None);
        };
        let rows = w.map(|w| w.rows);
        let Some(q) = self.group_acts(r.act, inputs, &rows, norm)? else {
            return Ok(None);
        };
        let n = q.n_tokens;
        let groups: Vec<usize> = rows
            .iter()
            .map(|r| (r * n).div_ceil(q.input.jobs()))
            .collect();
        let params = words(&[
            w[0].cols as u32,
            n as u32,
            w[0].row_bytes as u32,
            q.scales as u32,
            q.sums as u32,
            0,
            q.eps_bits(),
            rows[0] as u32,
            rows[1] as u32,
            rows[2] as u32,
            bases[1] as u32,
            bases[2] as u32,
            groups[0] as u32,
            groups[1] as u32,
            0,
            0,
        ]);
        let [o0, o1, o2] = out;
        let binds = q.with_norm(vec![
            binding,
            Bind::Buffer(q.buf),
            Bind::Buffer(o0.written()),
            Bind::Buffer(o1.written()),
            Bind::Buffer(o2.written()),
            Bind::Host(&params),
        ]);
        let module = Module::MatmulInt8Qkv(w[0].ty, self.gpu.info.native_fma, q.input);
        let grid = Grid::Groups(groups.iter().sum());
        self.recorder()
            .dispatch(&self.gpu, module, "matmul_qkv", &binds, grid)?;
        Ok(Some(()))
    }

    /// `out = silu(gate · x) · (up · x)` in one dispatch where gate and up are of one group
    /// side by side (`Some(())`), else `None` and nothing is done; `x` as for
    /// `matmul_int8_qkv`. Shapes are checked by the caller.
    pub(crate) fn matmul_int8_glu<'a>(
        &self,
        gate: &WgpuWeight,
        up: &WgpuWeight,
        inputs: &mut Inputs<'a>,
        norm: Option<(&WgpuWeight, f32)>,
        out: &mut WgpuTensor,
    ) -> Result<Option<()>, BackendError> {
        let pair = [gate, up];
        let (Some(r), Some((binding, bases))) = (int8_reader(gate.ty), side_by_side(&pair)) else {
            return Ok(None);
        };
        if gate.rows != up.rows {
            return Ok(None);
        }
        let Some(q) = self.group_acts(r.act, inputs, &[gate.rows], norm)? else {
            return Ok(None);
        };
        let n = q.n_tokens;
        let params = words(&[
            gate.cols as u32,
            n as u32,
            gate.row_bytes as u32,
            q.scales as u32,
            q.sums as u32,
            0,
            gate.rows as u32,
            bases[1] as u32,
            q.eps_bits(),
            0,
            0,
            0,
        ]);
        let binds = q.with_norm(vec![
            binding,
            Bind::Buffer(q.buf),
            Bind::Buffer(out.written()),
            Bind::Host(&params),
        ]);
        let module = Module::MatmulInt8Glu(gate.ty, self.gpu.info.native_fma, q.input);
        // `jobs / 2` outputs (a gate and an up job each) per workgroup.
        let grid = Grid::Groups((gate.rows * n).div_ceil(q.input.jobs() / 2));
        self.recorder()
            .dispatch(&self.gpu, module, "matmul_glu", &binds, grid)?;
        Ok(Some(()))
    }

    /// `inputs.x` rounded as the CPU rounds the activations of an f32-kernel matmul with a `ty`
    /// weight (see `round_entry`), or `None` where it needs no rounding.
    pub(crate) fn rounded_input<'i>(
        &self,
        ty: GgmlType,
        inputs: &'i mut Inputs,
    ) -> Result<Option<&'i WgpuTensor>, BackendError> {
        let x = inputs.x;
        let Some((entry, items)) = round_entry(ty, x) else {
            return Ok(None);
        };
        let i = match inputs.rounded.iter().position(|r| r.0 == entry) {
            Some(i) => i,
            None => {
                let out = self.alloc(x.rows, x.cols)?;
                self.elementwise(entry, &out.buf, Some(&x.buf), (items, x.cols), 0.0, &[])?;
                inputs.rounded.push((entry, out));
                inputs.rounded.len() - 1
            }
        };
        Ok(Some(&inputs.rounded[i].1))
    }

    /// The 8-bit blocks this device makes of `x` (`[x.len() / cols, cols]`) as the CPU
    /// backend stores them (`hearth_quant::quantize_activations` bytes, row after row), for
    /// tests that check the two quantizers agree. `act`: Q8_0 or Q8_K.
    pub fn quantize_activations(
        &self,
        act: GgmlType,
        x: &[f32],
        cols: usize,
    ) -> Result<Vec<u8>, BackendError> {
        check(cols > 0 && x.len().is_multiple_of(cols), || {
            format!("{} values in rows of {cols}", x.len())
        })?;
        let t = self.upload(x, x.len() / cols, cols)?;
        let q = self.quantize_acts(act, &t)?;
        let mut host = Vec::new();
        self.read_back(&q.buf, &mut host)?;
        let word = |i: usize| host[i].to_bits();
        let size = act_block(act);
        let mut out = Vec::new();
        for b in 0..x.len() / size {
            let d = f32::from_bits(word(q.scales + b));
            if act == GgmlType::Q8_K {
                out.extend_from_slice(&d.to_le_bytes());
            } else {
                // The device stores the f16 scale as the f32 of the same value: exact.
                out.extend_from_slice(&half::f16::from_f32(d).to_le_bytes());
            }
            for k in 0..size / 4 {
                out.extend_from_slice(&word(b * size / 4 + k).to_le_bytes());
            }
            if act == GgmlType::Q8_K {
                for g in 0..16 {
                    let s = word(q.sums + 16 * b + g) as i32 as i16;
                    out.extend_from_slice(&s.to_le_bytes());
                }
            }
        }
        Ok(out)
    }
}

/// One binding over weights stored side by side in one buffer (a group of one type, or MLX
/// spec, and width, see `WgpuBackend::load_group`), and the byte where each weight starts in
/// it; `None` for weights stored otherwise.
pub(crate) fn side_by_side<'w>(ws: &[&'w WgpuWeight]) -> Option<(Bind<'w>, Vec<u64>)> {
    let first = ws.first()?.parts.first()?;
    let mut end = first.offset;
    let mut bases = Vec::with_capacity(ws.len());
    for w in ws {
        let [part] = w.parts.as_slice() else {
            return None;
        };
        let same = part.buf == first.buf
            && (w.ty, w.cols, w.mlx) == (ws[0].ty, ws[0].cols, ws[0].mlx)
            && part.offset >= end;
        if !same {
            return None;
        }
        bases.push(part.offset - first.offset);
        end = part.offset + part.bytes;
    }
    Some((
        Bind::Range(&first.buf, first.offset, end - first.offset),
        bases,
    ))
}

/// The element-wise entry that rounds the activations of an f32-kernel matmul with a `ty`
/// weight as llama.cpp's CPU code does (values of 8-bit blocks for quantized weights, f16 for
/// f16 ones), and the number of items it runs over; `None` for f32 weights.
///
/// NOTE: the golden model tests compare greedy tokens with llama.cpp, and small models
/// amplify this rounding: without it a Q8_0 model parts ways with the reference.
fn round_entry(ty: GgmlType, x: &WgpuTensor) -> Option<(&'static str, usize)> {
    let n = x.rows * x.cols;
    Some(match hearth_quant::matmul_activation_type(ty) {
        Some(GgmlType::Q8_0 | GgmlType::Q8_1) if x.cols.is_multiple_of(32) => {
            ("quant_q8_0", n / 32)
        }
        Some(GgmlType::Q8_K) if x.cols.is_multiple_of(256) => ("quant_q8_k", n / 256),
        Some(GgmlType::F16) => ("round_f16", n),
        _ => return None,
    })
}
