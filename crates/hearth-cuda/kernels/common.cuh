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

// warp_sum of four values at once, bit for bit the same sums (each level adds the same pairs
// of lanes, and a + b == b + a): the first level leaves each half of the warp two of the
// values, the next each quarter one, so that 9 shuffles and 6 adds do the work of 20 and 20.
// Lane 0 gets the four sums.
__device__ __forceinline__ void warp_sum4(const float* v, float* sum) {
    const int lane = threadIdx.x % WARP_SIZE;
    const bool upper = lane & 16, odd = lane & 8;
    // Lanes 0-15 keep values 0 and 1, lanes 16-31 values 2 and 3.
    float p0 = upper ? v[2] : v[0], p1 = upper ? v[3] : v[1];
    p0 += __shfl_xor_sync(FULL_MASK, upper ? v[0] : v[2], 16);
    p1 += __shfl_xor_sync(FULL_MASK, upper ? v[1] : v[3], 16);
    // Lanes with bit 3 clear keep their first, the others their second: value
    // 2 * upper + odd.
    float q = odd ? p1 : p0;
    q += __shfl_xor_sync(FULL_MASK, odd ? p0 : p1, 8);
#pragma unroll
    for (int offset = 4; offset > 0; offset >>= 1) q += __shfl_xor_sync(FULL_MASK, q, offset);
    // Value r's sum is in lanes 8r .. 8r + 7.
    sum[0] = q;
#pragma unroll
    for (int r = 1; r < 4; ++r) sum[r] = __shfl_sync(FULL_MASK, q, 8 * r);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
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

// Programmatic dependent launch (Hopper and later; the backend turns it on there): the next
// kernel of the stream may be launched before this one has ended, so that its blocks start as
// this one's blocks leave and copy their weights while the last of them finish. Every kernel
// calls this before it reads anything an earlier kernel wrote and before it writes anything: it
// waits until the kernels before it have finished and their writes are visible. A kernel
// launched the ordinary way returns from it at once. Only loads of memory no kernel writes
// (weights) may come before it.
//
// EARLY_TRIGGER 1 also lets the next kernel start as soon as every block of this one has
// started, not as each ends. NOTE (H100, hearth bench, one call, two rounds): that lost to the
// trigger at each block's exit on every test: Qwen3-0.6B Q8_0 tg128 754/752 against 772/747
// tok/s, pp512 83.1k/82.0k against 93.6k/90.5k; Llama-3.1-8B Q4_K_M tg128 284.7/282.4 against
// 294.4/297.9 (ordinary launches 290.9/288.8), a 32-token prompt 1,931 against 2,222 tok/s.
// Blocks of the next kernel that start early hold SM slots the current one's later blocks
// would have used.
// NOTE (H200, BENCHMARKS.md 2026-11-30, later, one call, with every kernel at one
// shared-memory carveout): Qwen3-0.6B Q8_0 tg128 1,446.3 / 1,448.6 -> 1,470.0 / 1,465.5 tok/s,
// `--greedy` 1,440.1 / 1,443.9 -> 1,453.0 / 1,453.7; other models, prompts and batches not
// measured with it yet.
// NOTE (H200, BENCHMARKS.md 2026-11-30, night, two rounds, against the gated GEMV's trigger
// alone): Qwen3-0.6B Q8_0 tg128 1,459.4 / 1,459.5 -> 1,465.5 / 1,474.5 tok/s, but Q4_K_M
// 1,481.2 / 1,483.5 -> 1,346.9 / 1,345.4, Llama-3.1-8B Q4_K_M 449.4 / 449.7 -> 416.3 / 416.0
// and 64 sequences of Q8_0 20,138 / 20,105 -> 18,601 / 18,604. Leaving out the grids of more
// than 1,056 blocks (EARLY_TRIGGER_MAX_BLOCKS): the 8B 442.0 / 442.6. Leaving out the Q4_K
// kernel that reads its rows into registers (EARLY_TRIGGER_Q4K_REG 0): Q4_K_M 1,496.9, the 8B
// 449.1 / 449.1, but 64 sequences still 18,491 / 18,599 (Q8_0) and 17,606 (Q4_K_M, against
// 18,312 / 18,328). The int8 GEMVs alone triggering (gemv_q8a.cu Q8A_TRIGGER 2) kept the
// single-stream gain without the batches' loss.
#ifndef EARLY_TRIGGER
#define EARLY_TRIGGER 0
#endif
// With EARLY_TRIGGER, grids of more blocks than this do not trigger early (0: no limit).
#ifndef EARLY_TRIGGER_MAX_BLOCKS
#define EARLY_TRIGGER_MAX_BLOCKS 0
#endif
// With EARLY_TRIGGER, whether the Q4_K kernel that reads its rows into registers triggers too.
#ifndef EARLY_TRIGGER_Q4K_REG
#define EARLY_TRIGGER_Q4K_REG 1
#endif
__device__ __forceinline__ void await_previous_kernels(bool may_trigger = true) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#if EARLY_TRIGGER
    const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
    if (may_trigger && (EARLY_TRIGGER_MAX_BLOCKS == 0 || blocks <= EARLY_TRIGGER_MAX_BLOCKS)) {
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    }
#endif
#endif
}

// Lets the kernels queued after this one launch before it ends (griddepcontrol.launch_dependents
// from every block; a block that exits counts too). Their griddepcontrol.wait still waits for
// this whole grid to end and its writes to be visible, so this only moves when they start.
// The decode step's kernels of few blocks (norm + quantize, rope, attention) call it once their
// own wait is over, so that the next kernel's blocks stage their weights meanwhile: they take
// slots these kernels leave free. SMALL_TRIGGER 0 makes it do nothing.
//
// NOTE (H100, hearth bench tg128, `scripts/device/gemv_ab.sh`, rounds in one call): Qwen3-0.6B
// Q8_0 907 / 938 -> 941 / 985 tok/s, then 896 / 931 / 915 -> 989 / 976 / 990; Llama-3.1-8B
// Q4_K_M 333 / 334 -> 336 / 337, then 335 / 330 / 336 -> 347 / 342 / 342. The int8 GEMVs
// triggering after their loop over the row lost (0.6B 848-907, 8B 315-319 against 907-938 and
// 333-334), and so did GEMVs of at most 600 or 800 blocks (one wave) triggering after their
// wait (0.6B 911-983 against 959-977, 8B 321-338 against 335-341): the next kernel's early
// blocks cost these more than its launch did. (The gated GEMV now lets the down projection
// launch after its wait, with every kernel at one shared-memory carveout, and so do the other
// int8 GEMVs of staged rows: Q8A_TRIGGER.)
// NOTE (H200, BENCHMARKS.md, 2026-11-29, closing): the norms, q/k norm and rope and the wide
// attention letting the next kernel launch before their own wait instead measured even:
// Qwen3-0.6B tg128 `--greedy` Q8_0 1,383-1,385 against 1,377 tok/s, Q4_K_M 1,430-1,431 against
// 1,429-1,430; tg128 +0.3%.
#ifndef SMALL_TRIGGER
#define SMALL_TRIGGER 1
#endif
__device__ __forceinline__ void let_dependents_launch() {
#if __CUDA_ARCH__ >= 900 && SMALL_TRIGGER
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// griddepcontrol.launch_dependents whatever SMALL_TRIGGER says: for the int8 GEMVs of staged
// rows (see Q8A_TRIGGER in gemv_q8a.cu).
__device__ __forceinline__ void launch_dependents_now() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks L2 for `bytes` bytes from `p` (weights, before await_previous_kernels), one 128-byte
// line per lane of the warp at a time. A hint: nothing waits for it.
// NOTE: the short kernels of a decode step (norms, q/k norm and rope, attention) asking L2 for
// the next projections' weights, from extra blocks of their grids, lost on an H200 wherever
// they were put: Qwen3-0.6B Q8_0 tg128 1,172-1,247 against 1,264-1,270 tok/s (BENCHMARKS.md,
// 2026-11-29, afternoon). A kernel that asks for megabytes seems to end only once they came.
__device__ __forceinline__ void prefetch_l2(const void* p, size_t bytes, int lane) {
    const char* c = static_cast<const char*>(p);
    for (size_t at = (size_t)lane * 128; at < bytes; at += WARP_SIZE * 128) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(c + at));
    }
}
