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

// `v` rounded to the nearest f16 (as the CPU reference rounds queries and softmax weights).
fn f16_round(v: f32) -> f32 {
    return unpack2x16float(pack2x16float(vec2<f32>(v, 0.0))).x;
}
