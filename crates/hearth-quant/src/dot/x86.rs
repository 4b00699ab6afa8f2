//! Shared x86-64 pieces of the SIMD kernels: helpers compiled for AVX2 + FMA + F16C, and a
//! macro that stamps out the integer kernels once per CPU level. The levels differ only in
//! `dp_u8i8` (u8 x i8 products summed into i32 lanes), which each level's module defines:
//! `vpmaddubsw` + `vpmaddwd` on AVX2, one `vpdpbusd` with AVX-512 VNNI.
//!
//! Block byte offsets below follow the `#[repr(C)]` structs in `blocks.rs`; rows are read with
//! unaligned loads only, so rows may start at any byte.

use std::arch::x86_64::*;

/// Horizontal sum of 8 f32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The f16 at `p` (any alignment) as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = (p as *const u16).read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// The f32 at `p` (any alignment).
#[inline]
pub(super) unsafe fn f32_at(p: *const u8) -> f32 {
    (p as *const f32).read_unaligned()
}

/// 32 bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load32(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// 16 bytes of packed nibbles at `p` as 32 bytes: low nibbles in lanes 0..16, high in 16..32
/// (the element order of the legacy 4- and 5-bit blocks).
/// NOTE: a broadcast load plus a per-qword variable shift keeps this off port 5 (no insert or
/// shuffle) and costs a single load.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles32(p: *const u8) -> __m256i {
    let q = _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i));
    let shifted = _mm256_srlv_epi64(q, _mm256_set_epi64x(4, 4, 0, 0));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F))
}

/// f32 value of every f16 bit pattern (256 KiB, built once).
/// NOTE: a table lookup is a plain load that can broadcast straight from memory, where F16C
/// needs an insert, a convert and a broadcast, all competing for one shuffle port.
pub(super) fn f16_table() -> &'static [f32; 65536] {
    static TABLE: std::sync::OnceLock<Box<[f32; 65536]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([0f32; 65536]);
        for (i, v) in t.iter_mut().enumerate() {
            *v = half::f16::from_bits(i as u16).to_f32();
        }
        t
    })
}

/// The f16 at `p` (any alignment), converted through `t` and broadcast to 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bcast_f16(t: &[f32; 65536], p: *const u8) -> __m256 {
    let bits = (p as *const u16).read_unaligned();
    _mm256_broadcast_ss(&t[bits as usize])
}

/// The 32 bits at `p` (little-endian) as 32 bytes: 0xFF where the bit is set, else 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bits32(p: *const u8) -> __m256i {
    let x = (p as *const u32).read_unaligned();
    // Byte j takes input byte j / 8, then all bits but bit j % 8 are forced on.
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x as i32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// u8 x i8 products of 32 lanes, pairs summed to i16 and then weighted by two i16 scales:
/// `lo` for lanes 0..16, `hi` for 16..32. Returns 8 i32 partial sums.
/// NOTE: callers keep |u * s| pairs within i16 (u <= 63 here), so `vpmaddubsw` never saturates.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot16x2(u: __m256i, s: __m256i, lo: i16, hi: i16) -> __m256i {
    let scales = _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scales)
}

/// Bits `shift..shift + 2` of each byte of `qh`, moved to bits 4..6 (the Q6_K high bits).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q6_high(qh: __m256i, shift: i32) -> __m256i {
    let b = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(shift));
    _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi8(3)), 4)
}

/// Reads `N` bytes at `p` into an array.
#[inline]
pub(super) unsafe fn bytes_at<const N: usize>(p: *const u8) -> [u8; N] {
    (p as *const [u8; N]).read_unaligned()
}

/// Sums per-block `(scale, i32 lanes)` into f32 with two accumulators (to hide FMA latency).
/// The body yields the block's scale, already broadcast, and its i32 partial sums.
macro_rules! sum_blocks {
    ($n:expr, $i:ident => $body:expr) => {{
        let n: usize = $n;
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut $i = 0usize;
        while $i + 1 < n {
            let (d, v): (__m256, __m256i) = $body;
            acc0 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(v), acc0);
            $i += 1;
            let (d, v): (__m256, __m256i) = $body;
            acc1 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(v), acc1);
            $i += 1;
        }
        if $i < n {
            let (d, v): (__m256, __m256i) = $body;
            acc0 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(v), acc0);
        }
        _mm256_add_ps(acc0, acc1)
    }};
}

/// Defines the integer dot kernels `fn(w, a, n_blocks) -> f32` with target features `$feat`,
/// calling the invoking module's `dp_u8i8(acc, u8 lanes, i8 lanes) -> i32 lanes`.
macro_rules! define_int_kernels {
    ($feat:literal) => {
        use crate::blocks::unpack_k4_scales;
        use crate::blocks::q3k_scales;
        use crate::dot::x86::*;

        /// Signed x · signed y via |x| · sign(y, x), the form `dp_u8i8` takes.
        #[inline]
        #[target_feature(enable = $feat)]
        fn dot_i8(x: __m256i, y: __m256i) -> __m256i {
            dp_u8i8(_mm256_setzero_si256(), _mm256_abs_epi8(x), _mm256_sign_epi8(y, x))
        }

        /// `d_w * d_a` of weight and activation blocks, broadcast.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn dd(t: &[f32; 65536], wp: *const u8, ap: *const u8) -> __m256 {
            _mm256_mul_ps(bcast_f16(t, wp), bcast_f16(t, ap))
        }

        #[target_feature(enable = $feat)]
        pub(super) unsafe fn q4_0_q8_0(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
            let v = sum_blocks!(n, i => {
                let (wp, ap) = (w.add(18 * i), a.add(34 * i));
                let x = _mm256_sub_epi8(nibbles32(wp.add(2)), _mm256_set1_epi8(8));
                (dd(t, wp, ap), dot_i8(x, load32(ap.add(2))))
            });
            hsum_ps(v)
        }

        #[target_feature(enable = $feat)]
        pub(super) unsafe fn q4_1_q8_1(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
            // m_w * s_a terms, summed in 8 lanes (only the lane count differs from a scalar).
            let mut summs = _mm256_setzero_ps();
            let v = sum_blocks!(n, i => {
                let (wp, ap) = (w.add(20 * i), a.add(36 * i));
                summs = _mm256_add_ps(summs, dd(t, wp.add(2), ap.add(2)));
                let p = dp_u8i8(_mm256_setzero_si256(), nibbles32(wp.add(4)), load32(ap.add(4)));
                (dd(t, wp, ap), p)
            });
            hsum_ps(v) + _mm256_cvtss_f32(summs)
        }

        #[target_feature(enable = $feat)]
        pub(super) unsafe fn q5_0_q8_0(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
            let v = sum_blocks!(n, i => {
                let (wp, ap) = (w.add(22 * i), a.add(34 * i));
                // OR-ing 0xF0 where the high bit is clear gives q - 16 as i8 directly.
                let hi = _mm256_andnot_si256(bits32(wp.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
                let x = _mm256_or_si256(nibbles32(wp.add(6)), hi);
                (dd(t, wp, ap), dot_i8(x, load32(ap.add(2))))
            });
            hsum_ps(v)
        }

        #[target_feature(enable = $feat)]
        pub(super) unsafe fn q5_1_q8_1(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
            let mut summs = _mm256_setzero_ps();
            let v = sum_blocks!(n, i => {
                let (wp, ap) = (w.add(24 * i), a.add(36 * i));
                summs = _mm256_add_ps(summs, dd(t, wp.add(2), ap.add(2)));
                let hi = _mm256_and_si256(bits32(wp.add(4)), _mm256_set1_epi8(0x10));
                let x = _mm256_or_si256(nibbles32(wp.add(8)), hi);
                let p = dp_u8i8(_mm256_setzero_si256(), x, load32(ap.add(4)));
                (dd(t, wp, ap), p)
            });
            hsum_ps(v) + _mm256_cvtss_f32(summs)
        }

        #[target_feature(enable = $feat)]
        pub(super) unsafe fn q8_0_q8_0(w: *const u8, a: *const u8, n: usize, t: &[f32; 65536]) -> f32 {
            let v = sum_blocks!(n, i => {
                let (wp, ap) = (w.add(34 * i), a.add(34 * i));
                (dd(t, wp, ap), dot_i8(load32(wp.add(2)), load32(ap.add(2))))
            });
            hsum_ps(v)
        }

        /// Q8_K block `i` of `a`: (d, pointer to qs, the 16 group sums as i16 lanes).
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn q8k_block(a: *const u8, i: usize) -> (f32, *const u8, __m256i) {
            let ap = a.add(292 * i);
            (f32_at(ap), ap.add(4), load32(ap.add(260)))
        }

        #[target_feature(enable = $feat)]
        pub(super) unsafe fn q2_k_q8_k(w: *const u8, a: *const u8, n: usize) -> f32 {
            let m3 = _mm256_set1_epi8(3);
            let mut acc_m = _mm256_setzero_ps();
            let v = sum_blocks!(n, i => {
                let wp = w.add(84 * i);
                let (ad, y, bsums) = q8k_block(a, i);
                let sc: [u8; 16] = bytes_at(wp);
                let scv = _mm_loadu_si128(wp as *const __m128i);
                let mins = _mm_and_si128(_mm_srli_epi16(scv, 4), _mm_set1_epi8(0x0F));
                let msum = _mm256_madd_epi16(bsums, _mm256_cvtepu8_epi16(mins));
                let dmin = ad * f16_at(wp.add(82));
                acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(msum), acc_m);
                let mut sumi = _mm256_setzero_si256();
                for h in 0..2 {
                    let qs = load32(wp.add(16 + 32 * h));
                    for s in 0..4 {
                        let q = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * s as i32)), m3);
                        let g = 8 * h + 2 * s;
                        let p = dot16x2(q, load32(y.add(128 * h + 32 * s)), (sc[g] & 0xF) as i16, (sc[g + 1] & 0xF) as i16);
                        sumi = _mm256_add_epi32(sumi, p);
                    }
                }
                (_mm256_set1_ps(ad * f16_at(wp.add(80))), sumi)
            });
            hsum_ps(v) - hsum_ps(acc_m)
        }

        #[target_feature(enable = $feat)]
        pub(super) unsafe fn q3_k_q8_k(w: *const u8, a: *const u8, n: usize) -> f32 {
            let m3 = _mm256_set1_epi8(3);
            let one = _mm256_set1_epi8(1);
            let v = sum_blocks!(n, i => {
                let wp = w.add(110 * i);
                let (ad, y, bsums) = q8k_block(a, i);
                let sc = q3k_scales(&bytes_at(wp.add(96)));
                // Quants are stored as q' = low + 4 * hbit in 0..8; value = q' - 4.
                let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc.as_ptr() as *const __m128i));
                let offs = _mm256_madd_epi16(bsums, sc16);
                let hm = load32(wp);
                let mut sumi = _mm256_setzero_si256();
                for h in 0..2 {
                    let qs = load32(wp.add(32 + 32 * h));
                    for s in 0..4 {
                        let low = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * s as i32)), m3);
                        let hb = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128((4 * h + s) as i32)), one);
                        let q = _mm256_or_si256(low, _mm256_slli_epi16(hb, 2));
                        let g = 8 * h + 2 * s;
                        let p = dot16x2(q, load32(y.add(128 * h + 32 * s)), sc[g] as i16, sc[g + 1] as i16);
                        sumi = _mm256_add_epi32(sumi, p);
                    }
                }
                (_mm256_set1_ps(ad * f16_at(wp.add(108))), _mm256_sub_epi32(sumi, _mm256_slli_epi32(offs, 2)))
            });
            hsum_ps(v)
        }

        /// Weighted mins of a Q4_K / Q5_K block: 8 lanes of `min[g] * (bsums[2g] + bsums[2g+1])`.
        #[inline]
        #[target_feature(enable = $feat)]
        fn k4_mins(bsums: __m256i, sm: &[u8; 16]) -> __m256i {
            let gsum = _mm256_madd_epi16(bsums, _mm256_set1_epi16(1));
            let mins = _mm256_cvtepu8_epi32(_mm_set_epi64x(0, i64::from_le_bytes([
                sm[8], sm[9], sm[10], sm[11], sm[12], sm[13], sm[14], sm[15],
            ])));
            _mm256_mullo_epi32(gsum, mins)
        }

        #[target_feature(enable = $feat)]
        pub(super) unsafe fn q4_k_q8_k(w: *const u8, a: *const u8, n: usize) -> f32 {
            let m4 = _mm256_set1_epi8(0x0F);
            let mut acc_m = _mm256_setzero_ps();
            let v = sum_blocks!(n, i => {
                let wp = w.add(144 * i);
                let (ad, y, bsums) = q8k_block(a, i);
                let sm = unpack_k4_scales(&bytes_at(wp.add(4)));
                let dmin = ad * f16_at(wp.add(2));
                acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(k4_mins(bsums, &sm)), acc_m);
                let mut sumi = _mm256_setzero_si256();
                for j in 0..4 {
                    let q4 = load32(wp.add(16 + 32 * j));
                    let lo = _mm256_and_si256(q4, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
                    let s0 = sm[2 * j] as i16;
                    let s1 = sm[2 * j + 1] as i16;
                    sumi = _mm256_add_epi32(sumi, dot16x2(lo, load32(y.add(64 * j)), s0, s0));
                    sumi = _mm256_add_epi32(sumi, dot16x2(hi, load32(y.add(64 * j + 32)), s1, s1));
                }
                (_mm256_set1_ps(ad * f16_at(wp)), sumi)
            });
            hsum_ps(v) - hsum_ps(acc_m)
        }

        #[target_feature(enable = $feat)]
        pub(super) unsafe fn q5_k_q8_k(w: *const u8, a: *const u8, n: usize) -> f32 {
            let m4 = _mm256_set1_epi8(0x0F);
            let one = _mm256_set1_epi8(1);
            let mut acc_m = _mm256_setzero_ps();
            let v = sum_blocks!(n, i => {
                let wp = w.add(176 * i);
                let (ad, y, bsums) = q8k_block(a, i);
                let sm = unpack_k4_scales(&bytes_at(wp.add(4)));
                let dmin = ad * f16_at(wp.add(2));
                acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(k4_mins(bsums, &sm)), acc_m);
                let mut hb = load32(wp.add(16));
                let mut sumi = _mm256_setzero_si256();
                for j in 0..4 {
                    let q4 = load32(wp.add(48 + 32 * j));
                    let hlo = _mm256_slli_epi16(_mm256_and_si256(hb, one), 4);
                    let hhi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4);
                    hb = _mm256_srli_epi16(hb, 2);
                    let lo = _mm256_or_si256(_mm256_and_si256(q4, m4), hlo);
                    let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4, 4), m4), hhi);
                    let s0 = sm[2 * j] as i16;
                    let s1 = sm[2 * j + 1] as i16;
                    sumi = _mm256_add_epi32(sumi, dot16x2(lo, load32(y.add(64 * j)), s0, s0));
                    sumi = _mm256_add_epi32(sumi, dot16x2(hi, load32(y.add(64 * j + 32)), s1, s1));
                }
                (_mm256_set1_ps(ad * f16_at(wp)), sumi)
            });
            hsum_ps(v) - hsum_ps(acc_m)
        }

        #[target_feature(enable = $feat)]
        pub(super) unsafe fn q6_k_q8_k(w: *const u8, a: *const u8, n: usize) -> f32 {
            let m4 = _mm256_set1_epi8(0x0F);
            let v = sum_blocks!(n, i => {
                let wp = w.add(210 * i);
                let (ad, y, bsums) = q8k_block(a, i);
                let sc: [u8; 16] = bytes_at(wp.add(192));
                // Quants are stored as q' = q + 32 in 0..64; subtract 32 * sum(sc * bsums).
                let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc.as_ptr() as *const __m128i));
                let offs = _mm256_madd_epi16(bsums, sc16);
                let mut sumi = _mm256_setzero_si256();
                for h in 0..2 {
                    let ql0 = load32(wp.add(64 * h));
                    let ql1 = load32(wp.add(64 * h + 32));
                    let qh = load32(wp.add(128 + 32 * h));
                    let q = [
                        _mm256_or_si256(_mm256_and_si256(ql0, m4), q6_high(qh, 0)),
                        _mm256_or_si256(_mm256_and_si256(ql1, m4), q6_high(qh, 2)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), q6_high(qh, 4)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), q6_high(qh, 6)),
                    ];
                    for (s, q) in q.into_iter().enumerate() {
                        let g = 8 * h + 2 * s;
                        let p = dot16x2(q, load32(y.add(128 * h + 32 * s)), sc[g] as i8 as i16, sc[g + 1] as i8 as i16);
                        sumi = _mm256_add_epi32(sumi, p);
                    }
                }
                (_mm256_set1_ps(ad * f16_at(wp.add(208))), _mm256_sub_epi32(sumi, _mm256_slli_epi32(offs, 5)))
            });
            hsum_ps(v)
        }

        /// The integer kernels of this level as `DotFn`s, `None` for float types.
        ///
        /// # Safety
        /// The CPU must support the target features `$feat`.
        pub(super) unsafe fn int_kernel(ty: crate::GgmlType) -> Option<crate::dot::DotFn> {
            use crate::GgmlType::*;
            // SAFETY (every closure): the caller checked the CPU features, and the row lengths
            // were checked against the block count before any DotFn is called.
            Some(match ty {
                Q4_0 => |w, a| unsafe { q4_0_q8_0(w.as_ptr(), a.as_ptr(), w.len() / 18, f16_table()) },
                Q4_1 => |w, a| unsafe { q4_1_q8_1(w.as_ptr(), a.as_ptr(), w.len() / 20, f16_table()) },
                Q5_0 => |w, a| unsafe { q5_0_q8_0(w.as_ptr(), a.as_ptr(), w.len() / 22, f16_table()) },
                Q5_1 => |w, a| unsafe { q5_1_q8_1(w.as_ptr(), a.as_ptr(), w.len() / 24, f16_table()) },
                Q8_0 => |w, a| unsafe { q8_0_q8_0(w.as_ptr(), a.as_ptr(), w.len() / 34, f16_table()) },
                Q2_K => |w, a| unsafe { q2_k_q8_k(w.as_ptr(), a.as_ptr(), w.len() / 84) },
                Q3_K => |w, a| unsafe { q3_k_q8_k(w.as_ptr(), a.as_ptr(), w.len() / 110) },
                Q4_K => |w, a| unsafe { q4_k_q8_k(w.as_ptr(), a.as_ptr(), w.len() / 144) },
                Q5_K => |w, a| unsafe { q5_k_q8_k(w.as_ptr(), a.as_ptr(), w.len() / 176) },
                Q6_K => |w, a| unsafe { q6_k_q8_k(w.as_ptr(), a.as_ptr(), w.len() / 210) },
                _ => return None,
            })
        }
    };
}
