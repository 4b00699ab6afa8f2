// Per-row reductions: RMSNorm and argmax. One thread block per row; the block's threads stride
// over the row, so each warp's loads are consecutive (coalesced).

// Sum of `v` over the whole thread block (blockDim.x a multiple of 32, at most 1024).
// `scratch` holds 32 floats of shared memory; every thread gets the sum.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int n_warps = blockDim.x / WARP_SIZE;
    v = (lane < n_warps) ? scratch[lane] : 0.f;
    v = warp_sum(v);
    return v;
}

// y[row] = x[row] / sqrt(mean(x[row]^2) + eps) * w, for rows of `dim` values.
extern "C" __global__ void rms_norm_f32(const float* __restrict__ x, const float* __restrict__ w,
                                        float* __restrict__ y, int dim, float eps) {
    await_previous_kernels();
    __shared__ float scratch[WARP_SIZE];
    const float* xr = x + (size_t)blockIdx.x * dim;
    float* yr = y + (size_t)blockIdx.x * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss, scratch);
    const float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

#define NO_INDEX 0x7fffffff
#define ARGMAX_LOADS 4

// Keeps (v, i) if it beats (best, best_i): larger, or equal with a lower index. NaN never wins
// (both comparisons are false for it), matching the CPU sampler's argmax.
__device__ __forceinline__ void keep_better(float& best, int& best_i, float v, int i) {
    if (v > best || (v == best && i < best_i)) {
        best = v;
        best_i = i;
    }
}

// The block's best (value, index) by keep_better's rule, into thread 0's `best`, `best_i`
// (the other threads' are left partial). blockDim.x a multiple of 32, at most 1024.
__device__ __forceinline__ void block_best(float& best, int& best_i) {
    __shared__ float best_v[WARP_SIZE];
    __shared__ int best_idx[WARP_SIZE];
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        const float v = __shfl_xor_sync(FULL_MASK, best, offset);
        const int i = __shfl_xor_sync(FULL_MASK, best_i, offset);
        keep_better(best, best_i, v, i);
    }
    if (lane == 0) {
        best_v[warp] = best;
        best_idx[warp] = best_i;
    }
    __syncthreads();
    if (warp != 0) return;
    const int n_warps = blockDim.x / WARP_SIZE;
    best = lane < n_warps ? best_v[lane] : __int_as_float(0xff800000);
    best_i = lane < n_warps ? best_idx[lane] : NO_INDEX;
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        const float v = __shfl_xor_sync(FULL_MASK, best, offset);
        const int i = __shfl_xor_sync(FULL_MASK, best_i, offset);
        keep_better(best, best_i, v, i);
    }
}

// Stores row `row`'s answer in out and, where given, in out_host: page-locked host memory,
// which kernels reach at its host address (unified addressing). A chained greedy step's ids
// go to both, the next step's embedding and the host, without copies after the kernel
// (each copy of a step's graph or after it held up the next step by 4-5 µs on an H200).
__device__ __forceinline__ void store_best(u32* out, u32* out_host, int row, int best_i) {
    const u32 id = best_i == NO_INDEX ? 0u : (u32)best_i;
    out[row] = id;
    if (out_host != nullptr) out_host[row] = id;
}

// out[row] = index of the largest value of the row; ties go to the lower index, NaN never
// wins, and a row of only NaN gives 0. out_host: see store_best.
extern "C" __global__ void argmax_f32(const float* __restrict__ logits, u32* __restrict__ out,
                                      u32* out_host, int n_cols) {
    await_previous_kernels();
    const float* r = logits + (size_t)blockIdx.x * n_cols;
    float best = __int_as_float(0xff800000);  // -inf
    int best_i = NO_INDEX;
    if (n_cols % 4 == 0) {
        // Rows of whole float4s (every real vocabulary): ARGMAX_LOADS independent 16-byte
        // loads per thread in flight, so one SM streams a 600 KB row at a useful rate.
        const float4* r4 = reinterpret_cast<const float4*>(r);
        const int n4 = n_cols / 4;
        for (int i0 = threadIdx.x; i0 < n4; i0 += ARGMAX_LOADS * blockDim.x) {
            float4 v[ARGMAX_LOADS];
#pragma unroll
            for (int k = 0; k < ARGMAX_LOADS; ++k) {
                const int i = i0 + k * blockDim.x;
                if (i < n4) v[k] = r4[i];
            }
#pragma unroll
            for (int k = 0; k < ARGMAX_LOADS; ++k) {
                const int i = i0 + k * blockDim.x;
                if (i < n4) {
                    keep_better(best, best_i, v[k].x, 4 * i);
                    keep_better(best, best_i, v[k].y, 4 * i + 1);
                    keep_better(best, best_i, v[k].z, 4 * i + 2);
                    keep_better(best, best_i, v[k].w, 4 * i + 3);
                }
            }
        }
    } else {
        for (int i = threadIdx.x; i < n_cols; i += blockDim.x) keep_better(best, best_i, r[i], i);
    }
    block_best(best, best_i);
    if (threadIdx.x == 0) store_best(out, out_host, blockIdx.x, best_i);
}

// argmax_f32 over chunks of a row: one block per chunk of ARGMAX_SPLIT_CHUNK values finds
// the chunk's best, and the row's last block to finish takes the best of those. The same
// answer as argmax_f32: keep_better is a total order, so the order of merging is free.
// NOTE: one block of argmax_f32 took about 11 µs for a 151,936-value row on an H100 (the
// whole row through one multiprocessor), on the critical path of every greedy decode step.
// Grid (chunks, rows), chunks = ceil(n_cols / ARGMAX_SPLIT_CHUNK) > 1. part: per row `chunks`
// (value bits, index) pairs; counts: one zeroed counter per row, left zeroed; out_host: see
// store_best.
#define ARGMAX_SPLIT_THREADS 256
#define ARGMAX_SPLIT_CHUNK (16 * ARGMAX_SPLIT_THREADS)
extern "C" __global__ void __launch_bounds__(ARGMAX_SPLIT_THREADS)
argmax_split_f32(const float* __restrict__ logits, int2* __restrict__ part, u32* counts,
                 u32* __restrict__ out, u32* out_host, int n_cols) {
    await_previous_kernels();
    __shared__ bool last;
    const int tid = threadIdx.x, row = blockIdx.y, chunks = gridDim.x;
    const int c0 = blockIdx.x * ARGMAX_SPLIT_CHUNK;
    const int n = min(ARGMAX_SPLIT_CHUNK, n_cols - c0);
    const float* r = logits + (size_t)row * n_cols + c0;
    float best = __int_as_float(0xff800000);  // -inf
    int best_i = NO_INDEX;
    if (n_cols % 4 == 0) {
        // All four 16-byte loads of a thread in flight before the first is compared.
        const float4* r4 = reinterpret_cast<const float4*>(r);
        float4 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int i = tid + k * ARGMAX_SPLIT_THREADS;
            if (4 * i < n) v[k] = r4[i];
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int i = tid + k * ARGMAX_SPLIT_THREADS;
            if (4 * i < n) {
                keep_better(best, best_i, v[k].x, c0 + 4 * i);
                keep_better(best, best_i, v[k].y, c0 + 4 * i + 1);
                keep_better(best, best_i, v[k].z, c0 + 4 * i + 2);
                keep_better(best, best_i, v[k].w, c0 + 4 * i + 3);
            }
        }
    } else {
        for (int i = tid; i < n; i += ARGMAX_SPLIT_THREADS) keep_better(best, best_i, r[i], c0 + i);
    }
    block_best(best, best_i);
    if (tid == 0) {
        part[(size_t)row * chunks + blockIdx.x] = make_int2(__float_as_int(best), best_i);
        __threadfence();
        last = atomicAdd(counts + row, 1u) == (u32)chunks - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    best = __int_as_float(0xff800000);
    best_i = NO_INDEX;
    const int2* mine = part + (size_t)row * chunks;
    for (int c = tid; c < chunks; c += ARGMAX_SPLIT_THREADS) {
        // From L2: other blocks' results may be stale in this SM's L1.
        const int2 p = __ldcg(mine + c);
        keep_better(best, best_i, __int_as_float(p.x), p.y);
    }
    block_best(best, best_i);
    if (tid == 0) {
        store_best(out, out_host, row, best_i);
        counts[row] = 0;
    }
}
