//! Scalar reference dequantization: one row of blocks to f32, following ggml's formulas and
//! float operation order exactly (so results are bit-identical to llama.cpp and gguf-py).

use half::{bf16, f16};

use crate::blocks::*;
use crate::error::{check_len, row_bytes};
use crate::{GgmlType, QuantError};

/// Dequantizes the bytes of `dst.len()` elements of type `ty` into `dst`.
///
/// Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, Q8_K and IQ4_NL; other
/// types and lengths that do not match are errors naming the type.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let expected = row_bytes(ty, dst.len())?;
    check_len(ty, "source bytes", expected, src.len())?;
    match ty {
        GgmlType::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        GgmlType::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = bf16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        GgmlType::Q4_0 => each_block(src, dst, dequant_q4_0),
        GgmlType::Q4_1 => each_block(src, dst, dequant_q4_1),
        GgmlType::Q5_0 => each_block(src, dst, dequant_q5_0),
        GgmlType::Q5_1 => each_block(src, dst, dequant_q5_1),
        GgmlType::Q8_0 => each_block(src, dst, dequant_q8_0),
        GgmlType::Q2_K => each_block(src, dst, dequant_q2_k),
        GgmlType::Q3_K => each_block(src, dst, dequant_q3_k),
        GgmlType::Q4_K => each_block(src, dst, dequant_q4_k),
        GgmlType::Q5_K => each_block(src, dst, dequant_q5_k),
        GgmlType::Q6_K => each_block(src, dst, dequant_q6_k),
        GgmlType::Q8_K => each_block(src, dst, dequant_q8_k),
        GgmlType::IQ4_NL => each_block(src, dst, dequant_iq4_nl),
        _ => {
            return Err(QuantError::Unsupported {
                ty,
                op: "dequantize",
            })
        }
    }
    Ok(())
}

/// True when [`dequantize_row`] handles `ty`.
pub fn supports_dequantize(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | Q8_K
            | IQ4_NL
    )
}

/// Runs `f` over each block of `src` and its slice of `dst` (lengths already checked).
fn each_block<B: bytemuck::Pod, const N: usize>(
    src: &[u8],
    dst: &mut [f32],
    f: fn(&B, &mut [f32; N]),
) {
    // NOTE: the caller checked that src holds exactly dst.len() / N blocks.
    let blocks = view_blocks::<B>(src).expect("length checked by the caller");
    for (b, out) in blocks.iter().zip(dst.chunks_exact_mut(N)) {
        f(b, out.try_into().expect("chunks_exact yields N elements"));
    }
}

fn dequant_q4_0(b: &BlockQ4_0, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    for j in 0..QK / 2 {
        y[j] = d * ((b.qs[j] & 0xF) as i32 - 8) as f32;
        y[j + QK / 2] = d * ((b.qs[j] >> 4) as i32 - 8) as f32;
    }
}

fn dequant_q4_1(b: &BlockQ4_1, y: &mut [f32; QK]) {
    let (d, m) = (b.d.to_f32(), b.m.to_f32());
    for j in 0..QK / 2 {
        y[j] = d * (b.qs[j] & 0xF) as f32 + m;
        y[j + QK / 2] = d * (b.qs[j] >> 4) as f32 + m;
    }
}

/// The 5-bit quants (0..32) of a Q5_0 / Q5_1 block, in element order.
#[inline]
pub(crate) fn q5_values(qh: [u8; 4], qs: &[u8; QK / 2]) -> [u8; QK] {
    let qh = u32::from_le_bytes(qh);
    let mut q = [0u8; QK];
    for j in 0..QK / 2 {
        q[j] = (qs[j] & 0xF) | ((((qh >> j) & 1) as u8) << 4);
        q[j + QK / 2] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
    q
}

fn dequant_q5_0(b: &BlockQ5_0, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    for (o, q) in y.iter_mut().zip(q5_values(b.qh, &b.qs)) {
        *o = d * (q as i32 - 16) as f32;
    }
}

fn dequant_q5_1(b: &BlockQ5_1, y: &mut [f32; QK]) {
    let (d, m) = (b.d.to_f32(), b.m.to_f32());
    for (o, q) in y.iter_mut().zip(q5_values(b.qh, &b.qs)) {
        *o = d * q as f32 + m;
    }
}

fn dequant_q8_0(b: &BlockQ8_0, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    for (o, &q) in y.iter_mut().zip(&b.qs) {
        *o = q as f32 * d;
    }
}

fn dequant_q2_k(b: &BlockQ2_K, y: &mut [f32; QK_K]) {
    let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
    // Element 128*n + 32*s + 16*h + l: 2 bits at shift 2*s of qs[32*n + 16*h + l], group
    // 8*n + 2*s + h.
    for n in 0..2 {
        for s in 0..4 {
            for h in 0..2 {
                let sc = b.scales[8 * n + 2 * s + h];
                let dl = d * (sc & 0xF) as f32;
                let ml = dmin * (sc >> 4) as f32;
                for l in 0..16 {
                    let q = (b.qs[32 * n + 16 * h + l] >> (2 * s)) & 3;
                    y[128 * n + 32 * s + 16 * h + l] = dl * q as f32 - ml;
                }
            }
        }
    }
}

fn dequant_q3_k(b: &BlockQ3_K, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    let scales = q3k_scales(&b.scales);
    // Element 128*n + 32*s + 16*h + l: low bits as in Q2_K, high bit `4*n + s` of
    // hmask[16*h + l]; group 8*n + 2*s + h.
    for n in 0..2 {
        for s in 0..4 {
            for h in 0..2 {
                let dl = d * scales[8 * n + 2 * s + h] as f32;
                for l in 0..16 {
                    let low = ((b.qs[32 * n + 16 * h + l] >> (2 * s)) & 3) as i32;
                    let high_set = b.hmask[16 * h + l] & (1 << (4 * n + s)) != 0;
                    let q = low - if high_set { 0 } else { 4 };
                    y[128 * n + 32 * s + 16 * h + l] = dl * q as f32;
                }
            }
        }
    }
}

fn dequant_q4_k(b: &BlockQ4_K, y: &mut [f32; QK_K]) {
    let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
    for g in 0..QK_K / 32 {
        let (sc, m) = scale_min_k4(g, &b.scales);
        let (dl, ml) = (d * sc as f32, dmin * m as f32);
        let shift = 4 * (g % 2);
        for l in 0..32 {
            let q = (b.qs[32 * (g / 2) + l] >> shift) & 0xF;
            y[32 * g + l] = dl * q as f32 - ml;
        }
    }
}

fn dequant_q5_k(b: &BlockQ5_K, y: &mut [f32; QK_K]) {
    let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
    for g in 0..QK_K / 32 {
        let (sc, m) = scale_min_k4(g, &b.scales);
        let (dl, ml) = (d * sc as f32, dmin * m as f32);
        let shift = 4 * (g % 2);
        for l in 0..32 {
            let low = (b.qs[32 * (g / 2) + l] >> shift) & 0xF;
            let high = (b.qh[l] >> g) & 1;
            y[32 * g + l] = dl * (low | (high << 4)) as f32 - ml;
        }
    }
}

/// The 6-bit quant (0..64) of element `i` of a Q6_K block.
#[inline]
pub(crate) fn q6k_value(b: &BlockQ6_K, i: usize) -> u8 {
    // Element 128*n + 32*s + l: low nibble of ql[64*n + 32*(s%2) + l] (high nibble for s >= 2),
    // high 2 bits at shift 2*s of qh[32*n + l].
    let (n, s, l) = (i / 128, (i % 128) / 32, i % 32);
    let ql = b.ql[64 * n + 32 * (s % 2) + l] >> (4 * (s / 2));
    let qh = b.qh[32 * n + l] >> (2 * s);
    (ql & 0xF) | ((qh & 3) << 4)
}

fn dequant_q6_k(b: &BlockQ6_K, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for (i, o) in y.iter_mut().enumerate() {
        let sc = b.scales[i / 16] as f32;
        *o = d * sc * (q6k_value(b, i) as i32 - 32) as f32;
    }
}

fn dequant_q8_k(b: &BlockQ8_K, y: &mut [f32; QK_K]) {
    for (o, &q) in y.iter_mut().zip(&b.qs) {
        *o = b.d * q as f32;
    }
}

fn dequant_iq4_nl(b: &BlockIQ4_NL, y: &mut [f32; QK]) {
    let d = b.d.to_f32();
    for j in 0..QK / 2 {
        y[j] = d * KVALUES_IQ4NL[(b.qs[j] & 0xF) as usize] as f32;
        y[j + QK / 2] = d * KVALUES_IQ4NL[(b.qs[j] >> 4) as usize] as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_unsupported_types_and_bad_lengths() {
        let mut out = [0f32; 32];
        let err = dequantize_row(GgmlType::IQ2_XXS, &[], &mut out).unwrap_err();
        assert!(err.to_string().contains("IQ2_XXS"), "{err}");
        let err = dequantize_row(GgmlType::Q4_0, &[0; 17], &mut out).unwrap_err();
        assert!(err.to_string().contains("Q4_0"), "{err}");
        let err = dequantize_row(GgmlType::Q4_K, &[0; 144], &mut out).unwrap_err();
        assert!(err.to_string().contains("Q4_K"), "{err}");
    }

    #[test]
    fn q4_0_known_values() {
        let mut src = vec![0x00, 0x40]; // d = 2.0
        src.extend([0x9F; 16]); // low nibble 15 -> 14, high nibble 9 -> 2
        let mut out = [0f32; 32];
        dequantize_row(GgmlType::Q4_0, &src, &mut out).unwrap();
        assert_eq!(out[0], 14.0);
        assert_eq!(out[31], 2.0);
    }
}
