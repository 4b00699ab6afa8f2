//! The mean of squares of one RMSNorm group three ways: as the CPU backend computes it (f64,
//! its order), as norm.wgsl computes it (double-word f32 sums, double_word.wgsl, in the
//! kernel's order: 64 threads, each summing every 64th value, then a tree), and as the kernel
//! did before with plain f32 sums (to show that test rows would catch a plain f32 sum).
//! Also rows that stress the sum.

#![allow(dead_code)] // each test binary uses its own part

/// Threads of a norm workgroup (norm.wgsl's `@workgroup_size`).
const THREADS: usize = 64;

/// `(Σ v² / n) as f32` as the CPU backend's RMSNorm computes it (hearth-backend's
/// `simd::sum_squares_f64`: eight f64 lanes over whole chunks of eight, the lanes added in
/// order, then the tail).
pub fn cpu_mean(x: &[f32]) -> f32 {
    let mut acc = [0f64; 8];
    let chunks = x.len() / 8;
    for c in 0..chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            let f = x[c * 8 + i] as f64;
            *a += f * f;
        }
    }
    let mut s: f64 = acc.iter().sum();
    for &v in &x[chunks * 8..] {
        s += (v as f64) * (v as f64);
    }
    (s / x.len() as f64) as f32
}

/// What norm.wgsl's reduction gave with plain f32 sums.
pub fn f32_tree_mean(x: &[f32]) -> f32 {
    let mut sums = [0f32; THREADS];
    for (t, s) in sums.iter_mut().enumerate() {
        for &v in x.iter().skip(t).step_by(THREADS) {
            *s += v * v;
        }
    }
    let mut w = THREADS / 2;
    while w > 0 {
        for t in 0..w {
            sums[t] += sums[t + w];
        }
        w /= 2;
    }
    sums[0] / x.len() as f32
}

/// A double word: hi + lo.
type Dw = (f32, f32);

fn two_sum(a: f32, b: f32) -> Dw {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

fn fast_two_sum(a: f32, b: f32) -> Dw {
    let s = a + b;
    (s, b - (s - a))
}

fn dw_add(x: Dw, y: Dw) -> Dw {
    let s = two_sum(x.0, y.0);
    let t = two_sum(x.1, y.1);
    let v = fast_two_sum(s.0, s.1 + t.0);
    fast_two_sum(v.0, t.1 + v.1)
}

fn square_exact(v: f32) -> Dw {
    let p = v * v;
    let a = f32::from_bits(v.to_bits() & 0xffff_f000);
    let b = v - a;
    (p, ((a * a - p) + 2.0 * a * b) + b * b)
}

/// `f32::mul_add` rounds once, as `fma_rn` does; `/` is rounded as `div_rn` is.
fn dw_div_rn(s: Dw, n: f32) -> f32 {
    let q = s.0 / n;
    let r = (-q).mul_add(n, s.0);
    q + (r + s.1) / n
}

/// norm.wgsl's sum of squares, before the division.
pub fn dw_tree_sum(x: &[f32]) -> Dw {
    let mut sums = [(0f32, 0f32); THREADS];
    for (t, s) in sums.iter_mut().enumerate() {
        for &v in x.iter().skip(t).step_by(THREADS) {
            *s = dw_add(*s, square_exact(v));
        }
    }
    let mut w = THREADS / 2;
    while w > 0 {
        for t in 0..w {
            sums[t] = dw_add(sums[t], sums[t + w]);
        }
        w /= 2;
    }
    sums[0]
}

/// norm.wgsl's mean of squares.
pub fn dw_tree_mean(x: &[f32]) -> f32 {
    dw_div_rn(dw_tree_sum(x), x.len() as f32)
}

/// Σ v² as an f64 double word (hi, lo), to ~2^-100 relative: every square is exact in f64.
pub fn exact_sum(x: &[f32]) -> (f64, f64) {
    let (mut hi, mut lo) = (0f64, 0f64);
    for &v in x {
        let sq = v as f64 * v as f64;
        let s = hi + sq;
        let bb = s - hi;
        lo += (hi - (s - bb)) + (sq - bb);
        hi = s;
    }
    let s = hi + lo;
    (s, lo - (s - hi))
}

pub use crate::xorshift::Rng;

impl Rng {
    /// A float of random sign and significand with an exponent uniform in [e0, e1).
    pub fn float_in_exponents(&mut self, e0: i32, e1: i32) -> f32 {
        let e = e0 + (self.next() % (e1 - e0) as u64) as i32;
        let m = (self.next() >> 41) as u32; // 23 bits
        let sign = (self.next() & 1) as u32;
        f32::from_bits(sign << 31 | ((e + 127) as u32) << 23 | m)
    }
}

/// Row `i` of a set of `n` values that strain an f32 sum of squares: magnitudes over a wide
/// range (2^-12..2^12, as activations with outlier channels), a few huge values among small
/// ones, or values of one magnitude (every square rounded, the errors adding up).
pub fn stress_row(rng: &mut Rng, n: usize, i: usize) -> Vec<f32> {
    match i % 3 {
        0 => (0..n).map(|_| rng.float_in_exponents(-12, 12)).collect(),
        1 => (0..n)
            .map(|j| {
                if j % 97 == 5 {
                    rng.float_in_exponents(6, 9)
                } else {
                    rng.float_in_exponents(-4, 0)
                }
            })
            .collect(),
        _ => (0..n).map(|_| rng.float_in_exponents(0, 1)).collect(),
    }
}
