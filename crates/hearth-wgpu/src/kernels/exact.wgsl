// Division, square root and exp with one rounding to nearest (ties to even), as the CPU's
// IEEE f32 operations give, on any conforming device. The including module provides `fma_rn`
// (fma.wgsl, or the device's `fma` where the probe found it fused) and `keep` (prelude.wgsl).
//
// NOTE: Vulkan and Metal let `/` be off by 2.5 ulp, `sqrt` and `inverseSqrt` by a few, and `exp`
// by 3 + 2|x| ulp; GPUs use such approximations. Before an 8-bit matmul one ulp can move a value
// across a rounding boundary of the quantizer, and the logits by a whole quantization step. So
// each function starts from the device's approximation and corrects it with exact multiply-
// adds (`fma_rn`: one rounding, whichever implementation the module has); the Rust models of
// these algorithms, and their tests, are in tests/exact_math.rs. Every product that meets an
// add goes through `keep`, so that no compiler fuses it with a rounding fewer, and so does
// every sum whose rounding error is recovered after it (s = a + b; e = b - (s - a)): without
// it Mesa's optimizer rewrites (a + b) - a as b, and the error is lost.

// a · b exactly, as (rounded product, error): a · b = x + y.
fn two_prod(a: f32, b: f32) -> vec2<f32> {
    let x = keep(a * b);
    return vec2<f32>(x, fma_rn(a, b, -x));
}

// The float next to finite non-zero `v`, away from zero when `away`, else toward it.
fn next_float(v: f32, away: bool) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) + select(0xffffffffu, 1u, away));
}

// `a / b` rounded to nearest for finite a and b ≠ 0, where the quotient and `a`'s residual
// (~ |a| · 2^-24) are normal: |b| ≥ 2^-125, and |a| ≥ 2^-100 or a = 0. The kernels divide by
// sums ≥ 1, block maxima, group sizes and 1 + exp(-x) (up to FLT_MAX).
fn div_rn(a: f32, b: f32) -> f32 {
    if (a == 0.0) {
        return bitcast<f32>((bitcast<u32>(a) ^ bitcast<u32>(b)) & 0x80000000u); // ±0
    }
    // 1 / b is unspecified past 2^126 (it would be subnormal): scale both, exactly.
    let s = select(1.0, 0.0625, abs(b) > 4.2535296e37);
    let n = a * s;
    let d = b * s;
    let y = 1.0 / d;
    let q0 = n * y;                          // a few ulp off
    let q1 = fma_rn(fma_rn(-q0, d, n), y, q0); // within 0.5 ulp + 2^-20 ulp: faithful
    let r = fma_rn(-q1, d, n);               // n - q1 · d, exact as q1 is faithful
    if (r == 0.0) {
        return q1;
    }
    // a / b lies between q1 and its neighbour q2 on the remainder's side; q2 is nearer when
    // |r| > |d| · gap / 2 (never equal: a quotient of 24-bit significands is no midpoint). The
    // gap is 2^(E - 150) for q1's biased exponent E, half that toward zero from a power of two;
    // it is taken as an exponent, as it may be subnormal (which a device may flush to 0).
    let away = ((r > 0.0) == (d > 0.0)) == (q1 > 0.0);
    let q2 = next_float(q1, away);
    let bits = bitcast<u32>(q1);
    let e = i32((bits >> 23u) & 0xffu);
    let halved = !away && (bits & 0x7fffffu) == 0u && e > 1;
    let half_gap = ldexp(abs(d), e - 151 - select(0, 1, halved)); // exact
    return select(q1, q2, abs(r) > half_gap);
}

// `sqrt(a)` rounded to nearest for 0 and normal a ≥ 2^-100 (the residual a - s² must be
// normal). The kernels take it of mean squares plus eps > 0.
fn sqrt_rn(a: f32) -> f32 {
    if (a == 0.0) {
        return a;
    }
    let y = inverseSqrt(a);
    let s0 = a * y;
    let s = fma_rn(fma_rn(-s0, s0, a), 0.5 * y, s0); // within 0.5 ulp + 2^-20 ulp
    let r = fma_rn(-s, s, a);                         // a - s², exact for such an s
    // Round up when a > (s + u/2)² = s² + s·u + u²/4 (u: the gap above s). a - s² and s·u
    // are multiples of u²/4 · 4, so that is r > s·u; likewise down when r ≤ -s·d (d: the gap
    // below s, half of u at a power of two). No square root is a midpoint.
    let above = next_float(s, true);
    let below = next_float(s, false);
    var out = s;
    if (r > s * (above - s)) {
        out = above;
    } else if (r <= -(s * (s - below))) {
        out = below;
    }
    return out;
}

// 2^(j/32) for j = 0..31 as hi + lo (hi: rounded to f32; lo: the rest, rounded).
const EXP2_HI = array<f32, 32>(
    1.0, 1.0218971967697144, 1.0442737340927124, 1.0671404600143433, 1.0905077457427979,
    1.114386796951294, 1.1387885808944702, 1.1637248992919922, 1.1892070770263672,
    1.215247392654419, 1.2418577671051025, 1.2690509557724, 1.2968395948410034,
    1.3252366781234741, 1.3542555570602417, 1.3839099407196045, 1.4142135381698608,
    1.4451807737350464, 1.4768261909484863, 1.5091644525527954, 1.5422108173370361,
    1.5759809017181396, 1.610490322113037, 1.6457555294036865, 1.6817928552627563,
    1.7186193466186523, 1.7562521696090698, 1.7947090864181519, 1.8340080976486206,
    1.8741676807403564, 1.9152065515518188, 1.9571441411972046,
);
const EXP2_LO = array<f32, 32>(
    0.0, -4.811559861650494e-08, 4.8334701574503924e-08, -5.9337519786595294e-08,
    -1.3077539939843064e-08, -5.435540018083884e-08, 5.386222312608879e-08,
    -4.051441493402308e-08, 3.797635272917432e-08, -3.267394887984665e-08,
    4.496838101886169e-08, 1.419333317542737e-09, -4.018999533172973e-08,
    -3.496373324196611e-08, -1.0123349269974824e-08, -5.875577357983275e-08,
    2.4203234971764687e-08, 3.324199937537742e-08, -4.500898853621038e-08,
    -2.4959373234878512e-08, 8.070904833346049e-09, -5.661025426206834e-08,
    9.836217174097328e-09, -5.124972091152813e-08, -2.4755326677450284e-08,
    -4.8496175963919086e-08, -9.235770370707996e-09, -1.141504490931311e-08,
    -1.1239277952768134e-08, -4.663005626071026e-08, 9.845328108326612e-09,
    -1.7021804410433106e-08,
);

// ln2 / 32 in four parts: the first three have at most 11 significant bits, so their products
// with k (|k| < 2^13) are exact.
const LN2_32_A: f32 = 0.02166748046875;
const LN2_32_B: f32 = -6.631016731262207e-06;
const LN2_32_C: f32 = -5.951505954726599e-11;
const LN2_32_D: f32 = -5.387326479697587e-15;

// 2^e for -126 ≤ e ≤ 127.
fn pow2(e: i32) -> f32 {
    return bitcast<f32>(u32(e + 127) << 23u);
}

// `exp(x)` rounded to nearest, but for about one input in a million (the error before the
// final rounding is ~2^-44; tests/exact_math.rs counts the misses). Results below 2^-126 are
// 0 (a device may flush them anyway; the softmax and SiLU that use it cannot tell); x above
// ln(FLT_MAX) gives +inf. Not for NaN.
//
// x = (32e + j) · ln2/32 + r with |r| ≤ ln2/64, r as rh + rl exactly enough (Cody–Waite), and
// exp(x) = 2^e · 2^(j/32) · exp(r), where exp(r) = 1 + rh + rh²/2 (kept exact, as a sum of
// floats) + a small tail in plain f32 (rh³/6 + rh⁴/24 + rh⁵/120 + rl · exp(rh)).
fn exp_rn(x: f32) -> f32 {
    if (x < -88.0) {
        return 0.0;
    }
    if (x > 88.7228317) {
        return bitcast<f32>(0x7f800000u);
    }
    let k = round(x * 46.16624);
    let r1 = x - k * LN2_32_A; // exact (a product of at most 24 bits, then Sterbenz)
    let b = -(k * LN2_32_B);
    let rh = keep(r1 + b);
    let bb = rh - r1;
    let t = (r1 - (rh - bb)) + (b - bb); // r1 + b = rh + t exactly
    let rl = (t - k * LN2_32_C) - keep(k * LN2_32_D);
    let sq = two_prod(rh, rh);
    let h = 0.5 * sq.x;
    let s1 = keep(1.0 + rh);
    let e1 = rh - (s1 - 1.0); // 1 + rh = s1 + e1 exactly
    let s2 = keep(s1 + h);
    let e2 = h - (s2 - s1); // s1 + h = s2 + e2 exactly
    var c = keep(rh * 0.008333333) + 0.041666668;
    c = keep(rh * c) + 0.16666667;
    let cube = keep(sq.x * rh);
    // rl · exp(rh) to ~2^-46: rl reaches 2^-22 (k · LN2_32_C), so rl · rh²/2 and rl²/2 count.
    let rl_part = rl + keep(rl * (rh + (h + 0.5 * rl)));
    let tail = ((e1 + e2) + 0.5 * sq.y) + (keep(cube * c) + rl_part);
    // 2^(j/32) · (s2 + tail): the leading product exactly, the rest rounded.
    let ki = i32(k);
    let j = u32(ki & 31);
    let th = EXP2_HI[j];
    let m = two_prod(th, s2);
    let low = (m.y + keep(th * tail)) + keep(EXP2_LO[j] * s2);
    let mant = m.x + low;
    // × 2^e in two exact steps (e is -127..128).
    let e = ki >> 5u;
    let half_e = e / 2;
    let v = (mant * pow2(half_e)) * pow2(e - half_e);
    if (v < 1.1754944e-38) {
        return 0.0;
    }
    return keep(v); // a product: the caller's `1.0 + exp_rn(..)` must not fuse with it
}

// SiLU as the CPU computes it: x / (1 + exp(-x)), each step rounded once.
fn silu_rn(x: f32) -> f32 {
    if (x < -88.7228317) {
        return bitcast<f32>(0x80000000u); // x / (1 + inf) = -0
    }
    return div_rn(x, 1.0 + exp_rn(-x));
}
