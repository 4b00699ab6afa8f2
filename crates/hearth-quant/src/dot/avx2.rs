//! AVX2 + FMA + F16C kernels (256-bit). Integer kernels come from `define_int_kernels!`;
//! u8 x i8 products use `vpmaddubsw` (pairs to i16) then `vpmaddwd` (to i32).

use std::arch::x86_64::*;

use half::f16;

use crate::blocks::KVALUES_IQ4NL;
use crate::dot::DotFn;
use crate::GgmlType;

/// `acc + sum of 4 adjacent u8 * i8 products` per i32 lane.
/// NOTE: `vpmaddubsw` saturates at i16; every caller keeps |u| * |s| * 2 <= 128 * 127 * 2 < 2^15.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dp_u8i8(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    let p16 = _mm256_maddubs_epi16(u, s);
    _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
}

define_int_kernels!("avx2,fma,f16c");

/// IQ4_NL · Q8_0: one in-lane byte shuffle of the level table turns the 4-bit indices into
/// their i8 levels, then the block is a signed Q8_0-style product (levels are in -127..=113,
/// so `dot_i8`'s i16 pair sums stay below 2 * 127 * 127).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_q8_0(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
    let levels = _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i);
    let levels = _mm256_broadcastsi128_si256(levels);
    let v = sum_blocks!(n, i => {
        let (wp, ap) = (w.add(18 * i), a.add(34 * i));
        let x = _mm256_shuffle_epi8(levels, nibbles32(wp.add(2)));
        (dd(t, wp, ap), dot_i8(x, load32(ap.add(2))))
    });
    hsum_ps(v)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f32_f32(w: *const u8, a: *const u8, n: usize) -> f32 {
    let (w, a) = (w as *const f32, a as *const f32);
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let x = _mm256_loadu_ps(w.add(i + 8 * k));
            *acc = _mm256_fmadd_ps(x, _mm256_loadu_ps(a.add(i + 8 * k)), *acc);
        }
        i += 32;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut sum = hsum_ps(v);
    for j in i..n {
        sum += w.add(j).read_unaligned() * a.add(j).read_unaligned();
    }
    sum
}

/// 8 f16 at `p` as f32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16x8(p: *const u16) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// 8 bf16 at `p` as f32 lanes (bf16 is the top half of an f32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_bf16x8(p: *const u16) -> __m256 {
    let x = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
    _mm256_castsi256_ps(_mm256_slli_epi32(x, 16))
}

macro_rules! half_dot {
    ($name:ident, $load:ident, $to_f32:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name(w: *const u8, a: *const u8, n: usize) -> f32 {
            let (w, a) = (w as *const u16, a as *const u16);
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i + 32 <= n {
                for (k, acc) in acc.iter_mut().enumerate() {
                    let x = $load(w.add(i + 8 * k));
                    *acc = _mm256_fmadd_ps(x, $load(a.add(i + 8 * k)), *acc);
                }
                i += 32;
            }
            let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            let mut sum = hsum_ps(v);
            let to_f32: fn(u16) -> f32 = $to_f32;
            for j in i..n {
                sum += to_f32(w.add(j).read_unaligned()) * to_f32(a.add(j).read_unaligned());
            }
            sum
        }
    };
}

half_dot!(f16_f16, load_f16x8, |b| f16::from_bits(b).to_f32());
half_dot!(bf16_bf16, load_bf16x8, |b| half::bf16::from_bits(b)
    .to_f32());

/// The AVX2 kernel for weight type `ty`, if there is one.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
pub(super) unsafe fn kernel(ty: GgmlType) -> Option<DotFn> {
    // SAFETY (every closure): as for `int_kernel`.
    let f: DotFn = match ty {
        GgmlType::F32 => |w, a| unsafe { f32_f32(w.as_ptr(), a.as_ptr(), w.len() / 4) },
        GgmlType::F16 => |w, a| unsafe { f16_f16(w.as_ptr(), a.as_ptr(), w.len() / 2) },
        GgmlType::BF16 => |w, a| unsafe { bf16_bf16(w.as_ptr(), a.as_ptr(), w.len() / 2) },
        GgmlType::IQ4_NL => {
            |w, a| unsafe { iq4_nl_q8_0(w.as_ptr(), a.as_ptr(), w.len() / 18, f16_table()) }
        }
        // SAFETY: forwarded from this function's contract.
        _ => return unsafe { int_kernel(ty) },
    };
    Some(f)
}
