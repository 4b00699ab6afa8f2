//! Small vector loops, compiled twice: once for the baseline target and once with AVX2 + FMA,
//! chosen at run time. The loops are written with independent accumulators so that the compiler
//! vectorizes them without reassociating floating-point sums on its own.

use std::sync::OnceLock;

fn has_avx2_fma() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Defines `pub fn $name` dispatching to an AVX2+FMA build of `$generic` when the CPU has it.
macro_rules! multiversion {
    ($(#[$m:meta])* pub fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $generic:ident;) => {
        $(#[$m])*
        pub fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn fast($($arg: $ty),*) -> $ret {
                    $generic($($arg),*)
                }
                if has_avx2_fma() {
                    // SAFETY: the CPU supports the features `fast` was compiled for.
                    return unsafe { fast($($arg),*) };
                }
            }
            $generic($($arg),*)
        }
    };
}

#[inline(always)]
fn sum_squares_f64_generic(x: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = x.len() / 8;
    for c in 0..chunks {
        let v = &x[c * 8..][..8];
        for i in 0..8 {
            let f = v[i] as f64;
            acc[i] += f * f;
        }
    }
    let mut s: f64 = acc.iter().sum();
    for &v in &x[chunks * 8..] {
        s += (v as f64) * (v as f64);
    }
    s
}

#[inline(always)]
fn scale_mul_generic(x: &mut [f32], s: f32, w: &[f32]) {
    for (a, &b) in x.iter_mut().zip(w) {
        *a = *a * s * b;
    }
}

#[inline(always)]
fn dot_f32_generic(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let n = a.len().min(b.len());
    let chunks = n / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..][..8], &b[c * 8..][..8]);
        for i in 0..8 {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * 8..n {
        s = a[i].mul_add(b[i], s);
    }
    s
}

multiversion! {
    /// Σ a[i]·b[i] in f32, eight running sums.
    pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 = dot_f32_generic;
}
multiversion! {
    /// Σ x[i]², accumulated in f64 (as ggml's norms do).
    pub fn sum_squares_f64(x: &[f32]) -> f64 = sum_squares_f64_generic;
}
multiversion! {
    /// x[i] = x[i]·s·w[i].
    pub fn scale_mul(x: &mut [f32], s: f32, w: &[f32]) -> () = scale_mul_generic;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_f32_matches_a_plain_loop() {
        for n in [0, 1, 7, 8, 9, 100] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
            assert!((dot_f32(&a, &b) as f64 - plain).abs() < 1e-5, "n = {n}");
        }
    }

    #[test]
    fn sum_squares_matches_a_plain_loop() {
        for n in [0, 1, 7, 8, 9, 100] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let ss: f64 = a.iter().map(|&v| (v as f64) * (v as f64)).sum();
            assert!((sum_squares_f64(&a) - ss).abs() < 1e-9);
        }
    }
}

/// Σ a[i]·b[i] with `b` in f16.
pub fn dot_f16(a: &[f32], b: &[half::f16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma_f16c() {
        // SAFETY: the CPU supports the features the kernel was compiled for.
        return unsafe { x86::dot_f16(a, b) };
    }
    a.iter().zip(b).map(|(x, y)| x * y.to_f32()).sum()
}

/// y += a·x with `x` in f16.
pub fn axpy_f16(y: &mut [f32], a: f32, x: &[half::f16]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma_f16c() {
        // SAFETY: as above.
        return unsafe { x86::axpy_f16(y, a, x) };
    }
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi = a.mul_add(xi.to_f32(), *yi);
    }
}

fn has_avx2_fma_f16c() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            has_avx2_fma() && is_x86_feature_detected!("f16c")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::f16;

    #[inline(always)]
    unsafe fn load8(p: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_f16(a: &[f32], b: &[f16]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), load8(pb.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 8)), load8(pb.add(i + 8)), acc1);
            i += 16;
        }
        if i + 8 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), load8(pb.add(i)), acc0);
            i += 8;
        }
        let mut s = hsum(_mm256_add_ps(acc0, acc1));
        while i < n {
            s += a[i] * b[i].to_f32();
            i += 1;
        }
        s
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn axpy_f16(y: &mut [f32], a: f32, x: &[f16]) {
        let n = y.len().min(x.len());
        let (py, px) = (y.as_mut_ptr(), x.as_ptr());
        let va = _mm256_set1_ps(a);
        let mut i = 0;
        while i + 8 <= n {
            let r = _mm256_fmadd_ps(va, load8(px.add(i)), _mm256_loadu_ps(py.add(i)));
            _mm256_storeu_ps(py.add(i), r);
            i += 8;
        }
        while i < n {
            y[i] = a.mul_add(x[i].to_f32(), y[i]);
            i += 1;
        }
    }
}

#[cfg(test)]
mod f16_tests {
    use half::f16;

    use super::*;

    #[test]
    fn f16_kernels_match_plain_loops() {
        for n in [0, 1, 7, 8, 9, 16, 31, 64, 256] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f16> = (0..n)
                .map(|i| f16::from_f32((i as f32 * 0.11).cos()))
                .collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y.to_f32()).sum();
            assert!((dot_f16(&a, &b) - plain).abs() < 1e-4, "n = {n}");
            let mut y = a.clone();
            axpy_f16(&mut y, -0.5, &b);
            for i in 0..n {
                assert!((y[i] - (a[i] - 0.5 * b[i].to_f32())).abs() < 1e-6);
            }
        }
    }
}
