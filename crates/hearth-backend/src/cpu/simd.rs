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

const LANES: usize = 16;

#[inline(always)]
fn dot_generic(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0f32; LANES];
    let chunks = n / LANES;
    for c in 0..chunks {
        let (x, y) = (&a[c * LANES..][..LANES], &b[c * LANES..][..LANES]);
        for i in 0..LANES {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * LANES..n {
        s = a[i].mul_add(b[i], s);
    }
    s
}

#[inline(always)]
fn axpy_generic(y: &mut [f32], a: f32, x: &[f32]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = a.mul_add(xi, *yi);
    }
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

multiversion! {
    /// Σ a[i]·b[i] over the shorter length.
    pub fn dot(a: &[f32], b: &[f32]) -> f32 = dot_generic;
}
multiversion! {
    /// y += a·x.
    pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) -> () = axpy_generic;
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
    fn dot_and_axpy_match_plain_loops() {
        for n in [0, 1, 15, 16, 17, 64, 100] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() < 1e-4);
            let mut y = b.clone();
            axpy(&mut y, 0.5, &a);
            for i in 0..n {
                assert!((y[i] - (b[i] + 0.5 * a[i])).abs() < 1e-6);
            }
            let ss: f64 = a.iter().map(|&v| (v as f64) * (v as f64)).sum();
            assert!((sum_squares_f64(&a) - ss).abs() < 1e-9);
        }
    }
}
