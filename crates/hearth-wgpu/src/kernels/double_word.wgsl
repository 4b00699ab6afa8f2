// Double-word ("double-f32") sums: a real number carried as hi + lo, two f32 with
// |lo| ≤ ulp(hi) / 2, about 48 significant bits. The including module provides `keep`
// (prelude.wgsl) and `div_rn`, `fma_rn` (exact.wgsl).
//
// NOTE: the CPU's RMSNorm sums the squares of a row in f64 and rounds `sum / n` to f32 once;
// an f32 sum is off by many ulp of the mean for a wide row, and one ulp of the mean moves every
// output of the row (and, before an 8-bit matmul, can move a quantized value by a step). WGSL
// has no f64 everywhere, so the sum is kept as a double word with error-free transformations
// (the rounding error of each f32 operation recovered exactly in another f32). A compiler that
// simplifies `(a + b) - a` to `b` destroys them, so every sum whose error is recovered is
// passed through `keep`, as in exact.wgsl. The Rust model of these functions and the bound on
// how rarely they round the mean differently from the CPU are in tests/norm_exact.rs.

// a + b exactly, as (rounded sum, its error), for any finite a, b (Knuth's TwoSum).
fn two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = keep(a + b);
    let bb = keep(s - a);
    return vec2<f32>(s, (a - (s - bb)) + (b - bb));
}

// a + b exactly, as (rounded sum, its error), where |a| ≥ |b| or a = 0 (Dekker's Fast2Sum).
fn fast_two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = keep(a + b);
    return vec2<f32>(s, b - (s - a));
}

// x + y of two double words, as a double word; relative error below 3u² + 13u³ (u = 2^-24),
// whatever the signs (Joldes, Muller and Popescu, "Tight and rigorous error bounds for basic
// building blocks of double-word arithmetic", 2017, algorithm 6).
fn dw_add(x: vec2<f32>, y: vec2<f32>) -> vec2<f32> {
    let s = two_sum(x.x, y.x);
    let t = two_sum(x.y, y.y);
    let v = fast_two_sum(s.x, s.y + t.x);
    return fast_two_sum(v.x, t.y + v.y);
}

// v² exactly, as (rounded square, its error), for 2^-40 ≤ |v| < 2^63 or v = 0. Below, parts
// of the error may fall under the normal range, which a device may flush: less than 2^-126
// lost per value, which a norm cannot see (it adds eps to the mean square).
//
// NOTE: not `fma_rn(v, v, -p)`: on devices without a fused fma that is an integer emulation,
// and this runs for every value of the row. Split v = a + b, a its 12 leading bits (a mask)
// and b the 12 others (v - a, exact): a², 2ab and b² are exact products, and so are the sums
// (a² - p) + 2ab + b² = v² - p, in this order (each partial result needs at most 24 bits at
// its scale: Dekker's argument for his product).
fn square_exact(v: f32) -> vec2<f32> {
    let p = keep(v * v);
    let a = bitcast<f32>(bitcast<u32>(v) & 0xfffff000u);
    let b = v - a;
    let e = keep(keep(a * a - p) + 2.0 * a * b) + b * b;
    return vec2<f32>(p, e);
}

// (s.x + s.y) / n rounded to f32, for s ≥ 0 with s.x ≥ 2^-76 (so that the correction below
// is normal for div_rn) or s = 0, and whole n (1 ≤ n < 2^24). q = s.x / n rounded; the rest
// (s.x - q·n, exact for the correctly rounded q, plus s.y) divided by n is added to it in one
// rounding. That can differ from rounding the exact quotient only where the exact quotient
// lies within ~2^-22 ulp of a midpoint between two floats (the error of the small term).
fn dw_div_rn(s: vec2<f32>, n: f32) -> f32 {
    let q = div_rn(s.x, n);
    let r = fma_rn(-q, n, s.x);
    return q + div_rn(r + s.y, n);
}

// RMSNorm's 1 / sqrt(mean + eps), from the double-word sum of the squares of n values: the
// mean rounded as above, then one IEEE step each, as the CPU computes it.
fn inv_rms_of(sum: vec2<f32>, n: f32, eps: f32) -> f32 {
    return div_rn(1.0, sqrt_rn(dw_div_rn(sum, n) + eps));
}
