//! The 32-element "legacy" types: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, quantized as llama.cpp's
//! `quantize_row_*_ref` do (the functions it uses to write model files without an importance
//! matrix), with the same float operations in the same order.

use half::f16;

use crate::blocks::*;

/// The first value of largest magnitude in `x`, with its sign.
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// The smallest and largest value of `x`, starting from `(f32::MAX, -f32::MAX)` as ggml does.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// Packs 32 quants of at most 5 bits: low nibbles of element `j` and `j + 16` share byte `j`,
/// bit 4 of element `j` goes to bit `j` of the little-endian `qh` word.
fn pack_q5(q: &[u8; QK]) -> ([u8; 4], [u8; QK / 2]) {
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let (a, b) = (q[j], q[j + QK / 2]);
        qs[j] = (a & 0x0F) | ((b & 0x0F) << 4);
        qh |= (((a & 0x10) >> 4) as u32) << j;
        qh |= (((b & 0x10) >> 4) as u32) << (j + QK / 2);
    }
    (qh.to_le_bytes(), qs)
}

/// `x = d * (q - 8)` with `d = max / -8`, where `max` is the signed value of largest magnitude.
pub(crate) fn q4_0(x: &[f32; QK]) -> BlockQ4_0 {
    let d = signed_absmax(x) / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0u8; QK / 2];
    for (j, q) in qs.iter_mut().enumerate() {
        // NOTE: C's `(int8_t)(v + 8.5f)` truncates toward zero; `as i8` does too in range.
        let lo = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let hi = ((x[j + QK / 2] * id + 8.5) as i8).min(15) as u8;
        *q = lo | (hi << 4);
    }
    BlockQ4_0 {
        d: f16::from_f32(d),
        qs,
    }
}

/// `x = d * q + m` with 16 levels between the block's min and max.
pub(crate) fn q4_1(x: &[f32; QK]) -> BlockQ4_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0u8; QK / 2];
    for (j, q) in qs.iter_mut().enumerate() {
        let lo = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
        let hi = (((x[j + QK / 2] - min) * id + 0.5) as i8).min(15) as u8;
        *q = lo | (hi << 4);
    }
    BlockQ4_1 {
        d: f16::from_f32(d),
        m: f16::from_f32(min),
        qs,
    }
}

/// `x = d * (q - 16)` with `d = max / -16`.
pub(crate) fn q5_0(x: &[f32; QK]) -> BlockQ5_0 {
    let d = signed_absmax(x) / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q: [u8; QK] = std::array::from_fn(|j| ((x[j] * id + 16.5) as i8).min(31) as u8);
    let (qh, qs) = pack_q5(&q);
    BlockQ5_0 {
        d: f16::from_f32(d),
        qh,
        qs,
    }
}

/// `x = d * q + m` with 32 levels between the block's min and max.
pub(crate) fn q5_1(x: &[f32; QK]) -> BlockQ5_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    // NOTE: no clamp here, as in the reference: the largest value lands on 31 + 0.5 at most.
    let q: [u8; QK] = std::array::from_fn(|j| ((x[j] - min) * id + 0.5) as u8);
    let (qh, qs) = pack_q5(&q);
    BlockQ5_1 {
        d: f16::from_f32(d),
        m: f16::from_f32(min),
        qh,
        qs,
    }
}

/// `x = d * q` with `d = amax / 127`, rounding half away from zero (`roundf`).
///
/// NOTE: this is the model-file quantizer (`x * (1 / d)`, `roundf`), not the activation one in
/// `quantize_act.rs` (`x * (127 / amax)`, half to even), which follows llama.cpp's x86 kernels.
pub(crate) fn q8_0(x: &[f32; QK]) -> BlockQ8_0 {
    let amax = x
        .iter()
        .fold(0f32, |m, v| if m > v.abs() { m } else { v.abs() });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    BlockQ8_0 {
        d: f16::from_f32(d),
        qs: std::array::from_fn(|j| (x[j] * id).round() as i8),
    }
}
