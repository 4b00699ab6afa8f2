// The k best values of each row, for sampling: the sampler's top-k stage on the GPU, so that a
// step copies back k candidates per sequence instead of the whole vocabulary.
//
// "Better" is the sampler's total order (hearth_sampler's candidates.rs): a higher value, then a
// lower index, with NaN taken as -inf and +0 above -0. Values are compared as order-preserving
// integer keys, which is exactly f32::total_cmp's order. Under that order (index included) no
// two values tie, so a row's best k are one set.
//
// top_k_split_f32 (the usual path): a row is cut into chunks, one block each, and every block
// selects its chunk's best k, in shared memory; the last block of a row to finish selects the
// row's best k among those candidates and sorts them. Each of the row's best k is among its
// own chunk's best k, so that is the row's best k.
// top_k_f32 (rows whose candidates would not fit one block): one block per row.
// Both select by radix: the k-th best key T is found one byte at a time (four histogram passes,
// each counting only the keys whose higher bytes match what is fixed so far); every key above T
// is taken, and of those equal to T the ones of lowest index, as many as are needed; a bitonic
// sort orders the k candidates.

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

// Sorts the k entries of key / idx (shared, room for k rounded up to a power of two) best
// first, and writes them as out's row: the k values, then their indices.
__device__ __forceinline__ void sort_and_store(u32* key, u32* idx, int k, u32* out) {
    const int tid = threadIdx.x;
    int n = 1;
    while (n < k) n <<= 1;
    for (int i = k + tid; i < n; i += blockDim.x) {
        key[i] = 0u;
        idx[i] = 0xffffffffu;
    }
    __syncthreads();
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = tid; i < n; i += blockDim.x) {
                const int j = i ^ stride;
                if (j > i) {
                    // Ascending runs put the better candidate first.
                    const bool first_half = (i & size) == 0;
                    const bool swap = first_half ? comes_first(key[j], idx[j], key[i], idx[i])
                                                 : comes_first(key[i], idx[i], key[j], idx[j]);
                    if (swap) {
                        const u32 kk = key[i], ii = idx[i];
                        key[i] = key[j];
                        idx[i] = idx[j];
                        key[j] = kk;
                        idx[j] = ii;
                    }
                }
            }
            __syncthreads();
        }
    }
    for (int i = tid; i < k; i += blockDim.x) {
        out[i] = __float_as_uint(key_value(key[i]));
        out[k + i] = idx[i];
    }
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

    sort_and_store(cand_key, cand_idx, k, out + (size_t)blockIdx.x * 2 * k);
}

// ---- top_k_split_f32 ----

#define TOP_K_SPLIT_THREADS 512
// Values of one chunk, and candidates of one row (chunks x k), at most: one block holds them.
#define TOP_K_SPLIT_CAP 4096
#define TOP_K_SPLIT_PER_THREAD (TOP_K_SPLIT_CAP / TOP_K_SPLIT_THREADS)

// The byte b of the histogram at which the best `need` counted keys end: the count of bins
// above b is below need, with bin b it reaches it (bin 0 when no higher bin does). Warp 0 finds
// it (lane l sums bins 8l .. 8l + 7, then the sums of the lanes above are scanned) and writes b
// and need minus the count above b into *byte and *need_left. The same b as walking the bins
// from 255 down one at a time.
__device__ __forceinline__ void find_radix_byte(const u32* hist, u32 need, u32* byte,
                                                u32* need_left) {
    const int lane = threadIdx.x % WARP_SIZE;
    u32 mine = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) mine += hist[8 * lane + j];
    // at_or_above: the count of this lane's bins and every higher lane's.
    u32 at_or_above = mine;
#pragma unroll
    for (int o = 1; o < WARP_SIZE; o <<= 1) {
        const u32 v = __shfl_down_sync(FULL_MASK, at_or_above, o);
        if (lane + o < WARP_SIZE) at_or_above += v;
    }
    // The highest lane whose bins and those above reach need (lane 0 always, as the counted
    // keys number at least need).
    const u32 reach = __ballot_sync(FULL_MASK, at_or_above >= need);
    const int top = reach == 0u ? 0 : 31 - __clz(reach);
    if (lane == top) {
        u32 above = at_or_above - mine;
        int b = 8 * lane + 7;
        for (; b > 8 * lane; --b) {
            if (above + hist[b] >= need) break;
            above += hist[b];
        }
        *byte = (u32)b;
        *need_left = need - above;
    }
}

// The shared state of a block's radix select.
struct RadixShared {
    u32 hist[256];
    u32 byte, need, n_taken;
};

// Over the entries i < n that key_of(i, &key) accepts: the k-th best key (returned) and into
// *need how many of the entries with that key belong to the best k, and into *equal how many
// entries have it. k must be at least 1 and at most the accepted entries. Every thread of the
// block calls it; it ends with a barrier.
template <class KeyOf>
__device__ __forceinline__ u32 radix_select(KeyOf key_of, int n, u32 k, RadixShared& sh,
                                            u32* need, u32* equal) {
    const int tid = threadIdx.x, lane = tid % WARP_SIZE;
    u32 prefix = 0, mask = 0, left = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += blockDim.x) sh.hist[i] = 0;
        __syncthreads();
        // Whole warps go round the loop together (count_in_bin shuffles).
        for (int i0 = 0; i0 < n; i0 += blockDim.x) {
            const int i = i0 + tid;
            u32 key = 0;
            const bool in = i < n && key_of(i, &key) && (key & mask) == prefix;
            count_in_bin(sh.hist, in ? (key >> shift) & 255u : 256u, lane);
        }
        __syncthreads();
        if (tid < WARP_SIZE) find_radix_byte(sh.hist, left, &sh.byte, &sh.need);
        __syncthreads();
        prefix |= sh.byte << shift;
        mask |= 255u << shift;
        left = sh.need;
    }
    *need = left;
    *equal = sh.hist[prefix & 255u];
    __syncthreads();
    return prefix;
}

// The best k of the entries i < n (key_of as above, idx_of(i) their row index) into
// best_key / best_idx[0 .. k), in no particular order. Every thread of the block calls it; it
// ends with a barrier.
template <class KeyOf, class IdxOf>
__device__ __forceinline__ void select_best(KeyOf key_of, IdxOf idx_of, int n, u32 k,
                                            RadixShared& sh, u32* best_key, u32* best_idx) {
    const int tid = threadIdx.x;
    u32 need, equal;
    const u32 t = radix_select(key_of, n, k, sh, &need, &equal);
    // Of the entries equal to t, the `need` of lowest index: all of them, or those whose
    // index is at most the need-th lowest (a second select, on the complemented index).
    u32 last_idx = 0xffffffffu;
    if (equal > need) {
        u32 need2, equal2;
        const u32 inv = radix_select(
            [&](int i, u32* key) {
                u32 kk;
                if (!key_of(i, &kk) || kk != t) return false;
                *key = ~idx_of(i);
                return true;
            },
            n, need, sh, &need2, &equal2);
        last_idx = ~inv;
    }
    if (tid == 0) sh.n_taken = 0;
    __syncthreads();
    for (int i = tid; i < n; i += blockDim.x) {
        u32 key;
        if (!key_of(i, &key) || key < t) continue;
        const u32 idx = idx_of(i);
        if (key == t && idx > last_idx) continue;
        const u32 at = atomicAdd(&sh.n_taken, 1u);
        best_key[at] = key;
        best_idx[at] = idx;
    }
    __syncthreads();
}

// Grid (chunks, rows). Chunk c of a row is values [c * chunk, min((c + 1) * chunk, n_cols));
// chunk <= TOP_K_SPLIT_CAP, chunks * k <= TOP_K_SPLIT_CAP, k <= TOP_K_MAX and k <= n_cols.
// cand: per row, chunks * k (key, index) pairs; counts: one zeroed counter per row, left
// zeroed. out: per row 2k words, the k values (best first) then their indices.
extern "C" __global__ void __launch_bounds__(TOP_K_SPLIT_THREADS)
top_k_split_f32(const float* __restrict__ logits, uint2* __restrict__ cand, u32* counts,
                u32* __restrict__ out, int n_cols, int chunk, int k) {
    await_previous_kernels();
    __shared__ u32 key[TOP_K_SPLIT_CAP], idx[TOP_K_SPLIT_CAP];
    __shared__ u32 best_key[TOP_K_MAX], best_idx[TOP_K_MAX];
    __shared__ RadixShared sh;
    __shared__ bool last;
    const int tid = threadIdx.x, row = blockIdx.y, chunks = gridDim.x;
    const int c0 = blockIdx.x * chunk;
    const int n = min(chunk, n_cols - c0);
    const float* r = logits + (size_t)row * n_cols + c0;
    // Every load of the chunk in flight before the first is used.
    u32 held[TOP_K_SPLIT_PER_THREAD];
#pragma unroll
    for (int j = 0; j < TOP_K_SPLIT_PER_THREAD; ++j) {
        const int i = j * TOP_K_SPLIT_THREADS + tid;
        held[j] = i < n ? order_key(r[i]) : 0u;
    }
#pragma unroll
    for (int j = 0; j < TOP_K_SPLIT_PER_THREAD; ++j) key[j * TOP_K_SPLIT_THREADS + tid] = held[j];
    __syncthreads();
    const int kc = min(k, n);
    select_best([&](int i, u32* kk) { *kk = key[i]; return true; },
                [&](int i) { return (u32)(c0 + i); }, n, (u32)kc, sh, best_key, best_idx);
    u32* o = out + (size_t)row * 2 * k;
    if (chunks == 1) {
        sort_and_store(best_key, best_idx, k, o);
        return;
    }
    // This chunk's candidates (short chunks padded with keys below every value's), then the
    // row's last block to arrive takes them all.
    uint2* mine = cand + ((size_t)row * chunks + blockIdx.x) * k;
    for (int i = tid; i < k; i += blockDim.x) {
        mine[i] = i < kc ? make_uint2(best_key[i], best_idx[i]) : make_uint2(0u, 0xffffffffu);
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(counts + row, 1u) == (u32)chunks - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int m = chunks * k;
    const uint2* all = cand + (size_t)row * m;
    for (int i = tid; i < m; i += blockDim.x) {
        // From L2: other blocks' candidates may be stale in this SM's L1.
        const uint2 c = __ldcg(all + i);
        key[i] = c.x;
        idx[i] = c.y;
    }
    __syncthreads();
    select_best([&](int i, u32* kk) { *kk = key[i]; return key[i] != 0u; },
                [&](int i) { return idx[i]; }, m, (u32)k, sh, best_key, best_idx);
    sort_and_store(best_key, best_idx, k, o);
    if (tid == 0) counts[row] = 0;
}
