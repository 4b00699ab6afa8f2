// The k best values of each row, for sampling: the sampler's top-k stage on the GPU, so that a
// step copies back k candidates per sequence instead of the whole vocabulary.
//
// "Better" is the sampler's total order (hearth_sampler's candidates.rs): a higher value, then a
// lower index, with NaN taken as -inf and +0 above -0. Values are compared as order-preserving
// integer keys, which is exactly f32::total_cmp's order.
//
// One block per row: a radix select finds the k-th best key T one byte at a time (four
// histogram passes over the row, each counting only the values whose higher bytes match what is
// fixed so far); then every value above T is taken, and of those equal to T the ones of lowest
// index, as many as are needed; a bitonic sort orders the k candidates.

#define TOP_K_THREADS 1024
// The most candidates one row gives (the host checks k against it).
#define TOP_K_MAX 128

// f32 bits to a key whose unsigned order is the sampler's order of values (NaN as -inf).
__device__ __forceinline__ u32 order_key(float v) {
    if (v != v) v = NEG_INF;
    const u32 b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_value(u32 key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// Values each thread loads before using any of them, in the passes over a row: a pass is a
// chain of L2 round trips otherwise, 148 of them for a 151,936-value row.
// NOTE (H100, `hearth bench --sample` tg128, Qwen3-0.6B Q8_0, three rounds in one call): 8
// 872 / 880 / 871 tok/s, 16 860 / 871 / 861, 32 877 / 868 / 876.
#ifndef TOP_K_LOADS
#define TOP_K_LOADS 8
#endif

// The keys of values i0 + j * blockDim.x + threadIdx.x (j < TOP_K_LOADS) of row `r`; 0 (below
// every value's key) past the row's end.
__device__ __forceinline__ void load_keys(const float* __restrict__ r, int i0, int n_cols,
                                          u32 (&keys)[TOP_K_LOADS]) {
#pragma unroll
    for (int j = 0; j < TOP_K_LOADS; ++j) {
        const int i = i0 + j * (int)blockDim.x + (int)threadIdx.x;
        keys[j] = i < n_cols ? order_key(r[i]) : 0u;
    }
}

// Adds each lane's 1 to hist[bin] (bin 256: none), the lanes of a warp that share a bin with
// one atomic (Volta and later).
__device__ __forceinline__ void count_in_bin(u32* hist, u32 bin, int lane) {
#if __CUDA_ARCH__ >= 700
    const u32 peers = __match_any_sync(FULL_MASK, bin);
    if (bin != 256u && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], (u32)__popc(peers));
#else
    if (bin != 256u) atomicAdd(&hist[bin], 1u);
#endif
}

// Whether candidate (ka, ia) comes before (kb, ib).
__device__ __forceinline__ bool comes_first(u32 ka, u32 ia, u32 kb, u32 ib) {
    return ka > kb || (ka == kb && ia < ib);
}

// out: per row 2k words, the k values (best first) then their indices.
extern "C" __global__ void __launch_bounds__(TOP_K_THREADS)
top_k_f32(const float* __restrict__ logits, u32* __restrict__ out, int n_cols, int k) {
    await_previous_kernels();
    __shared__ u32 hist[256];
    __shared__ u32 fixed_key, need, n_above;
    __shared__ u32 cand_key[TOP_K_MAX], cand_idx[TOP_K_MAX];
    __shared__ u32 warp_counts[TOP_K_THREADS / WARP_SIZE];
    const float* r = logits + (size_t)blockIdx.x * n_cols;
    const int tid = threadIdx.x, lane = tid % WARP_SIZE, warp = tid / WARP_SIZE;

    // Radix select: after byte `shift`, `prefix` holds the k-th best key's bytes above and at
    // `shift`, and `need` how many of the values matching those bytes still belong to the k.
    u32 prefix = 0, mask = 0;
    if (tid == 0) need = (u32)k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        // Logits mostly share their top bytes, so most values of a pass fall in a few bins:
        // the lanes of a warp that count into the same bin add their count with one atomic.
        // NOTE (H100, `hearth bench --sample` tg128, with the loads above; one atomic per value
        // and one load at a time before): Qwen3-0.6B Q8_0 823-847 -> 868-898 tok/s,
        // Llama-3.2-1B Q4_K_M 1,013-1,040 -> 1,068-1,079.
        for (int i0 = 0; i0 < n_cols; i0 += TOP_K_LOADS * blockDim.x) {
            u32 keys[TOP_K_LOADS];
            load_keys(r, i0, n_cols, keys);
#pragma unroll
            for (int j = 0; j < TOP_K_LOADS; ++j) {
                const int i = i0 + j * (int)blockDim.x + tid;
                // 256: no bin (past the row, or higher bytes that do not match).
                const u32 bin = i < n_cols && (keys[j] & mask) == prefix
                                    ? (keys[j] >> shift) & 255u : 256u;
                count_in_bin(hist, bin, lane);
            }
        }
        __syncthreads();
        if (tid == 0) {
            // From the best byte down: the byte where the count reaches `need`.
            u32 above = 0;
            int b = 255;
            for (; b > 0; --b) {
                if (above + hist[b] >= need) break;
                above += hist[b];
            }
            need -= above;
            fixed_key = (u32)b;
        }
        __syncthreads();
        prefix |= fixed_key << shift;
        mask |= 255u << shift;
    }
    // `prefix` is now the k-th best key T; `need` values equal to T belong to the k, and the
    // last histogram's bin holds how many values equal T.
    const u32 t = prefix;
    const bool all_equal_taken = hist[t & 255u] == need;
    if (tid == 0) n_above = 0;
    __syncthreads();
    if (all_equal_taken) {
        for (int i0 = 0; i0 < n_cols; i0 += TOP_K_LOADS * blockDim.x) {
            u32 keys[TOP_K_LOADS];
            load_keys(r, i0, n_cols, keys);
#pragma unroll
            for (int j = 0; j < TOP_K_LOADS; ++j) {
                // Past the row the key is 0, below t: the k-th best key of a row is at least
                // the key of -inf (NaN counts as -inf), which is above 0.
                if (keys[j] >= t) {
                    const u32 at = atomicAdd(&n_above, 1u);
                    cand_key[at] = keys[j];
                    cand_idx[at] = (u32)(i0 + j * (int)blockDim.x + tid);
                }
            }
        }
    } else {
        // Ties at T: the values equal to T are taken in index order, so a block-wide count of
        // the equal ones before each index decides. Values above T go after the equal ones'
        // slots in any order (the sort below orders them).
        u32 base = 0;
        for (int i0 = 0; i0 < n_cols; i0 += blockDim.x) {
            const int i = i0 + tid;
            const u32 key = i < n_cols ? order_key(r[i]) : 0u;
            if (key > t) {
                const u32 at = atomicAdd(&n_above, 1u);
                cand_key[need + at] = key;
                cand_idx[need + at] = (u32)i;
            }
            const bool equal = i < n_cols && key == t;
            const u32 ballot = __ballot_sync(FULL_MASK, equal);
            if (lane == 0) warp_counts[warp] = __popc(ballot);
            __syncthreads();
            u32 before = base + __popc(ballot & ((1u << lane) - 1u));
            for (int w = 0; w < warp; ++w) before += warp_counts[w];
            if (equal && before < need) {
                cand_key[before] = key;
                cand_idx[before] = (u32)i;
            }
            u32 tile = 0;
            for (int w = 0; w < (int)(blockDim.x / WARP_SIZE); ++w) tile += warp_counts[w];
            base += tile;
            __syncthreads();
            if (base >= need && i0 + (int)blockDim.x < n_cols) {
                // The equal ones are all placed; the rest of the row only adds values above T.
                for (int j = i0 + blockDim.x + tid; j < n_cols; j += blockDim.x) {
                    const u32 kj = order_key(r[j]);
                    if (kj > t) {
                        const u32 at = atomicAdd(&n_above, 1u);
                        cand_key[need + at] = kj;
                        cand_idx[need + at] = (u32)j;
                    }
                }
                break;
            }
        }
    }
    __syncthreads();

    // Bitonic sort of the k candidates, padded to a power of two with entries that lose.
    int n = 1;
    while (n < k) n <<= 1;
    for (int i = k + tid; i < n; i += blockDim.x) {
        cand_key[i] = 0u;
        cand_idx[i] = 0xffffffffu;
    }
    __syncthreads();
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = tid; i < n; i += blockDim.x) {
                const int j = i ^ stride;
                if (j > i) {
                    // Ascending runs put the better candidate first.
                    const bool first_half = (i & size) == 0;
                    const bool swap = first_half
                                          ? comes_first(cand_key[j], cand_idx[j], cand_key[i], cand_idx[i])
                                          : comes_first(cand_key[i], cand_idx[i], cand_key[j], cand_idx[j]);
                    if (swap) {
                        const u32 kk = cand_key[i], ii = cand_idx[i];
                        cand_key[i] = cand_key[j];
                        cand_idx[i] = cand_idx[j];
                        cand_key[j] = kk;
                        cand_idx[j] = ii;
                    }
                }
            }
            __syncthreads();
        }
    }
    u32* o = out + (size_t)blockIdx.x * 2 * k;
    for (int i = tid; i < k; i += blockDim.x) {
        o[i] = __float_as_uint(key_value(cand_key[i]));
        o[k + i] = cand_idx[i];
    }
}
