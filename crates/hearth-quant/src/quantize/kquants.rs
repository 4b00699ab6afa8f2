//! The k-quants with 16-element groups (Q2_K, Q3_K, Q6_K), quantized as llama.cpp's
//! `quantize_row_*_ref`: a scale search per group, the group scales quantized against one f16
//! super-block scale, then every element re-quantized with its group's final scale.

use half::f16;

use super::search::{make_q3_quants, make_qkx2_quants, make_qx_quants, nearest_int, Qkx2Search};
use crate::blocks::*;

/// Packs 256 quants of 2 bits: byte `32 * n + l` holds elements `128 * n + l + 32 * s` at
/// shift `2 * s`.
fn pack_2bit(l_all: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut qs = [0u8; QK_K / 4];
    for n in 0..2 {
        let j = 128 * n;
        for l in 0..32 {
            qs[32 * n + l] = l_all[j + l]
                | (l_all[j + l + 32] << 2)
                | (l_all[j + l + 64] << 4)
                | (l_all[j + l + 96] << 6);
        }
    }
    qs
}

/// The largest value of `v` above zero, or 0.
fn max_positive(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |m, &s| if s > m { s } else { m })
}

/// 2 bits per element, 4-bit scales and mins per group of 16.
pub(crate) fn q2_k(x: &[f32; QK_K]) -> BlockQ2_K {
    const SEARCH: Qkx2Search = Qkx2Search {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    let mut l_all = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
    for (j, (xg, lg)) in x
        .chunks_exact(16)
        .zip(l_all.chunks_exact_mut(16))
        .enumerate()
    {
        let weights: [f32; 16] = std::array::from_fn(|l| xg[l].abs());
        (scales[j], mins[j]) = make_qkx2_quants(3, xg, &weights, lg, SEARCH);
    }
    let (max_scale, max_min) = (max_positive(&scales), max_positive(&mins));
    let mut packed = [0u8; 16];
    let mut d = f16::ZERO;
    if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for (p, &s) in packed.iter_mut().zip(&scales) {
            *p = nearest_int(iscale * s) as u8;
        }
        d = f16::from_f32(max_scale / 15.0);
    }
    let mut dmin = f16::ZERO;
    if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for (p, &m) in packed.iter_mut().zip(&mins) {
            *p |= (nearest_int(iscale * m) << 4) as u8;
        }
        dmin = f16::from_f32(max_min / 15.0);
    }
    for (j, (xg, lg)) in x
        .chunks_exact(16)
        .zip(l_all.chunks_exact_mut(16))
        .enumerate()
    {
        let dl = d.to_f32() * (packed[j] & 0xF) as f32;
        if dl == 0.0 {
            continue;
        }
        let ml = dmin.to_f32() * (packed[j] >> 4) as f32;
        for (o, &v) in lg.iter_mut().zip(xg) {
            *o = nearest_int((v + ml) / dl).clamp(0, 3) as u8;
        }
    }
    BlockQ2_K {
        scales: packed,
        qs: pack_2bit(&l_all),
        d,
        dmin,
    }
}

/// Packs 16 signed 6-bit scales (already offset by +32) as Q3_K stores them.
fn pack_q3k_scales(ls: &[u8; 16]) -> [u8; 12] {
    let mut packed = [0u8; 12];
    for (j, &l) in ls.iter().enumerate() {
        if j < 8 {
            packed[j] = l & 0xF;
        } else {
            packed[j - 8] |= (l & 0xF) << 4;
        }
        packed[j % 4 + 8] |= (l >> 4) << (2 * (j / 4));
    }
    packed
}

/// 3 bits per element (2 in `qs`, the high one in `hmask`), signed 6-bit group scales.
pub(crate) fn q3_k(x: &[f32; QK_K]) -> BlockQ3_K {
    let mut l_all = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut amax) = (0f32, 0f32);
    for (j, (xg, lg)) in x
        .chunks_exact(16)
        .zip(l_all.chunks_exact_mut(16))
        .enumerate()
    {
        scales[j] = make_q3_quants(4, xg, lg);
        if scales[j].abs() > amax {
            amax = scales[j].abs();
            max_scale = scales[j];
        }
    }
    let mut packed = [0u8; 12];
    let mut d = f16::ZERO;
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        // NOTE: the reference stores nearest_int in an int8_t before clamping, so wrap first.
        let ls: [u8; 16] = std::array::from_fn(|j| {
            ((nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32) as u8
        });
        packed = pack_q3k_scales(&ls);
        d = f16::from_f32(1.0 / iscale);
    }
    let group_scales = q3k_scales(&packed);
    for (j, (xg, lg)) in x
        .chunks_exact(16)
        .zip(l_all.chunks_exact_mut(16))
        .enumerate()
    {
        let dl = d.to_f32() * group_scales[j] as f32;
        if dl == 0.0 {
            continue;
        }
        for (o, &v) in lg.iter_mut().zip(xg) {
            *o = (nearest_int(v / dl).clamp(-4, 3) + 4) as i8;
        }
    }
    // Element j's high bit goes to bit j / 32 of hmask[j % 32].
    let mut hmask = [0u8; QK_K / 8];
    let mut low = [0u8; QK_K];
    for (j, (&l, o)) in l_all.iter().zip(low.iter_mut()).enumerate() {
        let mut l = l;
        if l > 3 {
            hmask[j % 32] |= 1 << (j / 32);
            l -= 4;
        }
        *o = l as u8;
    }
    BlockQ3_K {
        hmask,
        qs: pack_2bit(&low),
        scales: packed,
        d,
    }
}

/// 6 bits per element (4 in `ql`, 2 in `qh`), signed 8-bit group scales.
pub(crate) fn q6_k(x: &[f32; QK_K]) -> BlockQ6_K {
    let mut l_all = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
    for (ib, (xg, lg)) in x
        .chunks_exact(16)
        .zip(l_all.chunks_exact_mut(16))
        .enumerate()
    {
        scales[ib] = make_qx_quants(32, xg, lg);
        if scales[ib].abs() > max_abs_scale {
            max_abs_scale = scales[ib].abs();
            max_scale = scales[ib];
        }
    }
    if max_abs_scale < 1e-15 {
        return bytemuck::Zeroable::zeroed();
    }
    let iscale = -128.0 / max_scale;
    let d = f16::from_f32(1.0 / iscale);
    let group_scales: [i8; 16] =
        std::array::from_fn(|ib| nearest_int(iscale * scales[ib]).min(127) as i8);
    for (j, (xg, lg)) in x
        .chunks_exact(16)
        .zip(l_all.chunks_exact_mut(16))
        .enumerate()
    {
        let dl = d.to_f32() * group_scales[j] as f32;
        if dl == 0.0 {
            continue;
        }
        for (o, &v) in lg.iter_mut().zip(xg) {
            *o = (nearest_int(v / dl).clamp(-32, 31) + 32) as i8;
        }
    }
    let l_all = l_all.map(|l| l as u8);
    let (mut ql, mut qh) = ([0u8; QK_K / 2], [0u8; QK_K / 4]);
    for n in 0..2 {
        let j = 128 * n;
        for l in 0..32 {
            let q = [0, 32, 64, 96].map(|o| l_all[j + l + o]);
            ql[64 * n + l] = (q[0] & 0xF) | ((q[2] & 0xF) << 4);
            ql[64 * n + l + 32] = (q[1] & 0xF) | ((q[3] & 0xF) << 4);
            qh[32 * n + l] =
                (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
        }
    }
    BlockQ6_K {
        ql,
        qh,
        scales: group_scales,
        d,
    }
}
