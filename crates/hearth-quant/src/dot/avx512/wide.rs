//! 512-bit kernels for the 32-element block types: two blocks per register, so each block
//! costs half the vector instructions of the 256-bit form. An odd last block goes through the
//! 256-bit kernel of the parent module.

use std::arch::x86_64::*;

use crate::dot::x86::{bcast_f16, f16_table, load32};
use crate::dot::{Dot4Fn, DotFn};
use crate::GgmlType;

/// Every kernel here requires these features; `kernel` is only reached after checking them.
macro_rules! wide_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        $(#[$m])*
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
        $vis unsafe fn $name($($arg: $ty),*) -> $ret $body
    };
}

wide_fn! {
    /// The packed nibbles of two blocks (16 bytes at `p0` and at `p1`) in element order:
    /// `[lo(p0), hi(p0), lo(p1), hi(p1)]`.
    pub(super) fn nibbles64(p0: *const u8, p1: *const u8) -> __m512i {
        // Broadcast loads: one load each, the second merged into the upper half by mask.
        let v = _mm512_broadcast_i32x4(_mm_loadu_si128(p0 as *const __m128i));
        let v = _mm512_mask_broadcast_i32x4(v, 0xFF00, _mm_loadu_si128(p1 as *const __m128i));
        let v = _mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0));
        _mm512_and_si512(v, _mm512_set1_epi8(0x0F))
    }
}

wide_fn! {
    /// 32 bytes at `p0` and 32 at `p1` as one register.
    pub(super) fn load64(p0: *const u8, p1: *const u8) -> __m512i {
        _mm512_inserti64x4(_mm512_castsi256_si512(load32(p0)), load32(p1), 1)
    }
}

wide_fn! {
    /// Per-block scales: lanes 0..8 from `d0`, 8..16 from `d1`.
    pub(super) fn scales2(d0: __m256, d1: __m256) -> __m512 {
        _mm512_insertf32x8(_mm512_castps256_ps512(d0), d1, 1)
    }
}

wide_fn! {
    /// `d_w * d_a` of weight and activation blocks, broadcast.
    fn dd(t: &[f32; 65536], wp: *const u8, ap: *const u8) -> __m256 {
        _mm256_mul_ps(bcast_f16(t, wp), bcast_f16(t, ap))
    }
}

wide_fn! {
    /// Signed x · signed y in 16 i32 lanes: |x| · (y negated where x < 0).
    fn dot_i8(x: __m512i, y: __m512i) -> __m512i {
        let neg = _mm512_movepi8_mask(x);
        let y = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(x), y)
    }
}

wide_fn! {
    /// Two 32-bit high-bit masks (at `p0`, `p1`) as 64 bytes: 0xFF where the bit is set.
    pub(super) fn bits64(p0: *const u8, p1: *const u8) -> __m512i {
        let lo = (p0 as *const u32).read_unaligned() as u64;
        let hi = (p1 as *const u32).read_unaligned() as u64;
        _mm512_movm_epi8(lo | (hi << 32))
    }
}

/// How far ahead of the current block the streaming kernels prefetch weight bytes.
const PREFETCH_AHEAD: usize = 768;

/// Sums block pairs `(scales, i32 lanes)` with two accumulators; `$i` is the first block of
/// the pair. Leaves an odd last block to the caller.
macro_rules! sum_pairs {
    ($n:expr, $i:ident => $body:expr) => {{
        let n: usize = $n;
        let mut acc0 = _mm512_setzero_ps();
        let mut acc1 = _mm512_setzero_ps();
        let mut $i = 0usize;
        while $i + 4 <= n {
            let (d, v): (__m512, __m512i) = $body;
            acc0 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(v), acc0);
            $i += 2;
            let (d, v): (__m512, __m512i) = $body;
            acc1 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(v), acc1);
            $i += 2;
        }
        if $i + 2 <= n {
            let (d, v): (__m512, __m512i) = $body;
            acc0 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(v), acc0);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
    }};
}

wide_fn! {
    fn q8_0_q8_0(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
        let sum = sum_pairs!(n, i => {
            let (wp, ap) = (w.add(34 * i), a.add(34 * i));
            // NOTE: rows stream from DRAM for large matrices (the output projection); running
            // ahead of the hardware prefetcher keeps more lines in flight.
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(PREFETCH_AHEAD) as *const i8);
            let x = load64(wp.add(2), wp.add(36));
            let y = load64(ap.add(2), ap.add(36));
            (scales2(dd(t, wp, ap), dd(t, wp.add(34), ap.add(34))), dot_i8(x, y))
        });
        let last = n / 2 * 2;
        sum + super::q8_0_q8_0(w.add(34 * last), a.add(34 * last), n - last, t)
    }
}

wide_fn! {
    fn q4_0_q8_0(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
        let sum = sum_pairs!(n, i => {
            let (wp, ap) = (w.add(18 * i), a.add(34 * i));
            let x = _mm512_sub_epi8(nibbles64(wp.add(2), wp.add(20)), _mm512_set1_epi8(8));
            let y = load64(ap.add(2), ap.add(36));
            (scales2(dd(t, wp, ap), dd(t, wp.add(18), ap.add(34))), dot_i8(x, y))
        });
        let last = n / 2 * 2;
        sum + super::q4_0_q8_0(w.add(18 * last), a.add(34 * last), n - last, t)
    }
}

wide_fn! {
    fn q5_0_q8_0(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
        let sum = sum_pairs!(n, i => {
            let (wp, ap) = (w.add(22 * i), a.add(34 * i));
            // OR-ing 0xF0 where the high bit is clear gives q - 16 as i8 directly.
            let hi = _mm512_andnot_si512(bits64(wp.add(2), wp.add(24)), _mm512_set1_epi8(0xF0u8 as i8));
            let x = _mm512_or_si512(nibbles64(wp.add(6), wp.add(28)), hi);
            let y = load64(ap.add(2), ap.add(36));
            (scales2(dd(t, wp, ap), dd(t, wp.add(22), ap.add(34))), dot_i8(x, y))
        });
        let last = n / 2 * 2;
        sum + super::q5_0_q8_0(w.add(22 * last), a.add(34 * last), n - last, t)
    }
}

wide_fn! {
    fn q4_1_q8_1(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
        // m_w * s_a terms, summed in 8 lanes that all hold the same value.
        let mut summs = _mm256_setzero_ps();
        let sum = sum_pairs!(n, i => {
            let (wp, ap) = (w.add(20 * i), a.add(36 * i));
            summs = _mm256_add_ps(summs, dd(t, wp.add(2), ap.add(2)));
            summs = _mm256_add_ps(summs, dd(t, wp.add(22), ap.add(38)));
            let x = nibbles64(wp.add(4), wp.add(24));
            let y = load64(ap.add(4), ap.add(40));
            let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x, y);
            (scales2(dd(t, wp, ap), dd(t, wp.add(20), ap.add(36))), p)
        });
        let last = n / 2 * 2;
        sum + _mm256_cvtss_f32(summs) + super::q4_1_q8_1(w.add(20 * last), a.add(36 * last), n - last, t)
    }
}

wide_fn! {
    fn q5_1_q8_1(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
        let mut summs = _mm256_setzero_ps();
        let sum = sum_pairs!(n, i => {
            let (wp, ap) = (w.add(24 * i), a.add(36 * i));
            summs = _mm256_add_ps(summs, dd(t, wp.add(2), ap.add(2)));
            summs = _mm256_add_ps(summs, dd(t, wp.add(26), ap.add(38)));
            let hi = _mm512_and_si512(bits64(wp.add(4), wp.add(28)), _mm512_set1_epi8(0x10));
            let x = _mm512_or_si512(nibbles64(wp.add(8), wp.add(32)), hi);
            let y = load64(ap.add(4), ap.add(40));
            let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x, y);
            (scales2(dd(t, wp, ap), dd(t, wp.add(24), ap.add(36))), p)
        });
        let last = n / 2 * 2;
        sum + _mm256_cvtss_f32(summs) + super::q5_1_q8_1(w.add(24 * last), a.add(36 * last), n - last, t)
    }
}

/// Defines a kernel of one weight row against 4 activation rows of signed Q8_0 blocks, for a
/// signed weight type: the weight pair is unpacked once (`|wp| i8 lanes`) and reused
/// for each token. Prefill runs this; decode runs the one-row kernels above.
macro_rules! signed_x4 {
    ($name:ident, $one:ident, $wsz:expr, |$wp:ident| $unpack:expr) => {
        wide_fn! {
            fn $name(w: *const u8, a: [*const u8; 4], n: usize, t: &[f32; 65536]) -> [f32; 4] {
                let zero = _mm512_setzero_si512();
                let mut acc = [_mm512_setzero_ps(); 4];
                let mut i = 0usize;
                while i + 2 <= n {
                    let $wp = w.add($wsz * i);
                    let x: __m512i = $unpack;
                    let (ax, neg) = (_mm512_abs_epi8(x), _mm512_movepi8_mask(x));
                    let dw = scales2(bcast_f16(t, $wp), bcast_f16(t, $wp.add($wsz)));
                    for (acc, ap) in acc.iter_mut().zip(a) {
                        let ap = ap.add(34 * i);
                        let y = load64(ap.add(2), ap.add(36));
                        let y = _mm512_mask_sub_epi8(y, neg, zero, y);
                        let p = _mm512_dpbusd_epi32(zero, ax, y);
                        let d = _mm512_mul_ps(dw, scales2(bcast_f16(t, ap), bcast_f16(t, ap.add(34))));
                        *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), *acc);
                    }
                    i += 2;
                }
                let mut out = [0f32; 4];
                for k in 0..4 {
                    out[k] = _mm512_reduce_add_ps(acc[k])
                        + super::$one(w.add($wsz * i), a[k].add(34 * i), n - i, t);
                }
                out
            }
        }
    };
}

signed_x4!(q8_0_x4, q8_0_q8_0, 34, |wp| load64(wp.add(2), wp.add(36)));
signed_x4!(q4_0_x4, q4_0_q8_0, 18, |wp| {
    _mm512_sub_epi8(nibbles64(wp.add(2), wp.add(20)), _mm512_set1_epi8(8))
});
signed_x4!(q5_0_x4, q5_0_q8_0, 22, |wp| {
    let hi = _mm512_andnot_si512(
        bits64(wp.add(2), wp.add(24)),
        _mm512_set1_epi8(0xF0u8 as i8),
    );
    _mm512_or_si512(nibbles64(wp.add(6), wp.add(28)), hi)
});

wide_fn! {
    /// Q4_1 against 4 Q8_1 activation rows (see `signed_x4!`).
    fn q4_1_x4(w: *const u8, a: [*const u8; 4], n: usize, t: &[f32; 65536]) -> [f32; 4] {
        let zero = _mm512_setzero_si512();
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut summs = [_mm256_setzero_ps(); 4];
        let mut i = 0usize;
        while i + 2 <= n {
            let wp = w.add(20 * i);
            let x = nibbles64(wp.add(4), wp.add(24));
            let dw = scales2(bcast_f16(t, wp), bcast_f16(t, wp.add(20)));
            let (m0, m1) = (bcast_f16(t, wp.add(2)), bcast_f16(t, wp.add(22)));
            for k in 0..4 {
                let ap = a[k].add(36 * i);
                summs[k] = _mm256_fmadd_ps(m0, bcast_f16(t, ap.add(2)), summs[k]);
                summs[k] = _mm256_fmadd_ps(m1, bcast_f16(t, ap.add(38)), summs[k]);
                let p = _mm512_dpbusd_epi32(zero, x, load64(ap.add(4), ap.add(40)));
                let d = _mm512_mul_ps(dw, scales2(bcast_f16(t, ap), bcast_f16(t, ap.add(36))));
                acc[k] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[k]);
            }
            i += 2;
        }
        let mut out = [0f32; 4];
        for k in 0..4 {
            out[k] = _mm512_reduce_add_ps(acc[k])
                + _mm256_cvtss_f32(summs[k])
                + super::q4_1_q8_1(w.add(20 * i), a[k].add(36 * i), n - i, t);
        }
        out
    }
}

/// The one-row x four-token kernel for `ty`, if this module has one.
///
/// # Safety
/// As for [`kernel`].
pub(super) unsafe fn kernel_x4(ty: GgmlType) -> Option<Dot4Fn> {
    // SAFETY (every closure): as in `kernel`; all four activation rows have the same length.
    Some(match ty {
        GgmlType::Q4_0 => {
            |w, a| unsafe { q4_0_x4(w.as_ptr(), a.map(|r| r.as_ptr()), w.len() / 18, f16_table()) }
        }
        GgmlType::Q4_1 => {
            |w, a| unsafe { q4_1_x4(w.as_ptr(), a.map(|r| r.as_ptr()), w.len() / 20, f16_table()) }
        }
        GgmlType::Q5_0 => {
            |w, a| unsafe { q5_0_x4(w.as_ptr(), a.map(|r| r.as_ptr()), w.len() / 22, f16_table()) }
        }
        GgmlType::Q8_0 => {
            |w, a| unsafe { q8_0_x4(w.as_ptr(), a.map(|r| r.as_ptr()), w.len() / 34, f16_table()) }
        }
        _ => return None,
    })
}

/// The 512-bit kernel for `ty`, if this module has one.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/DQ/VL/VNNI.
pub(super) unsafe fn kernel(ty: GgmlType) -> Option<DotFn> {
    // SAFETY (every closure): the caller checked the CPU features, and the row lengths were
    // checked against the block count before any DotFn is called.
    Some(match ty {
        GgmlType::Q4_0 => {
            |w, a| unsafe { q4_0_q8_0(w.as_ptr(), a.as_ptr(), w.len() / 18, f16_table()) }
        }
        GgmlType::Q4_1 => {
            |w, a| unsafe { q4_1_q8_1(w.as_ptr(), a.as_ptr(), w.len() / 20, f16_table()) }
        }
        GgmlType::Q5_0 => {
            |w, a| unsafe { q5_0_q8_0(w.as_ptr(), a.as_ptr(), w.len() / 22, f16_table()) }
        }
        GgmlType::Q5_1 => {
            |w, a| unsafe { q5_1_q8_1(w.as_ptr(), a.as_ptr(), w.len() / 24, f16_table()) }
        }
        GgmlType::Q8_0 => {
            |w, a| unsafe { q8_0_q8_0(w.as_ptr(), a.as_ptr(), w.len() / 34, f16_table()) }
        }
        _ => return None,
    })
}
