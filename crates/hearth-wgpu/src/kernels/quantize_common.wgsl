// Activation quantization shared by quantize.wgsl, norm.wgsl, attention.wgsl and
// int8_input_normed.wgsl (see quantize.wgsl for the layout and for why the divisions must be
// correctly rounded). The including module provides exact.wgsl's `div_rn`.

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
fn div_long_rn(a: f32, b: f32) -> f32 {
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

// 127 / amax and amax / 127 for amax > 0, each correctly rounded.
//
// NOTE: exact.wgsl's `div_rn` (the device's division corrected with fma: a few operations)
// where its range holds, which is every maximum from 2^-100 on; the long division (a 24-step
// loop, ~2 µs of a decode kernel's critical path through NVIDIA's Vulkan) below that. Both
// round correctly, so the quants do not depend on which one ran.
fn q8_0_divisions(amax: f32) -> vec2<f32> {
    if (amax >= 7.888609e-31) { // 2^-100
        return vec2<f32>(div_rn(127.0, amax), div_rn(amax, 127.0));
    }
    return vec2<f32>(div_long_rn(127.0, amax), div_long_rn(amax, 127.0));
}

// The low byte of an integer-valued f32 in -128..=127.
fn byte_of(v: f32) -> u32 {
    return u32(i32(v)) & 0xffu;
}

// Q8_0 blocks (also the quants of Q8_1) spread over 8 consecutive threads of a workgroup (of
// up to 256 threads), 4 values each: d = amax / 127 stored as f16, q = round_half_even(v · id) with
// id = 127 / amax, as the CPU's `q8_0_ref`. Returns the thread's word of 4 quants and the
// block's scale (the f16 as f32 bits). Every thread of the workgroup must call it (barriers);
// threads without values pass zeros.
//
// NOTE: 8 threads per block rather than one: a thread that loads, scans and quantizes a whole
// block waits on memory and on the divisions alone, and one dispatch of 32 such blocks took
// 17-21 µs on an H100 through Vulkan.
var<workgroup> part_max: array<f32, 256>;

fn quantize_part_q8_0(v: vec4<f32>, lid: u32) -> vec2<u32> {
    part_max[lid] = max(max(abs(v.x), abs(v.y)), max(abs(v.z), abs(v.w)));
    workgroupBarrier();
    let first = lid & ~7u;
    var amax = 0.0;
    for (var i = 0u; i < 8u; i++) {
        amax = max(amax, part_max[first + i]);
    }
    // part_max is written again by the next call.
    workgroupBarrier();
    var id = 0.0;
    var d = 0.0;
    if (amax != 0.0) {
        let q = q8_0_divisions(amax);
        id = q.x;
        d = f16_round(q.y);
    }
    let word = byte_of(round(v.x * id)) | (byte_of(round(v.y * id)) << 8u)
        | (byte_of(round(v.z * id)) << 16u) | (byte_of(round(v.w * id)) << 24u);
    return vec2<u32>(word, bitcast<u32>(d));
}
