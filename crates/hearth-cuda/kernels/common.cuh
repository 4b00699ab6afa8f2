// Shared helpers for every hearth CUDA kernel. NVRTC compiles the files of this folder as one
// program (this file first), so nothing here may rely on toolkit headers: the binary must work
// with NVRTC alone, without a CUDA toolkit installed.

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu
#define NEG_INF __int_as_float(0xff800000)

// IEEE half bits to f32 (exact), without cuda_fp16.h.
__device__ __forceinline__ float half_to_f32(u16 h) {
    float f;
    asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
    return f;
}

// f32 to IEEE half bits, rounding to nearest even.
__device__ __forceinline__ u16 f32_to_half(float f) {
    u16 h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    return h;
}

// v rounded to the nearest f16 value.
__device__ __forceinline__ float round_f16(float v) { return half_to_f32(f32_to_half(v)); }

// Reads the little-endian f16 at `p` (2-byte aligned) as f32.
__device__ __forceinline__ float load_half(const u8* p) {
    return half_to_f32(*reinterpret_cast<const u16*>(p));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    }
    return v;
}

// 6-bit scale and min of group g (0..8) of a Q4_K / Q5_K block's packed scales.
__device__ __forceinline__ void scale_min_k4(const u8* sc, int g, int& scale, int& min) {
    if (g < 4) {
        scale = sc[g] & 63;
        min = sc[g + 4] & 63;
    } else {
        scale = (sc[g + 4] & 15) | ((sc[g - 4] >> 6) << 4);
        min = (sc[g + 4] >> 4) | ((sc[g] >> 6) << 4);
    }
}
