//! Prefill tiles for the 32-element block types: 4 weight rows x 4 tokens per call, with the
//! 16 partial sums held in registers. Each unpacked weight block pair serves 4 tokens and each
//! loaded activation pair serves 4 rows.
//!
//! NOTE: weights are unpacked to *unsigned* bytes `u = q + bias` so that `vpdpbusd` takes them
//! as they are; `sum(q * y) = sum(u * y) - bias * sum(y)`, and the `bias * sum(y)` lanes depend
//! on the token only, so they are computed once per token and seed each row's accumulation.
//! That replaces the per-(row, token) sign flip of the one-row kernels.

use std::arch::x86_64::*;

use super::wide::{bits64, load64, nibbles64, scales2};
use crate::dot::x86::{bcast_f16, f16_table};
use crate::dot::Tile4Fn;
use crate::GgmlType;

/// Every kernel here requires these features; `kernel_tile4` is only reached after checking.
macro_rules! tile_fn {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        $(#[$m])*
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
        unsafe fn $name($($arg: $ty),*) -> $ret $body
    };
}

tile_fn! {
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

/// Defines a 4 x 4 tile for a signed 32-element weight type stored with an offset: `|wp|`
/// unpacks the block pair at `wp` to unsigned bytes `q + $bias`; activations are Q8_0.
macro_rules! offset_tile {
    ($name:ident, $one:ident, $wsz:expr, $bias:expr, |$wp:ident| $unpack:expr) => {
        tile_fn! {
            fn $name(w: *const u8, stride: usize, a: [*const u8; 4], n: usize, t: &[f32; 65536]) -> [f32; 16] {
                let zero = _mm512_setzero_si512();
                let bias = _mm512_set1_epi8($bias as u8 as i8);
                let mut acc = [_mm512_setzero_ps(); 16];
                let mut i = 0usize;
                while i + 2 <= n {
                    let mut x = [zero; 4];
                    let mut dw = [_mm512_setzero_ps(); 4];
                    for r in 0..4 {
                        let $wp = w.add(r * stride + $wsz * i);
                        x[r] = $unpack;
                        dw[r] = scales2(bcast_f16(t, $wp), bcast_f16(t, $wp.add($wsz)));
                    }
                    for k in 0..4 {
                        let ap = a[k].add(34 * i);
                        let y = load64(ap.add(2), ap.add(36));
                        let off = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, y));
                        let da = scales2(bcast_f16(t, ap), bcast_f16(t, ap.add(34)));
                        for r in 0..4 {
                            let p = _mm512_dpbusd_epi32(off, x[r], y);
                            let d = _mm512_mul_ps(dw[r], da);
                            acc[4 * r + k] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[4 * r + k]);
                        }
                    }
                    i += 2;
                }
                let mut out = [0f32; 16];
                _mm512_storeu_ps(out.as_mut_ptr(), hsum16(&acc));
                if i < n {
                    // An odd last block, through the 256-bit one-row kernel.
                    for r in 0..4 {
                        for k in 0..4 {
                            let (wl, al) = (w.add(r * stride + $wsz * i), a[k].add(34 * i));
                            out[4 * r + k] += super::$one(wl, al, n - i, t);
                        }
                    }
                }
                out
            }
        }
    };
}

offset_tile!(q8_0_t4, q8_0_q8_0, 34, 128, |wp| {
    _mm512_xor_si512(
        load64(wp.add(2), wp.add(36)),
        _mm512_set1_epi8(0x80u8 as i8),
    )
});
offset_tile!(q4_0_t4, q4_0_q8_0, 18, 8, |wp| nibbles64(
    wp.add(2),
    wp.add(20)
));
offset_tile!(q5_0_t4, q5_0_q8_0, 22, 16, |wp| {
    let hi = _mm512_and_si512(bits64(wp.add(2), wp.add(24)), _mm512_set1_epi8(0x10));
    _mm512_or_si512(nibbles64(wp.add(6), wp.add(28)), hi)
});

tile_fn! {
    /// Q4_1 x Q8_1: unsigned weights need no offset; `m_w * s_a` is added per block pair as
    /// `(m_w / 8) * s_a` in each of a block's 8 lanes, which the final reduction sums.
    fn q4_1_t4(w: *const u8, stride: usize, a: [*const u8; 4], n: usize, t: &[f32; 65536]) -> [f32; 16] {
        let zero = _mm512_setzero_si512();
        let eighth = _mm512_set1_ps(0.125);
        let mut acc = [_mm512_setzero_ps(); 16];
        let mut i = 0usize;
        while i + 2 <= n {
            let mut x = [zero; 4];
            let mut dw = [_mm512_setzero_ps(); 4];
            let mut mw = [_mm512_setzero_ps(); 4];
            for r in 0..4 {
                let wp = w.add(r * stride + 20 * i);
                x[r] = nibbles64(wp.add(4), wp.add(24));
                dw[r] = scales2(bcast_f16(t, wp), bcast_f16(t, wp.add(20)));
                let m = scales2(bcast_f16(t, wp.add(2)), bcast_f16(t, wp.add(22)));
                mw[r] = _mm512_mul_ps(m, eighth);
            }
            for k in 0..4 {
                let ap = a[k].add(36 * i);
                let y = load64(ap.add(4), ap.add(40));
                let da = scales2(bcast_f16(t, ap), bcast_f16(t, ap.add(36)));
                let sa = scales2(bcast_f16(t, ap.add(2)), bcast_f16(t, ap.add(38)));
                for r in 0..4 {
                    let p = _mm512_dpbusd_epi32(zero, x[r], y);
                    let d = _mm512_mul_ps(dw[r], da);
                    let acc = &mut acc[4 * r + k];
                    *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), *acc);
                    *acc = _mm512_fmadd_ps(mw[r], sa, *acc);
                }
            }
            i += 2;
        }
        let mut out = [0f32; 16];
        _mm512_storeu_ps(out.as_mut_ptr(), hsum16(&acc));
        if i < n {
            for r in 0..4 {
                for k in 0..4 {
                    let (wl, al) = (w.add(r * stride + 20 * i), a[k].add(36 * i));
                    out[4 * r + k] += super::q4_1_q8_1(wl, al, n - i, t);
                }
            }
        }
        out
    }
}

/// The 4-row x 4-token tile for `ty`, if this module has one.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/DQ/VL/VNNI.
pub(super) unsafe fn kernel_tile4(ty: GgmlType) -> Option<Tile4Fn> {
    // SAFETY (every closure): the caller checked the CPU features; `w` holds 4 rows of equal
    // length and every activation row holds as many elements as one weight row (the
    // `Tile4Fn` contract).
    Some(match ty {
        GgmlType::Q4_0 => |w, a| unsafe {
            let s = w.len() / 4;
            q4_0_t4(w.as_ptr(), s, a.map(|r| r.as_ptr()), s / 18, f16_table())
        },
        GgmlType::Q4_1 => |w, a| unsafe {
            let s = w.len() / 4;
            q4_1_t4(w.as_ptr(), s, a.map(|r| r.as_ptr()), s / 20, f16_table())
        },
        GgmlType::Q5_0 => |w, a| unsafe {
            let s = w.len() / 4;
            q5_0_t4(w.as_ptr(), s, a.map(|r| r.as_ptr()), s / 22, f16_table())
        },
        GgmlType::Q8_0 => |w, a| unsafe {
            let s = w.len() / 4;
            q8_0_t4(w.as_ptr(), s, a.map(|r| r.as_ptr()), s / 34, f16_table())
        },
        _ => return None,
    })
}
