//! Why norm.wgsl's double-word sum of squares gives the CPU's f32 mean: the Rust model of the
//! kernel's arithmetic (tests/norm_model) against the CPU's f64 sum, on rows that strain an
//! f32 sum. The device itself is checked against the CPU backend in conformance.rs.
//!
//! Neither side is exact: the CPU's f64 sum rounds at every step (relative error up to about
//! (n / 8 + 8) · 2^-53), the double-word sum at every step too (up to 3 · 2^-48 per addition,
//! about (n / 64 + 6) · 3 · 2^-48 in all), and the division of the double word by n adds up to
//! ~2^-46. Both round the mean to f32 once, so they can only differ when the exact mean lies
//! within the sum of those errors of a midpoint between two floats. Bounded, that is ~2^-40
//! relative for n = 4096, so for a mean anywhere in its ulp (2^-24 to 2^-23 relative) about
//! one row in 2^15; measured, the errors stay near 2^-46 (worst over the rows below 2^-46.4,
//! and rows built to land near a midpoint rounded apart only within 2^-47.5 of it), about one
//! row in 2^21. The test measures the errors and demands that every row where the two means
//! differ is such a row.

mod norm_model;
mod xorshift;

use norm_model::{cpu_mean, dw_tree_mean, dw_tree_sum, exact_sum, f32_tree_mean, stress_row, Rng};

/// Relative distance of the exact mean of squares from the nearest midpoint between floats.
fn midpoint_distance(x: &[f32]) -> f64 {
    let (hi, lo) = exact_sum(x);
    let n = x.len() as f64;
    let mean = hi / n + lo / n;
    let r = mean as f32;
    let toward = if (r as f64) < mean {
        f32::from_bits(r.to_bits() + 1)
    } else {
        f32::from_bits(r.to_bits() - 1)
    };
    let mid = (r as f64 + toward as f64) / 2.0;
    (mean - mid).abs() / mean
}

/// Relative error of the kernel's double-word sum.
fn dw_error(x: &[f32]) -> f64 {
    let (hi, lo) = exact_sum(x);
    let (h, l) = dw_tree_sum(x);
    (((h as f64 - hi) + l as f64) - lo).abs() / hi
}

#[test]
fn double_word_mean_is_the_cpu_mean() {
    let mut rng = Rng(0x5eed_0f5a_0ae5);
    let (mut rows, mut f32_differs, mut dw_differs) = (0, 0, 0);
    let mut worst_error = 0f64;
    for (n, count) in [
        (4096, 400),
        (2048, 400),
        (1024, 800),
        (128, 4000),
        (7, 4000),
    ] {
        let bound = (n as f64 / 64.0 + 7.0) * 3.01 * 2f64.powi(-48);
        for i in 0..count {
            let x = stress_row(&mut rng, n, i);
            let want = cpu_mean(&x);
            let e = dw_error(&x);
            assert!(e <= bound, "n {n} row {i}: error {e:.3e} above {bound:.3e}");
            worst_error = worst_error.max(e);
            rows += 1;
            f32_differs += (f32_tree_mean(&x) != want) as usize;
            if dw_tree_mean(&x) != want {
                dw_differs += 1;
                let d = midpoint_distance(&x);
                assert!(
                    d < 2f64.powi(-38),
                    "n {n} row {i}: means differ {d:.3e} away from a midpoint"
                );
            }
        }
    }
    eprintln!(
        "{rows} rows: plain f32 sums give another mean in {f32_differs}, double words in \
         {dw_differs}; worst double-word error 2^{:.1}",
        worst_error.log2()
    );
    // The rows must be ones a plain f32 sum gets wrong, or the test proves nothing.
    assert!(
        f32_differs > rows / 4,
        "only {f32_differs} of {rows} rows strain f32"
    );
}

/// Rows built so that the exact mean of squares is a midpoint between floats up to a tiny
/// offset: the CPU's f64 sum and the double words may then round apart, and the test shows
/// that this only happens that close to a midpoint.
#[test]
fn near_midpoint_means_differ_only_there() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let n = 1024;
    let (mut dw_differs, mut farthest) = (0, 0f64);
    for _ in 0..2000 {
        let mut x: Vec<f32> = (0..n).map(|_| rng.float_in_exponents(-2, 0)).collect();
        // A last value chosen so that the exact mean lands close to a midpoint.
        let (hi, lo) = exact_sum(&x[..n - 1]);
        let m = ((hi + lo) / n as f64) as f32;
        let target = (m as f64 + f32::from_bits(m.to_bits() + 1) as f64) / 2.0;
        let rest = target * n as f64 - hi - lo;
        x[n - 1] = rest.max(0.0).sqrt() as f32;
        if dw_tree_mean(&x) != cpu_mean(&x) {
            dw_differs += 1;
            let d = midpoint_distance(&x);
            assert!(
                d < 2f64.powi(-38),
                "means differ {d:.3e} away from a midpoint"
            );
            farthest = farthest.max(d);
        }
    }
    eprintln!(
        "2000 rows near a midpoint: double words round apart from f64 in {dw_differs}, \
         all within 2^{:.1} of the midpoint",
        farthest.log2()
    );
}
