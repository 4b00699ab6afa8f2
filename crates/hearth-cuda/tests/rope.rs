//! Rotary embedding on the CUDA backend against the CPU backend, with rows whose rope base is
//! their own (dynamic NTK scaling raises it per sequence): `rope_rows` and the fused
//! `qk_norm_rope`, eagerly and replayed from a recorded decode step whose bases changed; and
//! `qk_norm_rope` over both rotary layouts, partial rotation, frequency factors and no norm,
//! by both of its kernels (a thread a value, a thread a rotating pair).
//! Without a usable GPU each test prints "skipped: <reason>".

mod common;

use std::sync::Arc;

use common::gpu;
use hearth_backend::cpu::CpuBackend;
use hearth_backend::{Backend, HostWeight, RopeKind, RopeRows, RopeSpec};
use hearth_cuda::CudaBackend;
use hearth_quant::GgmlType;
use rand::{Rng, SeedableRng};

const HEAD_DIM: usize = 64;

fn spec() -> RopeSpec {
    RopeSpec {
        kind: RopeKind::Neox,
        n_rot: HEAD_DIM,
        freq_base: 10_000.0,
        freq_scale: 1.0,
        freq_factors: vec![],
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// `rope` alone, then QK-norm + rope of `q` / `k`, on `be`; returns the three results.
fn rotate<B: Backend>(
    be: &B,
    key: Option<u64>,
    (q, k): (&[f32], &[f32]),
    norm: &B::Weight,
    rows: RopeRows,
) -> [Vec<f32>; 3] {
    let n = rows.positions.len();
    be.begin_forward(key);
    let mut x = be.upload(q, n, q.len() / n).expect("upload");
    be.rope(&mut x, rows, HEAD_DIM, &spec()).expect("rope");
    let mut qt = be.upload(q, n, q.len() / n).expect("upload");
    let mut kt = be.upload(k, n, k.len() / n).expect("upload");
    be.qk_norm_rope(
        &mut qt,
        &mut kt,
        Some((norm, norm)),
        rows,
        HEAD_DIM,
        &spec(),
        1e-6,
    )
    .expect("qk_norm_rope");
    [&x, &qt, &kt].map(|t| be.to_host(t).expect("to host"))
}

#[test]
fn rows_with_their_own_base_match_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    let cpu = CpuBackend::new(2).expect("cpu backend");
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let n = 3;
    let q: Vec<f32> = (0..n * 4 * HEAD_DIM)
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let k: Vec<f32> = (0..n * 2 * HEAD_DIM)
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let norm: Vec<u8> = (0..HEAD_DIM)
        .flat_map(|_| rng.gen_range(0.5f32..1.5).to_le_bytes())
        .collect();
    let weight = |be_name: &str| HostWeight {
        name: format!("norm ({be_name})"),
        ty: GgmlType::F32,
        rows: 1,
        cols: HEAD_DIM,
        data: Arc::new(norm.clone()),
        mlx: None,
    };
    let (gpu_norm, cpu_norm) = (
        gpu.load_weight(weight("cuda")).expect("weight"),
        cpu.load_weight(weight("cpu")).expect("weight"),
    );
    let plain = spec().theta_scale();
    // The same positions with bases that change between steps: a replayed recording must
    // read each step's, not the recorded ones.
    let steps = [
        [plain, 0.80, 0.85],
        [plain, 0.81, 0.86],
        [0.79, 0.82, 0.87],
        [plain; 3],
    ];
    let positions = [7u32, 300, 1000];
    for (i, scales) in steps.iter().enumerate() {
        let rows = RopeRows {
            positions: &positions,
            theta_scales: Some(scales),
        };
        let want = rotate(&cpu, None, (&q, &k), &cpu_norm, rows);
        for key in [None, Some(1 << 40)] {
            let got = rotate(&gpu, key, (&q, &k), &gpu_norm, rows);
            for (what, (a, b)) in ["rope", "qk_norm_rope q", "qk_norm_rope k"]
                .iter()
                .zip(got.iter().zip(&want))
            {
                let d = max_diff(a, b);
                assert!(
                    d < 1e-3,
                    "step {i} {what} (replay key {key:?}): max diff {d}"
                );
            }
        }
    }
}

/// QK-norm + rope of heads of `hd` with `spec` (and the norm `norm`, if any) on `be`.
fn qk_norm_rope<B: Backend>(
    be: &B,
    (q, k): (&[f32], &[f32]),
    norm: Option<&B::Weight>,
    positions: &[u32],
    hd: usize,
    spec: &RopeSpec,
) -> [Vec<f32>; 2] {
    let n = positions.len();
    be.begin_forward(None);
    let mut qt = be.upload(q, n, q.len() / n).expect("upload");
    let mut kt = be.upload(k, n, k.len() / n).expect("upload");
    let rows = RopeRows {
        positions,
        theta_scales: None,
    };
    be.qk_norm_rope(&mut qt, &mut kt, norm.map(|w| (w, w)), rows, hd, spec, 1e-6)
        .expect("qk_norm_rope");
    [&qt, &kt].map(|t| be.to_host(t).expect("to host"))
}

#[test]
fn qk_norm_rope_layouts_match_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    let cpu = CpuBackend::new(2).expect("cpu backend");
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let positions = [0u32, 5, 127, 4000];
    let n = positions.len();
    let pairs = gpu.with_qk_pairs(true);
    let values = CudaBackend::open(0)
        .expect("a second backend")
        .with_qk_pairs(false);
    for (be_name, be) in [("pairs", &pairs), ("values", &values)] {
        // (head size, layout, rotated values, frequency factors, QK-norm)
        for (hd, kind, n_rot, factors, normed) in [
            (128, RopeKind::Neox, 128, false, true),
            (64, RopeKind::Normal, 64, false, true),
            (128, RopeKind::Neox, 64, false, true),
            (80, RopeKind::Normal, 32, false, false),
            (128, RopeKind::Neox, 128, true, false),
            (256, RopeKind::Normal, 256, true, true),
        ] {
            let spec = RopeSpec {
                kind,
                n_rot,
                freq_base: 1_000_000.0,
                freq_scale: 1.0,
                freq_factors: if factors {
                    (0..n_rot / 2).map(|i| 1.0 + i as f32 / 8.0).collect()
                } else {
                    vec![]
                },
            };
            let q: Vec<f32> = (0..n * 3 * hd).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let k: Vec<f32> = (0..n * hd).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let norm: Vec<u8> = (0..hd)
                .flat_map(|_| rng.gen_range(0.5f32..1.5).to_le_bytes())
                .collect();
            let weight = HostWeight {
                name: "norm".into(),
                ty: GgmlType::F32,
                rows: 1,
                cols: hd,
                data: Arc::new(norm),
                mlx: None,
            };
            let (gw, cw) = (
                be.load_weight(weight.clone()).expect("weight"),
                cpu.load_weight(weight).expect("weight"),
            );
            let want = qk_norm_rope(&cpu, (&q, &k), normed.then_some(&cw), &positions, hd, &spec);
            let got = qk_norm_rope(be, (&q, &k), normed.then_some(&gw), &positions, hd, &spec);
            for (what, (a, b)) in ["q", "k"].iter().zip(got.iter().zip(&want)) {
                let d = max_diff(a, b);
                assert!(
                    d < 1e-3,
                    "{be_name}: hd {hd} {kind:?} n_rot {n_rot} factors {factors} \
                     norm {normed} {what}: max diff {d}"
                );
            }
        }
    }
}
