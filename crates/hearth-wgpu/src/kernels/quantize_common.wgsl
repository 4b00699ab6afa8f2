// Activation quantization shared by quantize.wgsl and norm.wgsl (see quantize.wgsl for the
// layout and for why the division is done in integer arithmetic). The including file declares
// `x: array<f32>` (the values) and `q: array<u32>` (the blocks, read_write).

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

// x[at .. at + 8], loaded together: one wait for memory instead of eight where each value
// would be used as soon as it is loaded (GPU compilers keep the order of a loop's loads).
fn x8(at: u32) -> array<f32, 8> {
    return array<f32, 8>(x[at], x[at + 1u], x[at + 2u], x[at + 3u], x[at + 4u], x[at + 5u],
                         x[at + 6u], x[at + 7u]);
}

// The low byte of an integer-valued f32 in -128..=127.
fn byte_of(v: f32) -> u32 {
    return u32(i32(v)) & 0xffu;
}

// Q8_0 block b of x (also the quants of Q8_1): d = amax / 127 stored as f16,
// q = round_half_even(v · id) with id = 127 / amax, as the CPU's `q8_0_ref`; its quants at word
// 8b of q, its scale (as f32) at word `scales + b`.
//
// NOTE: the 32 values are loaded into registers first, eight per statement. In a loop that
// uses each load at once, a GPU waits out the memory latency once per value: 32 waits made
// this one dispatch 17 µs on an H100 (Vulkan), a fifth of that with the loads in flight together.
fn quantize_block_q8_0(b: u32, scales: u32) {
    var v: array<f32, 32>;
    for (var i = 0u; i < 32u; i += 8u) {
        let a = x8(32u * b + i);
        for (var j = 0u; j < 8u; j++) {
            v[i + j] = a[j];
        }
    }
    var amax = 0.0;
    for (var i = 0u; i < 32u; i++) {
        amax = max(amax, abs(v[i]));
    }
    var id = 0.0;
    var d = 0.0;
    if (amax != 0.0) {
        id = div_long_rn(127.0, amax);
        d = f16_round(div_long_rn(amax, 127.0));
    }
    for (var k = 0u; k < 8u; k++) {
        var word = 0u;
        for (var j = 0u; j < 4u; j++) {
            word |= byte_of(round(v[4u * k + j] * id)) << (8u * j);
        }
        q[8u * b + k] = word;
    }
    q[scales + b] = bitcast<u32>(d);
}
