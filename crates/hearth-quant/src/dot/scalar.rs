//! Scalar reference dot products of one weight row with one activation row of its
//! `vec_dot_type`. Integer products are summed exactly per block, then scaled in f32, the way
//! ggml's generic kernels do; SIMD kernels are tested against these.

use half::{bf16, f16};

use crate::blocks::*;
use crate::dequant::{q5_values, q6k_value};

/// Q4_0 weights · Q8_0 activations.
pub fn dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in x.iter().zip(y) {
        let mut sumi = 0i32;
        for j in 0..QK / 2 {
            sumi += ((a.qs[j] & 0xF) as i32 - 8) * b.qs[j] as i32;
            sumi += ((a.qs[j] >> 4) as i32 - 8) * b.qs[j + QK / 2] as i32;
        }
        sum += sumi as f32 * a.d.to_f32() * b.d.to_f32();
    }
    sum
}

/// Q4_1 weights · Q8_1 activations: `d_x d_y sum(q_x q_y) + m_x s_y`.
pub fn dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in x.iter().zip(y) {
        let mut sumi = 0i32;
        for j in 0..QK / 2 {
            sumi += (a.qs[j] & 0xF) as i32 * b.qs[j] as i32;
            sumi += (a.qs[j] >> 4) as i32 * b.qs[j + QK / 2] as i32;
        }
        sum += (a.d.to_f32() * b.d.to_f32()) * sumi as f32 + a.m.to_f32() * b.s.to_f32();
    }
    sum
}

/// Q5_0 weights · Q8_0 activations.
pub fn dot_q5_0_q8_0(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in x.iter().zip(y) {
        let q = q5_values(a.qh, &a.qs);
        let sumi: i32 = q
            .iter()
            .zip(&b.qs)
            .map(|(&q, &v)| (q as i32 - 16) * v as i32)
            .sum();
        sum += sumi as f32 * a.d.to_f32() * b.d.to_f32();
    }
    sum
}

/// Q5_1 weights · Q8_1 activations.
pub fn dot_q5_1_q8_1(x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in x.iter().zip(y) {
        let q = q5_values(a.qh, &a.qs);
        let sumi: i32 = q
            .iter()
            .zip(&b.qs)
            .map(|(&q, &v)| q as i32 * v as i32)
            .sum();
        sum += (a.d.to_f32() * b.d.to_f32()) * sumi as f32 + a.m.to_f32() * b.s.to_f32();
    }
    sum
}

/// Q8_0 weights · Q8_0 activations.
pub fn dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in x.iter().zip(y) {
        let sumi: i32 =
            a.qs.iter()
                .zip(&b.qs)
                .map(|(&p, &q)| p as i32 * q as i32)
                .sum();
        sum += sumi as f32 * (a.d.to_f32() * b.d.to_f32());
    }
    sum
}

/// IQ4_NL weights · Q8_0 activations: the weight nibbles index [`KVALUES_IQ4NL`].
pub fn dot_iq4_nl_q8_0(x: &[BlockIQ4_NL], y: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in x.iter().zip(y) {
        let mut sumi = 0i32;
        for j in 0..QK / 2 {
            sumi += KVALUES_IQ4NL[(a.qs[j] & 0xF) as usize] as i32 * b.qs[j] as i32;
            sumi += KVALUES_IQ4NL[(a.qs[j] >> 4) as usize] as i32 * b.qs[j + QK / 2] as i32;
        }
        // NOTE: ggml scales by d_y * d_x, multiplied first, for this type.
        sum += (b.d.to_f32() * a.d.to_f32()) * sumi as f32;
    }
    sum
}

/// Sum over the 16 groups of 16 of `scale[g] * sum(q[i] * y[i])`, with `q` given per element.
fn k_groups16(q: impl Fn(usize) -> i32, scale: impl Fn(usize) -> i32, y: &BlockQ8_K) -> i32 {
    (0..QK_K / 16)
        .map(|g| {
            let s: i32 = (16 * g..16 * g + 16).map(|i| q(i) * y.qs[i] as i32).sum();
            scale(g) * s
        })
        .sum()
}

/// Q2_K weights · Q8_K activations.
pub fn dot_q2_k_q8_k(x: &[BlockQ2_K], y: &[BlockQ8_K]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in x.iter().zip(y) {
        // Element 128*n + 32*s + 16*h + l lives at shift 2*s of qs[32*n + 16*h + l].
        let q = |i: usize| {
            let (n, s, r) = (i / 128, (i % 128) / 32, i % 32);
            ((a.qs[32 * n + r] >> (2 * s)) & 3) as i32
        };
        let isum = k_groups16(q, |g| (a.scales[g] & 0xF) as i32, b);
        let msum: i32 = (0..16)
            .map(|g| (a.scales[g] >> 4) as i32 * b.bsums[g] as i32)
            .sum();
        sum += b.d * a.d.to_f32() * isum as f32 - b.d * a.dmin.to_f32() * msum as f32;
    }
    sum
}

/// Q3_K weights · Q8_K activations.
pub fn dot_q3_k_q8_k(x: &[BlockQ3_K], y: &[BlockQ8_K]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in x.iter().zip(y) {
        let scales = q3k_scales(&a.scales);
        let q = |i: usize| {
            let (n, s, r) = (i / 128, (i % 128) / 32, i % 32);
            let low = ((a.qs[32 * n + r] >> (2 * s)) & 3) as i32;
            let high_set = a.hmask[r] & (1 << (4 * n + s)) != 0;
            low - if high_set { 0 } else { 4 }
        };
        let isum = k_groups16(q, |g| scales[g] as i32, b);
        sum += b.d * a.d.to_f32() * isum as f32;
    }
    sum
}

/// Shared body of Q4_K / Q5_K: groups of 32 with 6-bit scales and mins.
fn k4_block(
    q: impl Fn(usize) -> i32,
    packed: &[u8; K_SCALE_SIZE],
    d: f16,
    dmin: f16,
    y: &BlockQ8_K,
) -> f32 {
    let sm = unpack_k4_scales(packed);
    let mut isum = 0i32;
    let mut msum = 0i32;
    for g in 0..QK_K / 32 {
        let s: i32 = (32 * g..32 * g + 32).map(|i| q(i) * y.qs[i] as i32).sum();
        isum += sm[g] as i32 * s;
        msum += sm[8 + g] as i32 * (y.bsums[2 * g] as i32 + y.bsums[2 * g + 1] as i32);
    }
    y.d * d.to_f32() * isum as f32 - y.d * dmin.to_f32() * msum as f32
}

/// Q4_K weights · Q8_K activations.
pub fn dot_q4_k_q8_k(x: &[BlockQ4_K], y: &[BlockQ8_K]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in x.iter().zip(y) {
        let q = |i: usize| ((a.qs[32 * (i / 64) + i % 32] >> (4 * ((i / 32) % 2))) & 0xF) as i32;
        sum += k4_block(q, &a.scales, a.d, a.dmin, b);
    }
    sum
}

/// Q5_K weights · Q8_K activations.
pub fn dot_q5_k_q8_k(x: &[BlockQ5_K], y: &[BlockQ8_K]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in x.iter().zip(y) {
        let q = |i: usize| {
            let low = (a.qs[32 * (i / 64) + i % 32] >> (4 * ((i / 32) % 2))) & 0xF;
            let high = (a.qh[i % 32] >> (i / 32)) & 1;
            (low | (high << 4)) as i32
        };
        sum += k4_block(q, &a.scales, a.d, a.dmin, b);
    }
    sum
}

/// Q6_K weights · Q8_K activations.
pub fn dot_q6_k_q8_k(x: &[BlockQ6_K], y: &[BlockQ8_K]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in x.iter().zip(y) {
        let q = |i: usize| q6k_value(a, i) as i32 - 32;
        let isum = k_groups16(q, |g| a.scales[g] as i32, b);
        sum += b.d * a.d.to_f32() * isum as f32;
    }
    sum
}

/// F32 · F32.
pub fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

/// F16 · F16, accumulated in f32.
pub fn dot_f16(x: &[f16], y: &[f16]) -> f32 {
    x.iter().zip(y).map(|(a, b)| a.to_f32() * b.to_f32()).sum()
}

/// BF16 · BF16, accumulated in f32.
pub fn dot_bf16(x: &[bf16], y: &[bf16]) -> f32 {
    x.iter().zip(y).map(|(a, b)| a.to_f32() * b.to_f32()).sum()
}
