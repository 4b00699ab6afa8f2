//! Whether the device's WGSL `fma` is a fused multiply-add (one rounding), found by running it.
//!
//! NOTE: the 8-bit matmuls need a fused multiply-add to give the CPU backend's bits. WGSL lets
//! `fma` be a rounded product then a rounded sum, and some drivers do that (see fma.wgsl), so
//! the kernels carry an exact one in integer arithmetic, which costs ~100 instructions per
//! multiply-add. GPUs fuse `fma` in hardware (NVIDIA's FFMA, Apple's, AMD's), and there the
//! emulation buys nothing. The probe feeds `fma` triples whose unfused result differs from the
//! fused one, and triples shaped like the matmul's (small scale products, integer block sums,
//! sums of both signs), through the same compiler path as the kernels, and compares every bit
//! with the host's `f32::mul_add` (fused by definition). Only a device that gets all of them
//! right uses its own `fma`; anything else keeps the emulation.

use wgpu::util::DeviceExt;

const PROBE: &str = r#"
@group(0) @binding(0) var<storage, read> abc: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn probe(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&out)) {
        let v = abc[id.x];
        out[id.x] = fma(v.x, v.y, v.z);
    }
}
"#;

/// `(a, b, c)` triples: the hand-made ones round differently unfused, the rest look like the
/// matmul's multiply-adds.
fn triples() -> Vec<[f32; 3]> {
    let e = f32::EPSILON; // 2^-23
    let mut t = vec![
        // (1 + 2^-23)² = 1 + 2^-22 + 2^-46: the 2^-46 survives only when fused.
        [1.0 + e, 1.0 + e, -(1.0 + 2.0 * e)],
        [1.0 - e, 1.0 + e, -1.0],
        [1.0 + 3.0 * e, 1.0 - 5.0 * e, -1.0],
        [0.1, 10.0, -1.0],
        [1.0 / 3.0, 3.0, -1.0],
    ];
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for _ in 0..251 {
        let scale = f32::from_bits(0x3600_0000 + (next() as u32 & 0x01ff_ffff)); // ~1e-6..1e-4
        let sum = (next() as i32 >> 17) as f32; // |sum| < 2^15: an integer block sum
        let acc = ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0;
        t.push([scale, sum, acc]);
    }
    t
}

/// Run the probe; `Ok(true)` when every result equals the fused one bit for bit.
pub(crate) fn fma_is_fused(device: &wgpu::Device, queue: &wgpu::Queue) -> Result<bool, String> {
    let t = triples();
    let input: Vec<f32> = t.iter().flat_map(|&[a, b, c]| [a, b, c, 0.0]).collect();
    let expected: Vec<u32> = t
        .iter()
        .map(|&[a, b, c]| a.mul_add(b, c).to_bits())
        .collect();
    let bytes = (t.len() * 4) as u64;
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("fma probe"),
        source: wgpu::ShaderSource::Wgsl(PROBE.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("fma probe"),
        layout: None,
        module: &module,
        entry_point: Some("probe"),
        compilation_options: Default::default(),
        cache: None,
    });
    let abc = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("fma probe input"),
        contents: bytemuck::cast_slice(&input),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
    let out = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("fma probe output"),
        size: bytes,
        usage,
        mapped_at_creation: false,
    });
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("fma probe read-back"),
        size: bytes,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("fma probe"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: abc.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: out.as_entire_binding(),
            },
        ],
    });
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Err(e.to_string());
    }
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups((t.len() as u32).div_ceil(64), 1, 1);
    }
    encoder.copy_buffer_to_buffer(&out, 0, &staging, 0, bytes);
    queue.submit([encoder.finish()]);
    let (tx, rx) = std::sync::mpsc::channel();
    staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| e.to_string())?;
    match rx.try_recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err("the read-back did not complete".into()),
    }
    let got: Vec<u32> = {
        let mapped = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| e.to_string())?;
        bytemuck::cast_slice(&mapped).to_vec()
    };
    staging.unmap();
    Ok(got == expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-made triples really tell a fused `fma` from a rounded product and sum.
    #[test]
    fn unfused_results_differ() {
        let t = triples();
        let differ = t
            .iter()
            .filter(|&&[a, b, c]| a.mul_add(b, c) != a * b + c)
            .count();
        assert!(differ >= 5, "only {differ} triples tell them apart");
    }
}
