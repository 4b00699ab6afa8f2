//! Prefill kernels on packed operands for the 32-element block types (Q4_0, Q4_1, Q5_0,
//! Q8_0): `matmul` unpacks each weight row and each quantized activation row once per call
//! into register-ready 64-byte vectors, and a 4-row x 4-token tile then runs on plain loads.
//!
//! ```text
//!   weight row: pairs of blocks [u: 64 x u8][d_w: 16 x f32] ...
//!               then for Q4_1: [m_w: one f32 per block, zero-padded to a multiple of 16]
//!   act row:    pairs of blocks [y: 64 x i8][d_a: 16 x f32][-bias * sum(y): 16 x i32] ...
//!               or for Q8_1:    [y: 64 x i8][d_a: 16 x f32] ... then [s_a: one f32 per block]
//! ```
//!
//! The Q4_1 min term `sum(m_w * s_a)` over blocks thus takes one FMA per 16 blocks.
//!
//! Lanes 0..8 of the f32 / i32 vectors belong to the pair's first block, 8..16 to its second.
//! An odd last block is padded with a zero block (u = 0, d = 0, y = 0), which adds nothing.
//!
//! NOTE: weights are stored *unsigned* (`u = q + bias`) so that `vpdpbusd` takes them as they
//! are; `sum(q * y) = sum(u * y) - bias * sum(y)`, and the `-bias * sum(y)` lanes depend on the
//! token only, so they are packed with the activations and seed each row's integer sum. Every
//! block sum stays exact in i32, as in the one-row kernels.

use std::arch::x86_64::*;

use super::wide::{bits64, load64, nibbles64, scales2};
use crate::dot::x86::{bcast_f16, f16_table};
use crate::dot::{PackFn, PackedTile, PackedTileFn};
use crate::GgmlType;

macro_rules! p_fn {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        $(#[$m])*
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
        unsafe fn $name($($arg: $ty),*) -> $ret $body
    };
}

/// Bytes of one packed weight pair.
const W_PAIR: usize = 128;
/// Bytes of one packed Q8_0 activation pair.
const A_PAIR: usize = 192;
/// Bytes of one packed Q8_1 activation pair.
const A_PAIR_Q8_1: usize = 128;

p_fn! {
    /// Lane `k` of the result is the sum of the 16 lanes of `v[k]`, added in exactly the order
    /// of `_mm512_reduce_add_ps` (halves of 8, 4, 2, then 1 lanes) so that the tiles give the
    /// same bits as the one-row kernels' reductions; a transposing reduction, 45 vector
    /// operations for all 16 sums.
    fn hsum16(v: &[__m512; 16]) -> __m512 {
        // s_i = a_i + a_(i+8): 8 sums of each source, two sources per vector.
        let s: [__m512; 8] = std::array::from_fn(|m| {
            let (a, b) = (v[2 * m], v[2 * m + 1]);
            let lo = _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b);
            let hi = _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b);
            _mm512_add_ps(lo, hi)
        });
        // t_i = s_i + s_(i+4): 128-bit lane q holds the 4 sums of source 4m + q.
        let t: [__m512; 4] = std::array::from_fn(|m| {
            let (a, b) = (s[2 * m], s[2 * m + 1]);
            let lo = _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b);
            let hi = _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b);
            _mm512_add_ps(lo, hi)
        });
        // u_i = t_i + t_(i+2): 128-bit lane q holds [u0, u1] of sources 8m + q and 8m + 4 + q.
        let u: [__m512; 2] = std::array::from_fn(|m| {
            let (a, b) = (t[2 * m], t[2 * m + 1]);
            let lo = _mm512_shuffle_ps::<0b01_00_01_00>(a, b);
            let hi = _mm512_shuffle_ps::<0b11_10_11_10>(a, b);
            _mm512_add_ps(lo, hi)
        });
        // r = u_0 + u_1: 128-bit lane q holds sources q, 4 + q, 8 + q, 12 + q.
        let lo = _mm512_shuffle_ps::<0b10_00_10_00>(u[0], u[1]);
        let hi = _mm512_shuffle_ps::<0b11_01_11_01>(u[0], u[1]);
        let r = _mm512_add_ps(lo, hi);
        // Back to source order: lane 4q + p <- lane 4p + q.
        let idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
        _mm512_permutexvar_ps(idx, r)
    }
}

p_fn! {
    /// Stores `v` at `p` (any alignment).
    fn st(p: *mut u8, v: __m512i) -> () {
        _mm512_storeu_si512(p as *mut __m512i, v)
    }
}

p_fn! {
    fn stf(p: *mut u8, v: __m512) -> () {
        _mm512_storeu_ps(p as *mut f32, v)
    }
}

/// Lanes kept for a pair whose second block is padding (bytes / f32 lanes).
const FIRST_BYTES: u64 = 0xFFFF_FFFF;
const FIRST_LANES: u16 = 0x00FF;

/// Defines the weight packer of a signed type: `|p0, p1|` unpacks two blocks to `q + bias`.
macro_rules! pack_offset_weights {
    ($name:ident, $wsz:expr, |$p0:ident, $p1:ident| $unpack:expr) => {
        p_fn! {
            fn $name(w: *const u8, n: usize, dst: *mut u8, t: &[f32; 65536]) -> () {
                for i in 0..n.div_ceil(2) {
                    let $p0 = w.add($wsz * 2 * i);
                    let full = 2 * i + 1 < n;
                    // A lone last block reads itself twice and keeps the first half.
                    let $p1 = if full { $p0.add($wsz) } else { $p0 };
                    let (mut u, mut d): (__m512i, __m512) = ($unpack, scales2(bcast_f16(t, $p0), bcast_f16(t, $p1)));
                    if !full {
                        u = _mm512_maskz_mov_epi8(FIRST_BYTES, u);
                        d = _mm512_maskz_mov_ps(FIRST_LANES, d);
                    }
                    let o = dst.add(W_PAIR * i);
                    st(o, u);
                    stf(o.add(64), d);
                }
            }
        }
    };
}

pack_offset_weights!(pack_q4_0, 18, |p0, p1| nibbles64(p0.add(2), p1.add(2)));
pack_offset_weights!(pack_q5_0, 22, |p0, p1| {
    let hi = _mm512_and_si512(bits64(p0.add(2), p1.add(2)), _mm512_set1_epi8(0x10));
    _mm512_or_si512(nibbles64(p0.add(6), p1.add(6)), hi)
});
pack_offset_weights!(pack_q8_0, 34, |p0, p1| {
    _mm512_xor_si512(load64(p0.add(2), p1.add(2)), _mm512_set1_epi8(0x80u8 as i8))
});

/// Writes the f16 at byte `at` of each of `n` blocks of `bsz` bytes as f32 at `dst`, then
/// zeros up to a multiple of 16 values.
unsafe fn per_block_f32(
    src: *const u8,
    n: usize,
    bsz: usize,
    at: usize,
    dst: *mut u8,
    t: &[f32; 65536],
) {
    let dst = dst as *mut f32;
    for b in 0..n.next_multiple_of(16) {
        let v = if b < n {
            let bits = (src.add(bsz * b + at) as *const u16).read_unaligned();
            t[bits as usize]
        } else {
            0.0
        };
        dst.add(b).write_unaligned(v);
    }
}

p_fn! {
    /// Q4_1 weights: nibbles and `d_w` per pair, then the mins `m_w`.
    fn pack_q4_1(w: *const u8, n: usize, dst: *mut u8, t: &[f32; 65536]) -> () {
        for i in 0..n.div_ceil(2) {
            let p0 = w.add(40 * i);
            let full = 2 * i + 1 < n;
            let p1 = if full { p0.add(20) } else { p0 };
            let mut u = nibbles64(p0.add(4), p1.add(4));
            let mut d = scales2(bcast_f16(t, p0), bcast_f16(t, p1));
            if !full {
                u = _mm512_maskz_mov_epi8(FIRST_BYTES, u);
                d = _mm512_maskz_mov_ps(FIRST_LANES, d);
            }
            let o = dst.add(128 * i);
            st(o, u);
            stf(o.add(64), d);
        }
        per_block_f32(w, n, 20, 2, dst.add(128 * n.div_ceil(2)), t);
    }
}

p_fn! {
    /// Q8_0 (`bsz` 34, `q` at 2) or Q8_1 (`bsz` 36, `q` at 4, `s` at 2) activations:
    /// `y`, `d_a`, then `-bias * sum(y)` lanes (`sum_at == None`) or `s_a` (Q8_1).
    #[allow(clippy::too_many_arguments)]
    fn pack_acts(a: *const u8, n: usize, dst: *mut u8, bsz: usize, q: usize, sum_at: Option<usize>, bias: i8, t: &[f32; 65536]) -> () {
        let zero = _mm512_setzero_si512();
        let pair = if sum_at.is_some() { A_PAIR_Q8_1 } else { A_PAIR };
        for i in 0..n.div_ceil(2) {
            let p0 = a.add(bsz * 2 * i);
            let full = 2 * i + 1 < n;
            let p1 = if full { p0.add(bsz) } else { p0 };
            let mut y = load64(p0.add(q), p1.add(q));
            let mut d = scales2(bcast_f16(t, p0), bcast_f16(t, p1));
            if !full {
                y = _mm512_maskz_mov_epi8(FIRST_BYTES, y);
                d = _mm512_maskz_mov_ps(FIRST_LANES, d);
            }
            let o = dst.add(pair * i);
            st(o, y);
            stf(o.add(64), d);
            if sum_at.is_none() {
                let off = _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(bias), y);
                st(o.add(128), _mm512_sub_epi32(zero, off));
            }
        }
        if let Some(at) = sum_at {
            per_block_f32(a, n, bsz, at, dst.add(pair * n.div_ceil(2)), t);
        }
    }
}

/// 4 packed weight rows (`w`, `stride` bytes apart) x 4 packed activation rows of `n` blocks:
/// lane `4 * r + k` of the result is `dot(row r, token k)`. `MIN`: the Q4_1 x Q8_1 layout.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
unsafe fn tile<const MIN: bool>(
    w: *const u8,
    stride: usize,
    a: [*const u8; 4],
    n: usize,
) -> [f32; 16] {
    let apair = if MIN { A_PAIR_Q8_1 } else { A_PAIR };
    let zero = _mm512_setzero_si512();
    let ld = |p: *const u8| _mm512_loadu_si512(p as *const __m512i);
    let ldf = |p: *const u8| _mm512_loadu_ps(p as *const f32);
    let mut acc = [_mm512_setzero_ps(); 16];
    let n_pairs = n.div_ceil(2);
    for i in 0..n_pairs {
        let mut x = [zero; 4];
        let mut dw = [_mm512_setzero_ps(); 4];
        for r in 0..4 {
            let wp = w.add(r * stride + W_PAIR * i);
            x[r] = ld(wp);
            dw[r] = ldf(wp.add(64));
        }
        for k in 0..4 {
            let ap = a[k].add(apair * i);
            let (y, da) = (ld(ap), ldf(ap.add(64)));
            // The integer sum starts at -bias * sum(y), or 0 for the unsigned Q4_1.
            let start = if MIN { zero } else { ld(ap.add(128)) };
            for r in 0..4 {
                let p = _mm512_dpbusd_epi32(start, x[r], y);
                let acc = &mut acc[4 * r + k];
                *acc = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], da), _mm512_cvtepi32_ps(p), *acc);
            }
        }
    }
    if MIN {
        // sum(m_w * s_a) over blocks, 16 blocks per FMA (padding lanes are zero).
        for c in 0..n.div_ceil(16) {
            let m: [__m512; 4] =
                std::array::from_fn(|r| ldf(w.add(r * stride + W_PAIR * n_pairs + 64 * c)));
            for k in 0..4 {
                let s = ldf(a[k].add(apair * n_pairs + 64 * c));
                for r in 0..4 {
                    acc[4 * r + k] = _mm512_fmadd_ps(m[r], s, acc[4 * r + k]);
                }
            }
        }
    }
    let mut out = [0f32; 16];
    _mm512_storeu_ps(out.as_mut_ptr(), hsum16(&acc));
    out
}

/// The packed prefill kernels for `ty`, if this module has them.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/DQ/VL/VNNI.
pub(super) unsafe fn kernel_packed(ty: GgmlType) -> Option<PackedTile> {
    // SAFETY (every closure): the caller checked the CPU features; `PackedTile` documents the
    // buffer sizes its users guarantee, and every pointer stays inside those buffers.
    let (pack_w, pack_a, tile): (PackFn, PackFn, PackedTileFn) = match ty {
        GgmlType::Q4_0 => (
            |w, n, d| unsafe { pack_q4_0(w.as_ptr(), n, d.as_mut_ptr(), f16_table()) },
            |a, n, d| unsafe {
                pack_acts(a.as_ptr(), n, d.as_mut_ptr(), 34, 2, None, 8, f16_table())
            },
            |w, s, a, n| unsafe { tile::<false>(w.as_ptr(), s, a.map(|r| r.as_ptr()), n) },
        ),
        GgmlType::Q5_0 => (
            |w, n, d| unsafe { pack_q5_0(w.as_ptr(), n, d.as_mut_ptr(), f16_table()) },
            |a, n, d| unsafe {
                pack_acts(a.as_ptr(), n, d.as_mut_ptr(), 34, 2, None, 16, f16_table())
            },
            |w, s, a, n| unsafe { tile::<false>(w.as_ptr(), s, a.map(|r| r.as_ptr()), n) },
        ),
        GgmlType::Q8_0 => (
            |w, n, d| unsafe { pack_q8_0(w.as_ptr(), n, d.as_mut_ptr(), f16_table()) },
            |a, n, d| unsafe {
                pack_acts(
                    a.as_ptr(),
                    n,
                    d.as_mut_ptr(),
                    34,
                    2,
                    None,
                    0x80u8 as i8,
                    f16_table(),
                )
            },
            |w, s, a, n| unsafe { tile::<false>(w.as_ptr(), s, a.map(|r| r.as_ptr()), n) },
        ),
        GgmlType::Q4_1 => (
            |w, n, d| unsafe { pack_q4_1(w.as_ptr(), n, d.as_mut_ptr(), f16_table()) },
            |a, n, d| unsafe {
                pack_acts(
                    a.as_ptr(),
                    n,
                    d.as_mut_ptr(),
                    36,
                    4,
                    Some(2),
                    0,
                    f16_table(),
                )
            },
            |w, s, a, n| unsafe { tile::<true>(w.as_ptr(), s, a.map(|r| r.as_ptr()), n) },
        ),
        _ => return None,
    };
    let q4_1 = ty == GgmlType::Q4_1;
    Some(PackedTile {
        w_pair: W_PAIR,
        a_pair: if q4_1 { A_PAIR_Q8_1 } else { A_PAIR },
        per_block: q4_1,
        pack_w,
        pack_a,
        tile,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn hsum16_adds_in_the_order_of_reduce_add_ps() {
        if crate::cpu::kernel_level() != crate::cpu::KernelLevel::Avx512Vnni {
            return;
        }
        let mut rng = StdRng::seed_from_u64(21);
        for _ in 0..2000 {
            // Mixed magnitudes, so that any other association changes the rounding.
            let vals: Vec<f32> = (0..256)
                .map(|_| rng.gen_range(-1f32..1.0) * 10f32.powi(rng.gen_range(-6..7)))
                .collect();
            // SAFETY: AVX-512 checked above; every load reads 16 of the 256 values.
            let (got, want) = unsafe {
                let v: [__m512; 16] =
                    std::array::from_fn(|k| _mm512_loadu_ps(vals[16 * k..].as_ptr()));
                let mut got = [0f32; 16];
                _mm512_storeu_ps(got.as_mut_ptr(), hsum16(&v));
                (got, v.map(|x| _mm512_reduce_add_ps(x)))
            };
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "{vals:?}");
        }
    }
}
