//! IQ4_NL: 4-bit indices into a fixed non-linear table of 16 levels, one f16 scale per 32
//! elements. llama.cpp uses it as the fallback for Q2_K / Q3_K rows that are not a whole
//! number of 256-element blocks; this is its `quantize_iq4_nl` without importance weights.

use half::f16;

use crate::blocks::KVALUES_IQ4NL as LEVELS;

/// Scale searches on each side of the starting scale.
const N_TRY: i32 = 7;

/// Bytes of one block: the f16 scale, then 16 bytes of index pairs.
pub(crate) const BLOCK_BYTES: usize = std::mem::size_of::<crate::blocks::BlockIQ4_NL>();

/// The index of the level nearest `x` (`best_index_int8`; ties go to the upper level).
fn best_index(x: f32) -> usize {
    let val = |i: usize| LEVELS[i] as f32;
    if x <= val(0) {
        return 0;
    }
    if x >= val(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0, 15);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - val(mu - 1) < val(mu) - x {
        mu - 1
    } else {
        mu
    }
}

/// `sum(w * q * x)` and `sum(w * q * q)` for the levels nearest `id * x`, weights `x^2`.
fn fit(x: &[f32; 32], id: f32) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for &v in x {
        let q = LEVELS[best_index(id * v)] as f32;
        let w = v * v;
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The least-squares scale of the best of 15 candidate scales, or 0 for an all-zero block.
fn block_scale(x: &[f32; 32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    // GROUP_MAX_EPS: an all-zero block.
    if amax < 1e-15 {
        return 0.0;
    }
    let d = -max / LEVELS[0] as f32;
    let (sumqx, sumq2) = fit(x, 1.0 / d);
    let mut d = sumqx / sumq2;
    let mut best = d * sumqx;
    for itry in -N_TRY..=N_TRY {
        let id = (itry + LEVELS[0] as i32) as f32 / max;
        let (sumqx, sumq2) = fit(x, id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// One IQ4_NL block: the scale, then element `j` in the low and `j + 16` in the high nibble.
pub(crate) fn iq4_nl(x: &[f32; 32]) -> [u8; BLOCK_BYTES] {
    let d = block_scale(x);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut out = [0u8; BLOCK_BYTES];
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for j in 0..16 {
        let (lo, hi) = (best_index(id * x[j]), best_index(id * x[j + 16]));
        out[2 + j] = lo as u8 | ((hi as u8) << 4);
    }
    out
}
