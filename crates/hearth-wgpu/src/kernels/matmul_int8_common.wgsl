// The 8-bit matmuls: `W[r] · x[t]` for a weight of raw blocks and activations quantized to 8
// bits by quantize.wgsl, with integer dot products (`dot4I8Packed`: four i8 products summed
// into an i32) and the f32 steps of the CPU backend's x86 kernels (hearth-quant's dot/x86.rs,
// the order llama.cpp's x86 kernels use), so the result has the CPU's bits, not just its value.
//
// The CPU keeps 8 lanes per (row, token), lane l holding words l of each 32-byte chunk, and
// two lane vectors, for even and odd blocks:
//
// ```text
//  block k:   lane integer  L_l = Σ (scale ·) dot4(weight word l, activation word l)   exact
//             acc[k % 2]_l = fma(d_w · d_x, f32(L_l), acc[k % 2]_l)
//  result:    v_l = acc0_l + acc1_l;  s_i = v_i + v_(i+4);  (s_0 + s_2) + (s_1 + s_3)
// ```
// (Q4_K and Q5_K also keep 8 lanes of their mins, over every block, and subtract their sum
// the same way.) Here 16 threads run the 16 chains of one (row, token) job, JOBS jobs per
// workgroup (`job_chains`), and the first thread of each job adds the lanes up in that order
// (`job_sum`). The entry points (matmul_int8.wgsl, matmul_int8_qkv.wgsl, matmul_int8_glu.wgsl)
// say which row and token each job is and where its sum goes; each declares `w` and a
// parameter struct `p` with `cols`, `row_bytes`, `x_scales`, `x_sums` and `zero` (and `eps`
// where the activations are normed in the kernel). The activations come from one of two input
// files: int8_input_quantized.wgsl (quantized already, in quantize.wgsl's layout) or
// int8_input_normed.wgsl (f32 rows that each workgroup norms and quantizes itself, for the
// q/k/v and gate/up entries); both give word i of the layout as `act(i)` and the token a job
// reads as `act_token(t)`.
// QLANE(b, l, t, k) gives `(d_w · d_x, f32(L_l))` for the weight block at byte b; QMINS the
// mins chain.
//
// NOTE: `dot4I8Packed` is core WGSL (the packed_4x8_integer_dot_product language extension).
// naga emits SPIR-V's OpSDot where the device has VK_KHR_shader_integer_dot_product (Vulkan
// 1.3), and otherwise unpacks the bytes itself; on Metal it is a `char4` dot product. No
// subgroup operations: the fixed order of the final sum is the point, and it runs everywhere.
//
// NOTE: the multiply-adds are `fma_rn` (fma.wgsl), exact in integer arithmetic, not WGSL's
// `fma`, which a driver may split into a rounded product and a rounded sum (lavapipe does):
// one bit there moves the small golden models past their bounds.

// (row, token) outputs per workgroup, 16 threads each: 4 where the activations are quantized
// already, 16 where each workgroup norms and quantizes them itself (see
// int8_input_normed.wgsl); set per module (kernels.rs).
const JOBS: u32 = JOB_COUNTu;
var<workgroup> chains: array<f32, CHAIN_SLOTS>; // [JOBS, 2 (block parity), 8 lanes]
var<workgroup> mins: array<f32, MIN_SLOTS>;     // [JOBS, 8 lanes]

// The 4 bytes of w from byte i on (i even: blocks of 18, 22, 34 or 210 bytes start at any even
// byte, so their fields may straddle two words).
fn word_at2(i: u32) -> u32 {
    let k = i >> 2u;
    if ((i & 2u) == 0u) {
        return w[k];
    }
    return (w[k] >> 16u) | (w[k + 1u] << 16u);
}

// Each byte b of v (b ≤ 127) as the i8 b - c (c ≤ b + 128): borrows never cross bytes since
// every byte of v | 0x80.. is at least 0x80.
fn sub_bytes(v: u32, c: u32) -> u32 {
    return ((v | 0x80808080u) - c * 0x01010101u) ^ 0x80808080u;
}

// Word index of token t's quants from element e of its row on.
fn act_q(t: u32, e: u32) -> u32 {
    return (t * p.cols + e) / 4u;
}

// The scale of token t's activation block k (blocks of `size` elements).
fn act_scale(t: u32, k: u32, size: u32) -> f32 {
    return bitcast<f32>(act(p.x_scales + t * (p.cols / size) + k));
}

// Q8_0: f16 d, 32 × i8.
fn lane_q8_0(b: u32, l: u32, t: u32, k: u32) -> vec2<f32> {
    let li = dot4I8Packed(word_at2(b + 2u + 4u * l), act(act_q(t, 32u * k) + l));
    return vec2<f32>(half_at(b) * act_scale(t, k, 32u), f32(li));
}

// Q4_0: f16 d, 16 bytes; element j < 16 is the low nibble of byte j, j >= 16 the high one,
// each standing for nibble - 8. Lane l < 4 takes low nibbles, l >= 4 high ones.
fn lane_q4_0(b: u32, l: u32, t: u32, k: u32) -> vec2<f32> {
    let v = word_at2(b + 2u + 4u * (l % 4u));
    let q = sub_bytes((v >> (4u * (l / 4u))) & 0x0f0f0f0fu, 8u);
    let li = dot4I8Packed(q, act(act_q(t, 32u * k) + l));
    return vec2<f32>(half_at(b) * act_scale(t, k, 32u), f32(li));
}

// Q5_0: f16 d, 4 bytes of high bits, 16 nibble bytes laid out as Q4_0's; bit e of the high
// bits is bit 4 of element e, and each quant stands for q - 16. Lane l holds elements
// 4l .. 4l + 3, so it takes high bits 4l .. 4l + 3, one per byte.
fn lane_q5_0(b: u32, l: u32, t: u32, k: u32) -> vec2<f32> {
    let v = word_at2(b + 6u + 4u * (l % 4u));
    let hb = (word_at2(b + 2u) >> (4u * l)) & 0xfu;
    let spread = (hb & 1u) | ((hb & 2u) << 7u) | ((hb & 4u) << 14u) | ((hb & 8u) << 21u);
    let q = sub_bytes(((v >> (4u * (l / 4u))) & 0x0f0f0f0fu) | (spread << 4u), 16u);
    let li = dot4I8Packed(q, act(act_q(t, 32u * k) + l));
    return vec2<f32>(half_at(b) * act_scale(t, k, 32u), f32(li));
}

// Q4_K: f16 d, f16 dmin, 12 scale bytes, 128 nibble bytes (chunk j of 32 bytes: low nibbles
// are group 2j, high ones group 2j + 1, each with a 6-bit scale and min). Q8_K activations.
fn lane_q4_k(b: u32, l: u32, t: u32, k: u32) -> vec2<f32> {
    let xq = act_q(t, 256u * k) + l;
    var li = 0;
    for (var j = 0u; j < 4u; j++) {
        let q = w[(b + 16u + 32u * j) / 4u + l];
        let s0 = i32(scale_min_k4(b + 4u, 2u * j).x);
        let s1 = i32(scale_min_k4(b + 4u, 2u * j + 1u).x);
        li += s0 * dot4I8Packed(q & 0x0f0f0f0fu, act(xq + 16u * j));
        li += s1 * dot4I8Packed((q >> 4u) & 0x0f0f0f0fu, act(xq + 16u * j + 8u));
    }
    return vec2<f32>(act_scale(t, k, 256u) * half_at(b), f32(li));
}

// The Q4_K / Q5_K mins of lane g over the whole row at byte rb of w (both keep d, dmin and the 12 scale
// bytes at the start of a block): fma(d_x · dmin, m_g · (sum of group g's activation quants),
// acc) block after block.
fn mins_k4(rb: u32, g: u32, t: u32) -> f32 {
    let nb = p.cols / 256u;
    var acc = 0.0;
    var k = 0u;
    // Four blocks' loads in flight at a time (see `matmul`), added in block order.
    for (; k + 4u <= nb; k += 4u) {
        let m0 = min_term_k4(rb, g, t, k, nb);
        let m1 = min_term_k4(rb, g, t, k + 1u, nb);
        let m2 = min_term_k4(rb, g, t, k + 2u, nb);
        let m3 = min_term_k4(rb, g, t, k + 3u, nb);
        acc = fma_rn(m0.x, m0.y, acc);
        acc = fma_rn(m1.x, m1.y, acc);
        acc = fma_rn(m2.x, m2.y, acc);
        acc = fma_rn(m3.x, m3.y, acc);
    }
    for (; k < nb; k++) {
        let m = min_term_k4(rb, g, t, k, nb);
        acc = fma_rn(m.x, m.y, acc);
    }
    return acc;
}

// Block k's (d_x · dmin, f32(m_g · group sum)) for `mins_k4`.
fn min_term_k4(rb: u32, g: u32, t: u32, k: u32, nb: u32) -> vec2<f32> {
    let b = rb + QBLOCK_BYTES * k;
    let s = p.x_sums + 16u * (t * nb + k) + 2u * g;
    let gsum = bitcast<i32>(act(s)) + bitcast<i32>(act(s + 1u));
    let li = i32(scale_min_k4(b + 4u, g).y) * gsum;
    return vec2<f32>(act_scale(t, k, 256u) * half_at(b + 2u), f32(li));
}

fn no_mins(rb: u32, g: u32, t: u32) -> f32 {
    return 0.0;
}

// Q5_K: Q4_K's fields with 32 bytes of high bits after the scales (b + 16), then the 128
// nibble bytes (b + 48). Element i of chunk j takes bit 2j (low nibbles) or 2j + 1 (high
// ones) of high-bit byte i as its bit 4, so the quants are 0..31: dotted as i8 they are
// exact, and the CPU's `vpmaddubsw` pairs (at most 2 · 31 · 128) never saturate.
fn lane_q5_k(b: u32, l: u32, t: u32, k: u32) -> vec2<f32> {
    let xq = act_q(t, 256u * k) + l;
    let qh = w[(b + 16u) / 4u + l];
    var li = 0;
    for (var j = 0u; j < 4u; j++) {
        let q = w[(b + 48u + 32u * j) / 4u + l];
        let h0 = ((qh >> (2u * j)) & 0x01010101u) << 4u;
        let h1 = ((qh >> (2u * j + 1u)) & 0x01010101u) << 4u;
        let s0 = i32(scale_min_k4(b + 4u, 2u * j).x);
        let s1 = i32(scale_min_k4(b + 4u, 2u * j + 1u).x);
        li += s0 * dot4I8Packed((q & 0x0f0f0f0fu) | h0, act(xq + 16u * j));
        li += s1 * dot4I8Packed(((q >> 4u) & 0x0f0f0f0fu) | h1, act(xq + 16u * j + 8u));
    }
    return vec2<f32>(act_scale(t, k, 256u) * half_at(b), f32(li));
}

// Q6_K: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 × i8 scales (groups of 16),
// f16 d. Chunk (h, s) of 32 elements is nibble s / 2 of bytes 64h + 32(s % 2) .. and bits 2s
// of bytes 128 + 32h ..; its quants q' = q + 32 are dotted unsigned, and 32 · Σ sc · (group
// sums) is taken off per lane as the CPU does (lane l: groups 2l and 2l + 1).
fn lane_q6_k(b: u32, l: u32, t: u32, k: u32) -> vec2<f32> {
    let xq = act_q(t, 256u * k) + l;
    var li = 0;
    for (var h = 0u; h < 2u; h++) {
        for (var s = 0u; s < 4u; s++) {
            let lo = (word_at2(b + 64u * h + 32u * (s % 2u) + 4u * l) >> (4u * (s / 2u))) & 0x0f0f0f0fu;
            let hi = (word_at2(b + 128u + 32u * h + 4u * l) >> (2u * s)) & 0x03030303u;
            let g = 8u * h + 2u * s + l / 4u;
            li += sbyte_at(b + 192u + g) * dot4I8Packed(lo | (hi << 4u), act(xq + 32u * h + 8u * s));
        }
    }
    let sums = p.x_sums + 16u * (t * (p.cols / 256u) + k) + 2u * l;
    let offs = bitcast<i32>(act(sums)) * sbyte_at(b + 192u + 2u * l)
        + bitcast<i32>(act(sums + 1u)) * sbyte_at(b + 193u + 2u * l);
    return vec2<f32>(act_scale(t, k, 256u) * half_at(b + 208u), f32(li - 32 * offs));
}

// The horizontal sum of 8 lanes in the x86 kernels' order (their `hsum_ps`).
fn hsum8(v: array<f32, 8>) -> f32 {
    let s0 = v[0] + v[4];
    let s1 = v[1] + v[5];
    let s2 = v[2] + v[6];
    let s3 = v[3] + v[7];
    return (s0 + s2) + (s1 + s3);
}

// Thread lid's chain of job lid / 16: the row at byte rb of w, token t, into `chains` and
// `mins` (zeros where the job is not `live`). Every thread calls it, then `workgroupBarrier`,
// then the job's first thread takes `job_sum`.
fn job_chains(live: bool, rb: u32, t: u32, lid: u32) {
    let parity = (lid / 8u) % 2u;
    let l = lid % 8u;
    var acc = 0.0;
    var m = 0.0;
    if (live) {
        // NOTE: sixteen (then eight, four, one) blocks of the chain per iteration, read before
        // any is added, so that a thread has many blocks' loads in flight instead of one (a
        // decode GEMV has too few threads to hide memory latency otherwise: with four, a
        // 1024-row Q8_0 matmul took 22 µs on an H100 through Vulkan, with eight 16 µs); the
        // adds keep the chain's order. The sixteen-block loop is left out where fma is
        // emulated (between WIDE_BEGIN and WIDE_END, see `int8_source` in kernels.rs).
        let nb = p.cols / QBLOCK;
        var k = parity;
        // WIDE_BEGIN
        for (; k + 30u < nb; k += 32u) {
            let e0 = QLANE(rb + k * QBLOCK_BYTES, l, t, k);
            let e1 = QLANE(rb + (k + 2u) * QBLOCK_BYTES, l, t, k + 2u);
            let e2 = QLANE(rb + (k + 4u) * QBLOCK_BYTES, l, t, k + 4u);
            let e3 = QLANE(rb + (k + 6u) * QBLOCK_BYTES, l, t, k + 6u);
            let e4 = QLANE(rb + (k + 8u) * QBLOCK_BYTES, l, t, k + 8u);
            let e5 = QLANE(rb + (k + 10u) * QBLOCK_BYTES, l, t, k + 10u);
            let e6 = QLANE(rb + (k + 12u) * QBLOCK_BYTES, l, t, k + 12u);
            let e7 = QLANE(rb + (k + 14u) * QBLOCK_BYTES, l, t, k + 14u);
            let e8 = QLANE(rb + (k + 16u) * QBLOCK_BYTES, l, t, k + 16u);
            let e9 = QLANE(rb + (k + 18u) * QBLOCK_BYTES, l, t, k + 18u);
            let e10 = QLANE(rb + (k + 20u) * QBLOCK_BYTES, l, t, k + 20u);
            let e11 = QLANE(rb + (k + 22u) * QBLOCK_BYTES, l, t, k + 22u);
            let e12 = QLANE(rb + (k + 24u) * QBLOCK_BYTES, l, t, k + 24u);
            let e13 = QLANE(rb + (k + 26u) * QBLOCK_BYTES, l, t, k + 26u);
            let e14 = QLANE(rb + (k + 28u) * QBLOCK_BYTES, l, t, k + 28u);
            let e15 = QLANE(rb + (k + 30u) * QBLOCK_BYTES, l, t, k + 30u);
            acc = fma_rn(e0.x, e0.y, acc);
            acc = fma_rn(e1.x, e1.y, acc);
            acc = fma_rn(e2.x, e2.y, acc);
            acc = fma_rn(e3.x, e3.y, acc);
            acc = fma_rn(e4.x, e4.y, acc);
            acc = fma_rn(e5.x, e5.y, acc);
            acc = fma_rn(e6.x, e6.y, acc);
            acc = fma_rn(e7.x, e7.y, acc);
            acc = fma_rn(e8.x, e8.y, acc);
            acc = fma_rn(e9.x, e9.y, acc);
            acc = fma_rn(e10.x, e10.y, acc);
            acc = fma_rn(e11.x, e11.y, acc);
            acc = fma_rn(e12.x, e12.y, acc);
            acc = fma_rn(e13.x, e13.y, acc);
            acc = fma_rn(e14.x, e14.y, acc);
            acc = fma_rn(e15.x, e15.y, acc);
        }
        // WIDE_END
        for (; k + 14u < nb; k += 16u) {
            let d0 = QLANE(rb + k * QBLOCK_BYTES, l, t, k);
            let d1 = QLANE(rb + (k + 2u) * QBLOCK_BYTES, l, t, k + 2u);
            let d2 = QLANE(rb + (k + 4u) * QBLOCK_BYTES, l, t, k + 4u);
            let d3 = QLANE(rb + (k + 6u) * QBLOCK_BYTES, l, t, k + 6u);
            let d4 = QLANE(rb + (k + 8u) * QBLOCK_BYTES, l, t, k + 8u);
            let d5 = QLANE(rb + (k + 10u) * QBLOCK_BYTES, l, t, k + 10u);
            let d6 = QLANE(rb + (k + 12u) * QBLOCK_BYTES, l, t, k + 12u);
            let d7 = QLANE(rb + (k + 14u) * QBLOCK_BYTES, l, t, k + 14u);
            acc = fma_rn(d0.x, d0.y, acc);
            acc = fma_rn(d1.x, d1.y, acc);
            acc = fma_rn(d2.x, d2.y, acc);
            acc = fma_rn(d3.x, d3.y, acc);
            acc = fma_rn(d4.x, d4.y, acc);
            acc = fma_rn(d5.x, d5.y, acc);
            acc = fma_rn(d6.x, d6.y, acc);
            acc = fma_rn(d7.x, d7.y, acc);
        }
        if (k + 6u < nb) {
            let d0 = QLANE(rb + k * QBLOCK_BYTES, l, t, k);
            let d1 = QLANE(rb + (k + 2u) * QBLOCK_BYTES, l, t, k + 2u);
            let d2 = QLANE(rb + (k + 4u) * QBLOCK_BYTES, l, t, k + 4u);
            let d3 = QLANE(rb + (k + 6u) * QBLOCK_BYTES, l, t, k + 6u);
            acc = fma_rn(d0.x, d0.y, acc);
            acc = fma_rn(d1.x, d1.y, acc);
            acc = fma_rn(d2.x, d2.y, acc);
            acc = fma_rn(d3.x, d3.y, acc);
            k += 8u;
        }
        for (; k < nb; k += 2u) {
            let dl = QLANE(rb + k * QBLOCK_BYTES, l, t, k);
            acc = fma_rn(dl.x, dl.y, acc);
        }
        if (parity == 0u) {
            m = QMINS(rb, l, t);
        }
    }
    chains[lid] = acc;
    if (parity == 0u) {
        mins[(lid / 16u) * 8u + l] = m;
    }
}

// Job lid / 16's dot product from its chains, in the x86 kernels' order.
fn job_sum(lid: u32) -> f32 {
    let j0 = lid / 16u * 16u;
    var v: array<f32, 8>;
    var mv: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        v[i] = chains[j0 + i] + chains[j0 + 8u + i];
        mv[i] = mins[j0 / 2u + i];
    }
    return hsum8(v) - hsum8(mv);
}
