// GEMV with int8 activations: the quantized weights' integer values times activations
// quantized to 8 bits per 32-value group, four products per instruction (dp4a), as llama.cpp's
// MMVQ kernels do. Used for large weights at small batches, where the f32-activation kernels of
// gemv.cu are bound by instruction issue (they spend three instructions per weight value).
//
// Activations: quantize_q8_1 turns x [n_tokens, n_cols] into
//   xq  [n_tokens, n_cols] i8      q = round_half_even(x * 127 / amax)
//   xds [n_tokens, n_cols / 32]    (d, d * sum(q)) per group, d = amax / 127 rounded to f16
// the rounding of the CPU backend's Q8_0 activations (the same q and d: a Q8_0 model's dot
// products then differ from the CPU's only in summation order) and of llama.cpp's CUDA q8_1.
//
// Weights are staged through shared-memory windows as in gemv.cu (see there), but with
// asynchronous copies (cp.async) into two windows per row: the next window's loads are in
// flight while the current one is decoded, and loads in flight hold no registers. The int8
// kernels issue few instructions per weight byte, so unlike gemv.cu's they wait on memory.
// A row's windows are of equal size (a 16-block Q4_K row is 8 + 8 blocks, not 14 + 2).

// Bytes of one row's window (two per row, in flight one after the other). At most 3072: a
// block's windows must fit the 48 KiB of static shared memory.
//
// NOTE: measured on an H100 (HEARTH_CUDA_DEFINES, hearth bench tg128, one call), Llama-3.1-8B
// Q4_K_M / Qwen3-0.6B Q4_K_M: 1024 bytes 286.0 / 713.1 tok/s, 1536: 289.9 / 722.7, 2048: 284.8
// and 286.3 / 715.7 and 721.6, 3072: 271.6 / 689.4. A small difference, the same way on both.
// NOTE (H200, BENCHMARKS.md 2026-11-29, "before midnight"; `binary_ab.sh`, HEARTH_CUDA_DEFINES,
// tok/s by round): 1536 -> 1664 bytes, which cuts the 3,072-column rows of Qwen3-0.6B Q8_0's
// down projection in two windows instead of three, both staged before the kernel's wait
// (Q8A_STAGE_TWO): tg128 1,405.5 / 1,394.0 / 1,376.5 -> 1,414.8 / 1,414.2 / 1,396.4, `--greedy`
// 1,398.7 / 1,397.5 / 1,399.8 -> 1,413.4 / 1,411.5 / 1,409.8; Llama-3.2-1B Q8_0 tg128 1,354.4 /
// 1,357.3 -> 1,364.0 / 1,366.3. Q6_K rows keep their 4-block windows (7 blocks fit either way).
#ifndef Q8A_WINDOW_BYTES
#define Q8A_WINDOW_BYTES 1664
#endif
#define Q8A_WINDOW_VECS (Q8A_WINDOW_BYTES / 16)

// Whether a window holds a whole number of the warp's steps (1) where it can, or as many
// blocks as fit (0). A step takes 32 / LANES blocks: Q6_K 4, of which 7 fit in a window, so a
// 16-block row was windows of 6, 6 and 4 blocks, five steps, two of them with half the lanes
// idle, where 4 windows of 4 keep every lane busy. Q8_0 (steps of 16) takes windows of up to
// 48 blocks.
// NOTE (H100, hearth bench tg128, `scripts/device/gemv_ab.sh`): 1024-byte windows (4 Q6_K
// blocks) took Llama-3.1-8B Q4_K_M, whose v, output and a third of its down matrices are
// Q6_K, from 356.8 / 356.0 tok/s at 1536 to 365.9 / 363.6, while Qwen3-0.6B Q8_0 lost (993 /
// 1005 -> 952 / 930: its 32-block rows took two windows). Whole steps in 1536-byte windows,
// the next call: 8B 354.2 / 347.7 / 345.6 -> 359.1 / 357.0 / 354.0, the 0.6B unchanged.
#ifndef Q8A_WHOLE_STEPS
#define Q8A_WHOLE_STEPS 1
#endif

// Bytes of each row past its first window that a block asks L2 for before the kernel before
// it has ended (see gemv_rows_q8a), and whether the first window's copies start then
// (Q8A_EARLY_STAGE 1) or only after it (0).
//
// NOTE (H100, hearth bench tg128, one call, early trigger then; common.cuh): Qwen3-0.6B Q8_0 /
// Llama-3.1-8B Q4_K_M: prefetch 0 and early stage 766.2 / 282.4 tok/s, prefetch 4096 757.0 /
// 274.6, no early stage 695.1 / 268.3, ordinary launches 706.0 / 289.6. Unbounded (whole rows),
// 8B fell from 283 to 270: its large matrices stream tens of MB into L2 during the previous
// GEMV, to be evicted before they are read. The early window is the gain.
// NOTE (H100, 2026-11-28, `binary_ab.sh`, two rounds): the gated GEMV's blocks asking L2 for
// the down projection's weights (whose kernel starts only as theirs leave), each a share,
// after their own rows: tg128 `--greedy` Qwen3-0.6B Q8_0 1,177 / 1,171 -> 1,132 / 1,131
// tok/s, Llama-3.2-1B Q8_0 (17.8 MB of down weights) 1,119 / 1,120 -> 1,035 / 1,040; before
// their own rows 1,152 / 1,146 and 1,034 / 1,035. The requests take the bandwidth the gated
// GEMV's own last rows need.
// NOTE (H200, 2026-11-29, afternoon, `binary_ab.sh`): the down projection done by the gated
// GEMV's blocks (clusters of 8 computing 128 activations, exchanging them through distributed
// shared memory, each multiplying them by its share of down's rows; part rows the next norm
// adds) was slower too: Qwen3-0.6B Q8_0 tg128 1,235-1,238 against 1,265-1,267 tok/s. Skipping
// the down projection outright would give 1,466-1,472: its kernel costs ~4 µs a layer, but the
// cluster's barrier and the exchange after it cost ~3 µs, and its weight copies 5% more.
#ifndef Q8A_PREFETCH_BYTES
#define Q8A_PREFETCH_BYTES 0
#endif
#ifndef Q8A_EARLY_STAGE
#define Q8A_EARLY_STAGE 1
#endif

// Whether a row of two windows is staged whole (both buffers) before the kernel before it has
// ended (1), or only its first window (0): the loop then waits on no weight load.
//
// NOTE (H100, hearth bench tg128, four rounds in one call, 0 / 1): Qwen3-0.6B Q8_0 (its o
// projection's rows are two windows) 950 / 985, 1,019 / 1,027, 1,003 / 991, 946 / 969 tok/s.
// Staging two windows ahead in every row, the third and later ones as buffers free up, gave
// the 0.6B 939-984 -> 989-1,019 in another call and cost Llama-3.1-8B Q4_K_M 2% (its Q6_K
// rows are 4 and 17 windows): 360-367 -> 354. Windows of 1,664 bytes (the 0.6B's down rows
// in two) were no faster: 892-1,010. Two windows ahead in the down projection's own-copy
// kernels only (OwnQ8; H200, `binary_ab.sh`, two rounds): Qwen3-0.6B Q8_0 tg128 1,297.8 /
// 1,297.2 -> 1,320.1 / 1,312.8 tok/s but `--greedy` 1,352.2 / 1,351.6 -> 1,343.1 / 1,349.8,
// Q4_K_M 1,374.8 / 1,352.4 -> 1,369.1 / 1,373.1 and 1,396.0 / 1,401.1 -> 1,394.8 / 1,396.1.
#ifndef Q8A_STAGE_TWO
#define Q8A_STAGE_TWO 1
#endif

// When an int8 GEMV of staged rows lets the kernel after it launch: 2 (the default) every such
// GEMV once its own wait is over; 1 only the gated GEMV, and only where its rows are all staged
// before that wait (rows of one or two windows, as 1,024 Q8_0 columns); 0 none, as its blocks
// exit. After its wait such a GEMV reads only activations: the next kernel's blocks, resident
// beside its own, get ready meanwhile (the down projection's stage their weights) instead of
// after it has ended. Only with every kernel at the same shared-memory carveout (device.rs
// `uniform_carveout`): with the driver's split, the next kernel's blocks could not start
// beside the GEMV's, and the gated GEMV's trigger was a loss. The Q4_K kernel that reads its
// rows into registers (Q8A_DIRECT_Q4K) does not trigger: its registers leave no room.
//
// NOTE (H200, BENCHMARKS.md 2026-11-30, later; `binary_ab.sh`, two rounds, tok/s), the gated
// GEMV alone (1): with the driver's split, Qwen3-0.6B Q8_0 tg128 1,425.0 / 1,425.9 -> 1,323.7 /
// 1,322.6 (and 1,341.6 / 1,336.6 triggering before the first copies); with every kernel at
// the most shared memory, 1,415.2 / 1,418.0 -> 1,456.0 / 1,459.0. Also triggering from the
// Q4_K kernel cost Qwen3-0.6B Q4_K_M 0.5% more (1,472.4 / 1,474.4 -> 1,462.1 / 1,466.4).
// NOTE (H200, BENCHMARKS.md 2026-11-30, night), 1 -> 2: Qwen3-0.6B Q8_0 tg128 1,455.2 /
// 1,455.5 -> 1,469.3 / 1,469.8, `--greedy` +0.8%; Q4_K_M +0.2%; 64 sequences, pp512 and a
// 32-token prompt even; Llama-3.1-8B Q4_K_M -0.3%, inside its spread. Triggering only from
// the GEMVs whose rows were all staged before the wait gave the same. Every kernel triggering
// after its wait instead (common.cuh EARLY_TRIGGER): the same single streams, but 64
// sequences -7.5%.
#ifndef Q8A_TRIGGER
#define Q8A_TRIGGER 2
#endif

// Blocks per multiprocessor the Q6_K GEMV's registers must allow (Q8aQ6_K::dot's funnel
// shifts hold more words than its 16-bit loads did: 96 registers, 5 blocks, unbounded).
//
// NOTE (H100, hearth bench tg128, `scripts/device/gemv_ab.sh`, three rounds in one call,
// Llama-3.1-8B Q4_K_M, whose output matrix, v and a third of its down projections are Q6_K):
// 16-bit loads 346.8 / 342.4 / 341.7 tok/s, funnel shifts 345.1 / 343.7 / 346.8, the same held
// to 8 blocks 346.1 / 346.9 / 346.7.
// NOTE (H200, BENCHMARKS.md 2026-11-29, end of day): Qwen3-0.6B Q4_K_M tg128 at 8 blocks
// 1,424-1,428 tok/s, at 4 1,396-1,421, at 12 1,377-1,378. Its Q6_K output matrix (151,936
// rows of one 4-block step each) reads at 2.4 TB/s here against the Q8_0 kernel's 3.5: the
// per-warp setup, staging and reduction of one-step rows, not the register bound, hold it.
#ifndef Q8A_Q6K_MIN_BLOCKS
#define Q8A_Q6K_MIN_BLOCKS 8
#endif

// The sum of the four signed byte products of a and b, plus c.
__device__ __forceinline__ int dp4a(u32 a, u32 b, int c) {
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

// The sum of the four products of a's unsigned bytes and b's signed bytes, plus c.
__device__ __forceinline__ int dp4a_us(u32 a, u32 b, int c) {
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

// The five aligned words that hold the 16 bytes at p (2-byte aligned), and the bit offset of
// p's first byte in the first: funnel shifts then take any 4 of the bytes, already shifted.
// Reads up to 4 bytes past the 16: callers keep that much room after the block.
__device__ __forceinline__ u32 load20_a2(const u8* p, u32* v) {
    // NOTE: the aligned address as p minus its offset, so that the compiler still knows
    // which memory p is in (shared-memory windows take LDS, not generic loads).
    const u32 off = (u32)reinterpret_cast<size_t>(p) & 3u;
    const u32* w = reinterpret_cast<const u32*>(p - off);
#pragma unroll
    for (int j = 0; j < 5; ++j) v[j] = w[j];
    return 8 * off;
}

// Bytes in 0..63 minus 32, as signed bytes (no borrow crosses a byte: every byte + 96 < 256).
__device__ __forceinline__ u32 sub32_bytes(u32 v) {
    return ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
}

// 16 bytes from global to shared memory without passing through registers (sm_80 and up;
// a plain copy before).
__device__ __forceinline__ void copy16_async(uint4* dst, const uint4* src) {
#if __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src));
#else
    *dst = *src;
#endif
}

// Whether the weights the int8 GEMVs read are marked first to go from L2 (1) or cached as
// anything else (0). A decode step streams every weight once, through L2, between two reads of
// a layer's keys and values and of the small tensors a step passes from kernel to kernel:
// marked so, the weights take the place of other weights in L2, not of those.
// NOTE (H200, BENCHMARKS.md 2026-11-30, small hours; `binary_ab.sh`, two rounds, 0 -> 1, tok/s):
// Qwen3-0.6B Q8_0 tg128 1,495.9 / 1,507.2 -> 1,549.8 / 1,536.9, `--greedy` 1,494.7 / 1,494.0 ->
// 1,538.4 / 1,537.8; Q4_K_M tg128 1,506.7 / 1,504.8 -> 1,554.8 / 1,546.5; 64 sequences even;
// Llama-3.1-8B Q4_K_M tg128 450.4 -> 461.1. A Q8_0 step (host clock, a probe build) took
// 646-683 µs from the first position to the 128th, now 631-655: what grew with the span,
// attention's loads of earlier positions' keys and values, grew less (likely: those rows now
// stay in L2 from step to step; not checked with a profiler). Long contexts even: Q8_0 tg128
// after 2,048 and 8,192 positions 959.6 -> 960.9 and 797.3 -> 799.7, pp512 after 2,048
// 78.2k -> 78.6k.
#ifndef Q8A_WEIGHTS_EVICT_FIRST
#define Q8A_WEIGHTS_EVICT_FIRST 1
#endif

// The L2 policy of weight loads (Q8A_WEIGHTS_EVICT_FIRST), for loads that take a cache hint.
__device__ __forceinline__ unsigned long long weight_policy() {
    unsigned long long p = 0;
#if __CUDA_ARCH__ >= 800 && Q8A_WEIGHTS_EVICT_FIRST
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
    return p;
}

// As copy16_async, to the shared-memory address `dst` (a window's, worked out once for all
// its copies rather than converted from a generic pointer at each), a weight's bytes.
__device__ __forceinline__ void copy16_async_shared(unsigned dst, const uint4* src) {
#if __CUDA_ARCH__ >= 800
#if Q8A_WEIGHTS_EVICT_FIRST
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst),
                 "l"(src), "l"(weight_policy()));
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
#endif
#endif
}

// 16 bytes of a weight from global memory (read-only), with weight_policy.
__device__ __forceinline__ uint4 load_weight16(const uint4* src) {
#if __CUDA_ARCH__ >= 800 && Q8A_WEIGHTS_EVICT_FIRST
    uint4 v;
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(src), "l"(weight_policy()));
    return v;
#else
    return __ldg(src);
#endif
}

__device__ __forceinline__ void copies_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;");
#endif
}

// Wait until at most N committed groups of this thread's copies are still in flight.
template <int N>
__device__ __forceinline__ void copies_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
#endif
}

// Where block b0 of `row` starts within its first 16-byte vector.
template <int BYTES>
__device__ __forceinline__ int window_skew(const u8* row, int b0) {
    return (int)(reinterpret_cast<size_t>(row + (size_t)b0 * BYTES) & 15);
}

// As stage_rows (gemv.cu), with asynchronous copies: blocks b0 .. b0 + nb of each row to
// `window`, from the 16-byte vector holding the first byte of block b0. One commit group.
template <int BYTES, int R>
__device__ __forceinline__ void stage_rows_async(const u8* const* rows, int b0, int nb,
                                                 uint4 (*window)[Q8A_WINDOW_VECS], int lane) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const u8* start = rows[r] + (size_t)b0 * BYTES;
        const int skew = window_skew<BYTES>(rows[r], b0);
        const uint4* aligned = reinterpret_cast<const uint4*>(start - skew);
        const int n_vecs = (skew + nb * BYTES + 15) / 16;
#if __CUDA_ARCH__ >= 800
        const unsigned to = (unsigned)__cvta_generic_to_shared(window[r]);
#endif
        // A fixed number of copies (a window is at most 4 of the warp's rounds): the loop
        // the compiler made of a bounded one cost more than the copies. NOTE (H200, Nsight
        // Compute, with Q8aQ6_K's leaner dot): Qwen3-0.6B Q8_0's output GEMV 36.0 M -> 31.8 M
        // instructions, 47.5 -> 45.8 µs.
#pragma unroll
        for (int k = 0; k < (Q8A_WINDOW_VECS + WARP_SIZE - 1) / WARP_SIZE; ++k) {
            const int v = lane + k * WARP_SIZE;
            if (v >= n_vecs) break;
#if __CUDA_ARCH__ >= 800
            copy16_async_shared(to + 16 * v, aligned + v);
#else
            window[r][v] = aligned[v];
#endif
        }
    }
    copies_commit();
}

// One 32-value group held N consecutive values per lane by 32 / N aligned lanes of a warp
// (N = 1: the whole warp): the lanes' 8-bit values to `q` (N each), and (d, d * sum q) to `ds`
// from the group's first lane. `store`: whether this lane's group is written at all. All
// lanes must call it.
template <int N>
__device__ __forceinline__ void quantize_lane_values_q8_1(const float* v, i8* q, float2* ds,
                                                          bool store) {
    constexpr int LANES = WARP_SIZE / N;
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, o));
    const float d = amax / 127.f;
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    int sum = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const int qi = (int)rintf(v[i] * id);
        if (store) q[i] = (i8)qi;
        sum += qi;
    }
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(FULL_MASK, sum, o);
    const float dh = round_f16(d);
    if (store && threadIdx.x % LANES == 0) *ds = make_float2(dh, dh * (float)sum);
}

// One 32-value group held one value per lane of a warp.
__device__ __forceinline__ void quantize_group_q8_1(float v, i8* q, float2* ds) {
    quantize_lane_values_q8_1<1>(&v, q, ds, true);
}

extern "C" __global__ void quantize_q8_1(const float* __restrict__ x, i8* __restrict__ xq,
                                         float2* __restrict__ xds, int n) {
    await_previous_kernels();
    const int lane = threadIdx.x % WARP_SIZE;
    const int group = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (group * 32 >= n) return;
    quantize_group_q8_1(x[group * 32 + lane], xq + group * 32 + lane, xds + group);
}

// A block quantizes the n values of x (a multiple of 32) into xq / xds itself, laid out as
// quantize_q8_1 writes them and with its bits (a group's max and sum of q do not depend on
// which lanes hold its values): 8 lanes a group, 4 values a lane, so a warp takes 128 values
// a round, and the loads of 6 rounds (3,072 values for a block of 4 warps) go out before their
// first group is quantized. For a GEMV whose input no kernel has quantized (gemv_rows_q8a's
// `xf`). All threads of the block call it; the caller syncs the block before reading xq / xds.
__device__ __forceinline__ void block_quantize_q8_1(const float* __restrict__ x, i8* xq,
                                                    float2* xds, int n) {
    constexpr int ROUNDS = 6;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int stride = blockDim.x * 4;  // values of all the block's warps' rounds
    for (int base = warp * 128; base < n; base += ROUNDS * stride) {
        float4 v[ROUNDS];
#pragma unroll
        for (int i = 0; i < ROUNDS; ++i) {
            const int at = base + i * stride + lane * 4;
            v[i] = at < n ? *reinterpret_cast<const float4*>(x + at) : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < ROUNDS; ++i) {
            const int at = base + i * stride + lane * 4;
            if (base + i * stride >= n) break;  // the same for the whole warp
            const float vals[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
            quantize_lane_values_q8_1<4>(vals, xq + at, xds + at / 32, at < n);
        }
    }
}

// Each block type: BYTES, QK, LANES (= QK / VALS) and dot(): the lane's VALS values of block
// `b` times its VALS activations `xv` (16 per uint4), scaled to f32; `ds` is (d, d * sum q) of
// the 32-group of their first value.

// Q8_0: d (f16) | qs[32].
struct Q8aQ8_0 {
    static const int BYTES = 34, QK = 32, LANES = 2, VALS = 16;
    __device__ static __forceinline__ float dot(const u8* b, const uint4* xvs, float2 ds, int sub) {
        const uint4 xv = xvs[0];
        const u8* q = b + 2 + 16 * sub;
        // Aligned words and funnel shifts rather than 16-bit halves: 12 shared-memory loads
        // instead of 18 per step of two rows. NOTE: may read 4 bytes past the block, which
        // the window leaves room for (gemv_warp_rows_q8a).
        u32 v[5];
        const u32 sh = load20_a2(q, v);
        int s = dp4a(__funnelshift_r(v[0], v[1], sh), xv.x, 0);
        s = dp4a(__funnelshift_r(v[1], v[2], sh), xv.y, s);
        s = dp4a(__funnelshift_r(v[2], v[3], sh), xv.z, s);
        s = dp4a(__funnelshift_r(v[3], v[4], sh), xv.w, s);
        return load_half(b) * ds.x * (float)s;
    }
};

// Q4_0: d (f16) | qs[16]; values 0..16 in the low nibbles, 16..32 in the high ones;
// x = d * (q - 8). The -8 is applied once per block through the group sum: lane 0 takes it.
struct Q8aQ4_0 {
    static const int BYTES = 18, QK = 32, LANES = 2, VALS = 16;
    __device__ static __forceinline__ float dot(const u8* b, const uint4* xvs, float2 ds, int sub) {
        const uint4 xv = xvs[0];
        const int shift = 4 * sub;
        const u8* q = b + 2;
        int s = dp4a((load_u32_a2(q) >> shift) & 0x0F0F0F0Fu, xv.x, 0);
        s = dp4a((load_u32_a2(q + 4) >> shift) & 0x0F0F0F0Fu, xv.y, s);
        s = dp4a((load_u32_a2(q + 8) >> shift) & 0x0F0F0F0Fu, xv.z, s);
        s = dp4a((load_u32_a2(q + 12) >> shift) & 0x0F0F0F0Fu, xv.w, s);
        const float d = load_half(b);
        return d * (ds.x * (float)s - (sub == 0 ? 8.f * ds.y : 0.f));
    }
};

// Q4_K: d | dmin | scales[12] | qs[128]. A lane takes a whole 32-value group g (8 lanes per
// block), which reads nibble g % 2 of qs[32 * (g / 2) ..]; x = d*sc*q - dmin*m, the min term
// through the group's activation sum. NOTE: 144-byte blocks keep rows and blocks 16-byte
// aligned in the window. A group per lane (rather than 16 values) decodes each 6-bit scale
// and min once per 32 values: 8B-model decode 210 -> 222 tok/s on an H100.
struct Q8aQ4_K {
    static const int BYTES = 144, QK = 256, LANES = 8, VALS = 32;
    __device__ static __forceinline__ float dot(const u8* b, const uint4* xv, float2 ds, int g) {
        const u8* sc = b + 4;
        int scale, min;
        scale_min_k4(sc, g, scale, min);
        const uint4* q = reinterpret_cast<const uint4*>(b + 16 + 32 * (g >> 1));
        const int shift = 4 * (g & 1);
        int s = 0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint4 w = q[h];
            s = dp4a((w.x >> shift) & 0x0F0F0F0Fu, xv[h].x, s);
            s = dp4a((w.y >> shift) & 0x0F0F0F0Fu, xv[h].y, s);
            s = dp4a((w.z >> shift) & 0x0F0F0F0Fu, xv[h].z, s);
            s = dp4a((w.w >> shift) & 0x0F0F0F0Fu, xv[h].w, s);
        }
        return load_half(b) * (float)scale * ds.x * (float)s -
               load_half(b + 2) * (float)min * ds.y;
    }
};

// Q6_K: ql[128] | qh[64] | scales[16] (i8) | d. Value 128n + 32s + l: low nibble of
// ql[64n + 32(s%2) + l] (high nibble for s >= 2), high 2 bits at shift 2s of qh[32n + l];
// x = d * scale[value / 16] * (q - 32). A lane takes 32 values (8 lanes per block):
// n = sub / 4, s = sub % 4, l = 0..32, with two 16-value scales.
// NOTE (H200, 2026-11-29; with the window copies of stage_rows_async unrolled): the alignment
// worked out once a block and the 2-bit fields taken without a shift of their own took the
// Q6_K output GEMV of Qwen3-0.6B Q4_K_M (Nsight Compute) from 43.2 M to 36.4 M instructions
// and from 53.4 to 48.0 µs; tg128 1,431.9 / 1,404.9 -> 1,459.6 / 1,460.1 tok/s.
struct Q8aQ6_K {
    static const int BYTES = 210, QK = 256, LANES = 8, VALS = 32;
    __device__ static __forceinline__ float dot(const u8* b, const uint4* xv, float2 ds, int sub) {
        const int n = sub >> 2, s = sub & 3;
        // Every word the lane reads lies a multiple of 16 bytes from b, so one alignment
        // serves all four 20-byte reads (see load20_a2): the aligned base and the bit offset
        // are worked out once a block, not once a read.
        const u32 off = (u32)reinterpret_cast<size_t>(b) & 3u;
        const u32* base = reinterpret_cast<const u32*>(b - off);
        const u32 ls = 8 * off + 4 * (s >> 1);
        // The 2-bit fields are taken from 4 bits lower (hs = their offset - 4), which puts
        // them at bits 4-5 of each byte with no shift of their own; where that offset would
        // be negative, from 28 bits into the word before (still in the block: ql's last).
        const u32 at = 8 * off + 2 * s;
        const bool before = at < 4;
        const u32 hs = before ? at + 28 : at - 4;
        const u32* ql = base + 16 * n + 8 * (s & 1);
        const u32* qh = base + 32 + 8 * n - (before ? 1 : 0);
        int acc[2] = {0, 0};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u32 xs[4] = {xv[h].x, xv[h].y, xv[h].z, xv[h].w};
            // One funnel shift both realigns the words and takes the lane's nibbles or 2-bit
            // fields. sum((q - 32) x) is taken as sum(q x) - 32 sum(x): the same integers,
            // and the warp's rows share sum(x).
            u32 lw[5], hw[5];
#pragma unroll
            for (int j = 0; j < 5; ++j) {
                lw[j] = ql[4 * h + j];
                hw[j] = qh[4 * h + j];
            }
            int xsum = 0;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const u32 lo = __funnelshift_r(lw[k], lw[k + 1], ls) & 0x0F0F0F0Fu;
                const u32 hi = __funnelshift_r(hw[k], hw[k + 1], hs) & 0x30303030u;
                acc[h] = dp4a_us(lo | hi, xs[k], acc[h]);
                xsum = dp4a(0x01010101u, xs[k], xsum);
            }
            acc[h] -= 32 * xsum;
        }
        const i8* scales = reinterpret_cast<const i8*>(b + 192) + 2 * sub;
        return load_half(b + 208) * ds.x *
               ((float)scales[0] * (float)acc[0] + (float)scales[1] * (float)acc[1]);
    }
};

// As gemv_rows (gemv.cu), with the activations in int8: plain modes compute rows row0, row0+1
// of w; GLU modes row r of w (gate) and of w2 (up).
// Where a GLU GEMV also writes its output quantized for the next int8 GEMV (the down
// projection), saving that GEMV a quantize_q8_1 launch; all null when it does not. yq and yds
// are laid out as quantize_q8_1 writes them; counts holds one zeroed counter per 32-row group
// and token (see quantize_when_complete).
struct GluQ8 {
    i8* yq;
    float2* yds;
    u32* counts;
};

// No 8-bit copy of the output.
#define NO_GLU_Q8 (GluQ8{nullptr, nullptr, nullptr})

// Called by every lane after lane 0 stored y[row]: the warp that stores the last row of a
// 32-row group quantizes the whole group, bit for bit as quantize_q8_1 does, and sets its
// counter back to 0 for the next launch (or graph replay). Rows of a group are spread over
// several blocks, so the count is kept in global memory, behind fences on both sides: every
// store a count reports is visible to the warp that reads the group.
__device__ __forceinline__ void quantize_when_complete(const float* y, GluQ8 out, int row,
                                                       int lane) {
    const int group = row / 32;
    __threadfence();
    u32 arrived = 0;
    if (lane == 0) arrived = atomicAdd(out.counts + group, 1u);
    arrived = __shfl_sync(FULL_MASK, arrived, 0);
    if (arrived != 31) return;
    __threadfence();
    // From L2: other blocks' rows may be stale in this SM's L1.
    const float v = __ldcg(y + group * 32 + lane);
    quantize_group_q8_1(v, out.yq + group * 32 + lane, out.yds + group);
    if (lane == 0) out.counts[group] = 0;
}

// The weight rows a warp multiplies from row0: plain modes rows row0 .. row0 + R - 1 of w (the
// last row again past the end), GLU modes (R = 2) row row0 of w (gate) and of w2 (up).
template <int R = ROWS_PER_WARP>
__device__ __forceinline__ void warp_weight_rows(const u8** rows, const u8* w, const u8* w2,
                                                 bool glu, int row0, int n_rows,
                                                 size_t row_bytes) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        rows[r] = glu ? (r == 0 ? w : w2) + (size_t)row0 * row_bytes
                      : w + (size_t)min(row0 + r, n_rows - 1) * row_bytes;
    }
}

// One warp's two weight windows (shared memory).
typedef uint4 (*Q8aWindows)[ROWS_PER_WARP][Q8A_WINDOW_VECS];

// A GEMV block's own 8-bit copy of its activations: `x` the token's f32 row, which the block
// quantizes (block_quantize_q8_1) into q (n_cols bytes) and ds (n_cols / 32 pairs), shared
// memory, once the kernels before it have ended; then it reads those instead of xq / xds. For
// the down projection after the gated GEMV (launch.rs `own_q8_fits`): each of its blocks
// reads the whole f32 row through L2, one round trip, as it would read the 8-bit row, where
// the gated GEMV's own copy (quantize_when_complete) ends that kernel a fence, an atomic, a
// fence and a load later. x null: none. Every warp of the block must take part (no warp
// past n_rows): the block syncs.
//
// NOTE (H200, `scripts/device/binary_ab.sh`, tg128, two rounds, tok/s, the early residual of
// gemv_rows_base on): the gated GEMV's copy 1,270.5 / 1,279.1 -> the down projection's own
// 1,307.7 / 1,312.1 on Qwen3-0.6B Q8_0 (+3%), 1,333.5 / 1,330.5 -> 1,365.9 / 1,363.7 on
// Q4_K_M (+2.5%).
struct OwnQ8 {
    const float* x;
    i8* q;
    float2* ds;
};
#define NO_OWN_Q8 (OwnQ8{nullptr, nullptr, nullptr})

// With `own`, the block's 8-bit copy of its activations (see OwnQ8), made after
// await_previous_kernels: true, and the caller reads own.q / own.ds instead of xq / xds.
__device__ __forceinline__ bool make_own_q8(OwnQ8 own, int n_cols) {
    if (own.x == nullptr) return false;
    block_quantize_q8_1(own.x, own.q, own.ds, n_cols);
    __syncthreads();
    return true;
}

// How a row of n_blocks blocks of B is cut into windows (at most two in flight, see
// Q8A_WINDOW_BYTES): their number, and the blocks of each (the last may have fewer).
template <class B>
__device__ __forceinline__ int q8a_windows(int n_blocks, int& blocks_per_window) {
    const int blocks_per_step = WARP_SIZE / B::LANES;
    // Room for the skew (up to 15 bytes) and for the 4 bytes Q8aQ8_0::dot may read past a block.
    const int fits = (Q8A_WINDOW_BYTES - 15 - 4) / B::BYTES;
    // Whole steps of the warp where at least one fits (see Q8A_WHOLE_STEPS).
    const int max_per_window =
        Q8A_WHOLE_STEPS && fits >= blocks_per_step ? fits / blocks_per_step * blocks_per_step
                                                   : fits;
    const int n_windows = (int)((unsigned)(n_blocks + max_per_window - 1) / max_per_window);
    // Rows of one window (the output matrix of a small model) skip the division.
    blocks_per_window =
        n_windows == 1 ? n_blocks : (int)((unsigned)(n_blocks + n_windows - 1) / n_windows);
    return n_windows;
}

// gemv_warp_rows_q8a from row row0, R rows (plain modes) or ROWS_PER_WARP (GLU modes): R
// above ROWS_PER_WARP only for rows of one window, whose R rows then take the room of the
// warp's two windows of ROWS_PER_WARP rows (`window` points at that memory).
template <class B, int R = ROWS_PER_WARP>
__device__ __forceinline__ void gemv_warp_rows_q8a_at(uint4 (*window)[R][Q8A_WINDOW_VECS],
                                                      const u8* __restrict__ w,
                                                      const u8* __restrict__ w2,
                                                      const i8* __restrict__ xq,
                                                      const float2* __restrict__ xds,
                                                      float* __restrict__ y, int n_rows,
                                                      int n_cols, int mode, int row0, GluQ8 q8,
                                                      OwnQ8 own = NO_OWN_Q8) {
    const int lane = threadIdx.x % WARP_SIZE;
    const bool glu = mode >= GEMV_GLU_SILU;
    // NOTE: a whole warp leaves together and no block-wide barrier follows, so this is safe
    // (GEMV_STORE_BLOCK's barrier: launched only where rows fill whole blocks).
    if (row0 >= n_rows) return;
    const int n_blocks = (int)((unsigned)n_cols / B::QK);
    const size_t row_bytes = (size_t)n_blocks * B::BYTES;
    const u8* rows[R];
    warp_weight_rows<R>(rows, w, w2, glu, row0, n_rows, row_bytes);
    const int lane_block = lane / B::LANES, sub = lane % B::LANES;
    const int blocks_per_step = WARP_SIZE / B::LANES;
    int blocks_per_window;
    const int n_windows = q8a_windows<B>(n_blocks, blocks_per_window);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    // The first window of weights (no kernel writes them; both of a two-window row) is
    // copied, and up to Q8A_PREFETCH_BYTES more of each row asked of L2, while the kernel
    // before still runs.
#if !Q8A_EARLY_STAGE
    await_previous_kernels();
#endif
    stage_rows_async<B::BYTES, R>(rows, 0, min(blocks_per_window, n_blocks), window[0], lane);
    const bool both_staged = Q8A_STAGE_TWO && n_windows == 2;
    if (both_staged) {
        stage_rows_async<B::BYTES, R>(rows, blocks_per_window, n_blocks - blocks_per_window,
                                      window[1], lane);
    }
    if (Q8A_PREFETCH_BYTES > 0 && blocks_per_window < n_blocks) {
        const size_t staged = (size_t)blocks_per_window * B::BYTES;
        const size_t more = min(row_bytes - staged, (size_t)Q8A_PREFETCH_BYTES);
#pragma unroll
        for (int r = 0; r < R; ++r) prefetch_l2(rows[r] + staged, more, lane);
    }
#if Q8A_EARLY_STAGE
    await_previous_kernels();
#endif
    if (Q8A_TRIGGER == 2 || (Q8A_TRIGGER == 1 && glu && (n_windows == 1 || both_staged))) {
        launch_dependents_now();
    }
    const RowsOf<R> base = gemv_rows_base<R>(y, row0, n_rows, mode, lane);
    if (make_own_q8(own, n_cols)) {
        xq = own.q;
        xds = own.ds;
    }
    const uint4* xq4 = reinterpret_cast<const uint4*>(xq);
    for (int i = 0, b0 = 0; b0 < n_blocks; ++i, b0 += blocks_per_window) {
        const int nb = min(blocks_per_window, n_blocks - b0);
        // The next window's copies go out before this one is decoded. Its buffer was last
        // read two windows ago, before the __syncwarp that ends each window.
        const int next = b0 + blocks_per_window;
        if (next < n_blocks) {
            if (!both_staged) {
                stage_rows_async<B::BYTES, R>(rows, next,
                                              min(blocks_per_window, n_blocks - next),
                                              window[(i + 1) & 1], lane);
            }
            copies_wait<1>();
        } else {
            copies_wait<0>();
        }
        __syncwarp();
        uint4(*current)[Q8A_WINDOW_VECS] = window[i & 1];
        int skew[R];
#pragma unroll
        for (int r = 0; r < R; ++r) skew[r] = window_skew<B::BYTES>(rows[r], b0);
        // NOTE: not unrolled. Unrolled by 2 or 4 (so that later iterations' activation loads
        // go out early) it measured slower on an H100: tg128 Llama-3.1-8B Q4_K_M 301.6 -> 280.5
        // (2) and 292.7 (4) tok/s, Qwen3-0.6B Q4_K_M 800.2 -> 778.8 and 783.6.
#pragma unroll 1
        for (int b = lane_block; b < nb; b += blocks_per_step) {
            const int v = (b0 + b) * B::QK + B::VALS * sub;  // first value of the lane
            uint4 xv[B::VALS / 16];
#pragma unroll
            for (int i = 0; i < B::VALS / 16; ++i) xv[i] = xq4[v / 16 + i];
            const float2 ds = xds[v / 32];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const u8* blk = reinterpret_cast<const u8*>(current[r]) + skew[r];
                acc[r] += B::dot(blk + b * B::BYTES, xv, ds, sub);
            }
        }
        __syncwarp();
    }
    gemv_finish(acc, y, row0, n_rows, mode, lane, base);
    if (glu && q8.yq != nullptr) quantize_when_complete(y, q8, row0, lane);
}

// gemv_rows_q8a for one token's xq / xds / y, with the warp's windows given: the part the
// decode-layers kernel (decode_layers.cu) shares, which runs it for many blocks in turn.
template <class B>
__device__ __forceinline__ void gemv_warp_rows_q8a(Q8aWindows window, const u8* __restrict__ w,
                                                   const u8* __restrict__ w2,
                                                   const i8* __restrict__ xq,
                                                   const float2* __restrict__ xds,
                                                   float* __restrict__ y, int n_rows, int n_cols,
                                                   int mode, int block, GluQ8 q8,
                                                   OwnQ8 own = NO_OWN_Q8) {
    const int warp = threadIdx.x / WARP_SIZE;
    const bool glu = mode >= GEMV_GLU_SILU;
    const int row0 = (block * WARPS_PER_BLOCK + warp) * (glu ? 1 : ROWS_PER_WARP);
    gemv_warp_rows_q8a_at<B>(window, w, w2, xq, xds, y, n_rows, n_cols, mode, row0, q8, own);
}

// Q4_K rows read straight into registers (1) instead of staged through shared memory (0) by
// the GEMV kernels (the decode-layers kernel stages them, see gemv_warp_rows_q8a_typed).
//
// NOTE (H100, hearth bench tg128, two rounds in one call): Llama-3.1-8B Q4_K_M 298.0 / 302.6
// -> 302.7 / 306.2 tok/s, Qwen3-0.6B Q4_K_M 771.0 / 779.2 -> 811.2 / 818.9. Held to 64
// registers (8 blocks a multiprocessor instead of 6) it was slower: 295.6 / 296.3 and 791.9 /
// 808.4.
#ifndef Q8A_DIRECT_Q4K
#define Q8A_DIRECT_Q4K 1
#endif

// Q8aQ4_K::dot on a block held in registers: `head` its first 16 bytes, `q` the 32 bytes of
// quants holding group g. The same arithmetic in the same order, so the same bits.
__device__ __forceinline__ float q4k_dot_regs(uint4 head, const uint4* q, const uint4* xv,
                                              float2 ds, int g) {
    // scale_min_k4 without a branch (g is fixed per lane, but lanes 0-3 and 4-7 of a block
    // would take different sides): every group's scale and min come from byte g % 4 of the
    // scales' three words (head.y: scales[0..4], head.z: [4..8], head.w: [8..12]).
    // NOTE: 147 instructions a loop step against 164 picking bytes by index; Llama-3.1-8B
    // Q4_K_M tg128 on an H100 349.0 / 346.5 / 348.3 tok/s against 342.6 / 342.3 / 341.2
    // (BENCHMARKS.md, 2026-11-27).
    const u32 at = 8 * (g & 3);
    const u32 y = head.y >> at, z = head.z >> at, w = head.w >> at;
    const int scale = g < 4 ? (int)(y & 63) : (int)((w & 15) | ((y >> 2) & 0x30));
    const int min = g < 4 ? (int)(z & 63) : (int)(((w >> 4) & 15) | ((z >> 2) & 0x30));
    const int shift = 4 * (g & 1);
    int s = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        s = dp4a((q[h].x >> shift) & 0x0F0F0F0Fu, xv[h].x, s);
        s = dp4a((q[h].y >> shift) & 0x0F0F0F0Fu, xv[h].y, s);
        s = dp4a((q[h].z >> shift) & 0x0F0F0F0Fu, xv[h].z, s);
        s = dp4a((q[h].w >> shift) & 0x0F0F0F0Fu, xv[h].w, s);
    }
    const float d = half_to_f32((u16)(head.x & 0xFFFFu));
    const float dmin = half_to_f32((u16)(head.x >> 16));
    return d * (float)scale * ds.x * (float)s - dmin * (float)min * ds.y;
}

// gemv_warp_rows_q8a for Q4_K weights without shared memory: each lane loads the 48 bytes of a
// block it needs (the 16-byte head, its group's 32 quant bytes) with 16-byte read-only loads,
// the next block's loads (and its activations) in flight while it multiplies the current one.
// The first block's loads go out before the kernel before this one has ended. Rows are 16-byte
// aligned: weights start at allocations and are cut in whole rows of 144-byte blocks.
__device__ __forceinline__ void gemv_warp_rows_q4k_direct(const u8* __restrict__ w,
                                                          const u8* __restrict__ w2,
                                                          const i8* __restrict__ xq,
                                                          const float2* __restrict__ xds,
                                                          float* __restrict__ y, int n_rows,
                                                          int n_cols, int mode, int block,
                                                          GluQ8 q8, OwnQ8 own = NO_OWN_Q8) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const bool glu = mode >= GEMV_GLU_SILU;
    const int row0 = (block * WARPS_PER_BLOCK + warp) * (glu ? 1 : ROWS_PER_WARP);
    // NOTE: a whole warp leaves together and no block-wide barrier follows, so this is safe
    // (GEMV_STORE_BLOCK's barrier: launched only where rows fill whole blocks).
    if (row0 >= n_rows) return;
    const int n_blocks = n_cols / 256;
    const size_t row_bytes = (size_t)n_blocks * 144;
    const u8* rows[ROWS_PER_WARP];
    warp_weight_rows(rows, w, w2, glu, row0, n_rows, row_bytes);
    const int g = lane % 8;
    uint4 head[ROWS_PER_WARP], q[ROWS_PER_WARP][2];
    auto load = [&](int b, uint4* hd, uint4 (*qs)[2]) {
#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) {
            const u8* blk = rows[r] + (size_t)b * 144;
            hd[r] = load_weight16(reinterpret_cast<const uint4*>(blk));
            const uint4* qp = reinterpret_cast<const uint4*>(blk + 16 + 32 * (g >> 1));
            qs[r][0] = load_weight16(qp);
            qs[r][1] = load_weight16(qp + 1);
        }
    };
    // The activations go out one step ahead too, with the weights: waiting on them at the
    // step that multiplies them was the kernel's most common stall.
    // NOTE (H100, hearth bench tg128, `scripts/device/gemv_ab.sh`, three rounds in one call):
    // Llama-3.1-8B Q4_K_M 348.6 / 347.4 / 351.1 -> 357.2 / 360.0 / 354.4 tok/s (on 2026-11-26,
    // before the leaner Q4_K loop, it was within the spread). The same in the staged kernels
    // (gemv_warp_rows_q8a) lost: 346.8 / 346.3 / 347.8, and Qwen3-0.6B Q8_0 990 / 981 / 998 ->
    // 986 / 966 / 978 (its loop grew from 68 to 86 instructions).
    const uint4* xq4 = nullptr;  // after make_own_q8
    auto load_x = [&](int b, uint4* xv, float2& ds) {
        const int v = b * 256 + 32 * g;  // first value of the lane
        xv[0] = xq4[v / 16];
        xv[1] = xq4[v / 16 + 1];
        ds = xds[v / 32];
    };
    int b = lane / 8;
    if (b < n_blocks) load(b, head, q);
    await_previous_kernels(EARLY_TRIGGER_Q4K_REG);
    const RowsBase base = gemv_rows_base(y, row0, n_rows, mode, lane);
    if (make_own_q8(own, n_cols)) {
        xq = own.q;
        xds = own.ds;
    }
    xq4 = reinterpret_cast<const uint4*>(xq);
    uint4 xv[2];
    float2 ds;
    if (b < n_blocks) load_x(b, xv, ds);
    float acc[ROWS_PER_WARP];
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) acc[r] = 0.f;
    for (; b < n_blocks; b += 4) {
        uint4 next_head[ROWS_PER_WARP], next_q[ROWS_PER_WARP][2], next_xv[2];
        float2 next_ds;
        if (b + 4 < n_blocks) {
            load(b + 4, next_head, next_q);
            load_x(b + 4, next_xv, next_ds);
        }
#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) acc[r] += q4k_dot_regs(head[r], q[r], xv, ds, g);
#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) {
            head[r] = next_head[r];
            q[r][0] = next_q[r][0];
            q[r][1] = next_q[r][1];
        }
        xv[0] = next_xv[0];
        xv[1] = next_xv[1];
        ds = next_ds;
    }
    gemv_finish(acc, y, row0, n_rows, mode, lane, base);
    if (glu && q8.yq != nullptr) quantize_when_complete(y, q8, row0, lane);
}

// GGML type codes (hearth_quant::GgmlType::id) of the weight types above.
#define GGML_Q4_0 2
#define GGML_Q8_0 8
#define GGML_Q4_K 12
#define GGML_Q6_K 14

// gemv_warp_rows_q8a for weights of GGML type `ty`, one of the four above (a constant `ty`
// folds the switch away): one work unit of GEMV_ROWS_PER_BLOCK rows, or WARPS_PER_BLOCK rows
// of a GLU mode. `direct_q4k`: Q4_K as Q8A_DIRECT_Q4K says (the same bits either way); the
// decode-layers kernel, which holds many more registers, always stages.
__device__ __forceinline__ void gemv_warp_rows_q8a_typed(int ty, Q8aWindows window, const u8* w,
                                                         const u8* w2, const i8* xq,
                                                         const float2* xds, float* y, int n_rows,
                                                         int n_cols, int mode, int block,
                                                         GluQ8 q8, bool direct_q4k,
                                                         OwnQ8 own = NO_OWN_Q8) {
    switch (ty) {
        case GGML_Q8_0:
            gemv_warp_rows_q8a<Q8aQ8_0>(window, w, w2, xq, xds, y, n_rows, n_cols, mode, block,
                                        q8, own);
            break;
        case GGML_Q4_0:
            gemv_warp_rows_q8a<Q8aQ4_0>(window, w, w2, xq, xds, y, n_rows, n_cols, mode, block,
                                        q8, own);
            break;
        case GGML_Q4_K:
            if (Q8A_DIRECT_Q4K && direct_q4k) {
                gemv_warp_rows_q4k_direct(w, w2, xq, xds, y, n_rows, n_cols, mode, block, q8,
                                          own);
            } else {
                gemv_warp_rows_q8a<Q8aQ4_K>(window, w, w2, xq, xds, y, n_rows, n_cols, mode,
                                            block, q8, own);
            }
            break;
        case GGML_Q6_K:
            gemv_warp_rows_q8a<Q8aQ6_K>(window, w, w2, xq, xds, y, n_rows, n_cols, mode, block,
                                        q8, own);
            break;
    }
}

// The block's rows of a weight of type `ty`; blockIdx.y picks the token.
__device__ __forceinline__ void gemv_rows_q8a(int ty, const u8* __restrict__ w,
                                              const u8* __restrict__ w2,
                                              const i8* __restrict__ xq,
                                              const float2* __restrict__ xds,
                                              float* __restrict__ y, int n_rows, int n_cols,
                                              int mode, int block, GluQ8 q8,
                                              const float* xf = nullptr) {
    __shared__ uint4 window[WARPS_PER_BLOCK][2][ROWS_PER_WARP][Q8A_WINDOW_VECS];
    // With xf: the block's own 8-bit copy (OwnQ8), n_cols bytes and n_cols / 32 pairs of
    // dynamic shared memory (launch.rs sizes it).
    extern __shared__ uint4 own_q8[];
    xq += (size_t)blockIdx.y * n_cols;
    xds += (size_t)blockIdx.y * (n_cols / 32);
    y += (size_t)blockIdx.y * n_rows;
    if (q8.yq != nullptr) {
        q8.yq += (size_t)blockIdx.y * n_rows;
        q8.yds += (size_t)blockIdx.y * (n_rows / 32);
        q8.counts += (size_t)blockIdx.y * (n_rows / 32);
    }
    OwnQ8 own = NO_OWN_Q8;
    if (xf != nullptr) {
        i8* q = reinterpret_cast<i8*>(own_q8);
        own = {xf + (size_t)blockIdx.y * n_cols, q, reinterpret_cast<float2*>(q + n_cols)};
    }
    gemv_warp_rows_q8a_typed(ty, window[threadIdx.x / WARP_SIZE], w, w2, xq, xds, y, n_rows,
                             n_cols, mode, block, q8, true, own);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q8a_q8_0(const u8* w, const u8* w2, const i8* xq, const float2* xds, float* y, int n_rows,
              int n_cols, int mode, i8* yq, float2* yds, u32* counts) {
    gemv_rows_q8a(GGML_Q8_0, w, w2, xq, xds, y, n_rows, n_cols, mode, blockIdx.x,
                  {yq, yds, counts});
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q8a_q4_0(const u8* w, const u8* w2, const i8* xq, const float2* xds, float* y, int n_rows,
              int n_cols, int mode, i8* yq, float2* yds, u32* counts) {
    gemv_rows_q8a(GGML_Q4_0, w, w2, xq, xds, y, n_rows, n_cols, mode, blockIdx.x,
                  {yq, yds, counts});
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q8a_q4_k(const u8* w, const u8* w2, const i8* xq, const float2* xds, float* y, int n_rows,
              int n_cols, int mode, i8* yq, float2* yds, u32* counts) {
    gemv_rows_q8a(GGML_Q4_K, w, w2, xq, xds, y, n_rows, n_cols, mode, blockIdx.x,
                  {yq, yds, counts});
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS, Q8A_Q6K_MIN_BLOCKS)
gemv_q8a_q6_k(const u8* w, const u8* w2, const i8* xq, const float2* xds, float* y, int n_rows,
              int n_cols, int mode, i8* yq, float2* yds, u32* counts) {
    gemv_rows_q8a(GGML_Q6_K, w, w2, xq, xds, y, n_rows, n_cols, mode, blockIdx.x,
                  {yq, yds, counts});
}

// The same, quantizing the token's f32 activations `xf` themselves (OwnQ8; plain modes, every
// warp of every block with rows): kernels of their own, so that the registers this takes
// (the quantizer's loads in flight next to the first weights) stay out of the kernels above.
extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q8a_own_q8_0(const u8* w, const float* xf, float* y, int n_rows, int n_cols, int mode) {
    gemv_rows_q8a(GGML_Q8_0, w, nullptr, nullptr, nullptr, y, n_rows, n_cols, mode, blockIdx.x,
                  NO_GLU_Q8, xf);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q8a_own_q4_0(const u8* w, const float* xf, float* y, int n_rows, int n_cols, int mode) {
    gemv_rows_q8a(GGML_Q4_0, w, nullptr, nullptr, nullptr, y, n_rows, n_cols, mode, blockIdx.x,
                  NO_GLU_Q8, xf);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q8a_own_q4_k(const u8* w, const float* xf, float* y, int n_rows, int n_cols, int mode) {
    gemv_rows_q8a(GGML_Q4_K, w, nullptr, nullptr, nullptr, y, n_rows, n_cols, mode, blockIdx.x,
                  NO_GLU_Q8, xf);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS, Q8A_Q6K_MIN_BLOCKS)
gemv_q8a_own_q6_k(const u8* w, const float* xf, float* y, int n_rows, int n_cols, int mode) {
    gemv_rows_q8a(GGML_Q6_K, w, nullptr, nullptr, nullptr, y, n_rows, n_cols, mode, blockIdx.x,
                  NO_GLU_Q8, xf);
}

// Short rows, four a warp: for rows of one window (the output matrix of a small model:
// 1,024 columns of Q8_0 or Q6_K), each warp takes four rows in the room of its two windows
// of two, so that its setup, its activation loads and their sums serve twice the rows. The
// same arithmetic per row as gemv_rows_q8a, so the same bits. Plain modes; a block takes 16
// rows. Rows of more windows (HEARTH_CUDA_DEFINES can shrink the windows) go two by two,
// as gemv_rows_q8a takes them. The host picks these kernels by the columns (launch.rs
// `q8a_rows4`).
// NOTE (H200, BENCHMARKS.md 2026-11-29, "after hours"; Nsight Compute, 2 rows -> 4 rows a
// warp): Qwen3-0.6B Q4_K_M's Q6_K output GEMV 36.4 M -> 30.0 M instructions, 49.8 -> 41.6 µs;
// Q8_0's 31.8 M -> 25.9 M, 45.7 -> 44.1 µs. tg128 (`binary_ab.sh`, two rounds) Q4_K_M
// 1,467.1 / 1,464.9 -> 1,483.7 / 1,466.6 tok/s, Q8_0 1,390.3 / 1,393.1 -> 1,405.2 / 1,408.0.
// NOTE (H200, BENCHMARKS.md 2026-11-29, "before midnight"): four rows a warp for the other
// matrices of 1,024 columns did not pay. q/k/v (three matrices, 256 blocks instead of 512):
// Qwen3-0.6B Q8_0 tg128 1,399.7 against 1,403.2 tok/s (four rounds each), `--greedy` 1,400.4
// against 1,400.1. The gated GEMV (two gate and up pairs a warp, 384 blocks instead of 768):
// 1,343.6 / 1,373.4 against 1,360.6 / 1,391.9. Q4_K rows staged in windows four a warp, where
// two a warp read them straight into registers: Q4_K_M q/k/v 1,350.4 / 1,380.5 against
// 1,462.4 / 1,436.1. Those GEMVs wait on the latency of their few loads, which longer warps
// lengthen, rather than on instruction issue as the output matrix's does.
// NOTE (same entry; Nsight Compute, the output GEMV of one decode step): its rows staged by
// the bulk-copy engine (cp.async.bulk, a copy a row from lane 0, completing on a barrier a
// warp) instead of every lane's 16-byte copies: Q6_K 40.99 -> 40.28 µs (29.44 M -> 29.10 M
// instructions), but Q8_0 45.40 -> 46.69 µs (25.15 M -> 24.33 M). Eight rows a warp (windows of
// 1,120 bytes a row, 37 KB a block, six blocks a multiprocessor): Q6_K 41.15 -> 42.43 µs with
// 29.48 M -> 25.79 M instructions, Q8_0 45.09 -> 47.07 µs with 25.15 M -> 20.80 M; tg128 even.
// Four rows a warp no longer wait on instruction issue. Neither kept.
#define Q8A_ROWS4 (2 * ROWS_PER_WARP)
template <class B>
__device__ __forceinline__ void gemv_rows4_q8a(const u8* __restrict__ w,
                                               const i8* __restrict__ xq,
                                               const float2* __restrict__ xds,
                                               float* __restrict__ y, int n_rows, int n_cols,
                                               int mode) {
    __shared__ uint4 window[WARPS_PER_BLOCK][2][ROWS_PER_WARP][Q8A_WINDOW_VECS];
    xq += (size_t)blockIdx.y * n_cols;
    xds += (size_t)blockIdx.y * (n_cols / 32);
    y += (size_t)blockIdx.y * n_rows;
    const int warp = threadIdx.x / WARP_SIZE;
    const int first = blockIdx.x * WARPS_PER_BLOCK * Q8A_ROWS4;
    int blocks_per_window;
    if (q8a_windows<B>(n_cols / B::QK, blocks_per_window) == 1) {
        auto rows4 = reinterpret_cast<uint4(*)[Q8A_ROWS4][Q8A_WINDOW_VECS]>(window[warp]);
        gemv_warp_rows_q8a_at<B, Q8A_ROWS4>(rows4, w, nullptr, xq, xds, y, n_rows, n_cols, mode,
                                            first + warp * Q8A_ROWS4, NO_GLU_Q8);
        return;
    }
    // The block's first 8 rows, then its next 8 (GEMV_STORE_BLOCK stores 8 at a time).
    for (int half = 0; half < 2; ++half) {
        const int row0 = first + half * GEMV_ROWS_PER_BLOCK + warp * ROWS_PER_WARP;
        gemv_warp_rows_q8a_at<B>(window[warp], w, nullptr, xq, xds, y, n_rows, n_cols, mode,
                                 row0, NO_GLU_Q8);
    }
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q8a_rows4_q8_0(const u8* w, const i8* xq, const float2* xds, float* y, int n_rows,
                    int n_cols, int mode) {
    gemv_rows4_q8a<Q8aQ8_0>(w, xq, xds, y, n_rows, n_cols, mode);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q8a_rows4_q4_0(const u8* w, const i8* xq, const float2* xds, float* y, int n_rows,
                    int n_cols, int mode) {
    gemv_rows4_q8a<Q8aQ4_0>(w, xq, xds, y, n_rows, n_cols, mode);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS, Q8A_Q6K_MIN_BLOCKS)
gemv_q8a_rows4_q6_k(const u8* w, const i8* xq, const float2* xds, float* y, int n_rows,
                    int n_cols, int mode) {
    gemv_rows4_q8a<Q8aQ6_K>(w, xq, xds, y, n_rows, n_cols, mode);
}

// Three matrices of one type reading the same activations (q, k, v), as gemv3_* in gemv.cu.
extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv3_q8a_q8_0(const u8* w0, const u8* w1, const u8* w2, const i8* xq, const float2* xds,
               float* y0, float* y1, float* y2, int rows0, int rows1, int rows2, int n_cols) {
    SEGMENT3(GEMV_ROWS_PER_BLOCK)
    gemv_rows_q8a(GGML_Q8_0, w, nullptr, xq, xds, y, n_rows, n_cols, GEMV_STORE, block,
                  NO_GLU_Q8);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv3_q8a_q4_0(const u8* w0, const u8* w1, const u8* w2, const i8* xq, const float2* xds,
               float* y0, float* y1, float* y2, int rows0, int rows1, int rows2, int n_cols) {
    SEGMENT3(GEMV_ROWS_PER_BLOCK)
    gemv_rows_q8a(GGML_Q4_0, w, nullptr, xq, xds, y, n_rows, n_cols, GEMV_STORE, block,
                  NO_GLU_Q8);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv3_q8a_q4_k(const u8* w0, const u8* w1, const u8* w2, const i8* xq, const float2* xds,
               float* y0, float* y1, float* y2, int rows0, int rows1, int rows2, int n_cols) {
    SEGMENT3(GEMV_ROWS_PER_BLOCK)
    gemv_rows_q8a(GGML_Q4_K, w, nullptr, xq, xds, y, n_rows, n_cols, GEMV_STORE, block,
                  NO_GLU_Q8);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv3_q8a_q6_k(const u8* w0, const u8* w1, const u8* w2, const i8* xq, const float2* xds,
               float* y0, float* y1, float* y2, int rows0, int rows1, int rows2, int n_cols) {
    SEGMENT3(GEMV_ROWS_PER_BLOCK)
    gemv_rows_q8a(GGML_Q6_K, w, nullptr, xq, xds, y, n_rows, n_cols, GEMV_STORE, block,
                  NO_GLU_Q8);
}

// Three matrices of any of the four types (each segment's own) reading the same activations:
// Q4_K_M files keep v, and in some layers k, in Q6_K. The switch is per block, so a warp never
// diverges on it.
extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv3_q8a_mixed(const u8* w0, const u8* w1, const u8* w2, const i8* xq, const float2* xds,
                float* y0, float* y1, float* y2, int rows0, int rows1, int rows2, int n_cols,
                int ty0, int ty1, int ty2) {
    SEGMENT3(GEMV_ROWS_PER_BLOCK)
    const int ty = seg == 0 ? ty0 : (seg == 1 ? ty1 : ty2);
    gemv_rows_q8a(ty, w, nullptr, xq, xds, y, n_rows, n_cols, GEMV_STORE, block,
                  NO_GLU_Q8);
}
