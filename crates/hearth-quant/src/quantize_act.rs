//! Reference quantization of f32 activation rows to Q8_0, Q8_1 and Q8_K, rounding exactly as
//! llama.cpp does on x86-64: Q8_0 / Q8_1 as its AVX `quantize_row_q8_0` / `q8_1`
//! (`x * (127 / amax)`, round half to even), Q8_K as `quantize_row_q8_K_ref` (round half to even).
//!
//! On AVX-512 CPUs the public functions run the vectorized quantizers of `quantize_simd.rs`,
//! which produce the same bytes; the scalar code here is their reference.
//!
//! NOTE: the portable `quantize_row_q8_0_ref` uses `x * (1 / d)` and `roundf` instead. The two
//! differ only on ties and one-ulp scale differences, but matching the x86 path keeps our
//! activations bit-identical to the llama.cpp runs the golden tests compare against.

use half::f16;

use crate::blocks::*;
use crate::{GgmlType, QuantError};

fn check_blocks(ty: GgmlType, x: &[f32], n_blocks: usize, bs: usize) -> Result<(), QuantError> {
    if !x.len().is_multiple_of(bs) {
        return Err(QuantError::NotBlockMultiple {
            ty,
            n_elements: x.len(),
        });
    }
    crate::error::check_len(ty, "output blocks", x.len() / bs, n_blocks)
}

/// `v.round_ties_even()` without a libm call (the crate targets baseline x86-64, where
/// `round_ties_even` is a call to `rintf`).
/// NOTE: adding and subtracting 1.5 * 2^23 rounds half to even exactly for |v| < 2^22 (the
/// sum lands where the f32 spacing is 1), and rounding |v| then restoring the sign keeps -0.0
/// as `rintf` gives it. Larger values, infinities and NaN take the libm path.
#[inline]
pub(crate) fn round_half_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    if v.abs() < 4_194_304.0 {
        ((v.abs() + MAGIC) - MAGIC).copysign(v)
    } else {
        v.round_ties_even()
    }
}

/// True when the AVX-512 quantizers of `quantize_simd.rs` can run.
#[inline]
fn simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::cpu::kernel_level() == crate::cpu::KernelLevel::Avx512Vnni
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The absolute maximum of a block and the Q8_0-style scale / inverse scale.
#[inline]
fn q8_scale(x: &[f32]) -> (f32, f32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    (d, id)
}

/// Quantizes `x` (a multiple of 32 elements) into `y` (`x.len() / 32` blocks).
pub fn quantize_row_q8_0(x: &[f32], y: &mut [BlockQ8_0]) -> Result<(), QuantError> {
    check_blocks(GgmlType::Q8_0, x, y.len(), QK)?;
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX-512 checked by `simd`; lengths checked above.
        unsafe { crate::quantize_simd::quantize_q8_0(x, bytemuck::cast_slice_mut(y)) };
        return Ok(());
    }
    q8_0_ref(x, y);
    Ok(())
}

/// The scalar Q8_0 quantizer (`y.len() == x.len() / 32`, checked by callers).
pub(crate) fn q8_0_ref(x: &[f32], y: &mut [BlockQ8_0]) {
    for (b, xb) in y.iter_mut().zip(x.chunks_exact(QK)) {
        let (d, id) = q8_scale(xb);
        b.d = f16::from_f32(d);
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            // NOTE: half to even, like `_mm256_round_ps(_MM_ROUND_NEAREST)`.
            *q = round_half_even(v * id) as i8;
        }
    }
}

/// Quantizes `x` into Q8_1 blocks, with `s = d * sum(qs)` as llama.cpp stores it.
pub fn quantize_row_q8_1(x: &[f32], y: &mut [BlockQ8_1]) -> Result<(), QuantError> {
    check_blocks(GgmlType::Q8_1, x, y.len(), QK)?;
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX-512 checked by `simd`; lengths checked above.
        unsafe { crate::quantize_simd::quantize_q8_1(x, bytemuck::cast_slice_mut(y)) };
        return Ok(());
    }
    q8_1_ref(x, y);
    Ok(())
}

/// The scalar Q8_1 quantizer (`y.len() == x.len() / 32`, checked by callers).
pub(crate) fn q8_1_ref(x: &[f32], y: &mut [BlockQ8_1]) {
    for (b, xb) in y.iter_mut().zip(x.chunks_exact(QK)) {
        let (d, id) = q8_scale(xb);
        b.d = f16::from_f32(d);
        let mut sum = 0i32;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = round_half_even(v * id) as i8;
            sum += *q as i32;
        }
        b.s = f16::from_f32(sum as f32 * d);
    }
}

/// Quantizes `x` (a multiple of 256 elements) into Q8_K blocks with their group sums.
pub fn quantize_row_q8_k(x: &[f32], y: &mut [BlockQ8_K]) -> Result<(), QuantError> {
    check_blocks(GgmlType::Q8_K, x, y.len(), QK_K)?;
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX-512 checked by `simd`; lengths checked above.
        unsafe { crate::quantize_simd::quantize_q8_k(x, bytemuck::cast_slice_mut(y)) };
        return Ok(());
    }
    q8_k_ref(x, y);
    Ok(())
}

/// The scalar Q8_K quantizer (`y.len() == x.len() / 256`, checked by callers).
pub(crate) fn q8_k_ref(x: &[f32], y: &mut [BlockQ8_K]) {
    for (b, xb) in y.iter_mut().zip(x.chunks_exact(QK_K)) {
        // The signed value of largest magnitude (first one on ties), as the reference keeps it.
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            b.d = 0.0;
            b.qs = [0; QK_K];
            b.bsums = [0; QK_K / 16];
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            // NOTE: ggml's nearest_int rounds half to even; the clamp mirrors MIN(127, v).
            *q = (round_half_even(iscale * v) as i32).min(127) as i8;
        }
        for (s, g) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *s = g.iter().map(|&q| q as i16).sum();
        }
        b.d = 1.0 / iscale;
    }
}

/// Quantizes one activation row `x` to type `act` (Q8_0, Q8_1, Q8_K, F32, F16 or BF16),
/// writing its bytes to `dst` (any alignment).
pub fn quantize_activations(act: GgmlType, x: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let expected = crate::error::row_bytes(act, x.len())?;
    crate::error::check_len(act, "quantized activation bytes", expected, dst.len())?;
    #[cfg(target_arch = "x86_64")]
    if simd() && matches!(act, GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K) {
        // SAFETY: AVX-512 checked by `simd`; `dst.len()` is the row size checked above.
        unsafe {
            match act {
                GgmlType::Q8_0 => crate::quantize_simd::quantize_q8_0(x, dst),
                GgmlType::Q8_1 => crate::quantize_simd::quantize_q8_1(x, dst),
                _ => crate::quantize_simd::quantize_q8_k(x, dst),
            }
        }
        return Ok(());
    }
    match act {
        GgmlType::Q8_0 => per_block(x, dst, q8_0_ref),
        GgmlType::Q8_1 => per_block(x, dst, q8_1_ref),
        GgmlType::Q8_K => per_block(x, dst, q8_k_ref),
        GgmlType::F32 => {
            for (d, v) in dst.chunks_exact_mut(4).zip(x) {
                d.copy_from_slice(&v.to_le_bytes());
            }
            Ok(())
        }
        GgmlType::F16 => {
            match bytemuck::try_cast_slice_mut::<u8, f16>(dst) {
                Ok(d) => crate::f16_conv::f32_to_f16_slice(x, d),
                Err(_) => {
                    for (d, v) in dst.chunks_exact_mut(2).zip(x) {
                        d.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
                    }
                }
            }
            Ok(())
        }
        GgmlType::BF16 => {
            for (d, v) in dst.chunks_exact_mut(2).zip(x) {
                d.copy_from_slice(&half::bf16::from_f32(*v).to_le_bytes());
            }
            Ok(())
        }
        _ => Err(QuantError::Unsupported {
            ty: act,
            op: "activation quantization",
        }),
    }
}

/// Quantizes block by block through an aligned local block, so `dst` needs no alignment.
fn per_block<B: bytemuck::Pod>(
    x: &[f32],
    dst: &mut [u8],
    f: fn(&[f32], &mut [B]),
) -> Result<(), QuantError> {
    let n_blocks = dst.len() / std::mem::size_of::<B>();
    let bs = x.len() / n_blocks.max(1);
    let mut block = [B::zeroed()];
    for (xb, db) in x
        .chunks_exact(bs.max(1))
        .zip(dst.chunks_exact_mut(std::mem::size_of::<B>()))
    {
        f(xb, &mut block);
        db.copy_from_slice(bytemuck::bytes_of(&block[0]));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytemuck::Zeroable;

    #[test]
    fn q8_0_rounds_half_to_even() {
        // amax 127 gives d = 1 and id = 127 / 127 = 1, so x * id is exact and the rounding rule
        // shows.
        let mut x = [0f32; 32];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -2.5;
        x[3] = 0.49;
        x[4] = 3.5;
        let mut y = [BlockQ8_0::zeroed(); 1];
        quantize_row_q8_0(&x, &mut y).unwrap();
        assert_eq!(y[0].d.to_f32(), 1.0);
        assert_eq!(&y[0].qs[..5], &[127, 2, -2, 0, 4]);
    }

    #[test]
    fn q8_0_scales_by_127_over_amax() {
        // With amax = 127 / 7: 11.5 * (127 / amax) is exactly 80.5 (a tie, to even: 80), while
        // 11.5 * (1 / (amax / 127)) is 80.50001 (81, the portable reference's answer).
        let mut x = [0f32; 32];
        x[0] = 127.0 / 7.0;
        x[1] = 11.5;
        let mut y = [BlockQ8_0::zeroed(); 1];
        quantize_row_q8_0(&x, &mut y).unwrap();
        assert_eq!(y[0].qs[0], 127);
        assert_eq!(y[0].qs[1], 80);
    }

    #[test]
    fn q8_1_stores_scaled_sum() {
        let x: Vec<f32> = (0..32).map(|i| i as f32 - 10.0).collect();
        let mut y = [BlockQ8_1::zeroed(); 1];
        quantize_row_q8_1(&x, &mut y).unwrap();
        let d = 21.0f32 / 127.0;
        let sum: i32 = y[0].qs.iter().map(|&q| q as i32).sum();
        assert_eq!(y[0].d, f16::from_f32(d));
        assert_eq!(y[0].s, f16::from_f32(sum as f32 * d));
        assert_eq!(y[0].qs[31], 127);
    }

    #[test]
    fn q8_k_rounds_half_to_even_and_sums_groups() {
        // max = -127 gives iscale = 1, so values pass through and ties show the rounding.
        let mut x = [0f32; 256];
        x[0] = -127.0;
        x[1] = 2.5;
        x[2] = 3.5;
        x[3] = -0.5;
        x[16] = 100.0;
        let mut y = [BlockQ8_K::zeroed(); 1];
        quantize_row_q8_k(&x, &mut y).unwrap();
        assert_eq!(y[0].d, 1.0);
        assert_eq!(&y[0].qs[..4], &[-127, 2, 4, 0]);
        assert_eq!(y[0].bsums[0], -127 + 2 + 4);
        assert_eq!(y[0].bsums[1], 100);
        let zeros = [0f32; 256];
        quantize_row_q8_k(&zeros, &mut y).unwrap();
        assert_eq!(y[0].d, 0.0);
        assert!(quantize_row_q8_k(&zeros[..100], &mut y).is_err());
    }
}

#[cfg(test)]
mod fast_vs_reference {
    use super::*;
    use bytemuck::Zeroable;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn magic_rounding_is_round_ties_even() {
        let mut rng = StdRng::seed_from_u64(5);
        let ties = (-600..600).map(|k| k as f32 + 0.5);
        let near = (-300..300).flat_map(|k| {
            let v = k as f32 * 0.5;
            [v, v.next_up(), v.next_down()]
        });
        let random = (0..100_000).map(|_| rng.gen_range(-200f32..200.0));
        let edges = [
            0.0,
            -0.0,
            4_194_303.5,
            -4_194_303.5,
            4_194_304.5,
            8_388_609.0,
            1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE / 4.0,
        ];
        for v in ties.chain(near).chain(random).chain(edges) {
            assert_eq!(
                round_half_even(v).to_bits(),
                v.round_ties_even().to_bits(),
                "{v}"
            );
        }
        assert!(round_half_even(f32::NAN).is_nan());
    }

    /// Random rows with ties, repeated extremes of both signs, zeros, denormals and
    /// non-finite values mixed in.
    fn rows(n: usize, rng: &mut StdRng) -> Vec<Vec<f32>> {
        let mut out = Vec::new();
        for seed in 0..400 {
            let mut x: Vec<f32> = (0..n).map(|_| rng.gen_range(-3f32..3.0)).collect();
            match seed % 8 {
                // amax 127 (id = 1, iscale = +-1): half-integers are exact ties.
                0 => {
                    for v in x.iter_mut() {
                        *v = (rng.gen_range(-254i32..=254) as f32) * 0.5;
                    }
                    x[rng.gen_range(0..n)] = if seed % 16 == 0 { 127.0 } else { -127.0 };
                }
                // The largest magnitude twice with opposite signs (Q8_K keeps the first).
                1 => {
                    let (i, j) = (rng.gen_range(0..n), rng.gen_range(0..n));
                    x[i] = 5.0;
                    x[j] = -5.0;
                }
                2 => x.iter_mut().for_each(|v| *v = 0.0),
                3 => x.iter_mut().for_each(|v| *v *= 1e-41),
                4 => x[rng.gen_range(0..n)] = f32::NAN,
                5 => x[rng.gen_range(0..n)] = f32::INFINITY,
                6 => {
                    x.iter_mut().for_each(|v| *v *= 1e-39);
                    x[rng.gen_range(0..n)] = -f32::INFINITY;
                }
                _ => {}
            }
            out.push(x);
        }
        out
    }

    #[test]
    fn simd_quantizers_match_reference_bytes() {
        let mut rng = StdRng::seed_from_u64(9);
        for x in rows(32 * 5, &mut rng) {
            let mut want = vec![BlockQ8_0::zeroed(); 5];
            q8_0_ref(&x, &mut want);
            let mut got = vec![0u8; 5 * 34];
            quantize_activations(GgmlType::Q8_0, &x, &mut got).unwrap();
            assert_eq!(got, bytemuck::cast_slice::<_, u8>(&want), "Q8_0 {x:?}");

            let mut want = vec![BlockQ8_1::zeroed(); 5];
            q8_1_ref(&x, &mut want);
            let mut got = vec![0u8; 5 * 36];
            quantize_activations(GgmlType::Q8_1, &x, &mut got).unwrap();
            assert_eq!(got, bytemuck::cast_slice::<_, u8>(&want), "Q8_1 {x:?}");
        }
        for x in rows(256 * 2, &mut rng) {
            let mut want = vec![BlockQ8_K::zeroed(); 2];
            q8_k_ref(&x, &mut want);
            let mut got = vec![0u8; 2 * 292];
            quantize_activations(GgmlType::Q8_K, &x, &mut got).unwrap();
            assert_eq!(got, bytemuck::cast_slice::<_, u8>(&want), "Q8_K {x:?}");
            // The typed entry point takes the same path.
            let mut typed = vec![BlockQ8_K::zeroed(); 2];
            quantize_row_q8_k(&x, &mut typed).unwrap();
            assert_eq!(bytemuck::cast_slice::<_, u8>(&typed), &got[..]);
        }
    }
}
