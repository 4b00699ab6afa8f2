// Rotary embedding in place. The host computes each token's cos/sin table (as the CPU
// reference does, angle by repeated multiplication); one thread rotates one pair.

struct RopeParams {
    n: u32,        // pairs to rotate: n_tokens * heads * half
    cols: u32,     // row length
    head_dim: u32,
    half: u32,     // n_rot / 2
    heads: u32,    // cols / head_dim
    neox: u32,     // 1: pairs (i, i + half); 0: pairs (2i, 2i + 1)
    _pad0: u32,
    zero: u32, // 0, for `keep`
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> cs: array<f32>; // [n_tokens, half, 2] (cos, sin)
@group(0) @binding(2) var<storage, read> p: RopeParams;

@compute @workgroup_size(64)
fn rope(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_thread(gid, nwg);
    if (i >= p.n) {
        return;
    }
    let per_token = p.heads * p.half;
    let t = i / per_token;
    let h = (i % per_token) / p.half;
    let k = i % p.half;
    let base = t * p.cols + h * p.head_dim;
    let ab = base + rope_pair(k, p.half, p.neox != 0u);
    let r = rotate(x[ab.x], x[ab.y], cs[2u * (t * p.half + k)], cs[2u * (t * p.half + k) + 1u]);
    x[ab.x] = r.x;
    x[ab.y] = r.y;
}
