//! Helpers shared by the wgpu test files: opening the device, random data, weights, the
//! error measures and the ops run the same way on any backend.
#![allow(dead_code)] // each test file uses its own subset

use std::sync::Arc;

use hearth_backend::cpu::CpuBackend;
use hearth_backend::{Backend, HostWeight};
use hearth_quant::{GgmlType, KernelLevel};
use hearth_wgpu::WgpuBackend;
use rand::{rngs::StdRng, Rng};

pub fn gpu() -> Option<WgpuBackend> {
    gpu_with(true)
}

pub fn gpu_with(subgroups: bool) -> Option<WgpuBackend> {
    match WgpuBackend::open_with(subgroups) {
        Ok(b) => {
            eprintln!("running on {}", b.name());
            Some(b)
        }
        Err(e) if std::env::var("HEARTH_REQUIRE_WGPU").as_deref() != Ok("1") => {
            eprintln!("SKIPPED (no wgpu adapter): {e}");
            None
        }
        Err(e) => panic!("HEARTH_REQUIRE_WGPU=1 but {e}"),
    }
}

pub fn cpu() -> CpuBackend {
    CpuBackend::new(2).expect("CPU backend")
}

pub fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect()
}

/// Σ (a - b)² / Σ a²; infinite when `b` has a NaN or the lengths differ.
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || b.iter().any(|v| v.is_nan()) {
        return f64::INFINITY;
    }
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum();
    num / den.max(1e-30)
}

pub fn weight(name: &str, ty: GgmlType, rows: usize, cols: usize, vals: &[f32]) -> HostWeight {
    let mut bytes = vec![0u8; cols / ty.block_size() * ty.type_size() * rows];
    let row_bytes = bytes.len() / rows;
    for (src, dst) in vals.chunks(cols).zip(bytes.chunks_mut(row_bytes)) {
        hearth_quant::quantize_row(ty, src, dst).expect("quantize");
    }
    HostWeight {
        name: name.into(),
        ty,
        rows,
        cols,
        data: Arc::new(bytes),
        mlx: None,
    }
}

/// The largest NMSE that passes for a weight type. Both sides round the activations the same
/// way (8-bit blocks, or f16 for f16 weights) and differ by summation order only (measured
/// ~1e-14 on lavapipe), except Q4_1, whose CPU dot product uses the Q8_1 block sum stored as
/// f16 (measured up to 5.5e-7). The types of `INT8_TYPES` sum each block exactly in integers
/// on both sides, so only the f32 steps per block and the order of the block sums differ.
pub fn bound(ty: GgmlType) -> f64 {
    match ty {
        GgmlType::Q4_1 => 2e-6,
        _ => 1e-12,
    }
}

pub fn matmul_on<B: Backend>(be: &B, w: HostWeight, x: &[f32], n: usize, add: bool) -> Vec<f32> {
    let (rows, cols) = (w.rows, w.cols);
    let w = be.load_weight(w).expect("load weight");
    let x = be.upload(x, n, cols).expect("upload");
    let mut out = be.upload(&vec![0.5; n * rows], n, rows).expect("upload");
    if add {
        be.matmul_add(&w, &x, &mut out).expect("matmul_add");
    } else {
        be.matmul(&w, &x, &mut out).expect("matmul");
    }
    be.to_host(&out).expect("to_host")
}

pub fn embed_on<B: Backend>(be: &B, w: HostWeight, tokens: &[u32]) -> Vec<f32> {
    let cols = w.cols;
    let w = be.load_weight(w).expect("load weight");
    let mut out = be.alloc(tokens.len(), cols).expect("alloc");
    be.embed(&w, tokens, &mut out).expect("embed");
    be.to_host(&out).expect("to_host")
}

/// Σ |a - b| / Σ |a| and max |a - b| / max |a|.
pub fn rel_errors(a: &[f32], b: &[f32]) -> (f64, f64) {
    let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs() as f64);
    let max_a = a.iter().fold(0f64, |m, x| m.max(x.abs() as f64));
    let sum_a: f64 = a.iter().map(|x| x.abs() as f64).sum();
    let (sum, max) = diff.fold((0.0, 0f64), |(s, m), d| (s + d, m.max(d)));
    (sum / sum_a.max(1e-30), max / max_a.max(1e-30))
}

/// Whether the CPU backend's 8-bit dot products of `ty` take the wgpu kernels' summation order.
pub fn same_order_on_cpu(ty: GgmlType) -> bool {
    match hearth_quant::kernel_level() {
        KernelLevel::Avx2 => true,
        // NOTE: Q5_0's 512-bit kernels add blocks as Q4_0's do (the same pair sums and packed
        // tiles), and Q5_K has no 512-bit kernel: AVX-512 hosts run the AVX2 one (the same
        // `define_int_kernels` body). Both bit-equal on an AVX-512 VNNI host (2026-11-24,
        // through NVIDIA's Vulkan).
        KernelLevel::Avx512Vnni => matches!(
            ty,
            GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q5_K
        ),
        KernelLevel::Scalar => false,
    }
}
