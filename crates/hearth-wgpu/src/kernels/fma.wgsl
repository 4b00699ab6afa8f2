// `fma_rn(a, b, c)`: a · b + c with one rounding (to nearest, ties to even), in integer
// arithmetic, for finite a, b, c.
//
// NOTE: WGSL's `fma` need not be fused, and lavapipe's is not (a product rounded, then a sum
// rounded). The CPU kernels this matches use x86's fused multiply-add, so it is done here
// exactly: the 48-bit product and c as 64-bit integers (vec2<u32>: low, high word) with a
// shared exponent, added with a sticky bit for what alignment shifts out, then rounded once.
// Results below the normal range give ±0 (they do not occur in the matmul sums).

// `v << s` (s < 64) for a 64-bit value.
fn shl64(v: vec2<u32>, s: u32) -> vec2<u32> {
    if (s == 0u) {
        return v;
    }
    if (s >= 32u) {
        return vec2<u32>(0u, v.x << (s - 32u));
    }
    return vec2<u32>(v.x << s, (v.y << s) | (v.x >> (32u - s)));
}

// `v >> s`, with bit 0 set when any bit shifted out was set (the sticky bit).
fn shr64_sticky(v: vec2<u32>, s: u32) -> vec2<u32> {
    if (s == 0u) {
        return v;
    }
    if (s >= 64u) {
        return vec2<u32>(select(0u, 1u, v.x != 0u || v.y != 0u), 0u);
    }
    var r: vec2<u32>;
    var lost: u32;
    if (s >= 32u) {
        let t = s - 32u;
        r = vec2<u32>(v.y >> t, 0u);
        lost = v.x;
        if (t > 0u) {
            lost |= v.y << (32u - t);
        }
    } else {
        r = vec2<u32>((v.x >> s) | (v.y << (32u - s)), v.y >> s);
        lost = v.x << (32u - s);
    }
    return vec2<u32>(r.x | select(0u, 1u, lost != 0u), r.y);
}

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

// a - b for a ≥ b.
fn sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}

fn ge64(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.y > b.y || (a.y == b.y && a.x >= b.x);
}

fn clz64(v: vec2<u32>) -> u32 {
    if (v.y != 0u) {
        return countLeadingZeros(v.y);
    }
    return 32u + countLeadingZeros(v.x);
}

// The product of two 24-bit integers, exactly.
fn mul24(a: u32, b: u32) -> vec2<u32> {
    let lo = (a & 0xffffu) * (b & 0xffffu);
    let mid = (a >> 16u) * (b & 0xffffu) + (a & 0xffffu) * (b >> 16u);
    let x = lo + (mid << 16u);
    return vec2<u32>(x, (a >> 16u) * (b >> 16u) + (mid >> 16u) + select(0u, 1u, x < lo));
}

// |v| as (significand, e) with |v| = significand · 2^(e - 150); subnormals have e = 1.
fn parts(v: f32) -> vec2<u32> {
    let b = bitcast<u32>(v);
    let e = (b >> 23u) & 0xffu;
    if (e == 0u) {
        return vec2<u32>(b & 0x7fffffu, 1u);
    }
    return vec2<u32>((b & 0x7fffffu) | 0x800000u, e);
}

// v · 2^e normalized so that its top bit is bit 62: (value, new e).
fn normalize64(v: vec2<u32>, e: i32) -> vec3<u32> {
    let z = clz64(v);
    return vec3<u32>(shl64(v, z - 1u), bitcast<u32>(e - i32(z) + 1));
}

fn fma_rn(a: f32, b: f32, c: f32) -> f32 {
    let pa = parts(a);
    let pb = parts(b);
    let pc = parts(c);
    if (pa.x == 0u || pb.x == 0u) {
        return c + a * b; // an exact zero product: the sum is exact too
    }
    let neg_p = (bitcast<u32>(a) ^ bitcast<u32>(b)) >= 0x80000000u;
    let neg_c = bitcast<u32>(c) >= 0x80000000u;
    // Both as 64-bit values with the top bit at 62 (bit 63 takes a carry).
    let np = normalize64(mul24(pa.x, pb.x), i32(pa.y + pb.y) - 300);
    var big = np.xy;
    var e = bitcast<i32>(np.z);
    var neg = neg_p;
    var small = vec2<u32>(0u, 0u);
    var neg_small = neg_c;
    if (pc.x != 0u) {
        let nc = normalize64(vec2<u32>(pc.x, 0u), i32(pc.y) - 150);
        let ec = bitcast<i32>(nc.z);
        if (ec > e) {
            small = shr64_sticky(big, u32(ec - e));
            big = nc.xy;
            e = ec;
            neg = neg_c;
            neg_small = neg_p;
        } else {
            small = shr64_sticky(nc.xy, u32(e - ec));
        }
    }
    var sum: vec2<u32>;
    if (neg == neg_small) {
        sum = add64(big, small);
    } else if (ge64(big, small)) {
        sum = sub64(big, small);
    } else {
        sum = sub64(small, big);
        neg = !neg;
    }
    if (sum.x == 0u && sum.y == 0u) {
        return 0.0;
    }
    // Keep 26 bits: 24 of significand, a round bit and a sticky bit.
    let top = 63 - i32(clz64(sum));
    let sh = top - 25;
    var v26: u32;
    if (sh >= 0) {
        v26 = shr64_sticky(sum, u32(sh)).x;
    } else {
        v26 = shl64(sum, u32(-sh)).x;
    }
    var m = v26 >> 2u;
    let g = v26 & 3u;
    if (g == 3u || (g == 2u && (m & 1u) == 1u)) {
        m += 1u;
    }
    var biased = e + sh + 2 + 150;
    if (m == 0x1000000u) {
        m >>= 1u;
        biased += 1;
    }
    let sign = select(0u, 0x80000000u, neg);
    if (biased <= 0) {
        return bitcast<f32>(sign);
    }
    if (biased >= 255) {
        return bitcast<f32>(sign | 0x7f800000u);
    }
    return bitcast<f32>(sign | (u32(biased) << 23u) | (m & 0x7fffffu));
}
