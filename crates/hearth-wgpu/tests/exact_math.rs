//! exact.wgsl's `div_rn`, `sqrt_rn` and `exp_rn`: a Rust model of each algorithm (with
//! `f32::mul_add`, fused by definition, for `fma_rn`, and the device's approximate `1 / b`,
//! `inverseSqrt` played by results a few ulp off) checked against IEEE `/` and `sqrt` and a
//! correctly rounded exp over random and edge-case inputs, then the WGSL functions themselves on
//! the adapter wgpu finds (lavapipe here), with fma.wgsl's exact `fma_rn`, on the same inputs.
//!
//! Without an adapter the GPU test prints why and passes, unless `HEARTH_REQUIRE_WGPU=1`.

mod exact_model;
mod xorshift;

use exact_model::{div_model, exp_model, exp_reference, sqrt_model, ExpTable, Rng};
use hearth_wgpu::kernels::exact_math;
use wgpu::util::DeviceExt;

/// Pairs (a, b) of the ranges `div_rn` promises: random over the whole range, then the shapes
/// the kernels divide (SiLU, the quantizers' scales, 1 / softmax sums), then edge cases.
fn div_inputs(n: usize) -> Vec<[f32; 2]> {
    let mut rng = Rng(0x0dd5_eed5_0123_4567);
    let mut v = Vec::with_capacity(n + 64);
    for i in 0..n {
        v.push(match i % 4 {
            0 => {
                // Any sign, |a| in [2^-100, 2^100), |b| with a quotient in [2^-101, 2^101).
                let ea = (rng.next() % 200) as i32 - 100;
                let eb = (ea + (rng.next() % 200) as i32 - 100).clamp(-125, 127);
                let a = rng.float_in_exponents(ea, ea + 1) * rng.sign();
                let b = rng.float_in_exponents(eb, eb + 1) * rng.sign();
                [a, b]
            }
            1 => {
                let g = rng.uniform(-88.7, 88.7);
                [g, 1.0 + (-g).exp()]
            }
            2 => {
                let amax = rng.float_in_exponents(-20, 10);
                [127.0, amax]
            }
            _ => [1.0, rng.uniform(1.0, 4096.0)],
        });
    }
    let max = f32::MAX;
    let ones = f32::from_bits(0x3fff_ffff); // significand all ones
    for (a, b) in [
        (1.0, 3.0),
        (1.0, ones),
        (ones, ones),
        (-7.0, 7.0),
        (0.0, 5.0),
        (-0.0, 5.0),
        (100.0, max),
        (-88.0, max),
        (-88.0, 1.0e38),
        (1.0, 4.2535296e37),
        (1.0, f32::from_bits(0x7e00_0001)), // just above 2^125: scaled
        (2.0f32.powi(-100), 3.0),
        (127.0, 1.0e-6),
        (1.0e-6, 127.0),
        (1.0, 1.0 + f32::EPSILON),
        (1.0 + f32::EPSILON, 1.0),
        (1.0 - f32::EPSILON / 2.0, 1.0 + f32::EPSILON),
    ] {
        v.push([a, b]);
        v.push([-a, b]);
        v.push([a, -b]);
    }
    v
}

/// Values of the range `sqrt_rn` promises (0, and normal values from 2^-100 on).
fn sqrt_inputs(n: usize) -> Vec<f32> {
    let mut rng = Rng(0x5eed_0f5a_1234_9876);
    let mut v: Vec<f32> = (0..n)
        .map(|i| match i % 2 {
            0 => rng.float_in_exponents(-100, 128),
            _ => rng.uniform(1e-6, 16.0), // mean squares + eps
        })
        .collect();
    for k in -50..64 {
        let p = 2.0f32.powi(k);
        for bits in [0i32, 1, -1, 2, -2] {
            v.push(f32::from_bits((p.to_bits() as i32 + bits) as u32));
        }
    }
    v.extend([0.0, 1e-6, 1e-5, f32::MAX, f32::from_bits(0x3fff_ffff)]);
    v
}

/// Arguments as the kernels pass them: softmax's s - max ≤ 0 (mostly near 0), SiLU's -x for
/// any x, then the edges of each range.
fn exp_inputs(n: usize) -> Vec<f32> {
    let mut rng = Rng(0xe4b0_ce11_5eed_0042);
    let mut v: Vec<f32> = (0..n)
        .map(|i| match i % 4 {
            0 => rng.uniform(-20.0, 0.0),
            1 => rng.uniform(-88.0, 0.0),
            2 => rng.uniform(-88.7, 88.7),
            _ => rng.uniform(-1.0, 1.0) * 2.0f32.powi(-((rng.next() % 30) as i32)),
        })
        .collect();
    v.extend([
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        f32::NEG_INFINITY,
        -3.0e38,
        -88.0,
        -87.9,
        -87.336_55,
        -87.336_54,
        -87.33,
        88.72,
        88.722_83,
        88.722_84,
        f32::INFINITY,
        std::f32::consts::LN_2,
        -std::f32::consts::LN_2,
        0.010_830_424,
        -0.010_830_424,
    ]);
    v
}

/// Where `got` and `want` differ, as (input, got, want); a NaN in `want` means "either".
fn misses<T: Copy>(inputs: &[T], got: &[f32], want: &[f32]) -> Vec<(T, f32, f32)> {
    inputs
        .iter()
        .zip(got.iter().zip(want))
        .filter(|(_, (g, w))| !w.is_nan() && g.to_bits() != w.to_bits())
        .map(|(i, (g, w))| (*i, *g, *w))
        .collect()
}

/// Every result has the bits of `want` (NaN references excepted); else the first few misses.
fn assert_no_misses<T: Copy + std::fmt::Debug>(inputs: &[T], got: &[f32], want: &[f32]) {
    let bad = misses(inputs, got, want);
    assert!(
        bad.is_empty(),
        "{} of {}: {:?}",
        bad.len(),
        inputs.len(),
        &bad[..bad.len().min(5)]
    );
}

#[test]
fn division_model_is_correctly_rounded() {
    let inputs = div_inputs(1_000_000);
    let mut rng = Rng(42);
    let got: Vec<f32> = inputs
        .iter()
        .map(|&[a, b]| div_model(a, b, rng.ulps(3)))
        .collect();
    let want: Vec<f32> = inputs.iter().map(|&[a, b]| a / b).collect();
    assert_no_misses(&inputs, &got, &want);
}

#[test]
fn sqrt_model_is_correctly_rounded() {
    let inputs = sqrt_inputs(1_000_000);
    let mut rng = Rng(43);
    let got: Vec<f32> = inputs.iter().map(|&a| sqrt_model(a, rng.ulps(3))).collect();
    let want: Vec<f32> = inputs.iter().map(|&a| a.sqrt()).collect();
    assert_no_misses(&inputs, &got, &want);
}

/// The misses of `exp_model` against the correctly rounded exp, and for information against
/// the host's `f32::exp` (glibc 2.36's expf is not always correctly rounded: ~4e-3 of these
/// inputs).
#[test]
fn exp_model_is_almost_always_correctly_rounded() {
    let table = ExpTable::from_wgsl(&exact_math(false));
    let inputs = exp_inputs(1_000_000);
    let got: Vec<f32> = inputs.iter().map(|&x| exp_model(x, &table)).collect();
    let (want, undecided) = exp_reference(&inputs);
    let bad = misses(&inputs, &got, &want);
    let host: Vec<f32> = inputs.iter().map(|&x| x.exp()).collect();
    let host_misses = misses(&inputs, &host, &want).len();
    let vs_host = misses(&inputs, &got, &host).len();
    eprintln!(
        "exp model: {} of {} differ from the correctly rounded exp ({undecided} too close to a \
         midpoint to tell, skipped); the host's f32::exp differs from it in {host_misses}, \
         from the model in {vs_host}",
        bad.len(),
        inputs.len()
    );
    assert!(
        (bad.len() as f64) < 1e-5 * inputs.len() as f64,
        "{:?}",
        &bad[..bad.len().min(10)]
    );
}

/// The table and Cody–Waite constants of exact.wgsl are what their comments say.
#[test]
fn exp_constants_are_right() {
    let table = ExpTable::from_wgsl(&exact_math(false));
    table.check();
}

// --- the WGSL functions on the device -------------------------------------------------------

const HARNESS: &str = r#"
struct P {
    n: u32,
    zero: u32,
}
@group(0) @binding(0) var<storage, read> inp: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> p: P;

fn keep(v: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) | p.zero);
}

@compute @workgroup_size(64)
fn run_div(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = id.y * nwg.x * 64u + id.x;
    if (i < p.n) {
        out[i] = div_rn(inp[i].x, inp[i].y);
    }
}

@compute @workgroup_size(64)
fn run_sqrt(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = id.y * nwg.x * 64u + id.x;
    if (i < p.n) {
        out[i] = sqrt_rn(inp[i].x);
    }
}

@compute @workgroup_size(64)
fn run_exp(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = id.y * nwg.x * 64u + id.x;
    if (i < p.n) {
        out[i] = exp_rn(inp[i].x);
    }
}
"#;

struct Device {
    device: wgpu::Device,
    queue: wgpu::Queue,
}

fn device() -> Option<Device> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN | wgpu::Backends::METAL,
        flags: wgpu::InstanceFlags::empty().with_env(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = match pollster::block_on(instance.request_adapter(&Default::default())) {
        Ok(a) => a,
        Err(e) if std::env::var("HEARTH_REQUIRE_WGPU").as_deref() != Ok("1") => {
            eprintln!("SKIPPED (no wgpu adapter): {e}");
            return None;
        }
        Err(e) => panic!("HEARTH_REQUIRE_WGPU=1 but {e}"),
    };
    eprintln!("running on {}", adapter.get_info().name);
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .expect("device");
    Some(Device { device, queue })
}

/// `entry` of the harness (with exact.wgsl over fma.wgsl's exact `fma_rn`) on each input pair.
fn run(dev: &Device, entry: &str, inputs: &[[f32; 2]]) -> Vec<f32> {
    let src = format!("{}\n{HARNESS}", exact_math(false));
    let d = &dev.device;
    let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(entry),
        source: wgpu::ShaderSource::Wgsl(src.into()),
    });
    let pipeline = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(entry),
        layout: None,
        module: &module,
        entry_point: Some(entry),
        compilation_options: Default::default(),
        cache: None,
    });
    let storage = wgpu::BufferUsages::STORAGE;
    let input = d.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: None,
        contents: bytemuck::cast_slice(inputs),
        usage: storage,
    });
    let params = d.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: None,
        contents: bytemuck::cast_slice(&[inputs.len() as u32, 0]),
        usage: storage,
    });
    let bytes = (inputs.len() * 4) as u64;
    let out = d.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: bytes,
        usage: storage | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let staging = d.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: bytes,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let group = d.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: input.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: out.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: params.as_entire_binding(),
            },
        ],
    });
    let mut encoder = d.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        let groups = (inputs.len() as u32).div_ceil(64);
        pass.dispatch_workgroups(groups.min(65535), groups.div_ceil(65535), 1);
    }
    encoder.copy_buffer_to_buffer(&out, 0, &staging, 0, bytes);
    dev.queue.submit([encoder.finish()]);
    staging
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.expect("map"));
    d.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
    let mapped = staging.slice(..).get_mapped_range().expect("mapped");
    bytemuck::cast_slice(&mapped).to_vec()
}

/// The grid above covers x · y groups with x = min(groups, 65535): exact when groups ≤ 65535
/// or a multiple of it; the inputs are cut to such a length.
fn fit_grid<T>(mut v: Vec<T>) -> Vec<T> {
    let per_row = 65535 * 64;
    if v.len() > per_row {
        v.truncate(v.len() / per_row * per_row);
    }
    v
}

#[test]
fn wgsl_functions_on_the_device() {
    let Some(dev) = device() else { return };
    let table = ExpTable::from_wgsl(&exact_math(false));

    let div = fit_grid(div_inputs(1_000_000));
    let got = run(&dev, "run_div", &div);
    let want: Vec<f32> = div.iter().map(|&[a, b]| a / b).collect();
    let bad_div = misses(&div, &got, &want);

    let sq = fit_grid(sqrt_inputs(1_000_000));
    let pairs: Vec<[f32; 2]> = sq.iter().map(|&a| [a, 0.0]).collect();
    let got = run(&dev, "run_sqrt", &pairs);
    let want: Vec<f32> = sq.iter().map(|&a| a.sqrt()).collect();
    let bad_sqrt = misses(&sq, &got, &want);

    let ex = fit_grid(exp_inputs(1_000_000));
    let pairs: Vec<[f32; 2]> = ex.iter().map(|&x| [x, 0.0]).collect();
    let got = run(&dev, "run_exp", &pairs);
    let model: Vec<f32> = ex.iter().map(|&x| exp_model(x, &table)).collect();
    let (want, _) = exp_reference(&ex);
    let not_model = misses(&ex, &got, &model);
    let bad_exp = misses(&ex, &got, &want);
    eprintln!(
        "device: div {} of {} wrong, sqrt {} of {} wrong, exp {} of {} not correctly rounded, \
         {} differ from the Rust model",
        bad_div.len(),
        div.len(),
        bad_sqrt.len(),
        sq.len(),
        bad_exp.len(),
        ex.len(),
        not_model.len()
    );
    assert!(
        bad_div.is_empty(),
        "div_rn: {:?}",
        &bad_div[..bad_div.len().min(5)]
    );
    assert!(
        bad_sqrt.is_empty(),
        "sqrt_rn: {:?}",
        &bad_sqrt[..bad_sqrt.len().min(5)]
    );
    assert!(
        not_model.is_empty(),
        "exp_rn vs the model: {:?}",
        &not_model[..not_model.len().min(5)]
    );
    assert!((bad_exp.len() as f64) < 1e-5 * ex.len() as f64);
}
