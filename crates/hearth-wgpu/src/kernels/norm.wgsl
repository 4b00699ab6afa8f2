// RMSNorm: each group of `group` consecutive values is scaled by 1/rms and multiplied by the
// weight. One 64-thread workgroup per group. `rms_norm` works in place, `rms_norm_to` reads
// the values from `aux` (a norm in front of a projection: one dispatch instead of a copy and
// a norm), `rms_norm_rope_qk` norms each head of q (`x`, `wt`) and of k (`x2`, `wt2`), then
// rotates it as rope.wgsl does, with the cos/sin table in `aux` (QK-norm then rotary embedding
// of both: one dispatch instead of four), and `rms_norm_to_q8` as `rms_norm_to`, then
// quantizes the row to Q8_0 blocks in `q` for the 8-bit matmuls that read it (quantize.wgsl's
// layout; one dispatch instead of two). Each value
// goes through the same steps as in the separate kernels, so the bits are theirs; each step is
// one IEEE operation, as on the CPU (`keep`, `div_rn`, `sqrt_rn`: see exact.wgsl), and the
// mean of squares is the CPU's f64 one rounded to f32 (see `inv_rms`).

struct NormParams {
    group: u32,
    n_groups: u32,
    eps: f32,
    half: u32,  // rms_norm_rope_qk: n_rot / 2
    heads: u32, // rms_norm_rope_qk: groups of x per token
    neox: u32,  // rms_norm_rope_qk: 1: pairs (i, i + half); 0: pairs (2i, 2i + 1)
    q_scales: u32, // rms_norm_to_q8: first word of the block scales in q
    zero: u32, // 0, for `keep`
    k_groups: u32, // rms_norm_rope_qk: the groups (heads of all tokens) of x2
    k_heads: u32,  // rms_norm_rope_qk: groups of x2 per token
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> wt: array<f32>; // [group]
@group(0) @binding(2) var<storage, read> p: NormParams;
@group(0) @binding(3) var<storage, read> aux: array<f32>; // source values, or [n_tokens, half, 2]
@group(0) @binding(4) var<storage, read_write> q: array<u32>; // rms_norm_to_q8: Q8_0 blocks of x
@group(0) @binding(5) var<storage, read_write> x2: array<f32>; // rms_norm_rope_qk: k
@group(0) @binding(6) var<storage, read> wt2: array<f32>;       // rms_norm_rope_qk: k's norm

var<workgroup> sums: array<vec2<f32>, 256>; // double words (double_word.wgsl), one a thread

// Where a group's input values are (the same for the whole workgroup).
const FROM_X: u32 = 0u;
const FROM_AUX: u32 = 1u;
const FROM_X2: u32 = 2u;

// Value i of the input.
fn input(i: u32, src: u32) -> f32 {
    if (src == FROM_AUX) {
        return aux[i];
    } else if (src == FROM_X2) {
        return x2[i];
    }
    return x[i];
}

// 1 / rms of the group from `base` on (every thread of the workgroup calls it).
//
// NOTE: the CPU rounds (f64 Σ v²) / group to f32 once; an f32 sum would be off by several
// ulp of that mean. Here the squares are exact double words, each addition (per thread, then
// in the tree) rounds to ~2^-48, and the mean then rounds as the CPU's does except where it
// lies within ~2^-40 of a midpoint between two floats (tests/norm_exact.rs), for values below
// 2^63 (above, the square overflows f32 where the CPU's f64 does not). From there on, one
// IEEE step each, as on the CPU.
// `threads`: the workgroup's size (64, or 256 for `rms_norm_to_q8`).
fn inv_rms(base: u32, live: bool, lid: u32, src: u32, threads: u32) -> f32 {
    var acc = vec2<f32>(0.0, 0.0);
    if (live) {
        // Four loads in flight, then added in the same order as one at a time (see `x8` in
        // quantize.wgsl for why).
        var i = lid;
        for (; i + 3u * threads < p.group; i += 4u * threads) {
            let v0 = input(base + i, src);
            let v1 = input(base + i + threads, src);
            let v2 = input(base + i + 2u * threads, src);
            let v3 = input(base + i + 3u * threads, src);
            acc = dw_add(acc, square_exact(v0));
            acc = dw_add(acc, square_exact(v1));
            acc = dw_add(acc, square_exact(v2));
            acc = dw_add(acc, square_exact(v3));
        }
        for (; i < p.group; i += threads) {
            acc = dw_add(acc, square_exact(input(base + i, src)));
        }
    }
    sums[lid] = acc;
    workgroupBarrier();
    for (var s = threads / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            sums[lid] = dw_add(sums[lid], sums[lid + s]);
        }
        workgroupBarrier();
    }
    return inv_rms_of(sums[0], f32(p.group), p.eps);
}

fn norm_group(g: u32, lid: u32, src: u32) {
    let live = g < p.n_groups;
    let base = g * p.group;
    let inv = inv_rms(base, live, lid, src, 64u);
    if (live) {
        var i = lid;
        for (; i + 192u < p.group; i += 256u) {
            let v = array<f32, 4>(input(base + i, src), input(base + i + 64u, src),
                                  input(base + i + 128u, src), input(base + i + 192u, src));
            let w = array<f32, 4>(wt[i], wt[i + 64u], wt[i + 128u], wt[i + 192u]);
            x[base + i] = v[0] * inv * w[0];
            x[base + i + 64u] = v[1] * inv * w[1];
            x[base + i + 128u] = v[2] * inv * w[2];
            x[base + i + 192u] = v[3] * inv * w[3];
        }
        for (; i < p.group; i += 64u) {
            x[base + i] = input(base + i, src) * inv * wt[i];
        }
    }
}

@compute @workgroup_size(64)
fn rms_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    norm_group(flat_group(wg, nwg), lid, FROM_X);
}

@compute @workgroup_size(64)
fn rms_norm_to(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    norm_group(flat_group(wg, nwg), lid, FROM_AUX);
}

// NOTE: 256 threads, where the other entries have 64: a row is one workgroup, and a 1,024-wide
// row's 32 blocks are then quantized in one round instead of four (each round waits on its
// loads, two barriers and two long divisions): on an H100 through Vulkan a 64-thread
// workgroup took 21 µs per row.
@compute @workgroup_size(256)
fn rms_norm_to_q8(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let g = flat_group(wg, nwg);
    let live = g < p.n_groups;
    let base = g * p.group;
    let inv = inv_rms(base, live, lid, FROM_AUX, 256u);
    // 32 blocks of 32 values at a time, 8 threads per block (see quantize_part_q8_0): each
    // thread normalizes 4 values as norm_group does, stores them and quantizes them.
    let per_row = p.group / 32u;
    for (var k0 = 0u; k0 < per_row; k0 += 32u) {
        let k = k0 + lid / 8u;
        let i = 32u * k + 4u * (lid % 8u);
        let mine = live && k < per_row;
        var v = vec4<f32>(0.0);
        if (mine) {
            v = vec4<f32>(aux[base + i] * inv * wt[i], aux[base + i + 1u] * inv * wt[i + 1u],
                          aux[base + i + 2u] * inv * wt[i + 2u],
                          aux[base + i + 3u] * inv * wt[i + 3u]);
            x[base + i] = v.x;
            x[base + i + 1u] = v.y;
            x[base + i + 2u] = v.z;
            x[base + i + 3u] = v.w;
        }
        let qd = quantize_part_q8_0(v, lid);
        if (mine) {
            let b = g * per_row + k;
            q[8u * b + lid % 8u] = qd.x;
            if (lid % 8u == 0u) {
                q[p.q_scales + b] = qd.y;
            }
        }
    }
}

@compute @workgroup_size(64)
fn rms_norm_rope_qk(@builtin(workgroup_id) wg: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let g = flat_group(wg, nwg);
    if (g < p.n_groups) {
        norm_rope_group(g, true, p.heads, lid, FROM_X);
    } else {
        norm_rope_group(g - p.n_groups, g - p.n_groups < p.k_groups, p.k_heads, lid, FROM_X2);
    }
}

// Weight i of the norm of `src`'s groups.
fn weight(i: u32, src: u32) -> f32 {
    if (src == FROM_X2) {
        return wt2[i];
    }
    return wt[i];
}

// Store v as value i of `src` (x or x2).
fn store(i: u32, v: f32, src: u32) {
    if (src == FROM_X2) {
        x2[i] = v;
    } else {
        x[i] = v;
    }
}

// Group g of `src` (x or x2, `heads` groups per token) normed, then rotated in place.
fn norm_rope_group(g: u32, live: bool, heads: u32, lid: u32, src: u32) {
    let base = g * p.group;
    let inv = inv_rms(base, live, lid, src, 64u);
    if (!live) {
        return;
    }
    let t = g / heads;
    // Each thread reads the values it writes, so no barrier is needed between the two.
    for (var k = lid; k < p.half; k += 64u) {
        let ab = rope_pair(k, p.half, p.neox != 0u);
        let x0 = input(base + ab.x, src) * inv * weight(ab.x, src);
        let x1 = input(base + ab.y, src) * inv * weight(ab.y, src);
        let r = rotate(x0, x1, aux[2u * (t * p.half + k)], aux[2u * (t * p.half + k) + 1u]);
        store(base + ab.x, r.x, src);
        store(base + ab.y, r.y, src);
    }
    for (var i = 2u * p.half + lid; i < p.group; i += 64u) {
        store(base + i, input(base + i, src) * inv * weight(i, src), src);
    }
}
