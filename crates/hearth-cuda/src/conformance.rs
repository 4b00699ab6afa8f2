//! The op conformance table: every op and weight type on random data against the CPU
//! reference, with each GEMV's achieved bandwidth. Used by the `cuda-conformance` binary and by
//! the GPU tests.

use cudarc::driver::{sys, CudaSlice};
use hearth_quant::GgmlType;
use rand::Rng;

use crate::error::driver;
use crate::reference::{
    abs_weight_rows, abs_weight_rows_q8a, dequantize_rows, gemv_f64, gemv_f64_x64, gemv_nmse_bound,
    nmse, quantize_q8a_f64, random_weights, rms_norm_f64, rms_norm_nmse_bound,
};
use crate::{CudaDevice, CudaError, QuantMatrix};

/// Threads per block of the RMSNorm kernel (the bound depends on it); ops.rs launches this.
const NORM_THREADS: usize = 256;

/// One line of the table.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// "gemv", "rms_norm" or "argmax".
    pub op: &'static str,
    /// Weight or value type.
    pub dtype: String,
    /// `rows x cols`.
    pub shape: String,
    /// Measured error (NMSE, or mismatching rows for argmax).
    pub error: f64,
    /// The largest error that passes.
    pub bound: f64,
    /// Median kernel time and the bytes it read, when timed.
    pub timing: Option<Timing>,
}

impl CaseResult {
    /// Whether the error is within its bound (NaN never passes).
    pub fn passed(&self) -> bool {
        self.error <= self.bound
    }
}

/// Median time of one kernel over several runs.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Median seconds per launch (CUDA events around each launch).
    pub seconds: f64,
    /// Bytes the kernel must read from device memory (the weights).
    pub bytes: usize,
}

impl Timing {
    /// Achieved bandwidth in GB/s (10^9 bytes per second).
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e9
    }
}

/// How to time: warm-up launches, timed launches (median taken), and how many bytes the
/// rotating weight copies must span so that the L2 cache cannot hold them.
#[derive(Clone, Copy, Debug)]
pub struct TimingPlan {
    pub warmup: usize,
    pub runs: usize,
    pub rotate_bytes: usize,
}

impl TimingPlan {
    /// 5 warm-ups, 30 timed runs, weight copies spanning 4x the device's L2 cache.
    pub fn for_device(dev: &CudaDevice) -> Result<Self, CudaError> {
        let l2 = dev
            .context()
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .map_err(driver("L2 size query"))?;
        Ok(TimingPlan {
            warmup: 5,
            runs: 30,
            rotate_bytes: 4 * usize::try_from(l2).unwrap_or(64 << 20),
        })
    }
}

/// Median seconds of `launch(i)` over `plan.runs` runs after `plan.warmup`, timed with CUDA
/// events around each launch on the device's stream.
pub fn median_launch_time(
    dev: &CudaDevice,
    plan: &TimingPlan,
    mut launch: impl FnMut(usize) -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    for i in 0..plan.warmup {
        launch(i)?;
    }
    let ctx = dev.context();
    let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let mut events = Vec::with_capacity(plan.runs);
    for i in 0..plan.runs {
        let start = ctx.new_event(timed).map_err(driver("event"))?;
        let end = ctx.new_event(timed).map_err(driver("event"))?;
        start.record(dev.stream()).map_err(driver("event record"))?;
        launch(plan.warmup + i)?;
        end.record(dev.stream()).map_err(driver("event record"))?;
        events.push((start, end));
    }
    dev.synchronize()?;
    let mut ms = events
        .iter()
        .map(|(s, e)| s.elapsed_ms(e).map(f64::from))
        .collect::<Result<Vec<_>, _>>()
        .map_err(driver("event timing"))?;
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2] / 1e3)
}

/// Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written.
pub fn copy_bandwidth(dev: &CudaDevice, bytes: usize) -> Result<f64, CudaError> {
    let stream = dev.stream();
    let src = stream
        .alloc_zeros::<u8>(bytes)
        .map_err(driver("copy buffer"))?;
    let mut dst = stream
        .alloc_zeros::<u8>(bytes)
        .map_err(driver("copy buffer"))?;
    let plan = TimingPlan {
        warmup: 2,
        runs: 20,
        rotate_bytes: 0,
    };
    let secs = median_launch_time(dev, &plan, |_| {
        stream.memcpy_dtod(&src, &mut dst).map_err(driver("copy"))
    })?;
    Ok(2.0 * bytes as f64 / secs / 1e9)
}

/// Which GEMV kernels a case runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activations {
    /// f32 activations (kernels/gemv.cu).
    F32,
    /// Activations quantized to int8 first (kernels/gemv_q8a.cu); the reference then uses the
    /// same quantized activations, so the bound stays the f32 rounding bound.
    Int8,
}

/// GEMV of random `n_rows x n_cols` weights of `ty` against the f64 reference over
/// hearth-quant's dequantization; timed when `plan` is given.
pub fn check_gemv(
    dev: &CudaDevice,
    ty: GgmlType,
    (n_rows, n_cols): (usize, usize),
    act: Activations,
    plan: Option<&TimingPlan>,
    rng: &mut impl Rng,
) -> Result<CaseResult, CudaError> {
    let bytes = random_weights(ty, n_rows, n_cols, rng);
    let x: Vec<f32> = (0..n_cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    let w = dev.upload_matrix(ty, n_rows, n_cols, &bytes)?;
    let x_dev = dev.upload_f32(&x)?;
    let mut y_dev = dev.alloc_poisoned_f32(n_rows)?;
    let mut q8 = match act {
        Activations::F32 => None,
        Activations::Int8 => Some(dev.alloc_q8_activations(n_cols)?),
    };
    match q8.as_mut() {
        None => dev.gemv(&w, &x_dev, &mut y_dev)?,
        Some(q8) => dev.gemv_q8a(&w, &x_dev, q8, &mut y_dev)?,
    }
    let got = dev.download(&y_dev)?;

    let (exact, abs_dot) = match act {
        Activations::F32 => {
            let x_abs: Vec<f32> = x.iter().map(|v| v.abs()).collect();
            let abs_w = abs_weight_rows(ty, &bytes, n_rows, n_cols);
            let exact = gemv_f64(&dequantize_rows(ty, &bytes, n_rows, n_cols), &x, n_cols);
            (exact, gemv_f64(&abs_w, &x_abs, n_cols))
        }
        Activations::Int8 => {
            let xq = quantize_q8a_f64(&x);
            let xq_abs: Vec<f64> = xq.iter().map(|v| v.abs()).collect();
            let abs_w = abs_weight_rows_q8a(ty, &bytes, n_rows, n_cols);
            let exact = gemv_f64_x64(&dequantize_rows(ty, &bytes, n_rows, n_cols), &xq, n_cols);
            (exact, gemv_f64_x64(&abs_w, &xq_abs, n_cols))
        }
    };
    let timing = match plan {
        Some(plan) => Some(time_gemv(
            dev,
            plan,
            (w, &bytes),
            &x_dev,
            q8.as_mut(),
            &mut y_dev,
        )?),
        None => None,
    };
    Ok(CaseResult {
        op: match act {
            Activations::F32 => "gemv",
            Activations::Int8 => "gemv_q8a",
        },
        dtype: ty.name().to_string(),
        shape: format!("{n_rows}x{n_cols}"),
        error: nmse(&got, &exact),
        bound: gemv_nmse_bound(&abs_dot, &exact, n_cols),
        timing,
    })
}

/// `first` and enough further copies of its `bytes` that timed launches rotating over them
/// span `plan.rotate_bytes`, so the L2 cache cannot hold the weights between launches.
fn rotated_copies(
    dev: &CudaDevice,
    plan: &TimingPlan,
    first: QuantMatrix,
    bytes: &[u8],
) -> Result<Vec<QuantMatrix>, CudaError> {
    let (ty, n_rows, n_cols) = (first.ty(), first.n_rows(), first.n_cols());
    let copies = plan.rotate_bytes.div_ceil(bytes.len().max(1)).max(1);
    let mut mats = vec![first];
    for _ in 1..copies {
        mats.push(dev.upload_matrix(ty, n_rows, n_cols, bytes)?);
    }
    Ok(mats)
}

/// Times GEMV launches rotating over enough copies of the weights to defeat the L2 cache;
/// with `q8`, each launch quantizes the activations first (timed with it).
fn time_gemv(
    dev: &CudaDevice,
    plan: &TimingPlan,
    (first, bytes): (QuantMatrix, &[u8]),
    x: &CudaSlice<f32>,
    mut q8: Option<&mut crate::Q8Activations>,
    y: &mut CudaSlice<f32>,
) -> Result<Timing, CudaError> {
    let mats = rotated_copies(dev, plan, first, bytes)?;
    let seconds = median_launch_time(dev, plan, |i| {
        let w = &mats[i % mats.len()];
        match q8.as_deref_mut() {
            None => dev.gemv(w, x, y),
            Some(q8) => dev.gemv_q8a(w, x, q8, y),
        }
    })?;
    Ok(Timing {
        seconds,
        bytes: bytes.len(),
    })
}

/// The f16 dequantizer of the GEMM path on random `n_rows x n_cols` weights of `ty`: the
/// specialized kernel (`typed`) or the element-wise one, against hearth-quant's dequantization
/// rounded to f16. The error counts values more than one f16 step away (bound 0: a fused
/// multiply-add may move a value by one rounding step, nothing more). Timed when `plan` is
/// given, counting the bytes read and written.
pub fn check_dequant_f16(
    dev: &CudaDevice,
    ty: GgmlType,
    (n_rows, n_cols): (usize, usize),
    typed: bool,
    plan: Option<&TimingPlan>,
    rng: &mut impl Rng,
) -> Result<CaseResult, CudaError> {
    let bytes = random_weights(ty, n_rows, n_cols, rng);
    let w = dev.upload_matrix(ty, n_rows, n_cols, &bytes)?;
    let mut out = dev
        .stream()
        .alloc_zeros::<u16>(n_rows * n_cols)
        .map_err(driver("dequant output"))?;
    dev.dequant_to_f16(&w, typed, &mut out)?;
    let got = dev.download(&out)?;
    let want = dequantize_rows(ty, &bytes, n_rows, n_cols);
    let off = got
        .iter()
        .zip(&want)
        .filter(|(&g, &w)| (g as i32 - half::f16::from_f32(w).to_bits() as i32).abs() > 1)
        .count();
    let timing = match plan {
        Some(plan) => {
            let mats = rotated_copies(dev, plan, w, &bytes)?;
            let seconds = median_launch_time(dev, plan, |i| {
                dev.dequant_to_f16(&mats[i % mats.len()], typed, &mut out)
            })?;
            Some(Timing {
                seconds,
                bytes: bytes.len() + 2 * n_rows * n_cols,
            })
        }
        None => None,
    };
    Ok(CaseResult {
        op: if typed {
            "dequant_typed"
        } else {
            "dequant_any"
        },
        dtype: ty.name().to_string(),
        shape: format!("{n_rows}x{n_cols}"),
        error: off as f64,
        bound: 0.0,
        timing,
    })
}

/// RMSNorm of `n_rows` random rows of `dim` values against the f64 reference.
pub fn check_rms_norm(
    dev: &CudaDevice,
    n_rows: usize,
    dim: usize,
    rng: &mut impl Rng,
) -> Result<CaseResult, CudaError> {
    let eps = 1e-6f32;
    let x: Vec<f32> = (0..n_rows * dim)
        .map(|_| rng.gen_range(-4.0f32..4.0))
        .collect();
    let w: Vec<f32> = (0..dim).map(|_| rng.gen_range(0.5f32..1.5)).collect();
    let (x_dev, w_dev) = (dev.upload_f32(&x)?, dev.upload_f32(&w)?);
    let mut y_dev = dev.alloc_poisoned_f32(n_rows * dim)?;
    dev.rms_norm(&x_dev, &w_dev, &mut y_dev, n_rows, eps)?;
    let got = dev.download(&y_dev)?;
    Ok(CaseResult {
        op: "rms_norm",
        dtype: "F32".into(),
        shape: format!("{n_rows}x{dim}"),
        error: nmse(&got, &rms_norm_f64(&x, &w, eps)),
        bound: rms_norm_nmse_bound(dim, NORM_THREADS),
        timing: None,
    })
}

/// Rows that exercise argmax's rules: plain random, a tie (lower index wins), NaNs (never
/// win), all -inf (index 0), all NaN (index 0), the maximum in the last column.
pub fn argmax_rows(n_cols: usize, rng: &mut impl Rng) -> Vec<Vec<f32>> {
    let random = |rng: &mut dyn rand::RngCore| -> Vec<f32> {
        (0..n_cols).map(|_| rng.gen_range(-20.0f32..20.0)).collect()
    };
    let mut tie = random(rng);
    let (a, b) = (
        rng.gen_range(0..n_cols / 2),
        rng.gen_range(n_cols / 2..n_cols),
    );
    (tie[a], tie[b]) = (25.0, 25.0);
    let mut nans = random(rng);
    for v in nans.iter_mut().step_by(7) {
        *v = f32::NAN;
    }
    let mut last = random(rng);
    last[n_cols - 1] = 30.0;
    vec![
        random(rng),
        tie,
        nans,
        vec![f32::NEG_INFINITY; n_cols],
        vec![f32::NAN; n_cols],
        last,
    ]
}

/// Argmax over [`argmax_rows`], exact against the CPU sampler's argmax: the error is the
/// number of rows that differ, and the bound 0. With `plan`, one row (the decode case) is
/// timed.
pub fn check_argmax(
    dev: &CudaDevice,
    n_cols: usize,
    plan: Option<&TimingPlan>,
    rng: &mut impl Rng,
) -> Result<CaseResult, CudaError> {
    let rows = argmax_rows(n_cols, rng);
    let flat: Vec<f32> = rows.concat();
    let logits = dev.upload_f32(&flat)?;
    // Poisoned: an index no row has.
    let mut out = dev
        .stream()
        .clone_htod(&vec![u32::MAX; rows.len()])
        .map_err(driver("upload"))?;
    dev.argmax(&logits, rows.len(), n_cols, &mut out)?;
    let got = dev.download(&out)?;
    let wrong = rows
        .iter()
        .zip(&got)
        .filter(|(row, &g)| hearth_sampler::argmax(row) != g)
        .count();
    let timing = match plan {
        Some(plan) => {
            let one = TimingPlan {
                rotate_bytes: 0,
                ..*plan
            };
            let seconds =
                median_launch_time(dev, &one, |_| dev.argmax(&logits, 1, n_cols, &mut out))?;
            Some(Timing {
                seconds,
                bytes: n_cols * 4,
            })
        }
        None => None,
    };
    Ok(CaseResult {
        op: "argmax",
        dtype: "F32".into(),
        shape: format!("{}x{n_cols}", rows.len()),
        error: wrong as f64,
        bound: 0.0,
        timing,
    })
}
