// Element-wise ops over f32 tensors; one thread per output value. Divisions and exp are
// exact.wgsl's, so that the results have the CPU's bits on any device.

struct EwParams {
    n: u32,    // values to write
    cols: u32, // row length (gather_rows)
    s: f32,    // factor (scale)
    zero: u32, // 0, for `keep`
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
        x[i] = silu_rn(g) * y[i];
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
            let t = tanh(0.7978846 * h * (1.0 + keep(0.044715 * h * h)));
            a = f16_round(0.5 * h * (1.0 + t));
        }
        x[i] = a * y[i];
    }
}

// Activation rounding before a quantized matmul, as llama.cpp's CPU code quantizes the
// activations to 8 bits (the golden outputs come from it). `x` receives the values the 8-bit
// blocks stand for (scale × integer); one thread per block of `y`, p.n blocks.

// Q8_0 / Q8_1: blocks of 32, d = amax / 127 stored as f16, q = round_half_even(v · 127 / amax).
@compute @workgroup_size(64)
fn quant_q8_0(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = flat_thread(gid, nwg);
    if (b >= p.n) {
        return;
    }
    var amax = 0.0;
    for (var i = 0u; i < 32u; i++) {
        amax = max(amax, abs(y[32u * b + i]));
    }
    var id = 0.0;
    if (amax != 0.0) {
        id = div_rn(127.0, amax);
    }
    let d = f16_round(div_rn(amax, 127.0));
    for (var i = 0u; i < 32u; i++) {
        x[32u * b + i] = d * round(y[32u * b + i] * id);
    }
}

// Q8_K: blocks of 256, scaled by the signed value of largest magnitude (the first on ties):
// iscale = -127 / max, q = min(127, round_half_even(iscale · v)), d = 1 / iscale (f32).
@compute @workgroup_size(64)
fn quant_q8_k(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = flat_thread(gid, nwg);
    if (b >= p.n) {
        return;
    }
    var amax = 0.0;
    var mx = 0.0;
    for (var i = 0u; i < 256u; i++) {
        let v = y[256u * b + i];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    if (amax == 0.0) {
        for (var i = 0u; i < 256u; i++) {
            x[256u * b + i] = 0.0;
        }
        return;
    }
    let iscale = div_rn(-127.0, mx);
    let d = div_rn(1.0, iscale);
    for (var i = 0u; i < 256u; i++) {
        x[256u * b + i] = d * min(127.0, round(iscale * y[256u * b + i]));
    }
}

// F16 weights: the activations are rounded to f16.
@compute @workgroup_size(64)
fn round_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_thread(gid, nwg);
    if (i < p.n) {
        x[i] = f16_round(y[i]);
    }
}
