// Activation quantization for the 8-bit matmuls (matmul_int8.wgsl): f32 rows in, 8-bit blocks
// out, with the bytes hearth-quant's CPU quantizers produce (quantize_act.rs), so that the
// integer dot products see the same integers as the CPU backend.
//
// ```text
//  q: [ quants: n_tokens * cols / 4 words, 4 × i8 each, in element order ]
//     [ scales: one f32 per block, at p.scales ]          (Q8_0: the f16 d, as f32)
//     [ sums:   16 × i32 per Q8_K block, at p.sums ]      (Q8_K only: sums of 16 quants)
// ```
// Blocks of one row are consecutive and rows are whole blocks, so block b of the flat array is
// block b % (cols / size) of token b / (cols / size), and its quants start at word b * size / 4.
//
// NOTE: WGSL's `/` is only accurate to 2.5 ulp (GPUs multiply by an approximate reciprocal),
// and one ulp in `127 / amax` moves a value that sits near a rounding tie to the other
// integer. The scales are therefore divided correctly rounded, as the CPU's `/` is: Q8_0 with
// exact.wgsl's `div_rn` (or the long division for tiny maxima, see `q8_0_divisions`), Q8_K in
// integer arithmetic (`div_long_rn`). Inputs are assumed finite; f32 subnormal activations may
// be flushed to zero by a device (Vulkan allows it), where the CPU keeps them.

// The division and the Q8_0 block quantizer are in quantize_common.wgsl (norm.wgsl uses them
// too).

struct QuantParams {
    n: u32,      // blocks
    scales: u32, // first word of the scales in q
    sums: u32,   // first word of the Q8_K group sums in q
    zero: u32, // 0, for `keep`
}

@group(0) @binding(0) var<storage, read> x: array<f32>;        // [n_tokens, cols]
@group(0) @binding(1) var<storage, read_write> q: array<u32>;  // see above
@group(0) @binding(2) var<storage, read> p: QuantParams;

// x[at .. at + 8], loaded together: one wait for memory instead of eight where each value
// would be used as soon as it is loaded (GPU compilers keep the order of a loop's loads).
fn x8(at: u32) -> array<f32, 8> {
    return array<f32, 8>(x[at], x[at + 1u], x[at + 2u], x[at + 3u], x[at + 4u], x[at + 5u],
                         x[at + 6u], x[at + 7u]);
}

// Q8_0 (also the quants of Q8_1): see `quantize_part_q8_0`. 8 blocks of 32 per workgroup.
@compute @workgroup_size(64)
fn quantize_q8_0(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let b = flat_group(wg, nwg) * 8u + lid / 8u;
    let at = 32u * b + 4u * (lid % 8u);
    let live = b < p.n;
    var v = vec4<f32>(0.0);
    if (live) {
        v = vec4<f32>(x[at], x[at + 1u], x[at + 2u], x[at + 3u]);
    }
    let qd = quantize_part_q8_0(v, lid);
    if (live) {
        q[at / 4u] = qd.x;
        if (lid % 8u == 0u) {
            q[p.scales + b] = qd.y;
        }
    }
}

// Q8_K: blocks of 256 scaled by the signed value of largest magnitude (the first on ties):
// iscale = -127 / max, q = min(127, round_half_even(iscale · v)), d = 1 / iscale (an f32),
// plus the sum of each 16 quants, as the CPU's `q8_k_ref`. One thread per block.
@compute @workgroup_size(64)
fn quantize_q8_k(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = flat_thread(gid, nwg);
    if (b >= p.n) {
        return;
    }
    var amax = 0.0;
    var mx = 0.0;
    // Eight loads in flight at a time (see `x8`), scanned in order.
    for (var i0 = 0u; i0 < 256u; i0 += 8u) {
        var v8 = x8(256u * b + i0);
        for (var i = 0u; i < 8u; i++) {
            if (abs(v8[i]) > amax) {
                amax = abs(v8[i]);
                mx = v8[i];
            }
        }
    }
    // IEEE division rounds the magnitude, so -127 / mx is ±(127 / amax), and 1 / iscale too.
    var iscale = 0.0;
    var d = 0.0;
    if (amax != 0.0) {
        let mag = div_long_rn(127.0, amax);
        let inv = div_long_rn(1.0, mag);
        iscale = select(mag, -mag, mx > 0.0);
        d = select(inv, -inv, mx > 0.0);
    }
    for (var g = 0u; g < 16u; g++) {
        var sum = 0;
        var v16 = array<array<f32, 8>, 2>(x8(256u * b + 16u * g), x8(256u * b + 16u * g + 8u));
        for (var k = 0u; k < 4u; k++) {
            var word = 0u;
            for (var j = 0u; j < 4u; j++) {
                let v = min(127.0, round(iscale * v16[k / 2u][4u * (k % 2u) + j]));
                sum += i32(v);
                word |= byte_of(v) << (8u * j);
            }
            q[64u * b + 4u * g + k] = word;
        }
        q[p.sums + 16u * b + g] = bitcast<u32>(sum);
    }
    q[p.scales + b] = bitcast<u32>(d);
}
