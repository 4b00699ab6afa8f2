//! 512-bit kernels for the 32-element block types: two blocks per register, so each block
//! costs half the vector instructions of the 256-bit form. Every kernel here adds its blocks
//! in the order of the packed prefill tiles (`packed.rs`), so that a token's result does not
//! depend on which kernel `matmul` picks for it.

use std::arch::x86_64::*;

use crate::blocks::KVALUES_IQ4NL;
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

/// Sums blocks in pairs `(scales, i32 lanes)` into one accumulator, in the order of the packed
/// prefill tiles (`packed.rs`): one FMA per pair, the pairs in order, and a lone last block
/// with its second half's scales zeroed (the tiles pad it with a zero block). `$i` is the
/// pair's first block and `$full` whether it has a second; the body reads block `$i` twice
/// when it has not. Returns the 16 accumulator lanes, for [`min_terms`] and the reduction.
///
/// NOTE: a single accumulator, like the tiles, so that decode and prefill round alike; the
/// unpacking per pair is long enough to hide the FMA latency.
macro_rules! sum_pairs {
    ($n:expr, $i:ident, $full:ident => $body:expr) => {{
        let n: usize = $n;
        let mut acc = _mm512_setzero_ps();
        let mut $i = 0usize;
        while $i + 2 <= n {
            let $full = true;
            let (d, v): (__m512, __m512i) = $body;
            acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(v), acc);
            $i += 2;
        }
        if $i < n {
            let $full = false;
            let (d, v): (__m512, __m512i) = $body;
            let d = _mm512_maskz_mov_ps(0x00FF, d);
            acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(v), acc);
        }
        acc
    }};
}

wide_fn! {
    /// The f16 at byte 2 of each of `count` (at most 16) blocks of `sz` bytes from `p`, as f32
    /// lanes; lanes past `count` are 0.
    fn f16_at_2(p: *const u8, sz: usize, count: usize) -> __m512 {
        let h = if count >= 8 {
            let idx = _mm512_mullo_epi32(
                _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                _mm512_set1_epi32(sz as i32),
            );
            let mask = ((1u32 << count) - 1) as u16;
            // NOTE: reads 4 bytes at byte 2 of each block (inside the block); masked lanes
            // read nothing.
            let v = _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), mask, idx, p.add(2) as *const i32);
            _mm512_cvtepi32_epi16(v)
        } else {
            // NOTE: a few blocks (the tail of a row) are cheaper one by one than gathered.
            let mut h = _mm256_setzero_si256();
            for j in 0..count {
                let bits = (p.add(sz * j + 2) as *const u16).read_unaligned();
                h = _mm256_mask_set1_epi16(h, 1 << j, bits as i16);
            }
            h
        };
        _mm512_cvtph_ps(h)
    }
}

wide_fn! {
    /// Adds the `m_w * s_a` terms of a row of `n` blocks with the mins / sums at byte 2 of
    /// weight blocks of `wsz` bytes and activation blocks of `asz` bytes: lane `j` takes block
    /// `16 c + j` for `c = 0, 1, ...`, one FMA per 16 blocks, as the packed Q4_1 tile does.
    fn min_terms(acc: __m512, w: *const u8, wsz: usize, a: *const u8, asz: usize, n: usize) -> __m512 {
        let mut acc = acc;
        for c in 0..n.div_ceil(16) {
            let count = (n - 16 * c).min(16);
            let m = f16_at_2(w.add(16 * wsz * c), wsz, count);
            let s = f16_at_2(a.add(16 * asz * c), asz, count);
            acc = _mm512_fmadd_ps(m, s, acc);
        }
        acc
    }
}

/// The second block of a pair at `p` of `$sz`-byte blocks: the next one, or `p` itself when
/// the pair is a lone last block.
macro_rules! second {
    ($full:ident, $p:expr, $sz:expr) => {
        if $full {
            $p.add($sz)
        } else {
            $p
        }
    };
}

wide_fn! {
    fn q8_0_q8_0(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
        let acc = sum_pairs!(n, i, full => {
            let (wp, ap) = (w.add(34 * i), a.add(34 * i));
            let (w1, a1) = (second!(full, wp, 34), second!(full, ap, 34));
            // NOTE: rows stream from DRAM for large matrices (the output projection); running
            // ahead of the hardware prefetcher keeps more lines in flight.
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(PREFETCH_AHEAD) as *const i8);
            let x = load64(wp.add(2), w1.add(2));
            let y = load64(ap.add(2), a1.add(2));
            (scales2(dd(t, wp, ap), dd(t, w1, a1)), dot_i8(x, y))
        });
        _mm512_reduce_add_ps(acc)
    }
}

wide_fn! {
    fn q4_0_q8_0(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
        let acc = sum_pairs!(n, i, full => {
            let (wp, ap) = (w.add(18 * i), a.add(34 * i));
            let (w1, a1) = (second!(full, wp, 18), second!(full, ap, 34));
            let x = _mm512_sub_epi8(nibbles64(wp.add(2), w1.add(2)), _mm512_set1_epi8(8));
            let y = load64(ap.add(2), a1.add(2));
            (scales2(dd(t, wp, ap), dd(t, w1, a1)), dot_i8(x, y))
        });
        _mm512_reduce_add_ps(acc)
    }
}

wide_fn! {
    /// The i8 levels of two IQ4_NL blocks (nibbles at `p0` and `p1`) in element order.
    fn iq4_nl_levels(p0: *const u8, p1: *const u8) -> __m512i {
        let levels = _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i);
        _mm512_shuffle_epi8(_mm512_broadcast_i32x4(levels), nibbles64(p0, p1))
    }
}

wide_fn! {
    fn iq4_nl_q8_0(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
        let acc = sum_pairs!(n, i, full => {
            let (wp, ap) = (w.add(18 * i), a.add(34 * i));
            let (w1, a1) = (second!(full, wp, 18), second!(full, ap, 34));
            let x = iq4_nl_levels(wp.add(2), w1.add(2));
            let y = load64(ap.add(2), a1.add(2));
            (scales2(dd(t, wp, ap), dd(t, w1, a1)), dot_i8(x, y))
        });
        _mm512_reduce_add_ps(acc)
    }
}

wide_fn! {
    fn q5_0_q8_0(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
        let acc = sum_pairs!(n, i, full => {
            let (wp, ap) = (w.add(22 * i), a.add(34 * i));
            let (w1, a1) = (second!(full, wp, 22), second!(full, ap, 34));
            // OR-ing 0xF0 where the high bit is clear gives q - 16 as i8 directly.
            let hi = _mm512_andnot_si512(bits64(wp.add(2), w1.add(2)), _mm512_set1_epi8(0xF0u8 as i8));
            let x = _mm512_or_si512(nibbles64(wp.add(6), w1.add(6)), hi);
            let y = load64(ap.add(2), a1.add(2));
            (scales2(dd(t, wp, ap), dd(t, w1, a1)), dot_i8(x, y))
        });
        _mm512_reduce_add_ps(acc)
    }
}

wide_fn! {
    fn q4_1_q8_1(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
        let acc = sum_pairs!(n, i, full => {
            let (wp, ap) = (w.add(20 * i), a.add(36 * i));
            let (w1, a1) = (second!(full, wp, 20), second!(full, ap, 36));
            let x = nibbles64(wp.add(4), w1.add(4));
            let y = load64(ap.add(4), a1.add(4));
            let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x, y);
            (scales2(dd(t, wp, ap), dd(t, w1, a1)), p)
        });
        _mm512_reduce_add_ps(min_terms(acc, w, 20, a, 36, n))
    }
}

wide_fn! {
    /// NOTE: Q5_1 has no packed tile or multi-token kernel, so this is its only path in
    /// `matmul`; its min terms stay in the cheaper per-block sum (8 equal lanes) instead of
    /// [`min_terms`]. A Q5_1 tile would have to add them in this order.
    fn q5_1_q8_1(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
        let mut summs = _mm256_setzero_ps();
        let acc = sum_pairs!(n, i, full => {
            let (wp, ap) = (w.add(24 * i), a.add(36 * i));
            let (w1, a1) = (second!(full, wp, 24), second!(full, ap, 36));
            summs = _mm256_add_ps(summs, dd(t, wp.add(2), ap.add(2)));
            if full {
                summs = _mm256_add_ps(summs, dd(t, w1.add(2), a1.add(2)));
            }
            let hi = _mm512_and_si512(bits64(wp.add(4), w1.add(4)), _mm512_set1_epi8(0x10));
            let x = _mm512_or_si512(nibbles64(wp.add(8), w1.add(8)), hi);
            let y = load64(ap.add(4), a1.add(4));
            let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x, y);
            (scales2(dd(t, wp, ap), dd(t, w1, a1)), p)
        });
        _mm512_reduce_add_ps(acc) + _mm256_cvtss_f32(summs)
    }
}

/// Defines a kernel of one weight row against 4 activation rows of signed Q8_0 blocks, for a
/// signed weight type: the weight pair is unpacked once (`|wp, w1| i8 lanes`, `w1` the pair's
/// second block) and reused for each token. Per token the float operations are those of the
/// one-row kernels (see `sum_pairs!`), so the results are bit-identical to them.
macro_rules! signed_x4 {
    ($name:ident, $wsz:expr, |$wp:ident, $w1:ident| $unpack:expr) => {
        wide_fn! {
            fn $name(w: *const u8, a: [*const u8; 4], n: usize, t: &[f32; 65536]) -> [f32; 4] {
                let zero = _mm512_setzero_si512();
                let mut acc = [_mm512_setzero_ps(); 4];
                let mut i = 0usize;
                while i < n {
                    let full = i + 1 < n;
                    let $wp = w.add($wsz * i);
                    let $w1 = second!(full, $wp, $wsz);
                    let x: __m512i = $unpack;
                    let (ax, neg) = (_mm512_abs_epi8(x), _mm512_movepi8_mask(x));
                    let dw = scales2(bcast_f16(t, $wp), bcast_f16(t, $w1));
                    for (acc, ap) in acc.iter_mut().zip(a) {
                        let ap = ap.add(34 * i);
                        let a1 = second!(full, ap, 34);
                        let y = load64(ap.add(2), a1.add(2));
                        let y = _mm512_mask_sub_epi8(y, neg, zero, y);
                        let p = _mm512_dpbusd_epi32(zero, ax, y);
                        let d = _mm512_mul_ps(dw, scales2(bcast_f16(t, ap), bcast_f16(t, a1)));
                        let d = if full { d } else { _mm512_maskz_mov_ps(0x00FF, d) };
                        *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), *acc);
                    }
                    i += 2;
                }
                acc.map(|v| _mm512_reduce_add_ps(v))
            }
        }
    };
}

signed_x4!(q8_0_x4, 34, |wp, w1| load64(wp.add(2), w1.add(2)));
signed_x4!(q4_0_x4, 18, |wp, w1| {
    _mm512_sub_epi8(nibbles64(wp.add(2), w1.add(2)), _mm512_set1_epi8(8))
});
signed_x4!(iq4_nl_x4, 18, |wp, w1| iq4_nl_levels(wp.add(2), w1.add(2)));
signed_x4!(q5_0_x4, 22, |wp, w1| {
    let hi = _mm512_andnot_si512(bits64(wp.add(2), w1.add(2)), _mm512_set1_epi8(0xF0u8 as i8));
    _mm512_or_si512(nibbles64(wp.add(6), w1.add(6)), hi)
});

wide_fn! {
    /// Q4_1 against 4 Q8_1 activation rows (see `signed_x4!`).
    fn q4_1_x4(w: *const u8, a: [*const u8; 4], n: usize, t: &[f32; 65536]) -> [f32; 4] {
        let zero = _mm512_setzero_si512();
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut i = 0usize;
        while i < n {
            let full = i + 1 < n;
            let wp = w.add(20 * i);
            let w1 = second!(full, wp, 20);
            let x = nibbles64(wp.add(4), w1.add(4));
            let dw = scales2(bcast_f16(t, wp), bcast_f16(t, w1));
            for k in 0..4 {
                let ap = a[k].add(36 * i);
                let a1 = second!(full, ap, 36);
                let p = _mm512_dpbusd_epi32(zero, x, load64(ap.add(4), a1.add(4)));
                let d = _mm512_mul_ps(dw, scales2(bcast_f16(t, ap), bcast_f16(t, a1)));
                let d = if full { d } else { _mm512_maskz_mov_ps(0x00FF, d) };
                acc[k] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[k]);
            }
            i += 2;
        }
        std::array::from_fn(|k| _mm512_reduce_add_ps(min_terms(acc[k], w, 20, a[k], 36, n)))
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
        GgmlType::IQ4_NL => |w, a| unsafe {
            iq4_nl_x4(w.as_ptr(), a.map(|r| r.as_ptr()), w.len() / 18, f16_table())
        },
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
        GgmlType::IQ4_NL => {
            |w, a| unsafe { iq4_nl_q8_0(w.as_ptr(), a.as_ptr(), w.len() / 18, f16_table()) }
        }
        GgmlType::Q8_0 => {
            |w, a| unsafe { q8_0_q8_0(w.as_ptr(), a.as_ptr(), w.len() / 34, f16_table()) }
        }
        _ => return None,
    })
}
