//! f16 <-> f32 slice conversion, with F16C on x86-64 CPUs that have it.

use half::f16;

#[cfg(target_arch = "x86_64")]
use crate::cpu::{kernel_level, KernelLevel};

/// Converts `src` to f32 into `dst`.
///
/// # Panics
/// If the lengths differ (a caller bug, like `copy_from_slice`).
pub fn f16_to_f32_slice(src: &[f16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "f16_to_f32_slice: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if kernel_level() != KernelLevel::Scalar {
        // SAFETY: every non-scalar level includes F16C and AVX.
        unsafe { x86::f16_to_f32(src, dst) };
        return;
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

/// Converts `src` to f16 (round to nearest even) into `dst`.
///
/// # Panics
/// If the lengths differ (a caller bug, like `copy_from_slice`).
pub fn f32_to_f16_slice(src: &[f32], dst: &mut [f16]) {
    assert_eq!(src.len(), dst.len(), "f32_to_f16_slice: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if kernel_level() != KernelLevel::Scalar {
        // SAFETY: every non-scalar level includes F16C and AVX.
        unsafe { x86::f32_to_f16(src, dst) };
        return;
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f16::from_f32(*s);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::f16;

    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
        let n = src.len() / 8 * 8;
        for i in (0..n).step_by(8) {
            let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        for i in n..src.len() {
            dst[i] = src[i].to_f32();
        }
    }

    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
        let n = src.len() / 8 * 8;
        for i in (0..n).step_by(8) {
            let v = _mm256_loadu_ps(src.as_ptr().add(i));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
        }
        for i in n..src.len() {
            dst[i] = f16::from_f32(src[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_half_crate_both_ways() {
        let mut vals: Vec<f32> = (0..1000)
            .map(|i| ((i as f32) * 0.7311).sin() * 10f32.powi(i % 9 - 4))
            .collect();
        vals.extend([
            0.0,
            -0.0,
            65504.0,
            70000.0,
            -1e-7,
            6e-8,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ]);
        let mut h = vec![f16::ZERO; vals.len()];
        f32_to_f16_slice(&vals, &mut h);
        for (a, b) in h.iter().zip(&vals) {
            assert_eq!(a.to_bits(), f16::from_f32(*b).to_bits(), "{b}");
        }
        let mut back = vec![0f32; vals.len()];
        f16_to_f32_slice(&h, &mut back);
        for (a, b) in back.iter().zip(&h) {
            assert_eq!(a.to_bits(), b.to_f32().to_bits());
        }
    }
}
