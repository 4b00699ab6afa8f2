// Element reads from raw GGUF blocks stored as a `w: array<u32>` binding.
//
// Each `deq_*(b, j)` returns element `j` of the block that starts at byte `b`. The layouts are
// ggml's (hearth-quant's blocks.rs documents each); every f16 field sits at an even byte, so it
// never straddles two words.

fn byte_at(i: u32) -> u32 {
    return (w[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu;
}

fn sbyte_at(i: u32) -> i32 {
    return (i32(byte_at(i)) << 24u) >> 24u;
}

fn half_at(i: u32) -> f32 {
    return unpack2x16float((w[i >> 2u] >> ((i & 2u) * 8u)) & 0xffffu).x;
}

fn u32_at(i: u32) -> u32 {
    return byte_at(i) | (byte_at(i + 1u) << 8u) | (byte_at(i + 2u) << 16u) | (byte_at(i + 3u) << 24u);
}

fn deq_f32(b: u32, j: u32) -> f32 {
    return bitcast<f32>(w[b >> 2u]);
}

fn deq_f16(b: u32, j: u32) -> f32 {
    return half_at(b);
}

// Q8_0: f16 d, 32 × i8.
fn deq_q8_0(b: u32, j: u32) -> f32 {
    return half_at(b) * f32(sbyte_at(b + 2u + j));
}

// Q4_0: f16 d, 16 bytes; element j < 16 is the low nibble of byte j, j >= 16 the high one.
fn deq_q4_0(b: u32, j: u32) -> f32 {
    let q = (byte_at(b + 2u + (j & 15u)) >> ((j >> 4u) * 4u)) & 15u;
    return half_at(b) * (f32(q) - 8.0);
}

// Q4_1: f16 d, f16 m, nibbles as Q4_0.
fn deq_q4_1(b: u32, j: u32) -> f32 {
    let q = (byte_at(b + 4u + (j & 15u)) >> ((j >> 4u) * 4u)) & 15u;
    return keep(half_at(b) * f32(q)) + half_at(b + 2u);
}

// Q5_0: f16 d, u32 of high bits (bit j for element j), nibbles as Q4_0.
fn deq_q5_0(b: u32, j: u32) -> f32 {
    let low = (byte_at(b + 6u + (j & 15u)) >> ((j >> 4u) * 4u)) & 15u;
    let high = (u32_at(b + 2u) >> j) & 1u;
    return half_at(b) * (f32(low | (high << 4u)) - 16.0);
}

// The 6-bit scale and min of group g (0..8) of a Q4_K / Q5_K block whose scales start at s.
fn scale_min_k4(s: u32, g: u32) -> vec2<f32> {
    if (g < 4u) {
        return vec2<f32>(f32(byte_at(s + g) & 63u), f32(byte_at(s + g + 4u) & 63u));
    }
    let sc = (byte_at(s + g + 4u) & 15u) | ((byte_at(s + g - 4u) >> 6u) << 4u);
    let m = (byte_at(s + g + 4u) >> 4u) | ((byte_at(s + g) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

// Q4_K: f16 d, f16 dmin, 12 scale bytes, 128 nibble bytes; 8 groups of 32.
fn deq_q4_k(b: u32, j: u32) -> f32 {
    let g = j / 32u;
    let sm = scale_min_k4(b + 4u, g);
    let q = (byte_at(b + 16u + 32u * (g / 2u) + (j % 32u)) >> (4u * (g % 2u))) & 15u;
    return keep(half_at(b) * sm.x * f32(q)) - keep(half_at(b + 2u) * sm.y);
}

// Q5_K: Q4_K plus 32 bytes of high bits (bit g of byte l) before the nibbles.
fn deq_q5_k(b: u32, j: u32) -> f32 {
    let g = j / 32u;
    let l = j % 32u;
    let sm = scale_min_k4(b + 4u, g);
    let low = (byte_at(b + 48u + 32u * (g / 2u) + l) >> (4u * (g % 2u))) & 15u;
    let high = (byte_at(b + 16u + l) >> g) & 1u;
    return keep(half_at(b) * sm.x * f32(low | (high << 4u))) - keep(half_at(b + 2u) * sm.y);
}

// Q6_K: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 × i8 scales, f16 d.
fn deq_q6_k(b: u32, j: u32) -> f32 {
    let n = j / 128u;
    let s = (j % 128u) / 32u;
    let l = j % 32u;
    let ql = byte_at(b + 64u * n + 32u * (s % 2u) + l) >> (4u * (s / 2u));
    let qh = byte_at(b + 128u + 32u * n + l) >> (2u * s);
    let q = (ql & 15u) | ((qh & 3u) << 4u);
    return half_at(b + 208u) * f32(sbyte_at(b + 192u + j / 16u)) * (f32(q) - 32.0);
}
