// Element-wise ops over f32 tensors; one thread per output value.

struct EwParams {
    n: u32,    // values to write
    cols: u32, // row length (gather_rows)
    s: f32,    // factor (scale)
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> p: EwParams;
@group(0) @binding(3) var<storage, read> idx: array<u32>; // source rows (gather_rows)

@compute @workgroup_size(64)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_thread(gid, nwg);
    if (i < p.n) {
        x[i] += y[i];
    }
}

@compute @workgroup_size(64)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_thread(gid, nwg);
    if (i < p.n) {
        x[i] *= p.s;
    }
}

@compute @workgroup_size(64)
fn copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_thread(gid, nwg);
    if (i < p.n) {
        x[i] = y[i];
    }
}

@compute @workgroup_size(64)
fn gather_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_thread(gid, nwg);
    if (i < p.n) {
        x[i] = y[idx[i / p.cols] * p.cols + i % p.cols];
    }
}

@compute @workgroup_size(64)
fn glu_silu(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_thread(gid, nwg);
    if (i < p.n) {
        let g = x[i];
        x[i] = g / (1.0 + exp(-g)) * y[i];
    }
}

// GELU (tanh form) as ggml's CPU code computes it: input and output rounded to f16, saturated
// outside ±10 (the CPU reference looks it up in an f16 table).
@compute @workgroup_size(64)
fn glu_gelu(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_thread(gid, nwg);
    if (i < p.n) {
        let g = x[i];
        var a = g;
        if (g <= -10.0) {
            a = 0.0;
        } else if (g < 10.0) {
            let h = f16_round(g);
            let t = tanh(0.7978846 * h * (1.0 + 0.044715 * h * h));
            a = f16_round(0.5 * h * (1.0 + t));
        }
        x[i] = a * y[i];
    }
}
