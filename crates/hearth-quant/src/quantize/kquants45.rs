//! Q4_K and Q5_K, quantized as llama.cpp's `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref`:
//! an affine fit per group of 32 (weighted by `rms + |x|`), 6-bit scales and mins against two
//! f16 super-block scales, then every element re-quantized with its group's final values.

use half::f16;

use super::search::{make_qkx2_quants, nearest_int, Qkx2Search};
use crate::blocks::*;

/// The fitted group scales and mins of one super-block, packed, with the final quants.
struct AffineFit {
    d: f16,
    dmin: f16,
    scales: [u8; K_SCALE_SIZE],
    quants: [u8; QK_K],
}

/// Packs 8 six-bit scales and mins: groups 0..4 in bytes 0..8 directly, groups 4..8 split
/// into low nibbles (bytes 8..12) and 2 high bits on top of bytes 0..8.
fn pack_k4_scales(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; K_SCALE_SIZE] {
    let mut q = [0u8; K_SCALE_SIZE];
    for j in 0..8 {
        if j < 4 {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            q[j - 4] |= (ls[j] >> 4) << 6;
            q[j] |= (lm[j] >> 4) << 6;
        }
    }
    q
}

/// Fits one super-block with quants in `0..=nmax`.
fn fit_affine(x: &[f32; QK_K], nmax: i32, search: Qkx2Search) -> AffineFit {
    let mut quants = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for (j, (xg, lg)) in x
        .chunks_exact(32)
        .zip(quants.chunks_exact_mut(32))
        .enumerate()
    {
        let mut sum_x2 = 0f32;
        for &v in xg {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|l| av_x + xg[l].abs());
        (scales[j], mins[j]) = make_qkx2_quants(nmax, xg, &weights, lg, search);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // NOTE: the reference stores nearest_int in a uint8_t before clamping, so wrap first.
    let ls: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_scale * scales[j]) as u8).min(63));
    let lm: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_min * mins[j]) as u8).min(63));
    let packed = pack_k4_scales(&ls, &lm);
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    for (j, (xg, lg)) in x
        .chunks_exact(32)
        .zip(quants.chunks_exact_mut(32))
        .enumerate()
    {
        let (sc, m) = scale_min_k4(j, &packed);
        let dl = d.to_f32() * sc as f32;
        if dl == 0.0 {
            continue;
        }
        let ml = dmin.to_f32() * m as f32;
        for (o, &v) in lg.iter_mut().zip(xg) {
            *o = nearest_int((v + ml) / dl).clamp(0, nmax) as u8;
        }
    }
    AffineFit {
        d,
        dmin,
        scales: packed,
        quants,
    }
}

/// Low nibbles: byte `32 * p + l` holds element `64 * p + l` (low) and `64 * p + l + 32` (high).
fn pack_nibbles(q: &[u8; QK_K]) -> [u8; QK_K / 2] {
    let mut qs = [0u8; QK_K / 2];
    for p in 0..4 {
        for l in 0..32 {
            qs[32 * p + l] = (q[64 * p + l] & 0xF) | ((q[64 * p + l + 32] & 0xF) << 4);
        }
    }
    qs
}

/// 4 bits per element, 6-bit scales and mins per group of 32.
pub(crate) fn q4_k(x: &[f32; QK_K]) -> BlockQ4_K {
    const SEARCH: Qkx2Search = Qkx2Search {
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    let fit = fit_affine(x, 15, SEARCH);
    BlockQ4_K {
        d: fit.d,
        dmin: fit.dmin,
        scales: fit.scales,
        qs: pack_nibbles(&fit.quants),
    }
}

/// 5 bits per element: Q4_K's nibbles plus bit 4 of element `64 * p + l` (and `+ 32`) at bit
/// `2 * p` (and `2 * p + 1`) of `qh[l]`.
pub(crate) fn q5_k(x: &[f32; QK_K]) -> BlockQ5_K {
    const SEARCH: Qkx2Search = Qkx2Search {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    let fit = fit_affine(x, 31, SEARCH);
    let mut qh = [0u8; QK_K / 8];
    for p in 0..4 {
        for (l, h) in qh.iter_mut().enumerate() {
            *h |= (fit.quants[64 * p + l] >> 4) << (2 * p);
            *h |= (fit.quants[64 * p + l + 32] >> 4) << (2 * p + 1);
        }
    }
    BlockQ5_K {
        d: fit.d,
        dmin: fit.dmin,
        scales: fit.scales,
        qh,
        qs: pack_nibbles(&fit.quants),
    }
}
