//! Rust models of exact.wgsl's algorithms, step for step: `f32::mul_add` stands for `fma_rn`
//! (both round once), and the device's `1 / b` and `inverseSqrt` are the exact results moved by
//! a given number of ulps (Vulkan and Metal allow a few), so the models show that the
//! corrections do not depend on how good the starting approximation is.

pub use crate::xorshift::Rng;

impl Rng {
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    /// A positive float with a random significand and an exponent uniform in [e0, e1).
    pub fn float_in_exponents(&mut self, e0: i32, e1: i32) -> f32 {
        let e = e0 + (self.next() % (e1 - e0) as u64) as i32;
        let m = (self.next() >> 41) as u32; // 23 bits
        f32::from_bits(((e + 127) as u32) << 23 | m)
    }

    pub fn sign(&mut self) -> f32 {
        if self.next() & 1 == 0 {
            1.0
        } else {
            -1.0
        }
    }

    /// An ulp offset in [-n, n].
    pub fn ulps(&mut self, n: i32) -> i32 {
        (self.next() % (2 * n as u64 + 1)) as i32 - n
    }
}

/// `v` moved by `ulps` (positive finite `v`).
fn off_by(v: f32, ulps: i32) -> f32 {
    f32::from_bits((v.to_bits() as i32 + ulps) as u32)
}

fn next_float(v: f32, away: bool) -> f32 {
    f32::from_bits(if away {
        v.to_bits() + 1
    } else {
        v.to_bits() - 1
    })
}

/// `div_rn`, with the device's `1 / d` off by `ulps`.
pub fn div_model(a: f32, b: f32, ulps: i32) -> f32 {
    if a == 0.0 {
        return f32::from_bits((a.to_bits() ^ b.to_bits()) & 0x8000_0000);
    }
    let s = if b.abs() > 4.253_529_6e37 {
        0.0625
    } else {
        1.0
    };
    let (n, d) = (a * s, b * s);
    let y = off_by(1.0 / d, ulps);
    let q0 = n * y;
    let q1 = (-q0).mul_add(d, n).mul_add(y, q0);
    let r = (-q1).mul_add(d, n);
    if r == 0.0 {
        return q1;
    }
    let away = ((r > 0.0) == (d > 0.0)) == (q1 > 0.0);
    let q2 = next_float(q1, away);
    let bits = q1.to_bits();
    let e = ((bits >> 23) & 0xff) as i32;
    let halved = !away && bits & 0x7f_ffff == 0 && e > 1;
    let shift = e - 151 - halved as i32;
    let half_gap = (d.abs() as f64 * 2f64.powi(shift)) as f32; // ldexp

    if r.abs() > half_gap {
        q2
    } else {
        q1
    }
}

/// `sqrt_rn`, with the device's `inverseSqrt(a)` off by `ulps`.
pub fn sqrt_model(a: f32, ulps: i32) -> f32 {
    if a == 0.0 {
        return a;
    }
    let y = off_by(1.0 / a.sqrt(), ulps);
    let s0 = a * y;
    let s = (-s0).mul_add(s0, a).mul_add(0.5 * y, s0);
    let r = (-s).mul_add(s, a);
    let above = next_float(s, true);
    let below = next_float(s, false);
    if r > s * (above - s) {
        above
    } else if r <= -(s * (s - below)) {
        below
    } else {
        s
    }
}

/// exact.wgsl's constants for `exp_rn`, read from its source.
pub struct ExpTable {
    pub hi: Vec<f32>,
    pub lo: Vec<f32>,
    /// ln2 / 32 in four parts.
    pub ln2_32: [f32; 4],
}

/// The numbers of the WGSL declaration that starts with `decl`, up to its `;`.
fn numbers_after(src: &str, decl: &str) -> Vec<f32> {
    let start = src
        .find(decl)
        .unwrap_or_else(|| panic!("no `{decl}` in exact.wgsl"))
        + decl.len();
    let body = &src[start..start + src[start..].find(';').expect("a `;`")];
    body.split(|c: char| c == ',' || c == '(' || c == ')' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .filter_map(|t| t.parse::<f32>().ok())
        .collect()
}

impl ExpTable {
    pub fn from_wgsl(src: &str) -> ExpTable {
        let one = |name: &str| numbers_after(src, &format!("const {name}: f32 ="))[0];
        let table = |name: &str| {
            let v = numbers_after(src, &format!("const {name} = array<f32, 32>"));
            assert_eq!(v.len(), 32, "{name}");
            v
        };
        ExpTable {
            hi: table("EXP2_HI"),
            lo: table("EXP2_LO"),
            ln2_32: [
                one("LN2_32_A"),
                one("LN2_32_B"),
                one("LN2_32_C"),
                one("LN2_32_D"),
            ],
        }
    }

    /// hi + lo is 2^(j/32) split as the comments say, and the parts of ln2 / 32 have the bits
    /// the reduction needs.
    pub fn check(&self) {
        for j in 0..32 {
            let t = (j as f64 / 32.0).exp2();
            assert_eq!(self.hi[j], t as f32, "hi {j}");
            assert_eq!(self.lo[j], (t - self.hi[j] as f64) as f32, "lo {j}");
        }
        for (i, part) in self.ln2_32[..3].iter().enumerate() {
            let bits = 24 - part.to_bits().trailing_zeros().min(23);
            assert!(
                bits <= 11,
                "part {i} of ln2 / 32 has {bits} significant bits"
            );
        }
        let sum: f64 = self.ln2_32.iter().map(|&p| p as f64).sum();
        let want = std::f64::consts::LN_2 / 32.0;
        assert!(
            ((sum - want) / want).abs() < 2f64.powi(-52),
            "{sum} vs {want}"
        );
    }
}

/// a · b as (rounded product, exact error).
fn two_prod(a: f32, b: f32) -> (f32, f32) {
    let x = a * b;
    (x, a.mul_add(b, -x))
}

fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// `exp_rn`.
pub fn exp_model(x: f32, t: &ExpTable) -> f32 {
    if x < -88.0 {
        return 0.0;
    }
    if x > 88.722_83 {
        return f32::INFINITY;
    }
    let [ca, cb, cc, cd] = t.ln2_32;
    let k = (x * 46.16624).round_ties_even();
    let r1 = x - k * ca;
    let b = -(k * cb);
    let rh = r1 + b;
    let bb = rh - r1;
    let tt = (r1 - (rh - bb)) + (b - bb);
    let rl = (tt - k * cc) - k * cd;
    let sq = two_prod(rh, rh);
    let h = 0.5 * sq.0;
    let s1 = 1.0 + rh;
    let e1 = rh - (s1 - 1.0);
    let s2 = s1 + h;
    let e2 = h - (s2 - s1);
    let mut c = rh * 0.008_333_333 + 0.041_666_668;
    c = rh * c + 0.166_666_67;
    let cube = sq.0 * rh;
    let rl_part = rl + rl * (rh + (h + 0.5 * rl));
    let tail = ((e1 + e2) + 0.5 * sq.1) + (cube * c + rl_part);
    let ki = k as i32;
    let j = (ki & 31) as usize;
    let m = two_prod(t.hi[j], s2);
    let low = (m.1 + t.hi[j] * tail) + t.lo[j] * s2;
    let mant = m.0 + low;
    let e = ki >> 5;
    let half_e = e / 2;
    let v = (mant * pow2(half_e)) * pow2(e - half_e);
    if v < 1.175_494_4e-38 {
        return 0.0;
    }
    v
}

/// The correctly rounded exp of each input (from f64's exp, whose error is ~2^-53), with
/// exp_rn's conventions (0 below 2^-126); NaN where the f64 result is too close to a midpoint
/// between two floats to tell which way it rounds. Also how many those are.
pub fn exp_reference(inputs: &[f32]) -> (Vec<f32>, usize) {
    let mut undecided = 0;
    let want = inputs
        .iter()
        .map(|&x| {
            let e = (x as f64).exp();
            if e < 2f64.powi(-126) {
                return 0.0;
            }
            let r = e as f32;
            if r.is_infinite() {
                return r;
            }
            // The midpoint on e's side of r.
            let other = if (r as f64) < e {
                f32::from_bits(r.to_bits() + 1)
            } else {
                f32::from_bits(r.to_bits() - 1)
            };
            let mid = (r as f64 + other as f64) / 2.0;
            if ((e - mid) / e).abs() < 2f64.powi(-48) {
                undecided += 1;
                return f32::NAN;
            }
            r
        })
        .collect();
    (want, undecided)
}
