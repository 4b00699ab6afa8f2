//! 512-bit kernels for Q4_K and Q6_K: 64 quants per register. Scales for each pair of groups
//! are spread over the lanes with one `vpermw`; mins (Q4_K) and the -32 offset (Q6_K) come
//! from the Q8_K group sums as in the 256-bit kernels.

use std::arch::x86_64::*;

use crate::blocks::unpack_k4_scales;
use crate::dot::x86::{bytes_at, f16_at, f32_at, hsum_ps, load32};
use crate::dot::{Dot4Fn, DotFn};
use crate::GgmlType;

macro_rules! k_fn {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        $(#[$m])*
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
        unsafe fn $name($($arg: $ty),*) -> $ret $body
    };
}

/// `vpermw` indices putting i16 scale `first + k / per` in lane `k` (32 lanes).
const fn spread_idx(first: i16, per: i16) -> [i16; 32] {
    let mut idx = [0i16; 32];
    let mut k = 0;
    while k < 32 {
        idx[k] = first + k as i16 / per;
        k += 1;
    }
    idx
}

const Q4K_IDX: [[i16; 32]; 4] = [
    spread_idx(0, 16),
    spread_idx(2, 16),
    spread_idx(4, 16),
    spread_idx(6, 16),
];
const Q6K_IDX: [[i16; 32]; 4] = [
    spread_idx(0, 8),
    spread_idx(4, 8),
    spread_idx(8, 8),
    spread_idx(12, 8),
];

k_fn! {
    fn load_idx(idx: &[i16; 32]) -> __m512i {
        _mm512_loadu_si512(idx.as_ptr() as *const __m512i)
    }
}

k_fn! {
    fn q4_k_q8_k(w: *const u8, a: *const u8, n: usize) -> f32 {
        let m4 = _mm512_set1_epi8(0x0F);
        let shifts = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
        let idx = [load_idx(&Q4K_IDX[0]), load_idx(&Q4K_IDX[1]), load_idx(&Q4K_IDX[2]), load_idx(&Q4K_IDX[3])];
        let mut acc = _mm512_setzero_ps();
        let mut acc_m = _mm256_setzero_ps();
        for i in 0..n {
            let wp = w.add(144 * i);
            let ap = a.add(292 * i);
            let (ad, y) = (f32_at(ap), ap.add(4));
            let sm = unpack_k4_scales(&bytes_at(wp.add(4)));
            // Mins: 8 lanes of min[g] * (bsums[2g] + bsums[2g + 1]).
            let gsum = _mm256_madd_epi16(load32(ap.add(260)), _mm256_set1_epi16(1));
            let mins = _mm256_cvtepu8_epi32(_mm_loadl_epi64(sm[8..].as_ptr() as *const __m128i));
            let dmin = _mm256_set1_ps(ad * f16_at(wp.add(2)));
            acc_m = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(_mm256_mullo_epi32(gsum, mins)), acc_m);
            let sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(sm.as_ptr() as *const __m128i)));
            let mut sumi = _mm512_setzero_si512();
            for (j, idx) in idx.iter().enumerate() {
                // Lanes 0..32: low nibbles (group 2j), 32..64: high nibbles (group 2j + 1).
                let q = _mm512_broadcast_i64x4(load32(wp.add(16 + 32 * j)));
                let q = _mm512_and_si512(_mm512_srlv_epi64(q, shifts), m4);
                let yv = _mm512_loadu_si512(y.add(64 * j) as *const __m512i);
                let p = _mm512_maddubs_epi16(q, yv);
                sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p, _mm512_permutexvar_epi16(*idx, sc)));
            }
            let d = _mm512_set1_ps(ad * f16_at(wp));
            acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi), acc);
        }
        _mm512_reduce_add_ps(acc) - hsum_ps(acc_m)
    }
}

k_fn! {
    fn q6_k_q8_k(w: *const u8, a: *const u8, n: usize) -> f32 {
        let m4 = _mm512_set1_epi8(0x0F);
        let m3 = _mm512_set1_epi8(3);
        let sh01 = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
        let sh23 = _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4);
        let idx = [load_idx(&Q6K_IDX[0]), load_idx(&Q6K_IDX[1]), load_idx(&Q6K_IDX[2]), load_idx(&Q6K_IDX[3])];
        let mut acc = _mm512_setzero_ps();
        let mut acc_off = _mm256_setzero_ps();
        for i in 0..n {
            let wp = w.add(210 * i);
            let ap = a.add(292 * i);
            let (ad, y) = (f32_at(ap), ap.add(4));
            let d = ad * f16_at(wp.add(208));
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(wp.add(192) as *const __m128i));
            // Quants are stored as q + 32; subtract 32 * sum(sc * bsums).
            let offs = _mm256_slli_epi32(_mm256_madd_epi16(load32(ap.add(260)), sc16), 5);
            acc_off = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(offs), acc_off);
            let sc = _mm512_castsi256_si512(sc16);
            let mut sumi = _mm512_setzero_si512();
            for h in 0..2 {
                // ql[64h..64h+64]: low nibbles are sub-blocks 0 and 1, high nibbles 2 and 3.
                let ql = _mm512_loadu_si512(wp.add(64 * h) as *const __m512i);
                let qh = _mm512_broadcast_i64x4(load32(wp.add(128 + 32 * h)));
                let hi01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, sh01), m3), 4);
                let hi23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, sh23), m3), 4);
                let q01 = _mm512_or_si512(_mm512_and_si512(ql, m4), hi01);
                let q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), hi23);
                let y01 = _mm512_loadu_si512(y.add(128 * h) as *const __m512i);
                let y23 = _mm512_loadu_si512(y.add(128 * h + 64) as *const __m512i);
                let s01 = _mm512_permutexvar_epi16(idx[2 * h], sc);
                let s23 = _mm512_permutexvar_epi16(idx[2 * h + 1], sc);
                sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(q01, y01), s01));
                sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(q23, y23), s23));
            }
            acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
        }
        _mm512_reduce_add_ps(acc) - hsum_ps(acc_off)
    }
}

k_fn! {
    /// Q4_K against 4 Q8_K activation rows: the block's nibbles and spread scales are unpacked
    /// once and serve every token; `vpdpwssd` folds the scale multiply into the accumulation.
    /// Per token the arithmetic (and so every rounding) is that of `q4_k_q8_k`.
    fn q4_k_x4(w: *const u8, a: [*const u8; 4], n: usize) -> [f32; 4] {
        let m4 = _mm512_set1_epi8(0x0F);
        let shifts = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
        let idx = [load_idx(&Q4K_IDX[0]), load_idx(&Q4K_IDX[1]), load_idx(&Q4K_IDX[2]), load_idx(&Q4K_IDX[3])];
        // Byte g of the 8 mins to bytes 2g and 2g + 1, matching the 16 group sums of Q8_K.
        let dup = _mm_set_epi8(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut acc_m = [_mm256_setzero_ps(); 4];
        for i in 0..n {
            let wp = w.add(144 * i);
            let sm = unpack_k4_scales(&bytes_at(wp.add(4)));
            let sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(sm.as_ptr() as *const __m128i)));
            let mins = _mm_shuffle_epi8(_mm_loadl_epi64(sm[8..].as_ptr() as *const __m128i), dup);
            let mins = _mm256_cvtepu8_epi16(mins);
            let mut q = [_mm512_setzero_si512(); 4];
            let mut s = [_mm512_setzero_si512(); 4];
            for j in 0..4 {
                // Lanes 0..32: low nibbles (group 2j), 32..64: high nibbles (group 2j + 1).
                let v = _mm512_broadcast_i64x4(load32(wp.add(16 + 32 * j)));
                q[j] = _mm512_and_si512(_mm512_srlv_epi64(v, shifts), m4);
                s[j] = _mm512_permutexvar_epi16(idx[j], sc);
            }
            let (d, dmin) = (f16_at(wp), f16_at(wp.add(2)));
            for k in 0..4 {
                let ap = a[k].add(292 * i);
                let (ad, y) = (f32_at(ap), ap.add(4));
                let mut sumi = _mm512_setzero_si512();
                for j in 0..4 {
                    let yv = _mm512_loadu_si512(y.add(64 * j) as *const __m512i);
                    sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q[j], yv), s[j]);
                }
                let msum = _mm256_madd_epi16(load32(ap.add(260)), mins);
                acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(ad * d), _mm512_cvtepi32_ps(sumi), acc[k]);
                acc_m[k] = _mm256_fmadd_ps(_mm256_set1_ps(ad * dmin), _mm256_cvtepi32_ps(msum), acc_m[k]);
            }
        }
        let mut out = [0f32; 4];
        for k in 0..4 {
            out[k] = _mm512_reduce_add_ps(acc[k]) - hsum_ps(acc_m[k]);
        }
        out
    }
}

k_fn! {
    /// Q6_K against 4 Q8_K activation rows (see `q4_k_x4`), with the same arithmetic per
    /// token as `q6_k_q8_k`.
    fn q6_k_x4(w: *const u8, a: [*const u8; 4], n: usize) -> [f32; 4] {
        let m4 = _mm512_set1_epi8(0x0F);
        let m3 = _mm512_set1_epi8(3);
        let sh01 = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
        let sh23 = _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4);
        let idx = [load_idx(&Q6K_IDX[0]), load_idx(&Q6K_IDX[1]), load_idx(&Q6K_IDX[2]), load_idx(&Q6K_IDX[3])];
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut acc_off = [_mm256_setzero_ps(); 4];
        for i in 0..n {
            let wp = w.add(210 * i);
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(wp.add(192) as *const __m128i));
            let sc = _mm512_castsi256_si512(sc16);
            let mut q = [_mm512_setzero_si512(); 4];
            let mut s = [_mm512_setzero_si512(); 4];
            for h in 0..2 {
                // ql[64h..64h+64]: low nibbles are sub-blocks 0 and 1, high nibbles 2 and 3.
                let ql = _mm512_loadu_si512(wp.add(64 * h) as *const __m512i);
                let qh = _mm512_broadcast_i64x4(load32(wp.add(128 + 32 * h)));
                let hi01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, sh01), m3), 4);
                let hi23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, sh23), m3), 4);
                q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), hi01);
                q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), hi23);
                s[2 * h] = _mm512_permutexvar_epi16(idx[2 * h], sc);
                s[2 * h + 1] = _mm512_permutexvar_epi16(idx[2 * h + 1], sc);
            }
            let dw = f16_at(wp.add(208));
            for k in 0..4 {
                let ap = a[k].add(292 * i);
                let (ad, y) = (f32_at(ap), ap.add(4));
                let d = _mm256_set1_ps(ad * dw);
                // Quants are stored as q + 32; subtract 32 * sum(sc * bsums).
                let offs = _mm256_slli_epi32(_mm256_madd_epi16(load32(ap.add(260)), sc16), 5);
                acc_off[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(offs), acc_off[k]);
                let mut sumi = _mm512_setzero_si512();
                for j in 0..4 {
                    let yv = _mm512_loadu_si512(y.add(64 * j) as *const __m512i);
                    sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q[j], yv), s[j]);
                }
                acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(ad * dw), _mm512_cvtepi32_ps(sumi), acc[k]);
            }
        }
        std::array::from_fn(|k| _mm512_reduce_add_ps(acc[k]) - hsum_ps(acc_off[k]))
    }
}

/// The one-row x four-token k-quant kernel for `ty`, if this module has one.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/DQ/VL/VNNI.
pub(super) unsafe fn kernel_x4(ty: GgmlType) -> Option<Dot4Fn> {
    // SAFETY (every closure): as in `kernel`; all four activation rows have the same length.
    Some(match ty {
        GgmlType::Q4_K => {
            |w, a| unsafe { q4_k_x4(w.as_ptr(), a.map(|r| r.as_ptr()), w.len() / 144) }
        }
        GgmlType::Q6_K => {
            |w, a| unsafe { q6_k_x4(w.as_ptr(), a.map(|r| r.as_ptr()), w.len() / 210) }
        }
        _ => return None,
    })
}

/// The 512-bit k-quant kernel for `ty`, if this module has one.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/DQ/VL/VNNI.
pub(super) unsafe fn kernel(ty: GgmlType) -> Option<DotFn> {
    // SAFETY (every closure): the caller checked the CPU features, and the row lengths were
    // checked against the block count before any DotFn is called.
    Some(match ty {
        GgmlType::Q4_K => |w, a| unsafe { q4_k_q8_k(w.as_ptr(), a.as_ptr(), w.len() / 144) },
        GgmlType::Q6_K => |w, a| unsafe { q6_k_q8_k(w.as_ptr(), a.as_ptr(), w.len() / 210) },
        _ => return None,
    })
}
