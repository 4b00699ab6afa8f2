//! AVX-512 kernels. Integer kernels come from `define_int_kernels!` with one `vpdpbusd`
//! (AVX-512 VNNI on 256-bit registers) per u8 x i8 product step; float kernels use 512-bit
//! registers.

use std::arch::x86_64::*;

use half::f16;

use crate::dot::DotFn;
use crate::GgmlType;

/// `acc + sum of 4 adjacent u8 * i8 products` per i32 lane, exact (no i16 saturation).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn dp_u8i8(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(acc, u, s)
}

define_int_kernels!("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni");

/// Packed 4-row x 4-token prefill tiles for the 32-element block types.
#[path = "avx512/packed.rs"]
mod packed;
/// 512-bit kernels for the legacy types, two blocks per register.
#[path = "avx512/wide.rs"]
mod wide;
/// 512-bit kernels for Q4_K and Q6_K.
#[path = "avx512/wide_k.rs"]
mod wide_k;

macro_rules! float_dot {
    ($name:ident, $elem:ty, $load:ident, $to_f32:expr) => {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
        unsafe fn $name(w: *const u8, a: *const u8, n: usize) -> f32 {
            let (w, a) = (w as *const $elem, a as *const $elem);
            let mut acc = [_mm512_setzero_ps(); 4];
            let mut i = 0;
            while i + 64 <= n {
                for (k, acc) in acc.iter_mut().enumerate() {
                    let x = $load(w.add(i + 16 * k));
                    *acc = _mm512_fmadd_ps(x, $load(a.add(i + 16 * k)), *acc);
                }
                i += 64;
            }
            while i + 16 <= n {
                acc[0] = _mm512_fmadd_ps($load(w.add(i)), $load(a.add(i)), acc[0]);
                i += 16;
            }
            let v = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
            let mut sum = _mm512_reduce_add_ps(v);
            let to_f32: fn($elem) -> f32 = $to_f32;
            for j in i..n {
                sum += to_f32(w.add(j).read_unaligned()) * to_f32(a.add(j).read_unaligned());
            }
            sum
        }
    };
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn load_f32x16(p: *const f32) -> __m512 {
    _mm512_loadu_ps(p)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn load_f16x16(p: *const u16) -> __m512 {
    _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn load_bf16x16(p: *const u16) -> __m512 {
    let x = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i));
    _mm512_castsi512_ps(_mm512_slli_epi32(x, 16))
}

float_dot!(f32_f32, f32, load_f32x16, |x| x);
float_dot!(f16_f16, u16, load_f16x16, |b| f16::from_bits(b).to_f32());
float_dot!(bf16_bf16, u16, load_bf16x16, |b| half::bf16::from_bits(b)
    .to_f32());

/// The AVX-512 kernel for weight type `ty`, if there is one.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/DQ/VL/VNNI.
pub(super) unsafe fn kernel(ty: GgmlType) -> Option<DotFn> {
    // SAFETY (every closure): as for `int_kernel`.
    let f: DotFn = match ty {
        GgmlType::F32 => |w, a| unsafe { f32_f32(w.as_ptr(), a.as_ptr(), w.len() / 4) },
        GgmlType::F16 => |w, a| unsafe { f16_f16(w.as_ptr(), a.as_ptr(), w.len() / 2) },
        GgmlType::BF16 => |w, a| unsafe { bf16_bf16(w.as_ptr(), a.as_ptr(), w.len() / 2) },
        // SAFETY: forwarded from this function's contract.
        _ => {
            return unsafe {
                wide::kernel(ty)
                    .or_else(|| wide_k::kernel(ty))
                    .or_else(|| int_kernel(ty))
            }
        }
    };
    Some(f)
}

/// The one-row x four-token kernel for `ty`, if there is one at this level.
///
/// # Safety
/// As for [`kernel`].
pub(super) unsafe fn kernel_x4(ty: GgmlType) -> Option<crate::dot::Dot4Fn> {
    // SAFETY: forwarded from this function's contract.
    unsafe { wide::kernel_x4(ty).or_else(|| wide_k::kernel_x4(ty)) }
}

/// The packed prefill kernels for `ty`, if there are some at this level.
///
/// # Safety
/// As for [`kernel`].
pub(super) unsafe fn kernel_packed(ty: GgmlType) -> Option<crate::dot::PackedTile> {
    // SAFETY: forwarded from this function's contract.
    unsafe { packed::kernel_packed(ty) }
}
