// Shared by every kernel: grid arithmetic and f16 rounding.
//
// NOTE: grids are 2-D because a dimension holds at most 65,535 workgroups; a kernel's flat index
// is `y * (groups in x) + x`, and the host sizes the grid so that x * y covers the work.

// Flat thread index of a 64-wide workgroup in a 2-D grid.
fn flat_thread(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.y * nwg.x * 64u + gid.x;
}

// Flat workgroup index in a 2-D grid.
fn flat_group(wg: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wg.y * nwg.x + wg.x;
}

// `v` rounded to the nearest f16, ties to even (as the CPU reference rounds).
//
// NOTE: not `pack2x16float`: its rounding mode is left to the implementation (lavapipe
// truncates), and one f16 step in a scale or a cached key moves these small models' logits by
// tenths. Normal range: round the f32 mantissa to 10 bits; subnormal f16: to multiples of 2^-24.
fn f16_round(v: f32) -> f32 {
    if (abs(v) < 6.1035156e-5) {
        return round(v * 16777216.0) / 16777216.0;
    }
    let b = bitcast<u32>(v);
    return bitcast<f32>((b + 0xfffu + ((b >> 13u) & 1u)) & 0xffffe000u);
}

// Two values rounded to f16 (ties to even) and packed into one word.
fn pack_f16(a: f32, b: f32) -> u32 {
    return pack2x16float(vec2<f32>(f16_round(a), f16_round(b)));
}
