//! Prefill kernels on packed operands for the 32-element block types (Q4_0, Q4_1, Q5_0,
//! Q8_0): `matmul` unpacks each weight row and each quantized activation row once per call
//! into register-ready 64-byte vectors, and a 4-row x 4-token tile then runs on plain loads.
//!
//! ```text
//!   weight pair (2 blocks) -> [u: 64 x u8][d_w: 16 x f32]{[m_w / 8: 16 x f32] (Q4_1)}
//!   act pair (2 blocks)    -> [y: 64 x i8][d_a: 16 x f32][-bias * sum(y) per lane: 16 x i32 |
//!                                                         s_a: 16 x f32 (Q8_1)]
//! ```
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

/// Bytes of one packed activation pair (all types).
const A_PAIR: usize = 192;

p_fn! {
    /// Lane `k` of the result is the sum of the 16 lanes of `v[k]` (a transposing reduction:
    /// 45 vector operations for 16 sums instead of 16 separate reductions).
    fn hsum16(v: &[__m512; 16]) -> __m512 {
        // Within 128-bit lanes: (a, b) -> [a, b, a, b] partials.
        let mut l1 = [_mm512_setzero_ps(); 8];
        for (k, l) in l1.iter_mut().enumerate() {
            let (a, b) = (v[2 * k], v[2 * k + 1]);
            *l = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
        }
        // Within 128-bit lanes: position p holds source 4m + p.
        let mut l2 = [_mm512_setzero_ps(); 4];
        for (m, l) in l2.iter_mut().enumerate() {
            let (c, d) = (l1[2 * m], l1[2 * m + 1]);
            let u = _mm512_shuffle_ps::<0b01_00_01_00>(c, d);
            let w = _mm512_shuffle_ps::<0b11_10_11_10>(c, d);
            *l = _mm512_add_ps(u, w);
        }
        // Across 128-bit lanes: 128-bit lane q ends up holding l2[q]'s totals.
        let fold = |g: __m512, h: __m512| {
            let u = _mm512_shuffle_f32x4::<0b10_00_10_00>(g, h);
            let w = _mm512_shuffle_f32x4::<0b11_01_11_01>(g, h);
            _mm512_add_ps(u, w)
        };
        fold(fold(l2[0], l2[1]), fold(l2[2], l2[3]))
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
                    let o = dst.add(128 * i);
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

p_fn! {
    /// Q4_1 weights: nibbles, `d_w` and `m_w / 8` (the min term is added in all 8 lanes of a
    /// block and summed by the final reduction).
    fn pack_q4_1(w: *const u8, n: usize, dst: *mut u8, t: &[f32; 65536]) -> () {
        for i in 0..n.div_ceil(2) {
            let p0 = w.add(40 * i);
            let full = 2 * i + 1 < n;
            let p1 = if full { p0.add(20) } else { p0 };
            let mut u = nibbles64(p0.add(4), p1.add(4));
            let mut d = scales2(bcast_f16(t, p0), bcast_f16(t, p1));
            let m = scales2(bcast_f16(t, p0.add(2)), bcast_f16(t, p1.add(2)));
            let mut m = _mm512_mul_ps(m, _mm512_set1_ps(0.125));
            if !full {
                u = _mm512_maskz_mov_epi8(FIRST_BYTES, u);
                d = _mm512_maskz_mov_ps(FIRST_LANES, d);
                m = _mm512_maskz_mov_ps(FIRST_LANES, m);
            }
            let o = dst.add(192 * i);
            st(o, u);
            stf(o.add(64), d);
            stf(o.add(128), m);
        }
    }
}

p_fn! {
    /// Q8_0 (`bsz` 34, `q` at 2) or Q8_1 (`bsz` 36, `q` at 4, `s` at 2) activations:
    /// `y`, `d_a`, then `-bias * sum(y)` lanes (`sum_at == None`) or `s_a` (Q8_1).
    #[allow(clippy::too_many_arguments)]
    fn pack_acts(a: *const u8, n: usize, dst: *mut u8, bsz: usize, q: usize, sum_at: Option<usize>, bias: i8, t: &[f32; 65536]) -> () {
        let zero = _mm512_setzero_si512();
        for i in 0..n.div_ceil(2) {
            let p0 = a.add(bsz * 2 * i);
            let full = 2 * i + 1 < n;
            let p1 = if full { p0.add(bsz) } else { p0 };
            let mut y = load64(p0.add(q), p1.add(q));
            let mut d = scales2(bcast_f16(t, p0), bcast_f16(t, p1));
            let mut s = match sum_at {
                Some(at) => scales2(bcast_f16(t, p0.add(at)), bcast_f16(t, p1.add(at))),
                None => _mm512_setzero_ps(),
            };
            if !full {
                y = _mm512_maskz_mov_epi8(FIRST_BYTES, y);
                d = _mm512_maskz_mov_ps(FIRST_LANES, d);
                s = _mm512_maskz_mov_ps(FIRST_LANES, s);
            }
            let o = dst.add(A_PAIR * i);
            st(o, y);
            stf(o.add(64), d);
            if sum_at.is_some() {
                stf(o.add(128), s);
            } else {
                let off = _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(bias), y);
                st(o.add(128), _mm512_sub_epi32(zero, off));
            }
        }
    }
}

/// 4 packed weight rows (`w`, `stride` bytes apart) x 4 packed activation rows, `n` pairs:
/// lane `4 * r + k` of the result is `dot(row r, token k)`. `MIN`: Q4_1 (min term) layout.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
unsafe fn tile<const MIN: bool>(
    w: *const u8,
    stride: usize,
    a: [*const u8; 4],
    n: usize,
) -> [f32; 16] {
    {
        let wpair = if MIN { 192 } else { 128 };
        let zero = _mm512_setzero_si512();
        let ld = |p: *const u8| _mm512_loadu_si512(p as *const __m512i);
        let ldf = |p: *const u8| _mm512_loadu_ps(p as *const f32);
        let mut acc = [_mm512_setzero_ps(); 16];
        for i in 0..n {
            let mut x = [zero; 4];
            let mut dw = [_mm512_setzero_ps(); 4];
            for r in 0..4 {
                let wp = w.add(r * stride + wpair * i);
                x[r] = ld(wp);
                dw[r] = ldf(wp.add(64));
            }
            for k in 0..4 {
                let ap = a[k].add(A_PAIR * i);
                let (y, da) = (ld(ap), ldf(ap.add(64)));
                for r in 0..4 {
                    let acc = &mut acc[4 * r + k];
                    let d = _mm512_mul_ps(dw[r], da);
                    if MIN {
                        let p = _mm512_dpbusd_epi32(zero, x[r], y);
                        *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), *acc);
                        let m = ldf(w.add(r * stride + wpair * i + 128));
                        *acc = _mm512_fmadd_ps(m, ldf(ap.add(128)), *acc);
                    } else {
                        let p = _mm512_dpbusd_epi32(ld(ap.add(128)), x[r], y);
                        *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), *acc);
                    }
                }
            }
        }
        let mut out = [0f32; 16];
        _mm512_storeu_ps(out.as_mut_ptr(), hsum16(&acc));
        out
    }
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
    let w_pair = if ty == GgmlType::Q4_1 { 192 } else { 128 };
    Some(PackedTile {
        w_pair,
        a_pair: A_PAIR,
        pack_w,
        pack_a,
        tile,
    })
}
