//! The scale searches behind the k-quants, as in ggml's `make_qx_quants`, `make_q3_quants` and
//! `make_qkx2_quants`: each picks a group scale (and min) by trying a few candidate scales and
//! keeping the one with the smallest weighted error. The float operations follow ggml's order
//! exactly, so the chosen scales and quants are bit-identical to llama.cpp's.

/// Groups whose largest magnitude is below this are all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// Rounds to the nearest integer, ties to even, as ggml's `nearest_int` (the 1.5 * 2^23 trick;
/// valid for |v| < 2^22, which every caller guarantees).
#[inline]
pub(crate) fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

/// The first value of largest magnitude, with its sign, and that magnitude.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// Symmetric quants in `-nmax..nmax` (stored with `+nmax`) weighted by `x^2`, searching 18
/// scales around `nmax / max` (`make_qx_quants` with `rmse_type = 1` and no importance
/// weights). Returns the scale.
pub(crate) fn make_qx_quants(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let l = quant(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (o, &v) in l_out.iter_mut().zip(x) {
        *o = (quant(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in l_out.iter_mut().zip(x) {
                *o = (quant(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Symmetric 3-bit quants in `-nmax..nmax` (stored with `+nmax`), refined by up to 5 passes of
/// coordinate descent on the `x^2`-weighted error (`make_q3_quants` with `do_rmse`). Returns
/// the scale. An all-zero group leaves every quant at 0 (not `nmax`), as the reference does.
pub(crate) fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (o, &v) in l_out.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *o = l as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (o, &v) in l_out.iter_mut().zip(x) {
            let w = v * v;
            let old = *o as f32;
            let mut slx = sumlx - w * v * old;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * old * old;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *o as i32 {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *o = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for o in l_out.iter_mut() {
        *o += nmax as i8;
    }
    sumlx / suml2
}

/// The candidate scales [`make_qkx2_quants`] tries: `(rmin + rdelta * is + nmax) / range` for
/// `is` in `0..=nstep`, and whether errors are absolute (true) or squared.
#[derive(Clone, Copy)]
pub(crate) struct Qkx2Search {
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    pub use_mad: bool,
}

/// Affine quants in `0..=nmax` with `x ≈ scale * q - min` (`min >= 0`), choosing the scale
/// and min by weighted least squares over a range of candidate scales (`make_qkx2_quants`).
/// Returns `(scale, min)`.
pub(crate) fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    search: Qkx2Search,
) -> (f32, f32) {
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for (&v, &w) in x.iter().zip(weights).skip(1) {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.fill(0);
        return (0.0, -min);
    }
    let error = |scale: f32, min: f32, l: u8, v: f32| {
        let diff = scale * l as f32 + min - v;
        if search.use_mad {
            diff.abs()
        } else {
            diff * diff
        }
    };
    let quant =
        |iscale: f32, min: f32, v: f32| nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
    let iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for ((o, &v), &w) in l_out.iter_mut().zip(x).zip(weights) {
        *o = quant(iscale, min, v);
        best_error += w * error(scale, min, *o, v);
    }
    if search.nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    let laux = &mut laux[..x.len()];
    for is in 0..=search.nstep {
        // NOTE: `min` is the best candidate's so far, as in the reference, so later candidates
        // are measured from an updated origin.
        let iscale = (search.rmin + search.rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for ((o, &v), &w) in laux.iter_mut().zip(x).zip(weights) {
            *o = quant(iscale, min, v);
            let l = *o as f32;
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        // NOTE: `det > 0` is false for NaN too, which must skip the candidate.
        if det.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            continue;
        }
        let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if this_min > 0.0 {
            this_min = 0.0;
            this_scale = sum_xl / sum_l2;
        }
        let mut cur_error = 0f32;
        for ((&l, &v), &w) in laux.iter().zip(x).zip(weights) {
            cur_error += w * error(this_scale, this_min, l, v);
        }
        if cur_error < best_error {
            l_out.copy_from_slice(laux);
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    (scale, -min)
}
