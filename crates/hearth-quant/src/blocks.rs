//! `#[repr(C)]` block layouts of the GGML quantized types, byte for byte as in GGUF files.
//!
//! Every struct derives `Pod`, so a byte slice of whole blocks can be viewed as a block slice
//! with [`view_blocks`]. Blocks holding `f16` fields need 2-byte alignment (Q8_K: 4 bytes); GGUF
//! tensor data starts 32-byte aligned and every block size here is even, so views of tensor rows
//! are aligned in practice, and [`view_blocks`] copies into an aligned buffer when they are not.

use std::borrow::Cow;
use std::mem::size_of;

use bytemuck::{Pod, Zeroable};
use half::f16;

/// Elements per block of the "legacy" types (Q4_0 .. Q8_1).
pub const QK: usize = 32;
/// Elements per super-block of the k-quants (Q2_K .. Q8_K).
pub const QK_K: usize = 256;
/// Bytes of packed 6-bit scales and mins in Q4_K / Q5_K.
pub const K_SCALE_SIZE: usize = 12;

/// 4-bit symmetric: `x = d * (q - 8)`. Low nibbles hold elements 0..16, high nibbles 16..32.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}

/// 4-bit affine: `x = d * q + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}

/// 5-bit symmetric: `x = d * (q - 16)`; bit 4 of element `j` is bit `j` of the little-endian `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// 5-bit affine: `x = d * q + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// 8-bit symmetric: `x = d * q`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}

/// 8-bit symmetric with `s = d * sum(qs)`, the activation type paired with Q4_1 / Q5_1.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_1 {
    pub d: f16,
    pub s: f16,
    pub qs: [i8; QK],
}

/// 2-bit k-quant: 16 groups of 16, each with a 4-bit scale (low nibble) and 4-bit min (high).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ2_K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}

/// 3-bit k-quant: 2 low bits in `qs`, the high bit in `hmask` (set means no -4 offset),
/// 16 signed 6-bit scales packed in 12 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ3_K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: f16,
}

/// 4-bit k-quant: 8 groups of 32 with 6-bit scales and mins: `x = d*sc*q - dmin*m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qs: [u8; QK_K / 2],
}

/// 5-bit k-quant: Q4_K plus one high bit per element in `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// 6-bit k-quant: low 4 bits in `ql`, high 2 bits in `qh`, 16 signed 8-bit scales:
/// `x = d * sc * (q - 32)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ6_K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}

/// The 16 levels of IQ4_NL (ggml's `kvalues_iq4nl`), a non-linear grid denser near zero.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// 4-bit non-linear: `x = d * KVALUES_IQ4NL[q]`. Low nibbles hold elements 0..16, high
/// nibbles 16..32, as in Q4_0. Its activation type is Q8_0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIQ4_NL {
    pub d: f16,
    pub qs: [u8; QK / 2],
}

/// 8-bit k-quant activations: f32 scale and the sums of each group of 16 quants.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

const _: () = assert!(size_of::<BlockQ4_0>() == 18);
const _: () = assert!(size_of::<BlockQ4_1>() == 20);
const _: () = assert!(size_of::<BlockQ5_0>() == 22);
const _: () = assert!(size_of::<BlockQ5_1>() == 24);
const _: () = assert!(size_of::<BlockQ8_0>() == 34);
const _: () = assert!(size_of::<BlockQ8_1>() == 36);
const _: () = assert!(size_of::<BlockQ2_K>() == 84);
const _: () = assert!(size_of::<BlockQ3_K>() == 110);
const _: () = assert!(size_of::<BlockQ4_K>() == 144);
const _: () = assert!(size_of::<BlockQ5_K>() == 176);
const _: () = assert!(size_of::<BlockQ6_K>() == 210);
const _: () = assert!(size_of::<BlockQ8_K>() == 292);
const _: () = assert!(size_of::<BlockIQ4_NL>() == 18);

/// Views `bytes` (a whole number of blocks) as a block slice, borrowing when the bytes are
/// aligned for `B` and copying otherwise. Returns `None` when the length is not a multiple of
/// the block size.
pub fn view_blocks<B: Pod>(bytes: &[u8]) -> Option<Cow<'_, [B]>> {
    if !bytes.len().is_multiple_of(size_of::<B>()) {
        return None;
    }
    match bytemuck::try_cast_slice::<u8, B>(bytes) {
        Ok(blocks) => Some(Cow::Borrowed(blocks)),
        Err(_) => Some(Cow::Owned(
            bytes
                .chunks_exact(size_of::<B>())
                .map(bytemuck::pod_read_unaligned)
                .collect(),
        )),
    }
}

/// Unpacks the 6-bit scale and min of group `j` (0..8) of a Q4_K / Q5_K block.
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Unpacks the 16 signed 6-bit scales of a Q3_K block, with the +32 storage offset removed.
///
/// Scale `j` has its low 4 bits in nibble `j / 8` of byte `j % 8` and its high 2 bits at bit
/// `2 * (j / 4)` of byte `8 + j % 4`; the word form below handles 4 scales per operation.
#[inline]
pub fn q3k_scales(packed: &[u8; 12]) -> [i8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let w = |i: usize| {
        u32::from_le_bytes([
            packed[4 * i],
            packed[4 * i + 1],
            packed[4 * i + 2],
            packed[4 * i + 3],
        ])
    };
    let (a0, a1, hi) = (w(0), w(1), w(2));
    let words = [
        (a0 & KMASK2) | ((hi & KMASK1) << 4),
        (a1 & KMASK2) | (((hi >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((hi >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((hi >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i8; 16];
    for (o, word) in out.chunks_exact_mut(4).zip(words) {
        for (o, b) in o.iter_mut().zip(word.to_le_bytes()) {
            *o = b as i8 - 32;
        }
    }
    out
}

/// Unpacks all 8 scales (bytes 0..8) and 8 mins (bytes 8..16) of a Q4_K / Q5_K block at once,
/// the word-parallel form of [`scale_min_k4`].
#[inline]
pub fn unpack_k4_scales(q: &[u8; K_SCALE_SIZE]) -> [u8; 16] {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let w = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (u0, u1, u2) = (w(0), w(1), w(2));
    let scales_lo = u0 & KMASK1;
    let scales_hi = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let mins_lo = u1 & KMASK1;
    let mins_hi = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    let mut out = [0u8; 16];
    out[0..4].copy_from_slice(&scales_lo.to_le_bytes());
    out[4..8].copy_from_slice(&scales_hi.to_le_bytes());
    out[8..12].copy_from_slice(&mins_lo.to_le_bytes());
    out[12..16].copy_from_slice(&mins_hi.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k4_scales_word_form_matches_per_group_form() {
        let mut q = [0u8; K_SCALE_SIZE];
        for seed in 0..200u32 {
            for (i, b) in q.iter_mut().enumerate() {
                *b = (seed.wrapping_mul(2654435761).rotate_left(i as u32 * 3) >> 7) as u8
                    ^ (i as u8).wrapping_mul(37);
            }
            let all = unpack_k4_scales(&q);
            for j in 0..8 {
                assert_eq!(scale_min_k4(j, &q), (all[j], all[8 + j]));
            }
        }
    }

    #[test]
    fn unaligned_views_copy() {
        let mut bytes = [0u8; 1 + 2 * 18];
        bytes[1] = 0x00;
        bytes[2] = 0x3c; // 1.0 as f16
        bytes[3] = 0x21;
        let view = view_blocks::<BlockQ4_0>(&bytes[1..]).unwrap();
        assert_eq!(view.len(), 2);
        assert_eq!(view[0].d.to_f32(), 1.0);
        assert_eq!(view[0].qs[0], 0x21);
        assert!(view_blocks::<BlockQ4_0>(&bytes[1..20]).is_none());
    }

    #[test]
    fn q3k_scales_match_the_bit_layout() {
        // Scale j: low nibble from byte j%8 (low half for j<8), 2 high bits from byte 8+j%4
        // at bit 2*(j/4).
        let mut packed = [0u8; 12];
        packed[0] = 0x5A; // j=0 low 0xA, j=8 low 0x5
        packed[8] = 0b1110_0100; // j=0 hi 0, j=4 hi 1, j=8 hi 2, j=12 hi 3
        let s = q3k_scales(&packed);
        assert_eq!(s[0], 0xA - 32);
        assert_eq!(s[8], (0x5 | (2 << 4)) - 32);
        assert_eq!(s[4], (1 << 4) - 32);
        assert_eq!(s[12], (3 << 4) - 32);
    }
}
