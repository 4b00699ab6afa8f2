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
        return round(v * 16777216.0) * 5.9604645e-8; // × 2^-24: exact, where `/` need not be
    }
    let b = bitcast<u32>(v);
    return bitcast<f32>((b + 0xfffu + ((b >> 13u) & 1u)) & 0xffffe000u);
}

// Two values rounded to f16 (ties to even) and packed into one word.
fn pack_f16(a: f32, b: f32) -> u32 {
    return pack2x16float(vec2<f32>(f16_round(a), f16_round(b)));
}

// `v`, opaque to the shader compiler: `keep(a * b) + c` is a rounded product, then a rounded
// sum, on every device.
//
// NOTE: naga's SPIR-V carries no NoContraction, and Vulkan and Metal compilers may fuse
// `a * b + c` into one multiply-add (NVIDIA's does): one rounding fewer, so other bits than
// the CPU's, which rounds twice. ORing in `p.zero` (a parameter word the host sets to 0; every
// kernel's parameter struct has one) is a no-op the compiler cannot prove, so the product must
// be rounded on its own. A constant or a `var<private>` zero would be folded away. Costs one
// integer OR (and one uniform load per kernel); used only where a product meets an add.
fn keep(v: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) | p.zero);
}

// Rope's pair j of a head: offsets (2j, 2j + 1), or (j, j + half) for NeoX.
fn rope_pair(j: u32, half: u32, neox: bool) -> vec2<u32> {
    if (neox) {
        return vec2<u32>(j, j + half);
    }
    return vec2<u32>(2u * j, 2u * j + 1u);
}

// (x0, x1) rotated by the angle of cosine c and sine s, each product rounded on its own as the
// CPU rounds it (see `keep`). Every kernel that rotates calls this, so they share their bits.
fn rotate(x0: f32, x1: f32, c: f32, s: f32) -> vec2<f32> {
    return vec2<f32>(keep(x0 * c) - keep(x1 * s), keep(x0 * s) + keep(x1 * c));
}
