//! AVX-512 activation quantizers, bit-identical to the scalar ones in `quantize_act.rs`.
//!
//! They write straight into the byte layout of the blocks (`#[repr(C)]` in `blocks.rs`), so
//! the destination needs no alignment. Rounding is `vcvtps2dq` with round-to-nearest-even
//! (no libm call), and the edge cases of Rust's `as` casts are reproduced lane by lane: NaN
//! products give 0, `f32 as i8` saturates, and Q8_K's `as i32` then `as i8` keeps the low byte.

use std::arch::x86_64::*;

use half::f16;

/// Every function here requires these features; callers check `kernel_level()` first.
macro_rules! q_fn {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        $(#[$m])*
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
        unsafe fn $name($($arg: $ty),*) -> $ret $body
    };
}

const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

q_fn! {
    /// Max of `|v|` into `m`, skipping NaN lanes as `f32::max` does (`vmaxps` returns its
    /// second operand when either is NaN, and `m` is never NaN).
    fn absmax(v: __m512, m: __m512) -> __m512 {
        _mm512_max_ps(_mm512_abs_ps(v), m)
    }
}

q_fn! {
    /// `q as i8` for 16 lanes, as i32 lanes (round half to even first): saturating at
    /// -128 / 127, NaN to 0.
    fn to_i8_sat(q: __m512) -> __m512i {
        let ord = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(q, q);
        let c = _mm512_min_ps(_mm512_max_ps(q, _mm512_set1_ps(-128.0)), _mm512_set1_ps(127.0));
        _mm512_maskz_cvt_roundps_epi32::<RNE>(ord, c)
    }
}

/// Q8_0 (`SUM == false`, 34-byte blocks) or Q8_1 (`SUM == true`, 36-byte blocks) from
/// `n_blocks * 32` floats at `x`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn q8_01<const SUM: bool>(x: *const f32, dst: *mut u8, n_blocks: usize) {
    {
        let (size, qs) = if SUM { (36, 4) } else { (34, 2) };
        for i in 0..n_blocks {
            let (xp, bp) = (x.add(32 * i), dst.add(size * i));
            let v0 = _mm512_loadu_ps(xp);
            let v1 = _mm512_loadu_ps(xp.add(16));
            let amax = _mm512_reduce_max_ps(absmax(v1, absmax(v0, _mm512_setzero_ps())));
            let d = amax / 127.0;
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let idv = _mm512_set1_ps(id);
            let q0 = to_i8_sat(_mm512_mul_ps(v0, idv));
            let q1 = to_i8_sat(_mm512_mul_ps(v1, idv));
            (bp as *mut [u8; 2]).write_unaligned(f16::from_f32(d).to_le_bytes());
            _mm_storeu_si128(bp.add(qs) as *mut __m128i, _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128(bp.add(qs + 16) as *mut __m128i, _mm512_cvtepi32_epi8(q1));
            if SUM {
                let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
                let s = f16::from_f32(sum as f32 * d);
                (bp.add(2) as *mut [u8; 2]).write_unaligned(s.to_le_bytes());
            }
        }
    }
}

q_fn! {
    /// Q8_K (292-byte blocks: f32 d, 256 i8, 16 i16 group sums) from `n_blocks * 256` floats.
    fn q8_k(x: *const f32, dst: *mut u8, n_blocks: usize) -> () {
        for i in 0..n_blocks {
            let (xp, bp) = (x.add(256 * i), dst.add(292 * i));
            let mut v = [_mm512_setzero_ps(); 16];
            let mut m = _mm512_setzero_ps();
            for (j, v) in v.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(xp.add(16 * j));
                m = absmax(*v, m);
            }
            let amax = _mm512_reduce_max_ps(m);
            if amax == 0.0 {
                std::ptr::write_bytes(bp, 0, 292);
                continue;
            }
            // The first element of largest magnitude keeps its sign (`>` in the reference).
            let am = _mm512_set1_ps(amax);
            let mut max = amax;
            for (j, v) in v.iter().enumerate() {
                let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(*v), am);
                if hit != 0 {
                    max = xp.add(16 * j + hit.trailing_zeros() as usize).read();
                    break;
                }
            }
            let iscale = -127.0 / max;
            let isv = _mm512_set1_ps(iscale);
            let mut bsums = [0i16; 16];
            for (j, v) in v.iter().enumerate() {
                let q = _mm512_mul_ps(*v, isv);
                // `(q.round_ties_even() as i32).min(127) as i8`: |q| <= 127.5 unless iscale
                // overflowed to infinity; then +inf gives 127 and -inf (i32::MIN) and NaN
                // give 0, the low byte.
                let keep = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(q, _mm512_set1_ps(f32::NEG_INFINITY));
                let r = _mm512_maskz_cvt_roundps_epi32::<RNE>(keep, _mm512_min_ps(q, _mm512_set1_ps(127.0)));
                _mm_storeu_si128(bp.add(4 + 16 * j) as *mut __m128i, _mm512_cvtepi32_epi8(r));
                bsums[j] = _mm512_reduce_add_epi32(r) as i16;
            }
            (bp as *mut f32).write_unaligned(1.0 / iscale);
            (bp.add(260) as *mut [i16; 16]).write_unaligned(bsums);
        }
    }
}

/// Quantizes `x` into Q8_0 blocks at `dst`.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/DQ/VL; `x.len()` is a multiple of 32
/// and `dst.len() == x.len() / 32 * 34`.
pub(crate) unsafe fn quantize_q8_0(x: &[f32], dst: &mut [u8]) {
    debug_assert_eq!(dst.len(), x.len() / 32 * 34);
    // SAFETY: forwarded from this function's contract.
    unsafe { q8_01::<false>(x.as_ptr(), dst.as_mut_ptr(), x.len() / 32) }
}

/// Quantizes `x` into Q8_1 blocks at `dst`.
///
/// # Safety
/// As for [`quantize_q8_0`], with `dst.len() == x.len() / 32 * 36`.
pub(crate) unsafe fn quantize_q8_1(x: &[f32], dst: &mut [u8]) {
    debug_assert_eq!(dst.len(), x.len() / 32 * 36);
    // SAFETY: forwarded from this function's contract.
    unsafe { q8_01::<true>(x.as_ptr(), dst.as_mut_ptr(), x.len() / 32) }
}

/// Quantizes `x` into Q8_K blocks at `dst`.
///
/// # Safety
/// As for [`quantize_q8_0`], with `x.len()` a multiple of 256 and
/// `dst.len() == x.len() / 256 * 292`.
pub(crate) unsafe fn quantize_q8_k(x: &[f32], dst: &mut [u8]) {
    debug_assert_eq!(dst.len(), x.len() / 256 * 292);
    // SAFETY: forwarded from this function's contract.
    unsafe { q8_k(x.as_ptr(), dst.as_mut_ptr(), x.len() / 256) }
}
