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
// integer. The scales are therefore divided in integer arithmetic (`div_rn`), correctly rounded
// as the CPU's `/` is. Inputs are assumed finite; f32 subnormal activations may be flushed to
// zero by a device (Vulkan allows it), where the CPU keeps them.

struct QuantParams {
    n: u32,      // blocks
    scales: u32, // first word of the scales in q
    sums: u32,   // first word of the Q8_K group sums in q
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;        // [n_tokens, cols]
@group(0) @binding(1) var<storage, read_write> q: array<u32>;  // see above
@group(0) @binding(2) var<storage, read> p: QuantParams;

// 24-bit significand (hidden bit included) and unbiased exponent of a positive finite value,
// normalized so that the significand's top bit is bit 23 (also for subnormals).
fn unpack_pos(v: f32) -> vec2<i32> {
    let b = bitcast<u32>(v);
    let e = i32((b >> 23u) & 0xffu);
    if (e == 0) {
        let m = b & 0x7fffffu;
        let s = countLeadingZeros(m) - 8u;
        return vec2<i32>(i32(m << s), -126 - i32(s));
    }
    return vec2<i32>(i32((b & 0x7fffffu) | 0x800000u), e - 127);
}

// `a / b` rounded to nearest, ties to even, for positive finite a and b: long division of the
// 24-bit significands. Quotients below the normal range give 0 (the callers round them to an
// f16 or multiply by them: 0 either way) and above it +inf, as IEEE division overflows.
fn div_rn(a: f32, b: f32) -> f32 {
    let ua = unpack_pos(a);
    let ub = unpack_pos(b);
    var r = u32(ua.x);
    let mb = u32(ub.x);
    var e = ua.y - ub.y;
    if (r < mb) {
        r <<= 1u;
        e -= 1;
    }
    // Here 1 ≤ r / mb < 2: 24 quotient bits, the first one set.
    var qt = 0u;
    for (var i = 0u; i < 24u; i++) {
        qt <<= 1u;
        if (r >= mb) {
            r -= mb;
            qt |= 1u;
        }
        r <<= 1u;
    }
    // r is twice the remainder: above mb rounds up, equal to it is a tie.
    if (r > mb || (r == mb && (qt & 1u) == 1u)) {
        qt += 1u;
    }
    if (qt == 0x1000000u) {
        qt >>= 1u;
        e += 1;
    }
    if (e < -126) {
        return 0.0;
    }
    if (e > 127) {
        return bitcast<f32>(0x7f800000u);
    }
    return bitcast<f32>((u32(e + 127) << 23u) | (qt & 0x7fffffu));
}

// The low byte of an integer-valued f32 in -128..=127.
fn byte_of(v: f32) -> u32 {
    return u32(i32(v)) & 0xffu;
}

// Q8_0 (also the quants of Q8_1): d = amax / 127 stored as f16, q = round_half_even(v · id)
// with id = 127 / amax, as the CPU's `q8_0_ref`. One thread per block of 32.
@compute @workgroup_size(64)
fn quantize_q8_0(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = flat_thread(gid, nwg);
    if (b >= p.n) {
        return;
    }
    var amax = 0.0;
    for (var i = 0u; i < 32u; i++) {
        amax = max(amax, abs(x[32u * b + i]));
    }
    var id = 0.0;
    var d = 0.0;
    if (amax != 0.0) {
        id = div_rn(127.0, amax);
        d = f16_round(div_rn(amax, 127.0));
    }
    for (var k = 0u; k < 8u; k++) {
        var word = 0u;
        for (var j = 0u; j < 4u; j++) {
            word |= byte_of(round(x[32u * b + 4u * k + j] * id)) << (8u * j);
        }
        q[8u * b + k] = word;
    }
    q[p.scales + b] = bitcast<u32>(d);
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
    for (var i = 0u; i < 256u; i++) {
        let v = x[256u * b + i];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    // IEEE division rounds the magnitude, so -127 / mx is ±(127 / amax), and 1 / iscale too.
    var iscale = 0.0;
    var d = 0.0;
    if (amax != 0.0) {
        let mag = div_rn(127.0, amax);
        let inv = div_rn(1.0, mag);
        iscale = select(mag, -mag, mx > 0.0);
        d = select(inv, -inv, mx > 0.0);
    }
    for (var g = 0u; g < 16u; g++) {
        var sum = 0;
        for (var k = 0u; k < 4u; k++) {
            var word = 0u;
            for (var j = 0u; j < 4u; j++) {
                let v = min(127.0, round(iscale * x[256u * b + 16u * g + 4u * k + j]));
                sum += i32(v);
                word |= byte_of(v) << (8u * j);
            }
            q[64u * b + 4u * g + k] = word;
        }
        q[p.sums + 16u * b + g] = bitcast<u32>(sum);
    }
    q[p.scales + b] = bitcast<u32>(d);
}
