// The per-layer operations of a decoder forward pass other than matrix products: grouped
// RMSNorm, rotary embedding, gated activations, element-wise updates, row gathers, and paged
// attention over the f16 KV cache. Numerics follow hearth's CPU backend (the reference):
// double-precision norm sums, rope angles advanced by repeated multiplication, queries rounded
// to f16 before q·k.
//
// Per-step host data (token ids, positions, block tables) is read from device buffers, never
// passed by value, so a recorded decode step can be replayed with new data (CUDA graphs).

// y[g] = x[g] / sqrt(mean(x[g]^2) + eps) * w for each group g of `group` values (y may be x).
// Grid: one block per group.
// Sum of `v` over the whole thread block in double precision (as the CPU backend sums squares
// for RMSNorm); every thread gets it. All threads of the block must call it.
__device__ __forceinline__ double block_sum_f64(double v) {
    __shared__ double partial[WARP_SIZE];
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / WARP_SIZE) ? partial[lane] : 0.0;
#pragma unroll
        for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
        if (lane == 0) partial[0] = v;
    }
    __syncthreads();
    return partial[0];
}

// block_sum_f64 with one barrier instead of two, the same bits: every warp reduces the warps'
// partial sums itself, lane 0's order of additions (rounds whose partner lanes hold no partial
// add zeros, so they are skipped), and takes lane 0's sum. Call it once in a kernel: a second
// call's partials could overwrite the first's before every warp has read them.
// NOTE (H200, BENCHMARKS.md, 2026-11-29, closing): Qwen3-0.6B tg128 +0.3-0.8% (Q8_0 1,331 ->
// 1,340 tok/s, Q4_K_M 1,369 -> 1,385).
#ifndef BLOCK_SUM_ONE_BARRIER
#define BLOCK_SUM_ONE_BARRIER 1
#endif
__device__ __forceinline__ double block_sum_f64_once(double v) {
#if !BLOCK_SUM_ONE_BARRIER
    return block_sum_f64(v);
#else
    __shared__ double partial[WARP_SIZE];
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int n_warps = (int)(blockDim.x / WARP_SIZE);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < n_warps ? partial[lane] : 0.0;
    int first = 1;  // the largest power of two below n_warps (no round for one warp)
    while (2 * first < n_warps) first *= 2;
    for (int o = n_warps > 1 ? first : 0; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return __shfl_sync(FULL_MASK, v, 0);
#endif
}

// ss + v.x² + v.y² + v.z² + v.w², in that order, in double precision.
__device__ __forceinline__ double add_squares(double ss, float4 v) {
    ss += (double)v.x * (double)v.x;
    ss += (double)v.y * (double)v.y;
    ss += (double)v.z * (double)v.z;
    return ss + (double)v.w * (double)v.w;
}

extern "C" __global__ void rms_norm_groups(const float* x, const float* __restrict__ w, float* y,
                                           int group, float eps) {
    await_previous_kernels();
    const float* g = x + (size_t)blockIdx.x * group;
    float* out = y + (size_t)blockIdx.x * group;
    double ss = 0.0;
    for (int i = threadIdx.x; i < group; i += blockDim.x) ss += (double)g[i] * (double)g[i];
    const float mean = (float)(block_sum_f64_once(ss) / (double)group);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = threadIdx.x; i < group; i += blockDim.x) out[i] = g[i] * scale * w[i];
}

// rms_norm_quantize's output for the 4 values x[row + i ..] with their weights: stored, and
// quantized with the 7 other lanes of their 32-value group (every lane calls it).
__device__ __forceinline__ void norm_quantize_store(float4 xs, float4 ws, float scale, float* y,
                                                    i8* yq, float2* yds, size_t row, int i,
                                                    int cols) {
    const bool in = i < cols;
    const float v[4] = {xs.x * scale * ws.x, xs.y * scale * ws.y, xs.z * scale * ws.z,
                        xs.w * scale * ws.w};
    if (in) *reinterpret_cast<float4*>(y + row + i) = make_float4(v[0], v[1], v[2], v[3]);
    quantize_lane_values_q8_1<4>(v, yq + row + i, yds + (row + i) / 32, in);
}

// rms_norm_groups over whole rows followed by quantize_q8_1 of the result (gemv_q8a.cu), in
// one launch: the f32 rows for any consumer, and the 8-bit values with their (d, d * sum q)
// per 32-value group for the int8-activation GEMVs of decode steps, bit for bit what the two
// kernels give. Grid: one block per row, of at least cols / 4 threads up to 1024, a multiple
// of 32; cols is a multiple of 32.
//
// Thread t takes the 4 consecutive values 4t .. 4t + 3 of each chunk of 4 * blockDim.x (one
// 16-byte load each of x and w), so 8 lanes hold one 32-value group and a warp quantizes 4
// groups at once, with 3 shuffle rounds instead of 5 per group. The first NORM_Q_HELD chunks
// (8192 values with 1024 threads) are loaded before the sum: a decode step's norm is one
// block, and every global load after the reduction would be one more wait on its critical
// path. NOTE: the f64 sum of squares runs in another order than rms_norm_groups'; the f32
// mean can differ only where the f64 sums straddle a rounding midpoint (~2^-29 relative).
#define NORM_Q_HELD 2
extern "C" __global__ void rms_norm_quantize(const float* __restrict__ x,
                                             const float* __restrict__ w, float* __restrict__ y,
                                             i8* __restrict__ yq, float2* __restrict__ yds,
                                             int cols, float eps) {
    await_previous_kernels();
    let_dependents_launch();
    const size_t row = (size_t)blockIdx.x * cols;
    const int step = 4 * blockDim.x;
    const int first = 4 * threadIdx.x;
    float4 xv[NORM_Q_HELD], wv[NORM_Q_HELD];
#pragma unroll
    for (int k = 0; k < NORM_Q_HELD; ++k) {
        const int i = first + k * step;
        const bool in = i < cols;
        xv[k] = in ? *reinterpret_cast<const float4*>(x + row + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        wv[k] = in ? *reinterpret_cast<const float4*>(w + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < NORM_Q_HELD; ++k) {
        const float4 v = xv[k];
        ss = add_squares(ss, v);
    }
    for (int i = first + NORM_Q_HELD * step; i < cols; i += step) {
        const float4 v = *reinterpret_cast<const float4*>(x + row + i);
        ss = add_squares(ss, v);
    }
    const float mean = (float)(block_sum_f64_once(ss) / (double)cols);
    const float scale = 1.0f / sqrtf(mean + eps);
    // Every lane calls the quantizer (it shuffles); lanes past the row store nothing, and a
    // 32-value group is either wholly inside the row or wholly past it.
#pragma unroll
    for (int k = 0; k < NORM_Q_HELD; ++k) {
        if (k * step >= cols) break;  // the same for the whole block
        norm_quantize_store(xv[k], wv[k], scale, y, yq, yds, row, first + k * step, cols);
    }
    for (int i = first + NORM_Q_HELD * step; i - first < cols; i += step) {
        const bool in = i < cols;
        const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
        norm_quantize_store(in ? *reinterpret_cast<const float4*>(x + row + i) : zero,
                            in ? *reinterpret_cast<const float4*>(w + i) : zero, scale, y, yq,
                            yds, row, i, cols);
    }
}

// Rotary embedding in place over rows of `cols` values (heads of head_dim). Grid: one block
// per row; threads over (head, pair). `neox`: pairs (i, i + n_rot/2), else (2i, 2i + 1).
// `factors`: n_rot/2 divisors or null. `theta_scales`: each row's ratio of consecutive
// frequencies (dynamic NTK raises the base per sequence), or null for `theta_scale` everywhere;
// read from device memory so that a replayed decode step sees this step's values.
extern "C" __global__ void rope_rows(float* x, const u32* positions, int cols, int head_dim,
                                     int n_rot, float theta_scale, const float* theta_scales,
                                     float freq_scale, const float* factors, int neox) {
    await_previous_kernels();
    const int half = n_rot / 2;
    const int n_heads = cols / head_dim;
    const float pos = (float)positions[blockIdx.x];
    if (theta_scales) theta_scale = theta_scales[blockIdx.x];
    float* row = x + (size_t)blockIdx.x * cols;
    for (int task = threadIdx.x; task < n_heads * half; task += blockDim.x) {
        const int h = task / half, i = task % half;
        float theta = pos;
        for (int k = 0; k < i; ++k) theta *= theta_scale;
        const float f = factors ? factors[i] : 1.0f;
        const float t = freq_scale * (theta / f);
        const float c = cosf(t), s = sinf(t);
        float* head = row + h * head_dim;
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float x0 = head[a], x1 = head[b];
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
    }
}

// gate = act(gate) * up (glu_act in gemv.cu: SiLU, or GELU as ggml's CPU table computes it).
extern "C" __global__ void glu(float* gate, const float* __restrict__ up, int n, int act) {
    await_previous_kernels();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        gate[i] = glu_act(gate[i], act) * up[i];
    }
}

// x += y.
extern "C" __global__ void add_f32(float* x, const float* __restrict__ y, int n) {
    await_previous_kernels();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        x[i] += y[i];
    }
}

// x *= s.
extern "C" __global__ void scale_f32(float* x, float s, int n) {
    await_previous_kernels();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        x[i] *= s;
    }
}

// out[i, :] = x[rows[i], :]. Grid: one block per output row.
extern "C" __global__ void gather_rows(const float* __restrict__ x, const u32* rows, int cols,
                                       float* out) {
    await_previous_kernels();
    const float* src = x + (size_t)rows[blockIdx.x] * cols;
    float* dst = out + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}

// x[rows[i]] += weights[i] * y[i] for block i (rows are distinct within one launch: one
// expert's tokens).
extern "C" __global__ void scatter_add_rows(float* __restrict__ x, const float* __restrict__ y,
                                            const u32* rows, const float* weights, int cols) {
    await_previous_kernels();
    float* dst = x + (size_t)rows[blockIdx.x] * cols;
    const float* src = y + (size_t)blockIdx.x * cols;
    const float w = weights[blockIdx.x];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = fmaf(w, src[c], dst[c]);
}

// The batch as attention reads it, in one u32 buffer:
//   tok_seq[n_tokens]  sequence of each token
//   tok_pos[n_tokens]  position of each token
//   seq_table[n_seqs]  offset of each sequence's block table in `tables`
//   tables[...]        the block tables, one after another
__device__ __forceinline__ size_t kv_slot(const u32* tables, u32 table_off, u32 pos,
                                          int block_size) {
    return (size_t)tables[table_off + pos / block_size] * block_size + pos % block_size;
}

// log2(block_size) where that is a power of two (the engine's block size is), else -1.
__device__ __forceinline__ int block_shift(int block_size) {
    return (block_size & (block_size - 1)) == 0 ? __ffs(block_size) - 1 : -1;
}

// Where a kernel that reads many positions of one sequence finds their cache slots: the
// entries of its block table from cache block b0 on (the table itself, or a part staged in
// shared memory), with shifts rather than kv_slot's division where the block size allows:
// a 32-bit division is about 20 instructions, a tile's copies take one per 16 bytes.
struct BlockTable {
    const u32* entries;  // entry of cache block b0 + i at i
    u32 b0;
    int block_size;
    int shift;  // block_shift(block_size)
    __device__ __forceinline__ size_t slot(u32 j) const {
        return shift >= 0 ? by_shift<size_t>(j) : by_division<size_t>(j);
    }
    // The slots of N positions, as 32-bit numbers (a cache holds fewer than 2^32 slots). The
    // way of reading the table is chosen once, not per position, so that the N table reads
    // can all be in flight before the first result is used.
    template <int N>
    __device__ __forceinline__ void slots(const u32 (&j)[N], u32 (&out)[N]) const {
        if (shift >= 0) {
#pragma unroll
            for (int i = 0; i < N; ++i) out[i] = by_shift<u32>(j[i]);
        } else {
#pragma unroll
            for (int i = 0; i < N; ++i) out[i] = by_division<u32>(j[i]);
        }
    }
    // The slot of position j, computed in T.
    template <class T>
    __device__ __forceinline__ T by_shift(u32 j) const {
        return ((T)entries[(j >> shift) - b0] << shift) | (j & (block_size - 1));
    }
    template <class T>
    __device__ __forceinline__ T by_division(u32 j) const {
        return (T)entries[j / block_size - b0] * block_size + j % block_size;
    }
};

// Writes the batch's new keys and values (f32 rows of kv_dim) into their f16 cache slots.
// Grid: one block per token.
extern "C" __global__ void kv_write(const float* __restrict__ k, const float* __restrict__ v,
                                    u16* kc, u16* vc, const u32* tok_seq, const u32* tok_pos,
                                    const u32* seq_table, const u32* tables, int kv_dim,
                                    int block_size) {
    await_previous_kernels();
    const int t = blockIdx.x;
    const size_t slot = kv_slot(tables, seq_table[tok_seq[t]], tok_pos[t], block_size);
    for (int d = threadIdx.x; d < kv_dim; d += blockDim.x) {
        kc[slot * kv_dim + d] = f32_to_half(k[(size_t)t * kv_dim + d]);
        vc[slot * kv_dim + d] = f32_to_half(v[(size_t)t * kv_dim + d]);
    }
}

// Positions whose scores (and cache rows) a block of attend_span keeps in shared memory
// between its two passes by default; past them the second pass computes the score again.
#define ATTN_KEPT 2048

// Positions a warp of attend_span's second pass loads at once (their values in flight
// together). Fewer for wide heads, whose rows take more registers, and in blocks of
// ATTN_WIDE_WARPS warps, whose threads have 64 registers each.
#define ATTN_BATCH(DPL, WARPS) ((WARPS) > 4 ? ((DPL) >= 8 ? 1 : 2) : ((DPL) >= 8 ? 2 : 4))

// Where one head of one token reads the span j0 .. j1 - 1 of its sequence, and a lane's share
// of a row: the caches, the block tables and where the sequence's starts (see kv_slot), where
// the KV head starts in a cache row of kv_dim values, and the lane's first dimension d0 and
// count n_mine. knewh / vnewh: the token's own key and value (position `pos`, a decode step
// where every sequence brings one token), read from these rows rounded to f16 as the cache
// holds them rather than from the slot this step writes; null: from the cache.
struct AttnSpan {
    const u16* kc;
    const u16* vc;
    const u32* tables;
    u32 table;
    int kv_off, kv_dim, head_dim, block_size;
    u32 j0, j1, pos;
    const float* knewh;
    const float* vnewh;
    int d0, n_mine;
    float scale, softcap;

    // Where position j's row of the head starts in the caches.
    __device__ __forceinline__ size_t row(u32 j) const {
        return kv_slot(tables, table, j, block_size) * kv_dim + kv_off;
    }
    __device__ __forceinline__ bool own(u32 j) const { return knewh != nullptr && j == pos; }
    __device__ __forceinline__ float capped(float s) const {
        s *= scale;
        return softcap > 0.f ? softcap * tanhf(s / softcap) : s;
    }
};

// A lane's DPL values of a cache row at `at`, or of the row `newh` (rounded to f16) when it is
// not null; zeros past the head.
template <int DPL>
__device__ __forceinline__ void load_lane_row(float (&dst)[DPL], const u16* __restrict__ cache,
                                              size_t at, const float* newh, int d0, int n_mine) {
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
        dst[d] = d >= n_mine ? 0.f : newh != nullptr ? round_f16(newh[d0 + d]) : half_to_f32(cache[at + d]);
    }
}

// Lanes that share a position's score in attend_span's first pass: each takes every
// ATTN_SCORE_LANES-th 8-value chunk of the key, all its loads in flight at once (one thread
// per position waited for 16 loads one after another on 128-value heads).
#define ATTN_SCORE_LANES 4

// This lane's part of q · k for position j (q f16-rounded in shared memory): chunks `part`,
// part + ATTN_SCORE_LANES, ... of 8 values (head_dim is a multiple of 8; DPL * 4 chunks cover
// the head).
template <int DPL>
__device__ __forceinline__ float partial_score(const AttnSpan& sp, const float* q, u32 j,
                                               size_t row, int part) {
    float s = 0.f;
    if (sp.own(j)) {
#pragma unroll
        for (int k = 0; k < DPL; ++k) {
            const int c = part + ATTN_SCORE_LANES * k;
            if (8 * c >= sp.head_dim) break;
#pragma unroll
            for (int e = 0; e < 8; ++e) s = fmaf(q[8 * c + e], round_f16(sp.knewh[8 * c + e]), s);
        }
        return s;
    }
    const uint4* k = reinterpret_cast<const uint4*>(sp.kc + row);
    uint4 w[DPL];
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
        const int c = part + ATTN_SCORE_LANES * i;
        if (8 * c < sp.head_dim) w[i] = k[c];
    }
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
        const int c = part + ATTN_SCORE_LANES * i;
        if (8 * c >= sp.head_dim) break;
        const u32 words[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            s = fmaf(q[8 * c + 2 * e], half_to_f32((u16)(words[e] & 0xffff)), s);
            s = fmaf(q[8 * c + 2 * e + 1], half_to_f32((u16)(words[e] >> 16)), s);
        }
    }
    return s;
}

// Values of one layer's span (f16, every KV head) that pass 1 asks L2 for, ahead of pass 2.
// Longer spans stream their keys and values past L2 before pass 2 gets there: prefetched
// values were then read twice from memory (Qwen3-0.6B, 32,768 positions).
#define ATTN_PREFETCH_BYTES (16u << 20)

__device__ __forceinline__ bool values_fit_in_l2(u32 span, int kv_dim) {
    return (size_t)span * kv_dim * 2 <= ATTN_PREFETCH_BYTES;
}

// Pass 1 of attend_span over positions i = 0 .. n - 1 of `sp` (j = sp.j0 + i),
// ATTN_SCORE_LANES lanes a position: the scores of the first n_keep go to kept[i] with their
// cache rows / 8 to kept_row[i] (shared or global memory), the rest into this thread's running
// max fm and sum fl. Returns the block's largest score (to every thread). q: the query rounded
// to f16, in shared memory. prefetch_v: ask L2 for each position's values (see
// values_fit_in_l2).
// NOTE: each thread working out its next round's cache row (the block-table read) one round
// ahead, as split_values does with its rows and scores (attention_split.cu), measured no
// faster on an H100 (Qwen3-0.6B Q8_0, two rounds: tg256 `--greedy` 1,067 / 1,069 against
// 1,074 / 1,072 tok/s, tg128 after 32,768 tokens 334 / 341 against 336 / 338).
template <int DPL, int WARPS>
__device__ __forceinline__ float span_scores(const AttnSpan& sp, const float* q, float* kept,
                                             u32* kept_row, u32 n_keep, bool prefetch_v,
                                             float& fm, float& fl, float* s_max) {
    constexpr int THREADS = WARPS * WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const u32 n = sp.j1 - sp.j0;
    const int part = threadIdx.x % ATTN_SCORE_LANES;
    float m = NEG_INF;
    fm = NEG_INF;
    fl = 0.f;
    for (u32 i0 = 0; i0 < n; i0 += THREADS / ATTN_SCORE_LANES) {
        // Every lane runs every round (the sums below shuffle across lanes).
        const u32 i = i0 + threadIdx.x / ATTN_SCORE_LANES, j = sp.j0 + i;
        const bool live = i < n;
        const size_t row = live ? sp.row(j) : 0;
        float s = live ? partial_score<DPL>(sp, q, j, row, part) : 0.f;
#pragma unroll
        for (int o = 1; o < ATTN_SCORE_LANES; o <<= 1) s += __shfl_xor_sync(FULL_MASK, s, o);
        if (!live) continue;
        s = sp.capped(s);
        m = fmaxf(m, s);
        // Asks L2 for the values pass 2 reads, a 128-byte line per lane.
        if (prefetch_v && part * 64 < sp.head_dim) {
            const char* v = reinterpret_cast<const char*>(sp.vc + row) + part * 128;
            asm volatile("prefetch.global.L2 [%0];" ::"l"(v));
        }
        if (part != 0) continue;
        if (i < n_keep) {
            kept[i] = s;
            kept_row[i] = (u32)(row / 8);  // rows start at multiples of 8 values
        } else {
            const float fm_new = fmaxf(fm, s);
            fl = fl * expf(fm - fm_new) + expf(s - fm_new);
            fm = fm_new;
        }
    }
    m = warp_max(m);
    if (lane == 0) s_max[warp] = m;
    __syncthreads();
    return warp_max(lane < WARPS ? s_max[lane] : NEG_INF);
}

// The sum of exp(s - mx) over a span: its n_kept kept scores and every thread's far positions
// (fm, fl from span_scores), to every thread. With STORE the kept scores become exp(s - mx).
template <int WARPS, bool STORE>
__device__ __forceinline__ float span_exp_sum(float* kept, u32 n_kept, float mx, float fm,
                                              float fl, float* s_sum) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    float sum = fl > 0.f ? fl * expf(fm - mx) : 0.f;
    for (u32 i = threadIdx.x; i < n_kept; i += WARPS * WARP_SIZE) {
        const float e = expf(kept[i] - mx);
        if (STORE) kept[i] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    if (lane == 0) s_sum[warp] = sum;
    __syncthreads();
    return warp_sum(lane < WARPS ? s_sum[lane] : 0.f);
}

// Pass 2 of attend_span: this warp's share of the sum over the span of
// f16(exp(s - mx) * inv) times the values, into acc (the lane's DPL dimensions). kept: exp(s -
// mx) of the first KEPT positions (kept_row: their rows / 8); past KEPT the score is computed
// again. B of a warp's positions at a time.
template <int DPL, int WARPS, int KEPT>
__device__ __forceinline__ void span_values(const AttnSpan& sp, const float* q,
                                            const float* kept, const u32* kept_row, float mx,
                                            float inv, float (&acc)[DPL]) {
    constexpr int B = ATTN_BATCH(DPL, WARPS);
    const int warp = threadIdx.x / WARP_SIZE;
    const u32 n = sp.j1 - sp.j0;
    float qv[DPL];
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
        acc[d] = 0.f;
        qv[d] = d < sp.n_mine ? q[sp.d0 + d] : 0.f;
    }
    for (u32 ib = warp; ib < n; ib += WARPS * B) {
        float vv[B][DPL], kv[B][DPL];
#pragma unroll
        for (int u = 0; u < B; ++u) {
            const u32 i = ib + u * WARPS, j = sp.j0 + i;
            if (i >= n) continue;
            const size_t row = i < KEPT ? (size_t)kept_row[i] * 8 : sp.row(j);
            const bool own = sp.own(j);
            load_lane_row<DPL>(vv[u], sp.vc, row + sp.d0, own ? sp.vnewh : nullptr, sp.d0,
                               sp.n_mine);
            if (i >= KEPT) {
                load_lane_row<DPL>(kv[u], sp.kc, row + sp.d0, own ? sp.knewh : nullptr, sp.d0,
                                   sp.n_mine);
            }
        }
#pragma unroll
        for (int u = 0; u < B; ++u) {
            const u32 i = ib + u * WARPS;
            if (i >= n) continue;
            float e;
            if (i < KEPT) {
                e = kept[i];
            } else {
                float s = 0.f;
#pragma unroll
                for (int d = 0; d < DPL; ++d) s = fmaf(qv[d], kv[u][d], s);
                e = expf(sp.capped(warp_sum(s)) - mx);
            }
            const float w = round_f16(e * inv);
#pragma unroll
            for (int d = 0; d < DPL; ++d) acc[d] = fmaf(w, vv[u][d], acc[d]);
        }
    }
}

// The block's sum of its warps' acc (warp order), in warp 0's lanes `o`: true there, false on
// the other warps. sacc: WARPS * DPL * WARP_SIZE floats of shared memory; with READ_BEFORE,
// threads may still be reading what it held, and the block waits for them first. All threads
// of the block call it.
template <int DPL, int WARPS, bool READ_BEFORE = true>
__device__ __forceinline__ bool block_sum_values(const float (&acc)[DPL], float* sacc,
                                                 float (&o)[DPL]) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    if (READ_BEFORE) __syncthreads();
#pragma unroll
    for (int d = 0; d < DPL; ++d) sacc[(warp * WARP_SIZE + lane) * DPL + d] = acc[d];
    __syncthreads();
    if (warp != 0) return false;
#pragma unroll
    for (int d = 0; d < DPL; ++d) o[d] = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
#pragma unroll
        for (int d = 0; d < DPL; ++d) o[d] += sacc[(w * WARP_SIZE + lane) * DPL + d];
    }
    return true;
}

// Spans of at most WARPS * ATTN_SHORT_POSITIONS(DPL, WARPS) positions take attend_short, whose
// warps hold their positions' keys and values in registers (0: never): in the blocks of
// ATTN_WIDE_WARPS warps of few-token steps, 4 positions a warp (2 for 256-value heads: a thread
// there has 64 registers).
// NOTE (H100, `scripts/device/binary_ab.sh`, two rounds): tg128 `--greedy` Qwen3-0.6B Q8_0
// 1,111.3 / 1,105.7 -> 1,170.0 / 1,170.9 tok/s, Llama-3.2-1B Q8_0 1,086.0 / 1,080.4 ->
// 1,113.7 / 1,113.5. The 4-warp blocks of many-token steps taking up to 64 positions (16 a
// warp) cost 64 sequences 3-9% (0.6B 18,193 / 17,783 -> 16,481 / 16,193 tok/s, with spans
// too long for it: 120 registers a thread instead of 63), so they keep two passes. Eight
// positions a warp in the wide blocks (spans of up to 256) spilled registers: tg256 `--greedy`
// 0.6B 1,080 -> 1,108, but tg128 1,177 -> 1,120-1,142 and Llama-3.2-1B tg128 1,110 -> 1,095.
#ifndef ATTN_SHORT
#define ATTN_SHORT 1
#endif
#define ATTN_SHORT_POSITIONS(DPL, WARPS) \
    (!ATTN_SHORT || (WARPS) <= 4 ? 0 : (DPL) >= 8 ? 2 : 4)

// Whether attend_span takes a span of n positions in attend_short's one pass.
template <int DPL, int WARPS>
__device__ __forceinline__ bool spans_short(u32 n) {
    constexpr int P = ATTN_SHORT_POSITIONS(DPL, WARPS);
    return P > 0 && n <= (u32)(WARPS * P);
}

// What an attention kernel does before it reads what earlier kernels wrote: waits for them,
// then (the few-token steps' wide blocks) lets the next kernel launch.
template <int WARPS>
__device__ __forceinline__ void attend_wait() {
    await_previous_kernels();
    if (WARPS > 4) let_dependents_launch();
}

// Whether attend_short loads the cache rows of positions before the token's own before its
// wait (1), where no kernel of the step writes them (a decode step whose attention writes the
// new rows itself), or after it (0). The kernel before (q/k norm and rope) lets this one launch
// once its own wait is over, so the rows are in registers by the time the query is ready,
// where before they were asked of L2 (prefetch_span_kv) and loaded after the wait.
// NOTE (H200, BENCHMARKS.md 2026-11-30, night; `binary_ab.sh`, two rounds, tok/s): Qwen3-0.6B
// Q8_0 tg128 1,480.2 / 1,490.4 -> 1,497.8 / 1,498.3, `--greedy` 1,477.2 / 1,481.9 -> 1,485.9 /
// 1,492.3, tg256 `--greedy` 1,303.6 -> 1,311.2; Q4_K_M tg128 1,492.6 / 1,488.1 -> 1,494.2 /
// 1,478.9; 64 sequences even; Llama-3.1-8B Q4_K_M 449.2 / 449.7 -> 448.7 / 448.2. A timeline
// put attention at 3.73 µs a layer, against 4.07 before this and the GEMVs' triggers.
#ifndef ATTN_SHORT_EARLY_ROWS
#define ATTN_SHORT_EARLY_ROWS 1
#endif

// Whether attend_short reads the block-table entries of all its positions before it loads
// any row (1), or each row's entry just before that row (0). The rows are loaded before the
// kernel's wait, where every table read that waits for the row before it adds a wait on L2
// to what the next kernel waits for.
// NOTE (H200, BENCHMARKS.md 2026-11-30, small hours; `binary_ab.sh`, two rounds, 0 -> 1):
// Qwen3-0.6B Q8_0 tg128 1,501.9 / 1,498.3 -> 1,503.8 / 1,501.1 tok/s, Q4_K_M 1,506.1 / 1,506.1
// -> 1,511.5 / 1,508.8, Llama-3.1-8B even; the Q8_0 step at the last positions of 128 (four
// positions a warp) 690 -> 676 µs.
#ifndef ATTN_SHORT_SLOTS_FIRST
#define ATTN_SHORT_SLOTS_FIRST 1
#endif

// A lane's DPL f16 values of a cache row, two to a word.
template <int DPL>
struct LaneHalves {
    u32 w[(DPL + 1) / 2];

    __device__ __forceinline__ float at(int d) const {
        const u32 word = w[d / 2];
        return half_to_f32((u16)(d % 2 ? word >> 16 : word & 0xffff));
    }
};

// A lane's values of a cache row at `at` (n_mine of DPL; zeros past them), or of the row `newh`
// rounded to f16 when it is not null. Rows start at multiples of 8 values and d0 at a multiple
// of DPL, so a lane's whole share is one aligned load.
template <int DPL>
__device__ __forceinline__ LaneHalves<DPL> load_lane_halves(const u16* __restrict__ cache,
                                                            size_t at, const float* newh, int d0,
                                                            int n_mine) {
    LaneHalves<DPL> h;
    if (newh == nullptr && n_mine == DPL) {
        // Only the branch of this DPL runs; the indices are written so that every DPL's
        // instance compiles (h.w has (DPL + 1) / 2 words).
        if (DPL == 1) h.w[0] = cache[at];
        if (DPL == 2) h.w[0] = *reinterpret_cast<const u32*>(cache + at);
        if (DPL == 4) {
            const uint2 t = *reinterpret_cast<const uint2*>(cache + at);
            h.w[0] = t.x;
            h.w[(DPL + 1) / 2 - 1] = t.y;
        }
        if (DPL == 8) {
            const uint4 t = *reinterpret_cast<const uint4*>(cache + at);
            const u32 ws[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
            for (int i = 0; i < (DPL + 1) / 2; ++i) h.w[i] = ws[i % 4];
        }
        return h;
    }
#pragma unroll
    for (int i = 0; i < (DPL + 1) / 2; ++i) h.w[i] = 0;
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
        if (d >= n_mine) break;
        const u16 bits = newh != nullptr ? f32_to_half(newh[d0 + d]) : cache[at + d];
        h.w[d / 2] |= (u32)bits << (16 * (d % 2));
    }
    return h;
}

// Whether attend_short skips block_sum_values' first barrier (1), which guards memory it
// does not use, or keeps it (0).
#ifndef ATTN_SHORT_ONE_LESS_BARRIER
#define ATTN_SHORT_ONE_LESS_BARRIER 1
#endif

// A lane's DPL values `h` (n_mine of them) stored to a cache row at `at`.
template <int DPL>
__device__ __forceinline__ void store_lane_halves(u16* cache, size_t at, const LaneHalves<DPL>& h,
                                                  int n_mine) {
    if (n_mine == DPL && DPL >= 2) {
        // As in load_lane_halves: one aligned store, indices valid for every DPL.
        constexpr int W = (DPL + 1) / 2;
        if (DPL == 2) *reinterpret_cast<u32*>(cache + at) = h.w[0];
        if (DPL == 4) *reinterpret_cast<uint2*>(cache + at) = make_uint2(h.w[0], h.w[W - 1]);
        if (DPL == 8) {
            *reinterpret_cast<uint4*>(cache + at) =
                make_uint4(h.w[0], h.w[1 % W], h.w[2 % W], h.w[3 % W]);
        }
        return;
    }
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
        if (d < n_mine) cache[at + d] = (u16)(h.w[d / 2] >> (16 * (d % 2)));
    }
}

// Where attend_short stores the token's own key and value (the cache rows of a decode step,
// null: not this block's to write, or no new row). See write_token_kv.
// `at`: the row's slot in the caches (the caller works it out before its wait, so that the
// stores wait for the row's values only).
struct OwnRowWrite {
    u16* k;
    u16* v;
    size_t at;
};
#define NO_OWN_ROW_WRITE (OwnRowWrite{nullptr, nullptr, 0})

// attend_span for a span of at most WARPS * P positions, in one pass over the cache: warp w
// takes positions w, w + WARPS, ... (P at most), its lanes holding DPL consecutive dimensions
// of each position's key and value, every load in flight at once; the scores are warp sums,
// and after the block's max M and sum L each weight exp(s - M) / L, rounded to f16, multiplies
// the values already in registers. The arithmetic of attend_span but for the order of the f32
// sums (q·k over a warp's lanes, L over the warps). attend_span's two passes wait for the
// cache twice and for the kept rows in between (Qwen3-0.6B: 7.5 µs a layer for at most 128
// positions, against about 2 µs of loads and arithmetic). With `wait_here` the caller has not
// waited for the kernels before (attend_wait): the rows of earlier positions are loaded first,
// then it waits, then loads the token's own row and the query, which those kernels wrote.
template <int DPL, int WARPS, int P>
__device__ __forceinline__ bool attend_short(const float* qh, const AttnSpan& sp, float& mx,
                                             float& total, float (&o)[DPL], float* sacc,
                                             float* s_max, float* s_sum, OwnRowWrite own_write,
                                             bool wait_here) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const u32 n = sp.j1 - sp.j0;
    LaneHalves<DPL> kh[P], vh[P];
#if ATTN_SHORT_SLOTS_FIRST
    // Every position's block-table entry first, then every row: one wait on memory for the
    // P table reads, where each row's load waited for its own. Positions past the span take
    // the last one's slot (a valid row, its values unused), so that no branch splits the reads.
    if (n > 0) {
        u32 js[P], slots[P];
#pragma unroll
        for (int u = 0; u < P; ++u) js[u] = sp.j0 + min(warp + u * WARPS, n - 1);
        const BlockTable table{sp.tables + sp.table, 0, sp.block_size,
                               block_shift(sp.block_size)};
        table.slots<P>(js, slots);
#pragma unroll
        for (int u = 0; u < P; ++u) {
            if (sp.own(js[u])) continue;
            const size_t at = (size_t)slots[u] * sp.kv_dim + sp.kv_off + sp.d0;
            kh[u] = load_lane_halves<DPL>(sp.kc, at, nullptr, sp.d0, sp.n_mine);
            vh[u] = load_lane_halves<DPL>(sp.vc, at, nullptr, sp.d0, sp.n_mine);
        }
    }
#else
#pragma unroll
    for (int u = 0; u < P; ++u) {
        const u32 i = warp + u * WARPS, j = sp.j0 + i;
        if (i >= n || sp.own(j)) continue;
        const size_t at = sp.row(j) + sp.d0;
        kh[u] = load_lane_halves<DPL>(sp.kc, at, nullptr, sp.d0, sp.n_mine);
        vh[u] = load_lane_halves<DPL>(sp.vc, at, nullptr, sp.d0, sp.n_mine);
    }
#endif
    if (wait_here) attend_wait<WARPS>();
#pragma unroll
    for (int u = 0; u < P; ++u) {
        const u32 i = warp + u * WARPS, j = sp.j0 + i;
        if (i >= n || !sp.own(j)) continue;
        kh[u] = load_lane_halves<DPL>(sp.kc, 0, sp.knewh, sp.d0, sp.n_mine);
        vh[u] = load_lane_halves<DPL>(sp.vc, 0, sp.vnewh, sp.d0, sp.n_mine);
    }
    float qv[DPL];
#pragma unroll
    for (int d = 0; d < DPL; ++d) qv[d] = d < sp.n_mine ? round_f16(qh[sp.d0 + d]) : 0.f;
    if (own_write.k != nullptr) {
#pragma unroll
        for (int u = 0; u < P; ++u) {
            const u32 i = warp + u * WARPS, j = sp.j0 + i;
            if (i >= n || !sp.own(j)) continue;
            store_lane_halves<DPL>(own_write.k, own_write.at + sp.d0, kh[u], sp.n_mine);
            store_lane_halves<DPL>(own_write.v, own_write.at + sp.d0, vh[u], sp.n_mine);
        }
    }
    float s[P];
#pragma unroll
    for (int u = 0; u < P; ++u) {
        s[u] = 0.f;
        if (warp + u * WARPS >= n) continue;
#pragma unroll
        for (int d = 0; d < DPL; ++d) s[u] = fmaf(qv[d], kh[u].at(d), s[u]);
    }
    // The warp's P sums side by side, so that their shuffles overlap.
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
#pragma unroll
        for (int u = 0; u < P; ++u) s[u] += __shfl_xor_sync(FULL_MASK, s[u], offset);
    }
    float m = NEG_INF;
#pragma unroll
    for (int u = 0; u < P; ++u) {
        if (warp + u * WARPS >= n) continue;
        s[u] = sp.capped(s[u]);
        m = fmaxf(m, s[u]);
    }
    if (lane == 0) s_max[warp] = m;
    __syncthreads();
    mx = warp_max(lane < WARPS ? s_max[lane] : NEG_INF);
    float sum = 0.f;
#pragma unroll
    for (int u = 0; u < P; ++u) {
        s[u] = warp + u * WARPS < n ? expf(s[u] - mx) : 0.f;
        sum += s[u];
    }
    if (lane == 0) s_sum[warp] = sum;
    __syncthreads();
    total = warp_sum(lane < WARPS ? s_sum[lane] : 0.f);
    const float inv = 1.f / total;
    float acc[DPL];
#pragma unroll
    for (int d = 0; d < DPL; ++d) acc[d] = 0.f;
#pragma unroll
    for (int u = 0; u < P; ++u) {
        if (warp + u * WARPS >= n) continue;
        const float w = round_f16(s[u] * inv);
#pragma unroll
        for (int d = 0; d < DPL; ++d) acc[d] = fmaf(w, vh[u].at(d), acc[d]);
    }
    // Nothing of this pass reads sacc, and every reader of an earlier call's sums has passed
    // the two barriers above.
    return block_sum_values<DPL, WARPS, !ATTN_SHORT_ONE_LESS_BARRIER>(acc, sacc, o);
}

// One query head of one token attending to positions j0 .. j1 - 1 of its sequence (`sp`), by
// a block of WARPS warps, in two passes:
//   1. the scores, ATTN_SCORE_LANES lanes for each position (the query in shared memory),
//      kept in shared memory with each position's cache row, and their max M;
//   (between them the block turns the kept scores into exp(s - M) and sums them: L)
//   2. each weight exp(s - M) / L rounded to f16, times the values: a warp for each position,
//      its lanes holding DPL consecutive dimensions (DPL * 32 >= head_dim).
// This is the CPU backend's arithmetic (cpu/attention.rs, after ggml's attention, which
// multiplies V by the weights as f16): an online softmax that weights values in f32 gives
// other last bits, and 8-bit activations after attention turn those into visible logit
// differences. Pass 1 asks L2 for each position's values, which pass 2 then reads (where they
// fit: values_fit_in_l2). Past KEPT positions, pass 1 keeps a running sum and pass 2 computes
// the scores again (a warp for each). Warp 0 returns true with M, L and the weighted sum of
// values `o` (its lane's DPL dimensions, already divided by L); the other warps return false.
// All threads of the block call it. head_dim must be a multiple of 8. With `own_write`, a span
// short enough for attend_short (spans_short) also has the token's own key and value stored
// there by the warp that loads them; other spans ignore it. With `wait_here` the caller has not
// waited for the kernels before: attend_span does (attend_wait), attend_short after loading
// the rows of earlier positions, which only earlier steps may have written.
template <int DPL, int WARPS = 4, int KEPT = ATTN_KEPT>
__device__ __forceinline__ bool attend_span(const float* qh, const AttnSpan& sp, float& mx,
                                            float& total, float (&o)[DPL],
                                            OwnRowWrite own_write = NO_OWN_ROW_WRITE,
                                            bool wait_here = false) {
    static_assert(WARPS <= WARP_SIZE, "a warp's lanes reduce the warps' partial results");
    // NOTE: WARPS is a template constant. A version that read it from blockDim, its shared
    // arrays sized for 16 warps, ran 4-warp blocks 9% slower on an H100 (Qwen3-0.6B tg128
    // 700 / 706 against 769 / 764 tok/s).
    // The kept scores and rows, then (after pass 2) each warp's weighted values: one pool, so
    // that the wide blocks of 256-value heads stay within 48 KiB of static shared memory.
    constexpr int POOL = 2 * KEPT > WARPS * DPL * WARP_SIZE ? 2 * KEPT : WARPS * DPL * WARP_SIZE;
    __shared__ float pool[POOL];
    __shared__ float q[DPL * WARP_SIZE];
    __shared__ float s_max[WARPS], s_sum[WARPS];
    constexpr int P = ATTN_SHORT_POSITIONS(DPL, WARPS);
    if constexpr (P > 0) {
        if (spans_short<DPL, WARPS>(sp.j1 - sp.j0)) {
            return attend_short<DPL, WARPS, P>(qh, sp, mx, total, o, pool, s_max, s_sum,
                                               own_write, wait_here);
        }
    }
    if (wait_here) attend_wait<WARPS>();
    float* kept = pool;
    u32* kept_row = reinterpret_cast<u32*>(pool + KEPT);
    for (int d = threadIdx.x; d < sp.head_dim; d += WARPS * WARP_SIZE) q[d] = round_f16(qh[d]);
    __syncthreads();
    float fm, fl;
    mx = span_scores<DPL, WARPS>(sp, q, kept, kept_row, KEPT,
                                 values_fit_in_l2(sp.j1 - sp.j0, sp.kv_dim), fm, fl, s_max);
    total = span_exp_sum<WARPS, true>(kept, min(sp.j1 - sp.j0, (u32)KEPT), mx, fm, fl, s_sum);
    float acc[DPL];
    span_values<DPL, WARPS, KEPT>(sp, q, kept, kept_row, mx, 1.f / total, acc);
    return block_sum_values<DPL, WARPS>(acc, pool, o);
}

// The arguments of a decode-attention launch (attention_hd*, attention_split_*): queries
// [n_tokens, n_heads * head_dim], the layer's caches, the output rows (q's shape), the batch
// (token -> sequence, token -> position, sequence -> offset of its block table, the tables),
// the heads, scale, sliding window (0: none) and softcap (0: none); the output's 8-bit copy
// for the o projection's int8 GEMV (oq / ods, null: none; head_dim is then a multiple of 32,
// so every 32-value group lies within a head); and with knew / vnew ([n_tokens, kv_dim]) a
// decode step's new keys and values, which the kernel writes into the cache itself.
struct AttnArgs {
    const float* q;
    u16* kc;
    u16* vc;
    float* out;
    const u32* tok_seq;
    const u32* tok_pos;
    const u32* seq_table;
    const u32* tables;
    int n_heads, n_kv_heads, head_dim, block_size;
    float scale;
    int window;
    float softcap;
    i8* oq;
    float2* ods;
    const float* knew;
    const float* vnew;
};

#define ATTN_PARAMS                                                                         \
    const float *q, u16 *kc, u16 *vc, float *out, const u32 *tok_seq, const u32 *tok_pos,   \
        const u32 *seq_table, const u32 *tables, int n_heads, int n_kv_heads, int head_dim, \
        int block_size, float scale, int window, float softcap, i8 *oq, float2 *ods,        \
        const float *knew, const float *vnew
#define ATTN_ARGS                                                                          \
    AttnArgs {                                                                             \
        q, kc, vc, out, tok_seq, tok_pos, seq_table, tables, n_heads, n_kv_heads, head_dim, \
            block_size, scale, window, softcap, oq, ods, knew, vnew                         \
    }

// Head h of token t of a launch: the token's position and block-table offset, its KV head,
// and where its rows start: `own` in knew / vnew, `at` in q / out.
struct TokenHead {
    u32 pos, table;
    int kv_head;
    size_t own, at;
};

__device__ __forceinline__ TokenHead token_head(const AttnArgs& a, int t, int h) {
    const int kv_head = h / (a.n_heads / a.n_kv_heads);
    return {a.tok_pos[t], a.seq_table[a.tok_seq[t]], kv_head,
            (size_t)t * a.n_kv_heads * a.head_dim + (size_t)kv_head * a.head_dim,
            ((size_t)t * a.n_heads + h) * a.head_dim};
}

// The first position a token at `pos` sees (a sliding window of `window` positions; 0: all).
__device__ __forceinline__ u32 window_start(u32 pos, int window) {
    return (window > 0 && pos + 1 > (u32)window) ? pos + 1 - window : 0;
}

// With knew / vnew, the first query head of each KV head writes the token's key and value to
// the cache (warp `warp` of the block): no kv_write launch. No block reads that slot in the
// same launch (AttnSpan's knewh / vnewh).
template <int DPL>
__device__ __forceinline__ void write_token_kv(const AttnArgs& a, const TokenHead& th, int h,
                                               int warp) {
    if (a.knew == nullptr || h % (a.n_heads / a.n_kv_heads) != 0 ||
        (int)threadIdx.x / WARP_SIZE != warp) {
        return;
    }
    const int d0 = (threadIdx.x % WARP_SIZE) * DPL, n_mine = max(0, min(DPL, a.head_dim - d0));
    const int kv_dim = a.n_kv_heads * a.head_dim;
    const size_t slot = kv_slot(a.tables, th.table, th.pos, a.block_size) * kv_dim +
                        th.kv_head * a.head_dim + d0;
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
        if (d < n_mine) {
            a.kc[slot + d] = f32_to_half(a.knew[th.own + d0 + d]);
            a.vc[slot + d] = f32_to_half(a.vnew[th.own + d0 + d]);
        }
    }
}

// Head th's positions j0 .. j1 - 1 as attend_span reads them, with this lane's share.
template <int DPL>
__device__ __forceinline__ AttnSpan head_span(const AttnArgs& a, const TokenHead& th, u32 j0,
                                              u32 j1) {
    const int d0 = (threadIdx.x % WARP_SIZE) * DPL;
    return {a.kc,
            a.vc,
            a.tables,
            th.table,
            th.kv_head * a.head_dim,
            a.n_kv_heads * a.head_dim,
            a.head_dim,
            a.block_size,
            j0,
            j1,
            th.pos,
            a.knew != nullptr ? a.knew + th.own : nullptr,
            a.vnew != nullptr ? a.vnew + th.own : nullptr,
            d0,
            max(0, min(DPL, a.head_dim - d0)),
            a.scale,
            a.softcap};
}

// A lane's DPL values of head th's attention output (sp's share), with their 8-bit copy.
template <int DPL>
__device__ __forceinline__ void store_head_output(const AttnArgs& a, const TokenHead& th,
                                                  const AttnSpan& sp, const float (&o)[DPL]) {
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
        if (d < sp.n_mine) a.out[th.at + sp.d0 + d] = o[d];
    }
    if (a.oq != nullptr) {
        quantize_lane_values_q8_1<DPL>(o, a.oq + th.at + sp.d0, a.ods + (th.at + sp.d0) / 32,
                                       sp.n_mine > 0);
    }
}

// Causal attention of head th over positions j0 .. j1 - 1 (attend_span), into its output.
template <int DPL, int WARPS>
__device__ __forceinline__ void attend_head(const AttnArgs& a, const TokenHead& th, u32 j0,
                                            u32 j1, OwnRowWrite own_write = NO_OWN_ROW_WRITE,
                                            bool wait_here = false) {
    const AttnSpan sp = head_span<DPL>(a, th, j0, j1);
    float mx, total, o[DPL];
    if (attend_span<DPL, WARPS>(a.q + th.at, sp, mx, total, o, own_write, wait_here)) {
        store_head_output<DPL>(a, th, sp, o);
    }
}

// Asks L2 for the keys and values of head th's positions j0 .. j1 - 1, a 128-byte line per
// thread at a time (callers check that the span's values fit L2: values_fit_in_l2).
//
// attend calls it before await_previous_kernels, so that the rows are on their way while the
// kernels before it finish: the batch's description and block tables are copied before the
// pass's first kernel, and the rows of positions before the token's own were written by
// earlier steps (for a prompt chunk, possibly by kv_write just before: such a row is asked of
// L2 too early, which changes nothing, since L2 is where that write lands and the loads after
// the wait read what is there). A hint: nothing waits for it.
//
// NOTE (H100, `scripts/device/binary_ab.sh`, two rounds, ATTN_EARLY_PREFETCH 0 against 1):
// tg128 `--greedy` Qwen3-0.6B Q8_0 1,092.8 / 1,091.6 -> 1,111.2 / 1,110.6 tok/s, Llama-3.2-1B
// Q8_0 1,077.7 / 1,075.2 -> 1,086.4 / 1,084.6; tg128 with the logits back 1,056.9 / 1,057.6
// -> 1,056.3 / 1,053.7 and 1,024.4 / 1,046.5 -> 1,050.6 / 1,054.9. The split kernels
// (attention_split.cu) asking for their splits' rows the same way measured 1-4% slower
// after 2,048 and 8,192 positions, so they do not.
#ifndef ATTN_EARLY_PREFETCH
#define ATTN_EARLY_PREFETCH 1
#endif
template <int THREADS>
__device__ __forceinline__ void prefetch_span_kv(const AttnArgs& a, const TokenHead& th, u32 j0,
                                                 u32 j1) {
#if ATTN_EARLY_PREFETCH
    const int kv_dim = a.n_kv_heads * a.head_dim;
    const u32 lines = (u32)(a.head_dim * 2 + 127) / 128;  // a head's row of f16 values
    for (u32 i = threadIdx.x; j0 < j1 && i < (j1 - j0) * lines; i += THREADS) {
        const u32 j = j0 + i / lines;
        const size_t at = kv_slot(a.tables, th.table, j, a.block_size) * kv_dim +
                          (size_t)th.kv_head * a.head_dim + (i % lines) * 64;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a.kc + at));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a.vc + at));
    }
#endif
}

// Whether attention over spans short enough for attend_short stores the token's own key and
// value as its warp loads them (1) or with write_token_kv after the block's sums (0).
// NOTE (H200, BENCHMARKS.md, 2026-11-29, closing; Qwen3-0.6B tg128 `--greedy`, tok/s): Q8_0
// 1,360-1,362 -> 1,373-1,374, Q4_K_M 1,409-1,412 -> 1,421-1,424. With the slot's block-table
// read after the wait (in front of the stores) it was 0.3-0.6% slower instead.
#ifndef ATTN_SHORT_OWN_WRITE
#define ATTN_SHORT_OWN_WRITE 1
#endif

// Attention of the (head blockIdx.x, token blockIdx.y) pair of a batch over its sequence.
template <int DPL, int WARPS>
__device__ void attend(const AttnArgs& a) {
    const int h = blockIdx.x;
    const TokenHead th = token_head(a, blockIdx.y, h);
    // The positions before the token's own (whose key and value this kernel writes).
    const u32 first = window_start(th.pos, a.window);
    // A span of attend_short's stores the new row as soon as its warp has loaded it, where
    // write_token_kv would load it once more after the block's sums.
    const bool short_span = ATTN_SHORT_OWN_WRITE && spans_short<DPL, WARPS>(th.pos + 1 - first);
    // Where this kernel writes the new rows (a.knew: no kv_write before it), the rows of
    // earlier positions come from earlier steps, and attend_short loads them before its wait.
    const bool rows_early = ATTN_SHORT_EARLY_ROWS && short_span && a.knew != nullptr;
    if (!rows_early && values_fit_in_l2(th.pos - first, a.n_kv_heads * a.head_dim)) {
        prefetch_span_kv<WARPS * WARP_SIZE>(a, th, first, th.pos);
    }
    OwnRowWrite own = NO_OWN_ROW_WRITE;
    if (short_span && a.knew != nullptr && h % (a.n_heads / a.n_kv_heads) == 0) {
        const size_t slot = kv_slot(a.tables, th.table, th.pos, a.block_size);
        own = {a.kc, a.vc, slot * a.n_kv_heads * a.head_dim + (size_t)th.kv_head * a.head_dim};
    }
    if (!rows_early) attend_wait<WARPS>();
    if (short_span) {
        attend_head<DPL, WARPS>(a, th, first, th.pos + 1, own, rows_early);
        return;
    }
    attend_head<DPL, WARPS>(a, th, first, th.pos + 1);
    // Last, by a warp that attend_head has let go while warp 0 writes the output: the loads of
    // the new row would otherwise come before the cache's, one more wait on L2 in a row.
    write_token_kv<DPL>(a, th, h, 1);
}

// Warps of the wide attention blocks (attention.rs ATTN_WIDE_WARPS, which must be the same).
#define ATTN_WIDE_WARPS 32

// One kernel per supported head size (the lanes' share of a head is a template constant) and
// block size: 4 warps, and ATTN_WIDE_WARPS (`_wide`) for batches of few tokens, whose heads
// alone would leave most of the GPU idle (attention.rs picks).
extern "C" __global__ void __launch_bounds__(4 * WARP_SIZE) attention_hd32(ATTN_PARAMS) {
    attend<1, 4>(ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_hd32_wide(ATTN_PARAMS) {
    attend<1, ATTN_WIDE_WARPS>(ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(4 * WARP_SIZE) attention_hd64(ATTN_PARAMS) {
    attend<2, 4>(ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_hd64_wide(ATTN_PARAMS) {
    attend<2, ATTN_WIDE_WARPS>(ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(4 * WARP_SIZE) attention_hd128(ATTN_PARAMS) {
    attend<4, 4>(ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_hd128_wide(ATTN_PARAMS) {
    attend<4, ATTN_WIDE_WARPS>(ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(4 * WARP_SIZE) attention_hd256(ATTN_PARAMS) {
    attend<8, 4>(ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_hd256_wide(ATTN_PARAMS) {
    attend<8, ATTN_WIDE_WARPS>(ATTN_ARGS);
}

// The rotation of value i (< n_rot) of a head at position `pos`: the pair (a, b) it belongs
// to and its angle's cosine and sine, the angle advanced by repeated multiplication, as the
// CPU backend computes it; `factor` is the pair's frequency divisor (1: none).
struct RopeTurn {
    int a, b;
    float c, s;
};
__device__ __forceinline__ int rope_pair(int i, int n_rot, int neox) {
    return neox ? (i % (n_rot / 2)) : (i / 2);
}
__device__ __forceinline__ RopeTurn rope_turn(int i, u32 pos, int n_rot, float theta_scale,
                                              float freq_scale, float factor, int neox) {
    const int pair = rope_pair(i, n_rot, neox);
    const int a = neox ? pair : 2 * pair, b = neox ? pair + n_rot / 2 : 2 * pair + 1;
    float theta = (float)pos;
    for (int m = 0; m < pair; ++m) theta *= theta_scale;
    const float ang = freq_scale * (theta / factor);
    return {a, b, cosf(ang), sinf(ang)};
}

// Value i of a head `head` turned by `r` (rope_turn of i).
__device__ __forceinline__ float turned_value(const float* head, int i, const RopeTurn& r) {
    const float x0 = head[r.a], x1 = head[r.b];
    return i == r.a ? x0 * r.c - x1 * r.s : x0 * r.s + x1 * r.c;
}

// Value i (< n_rot) of a head `head` after rotary embedding at position `pos`.
__device__ __forceinline__ float rotated_value(const float* head, int i, u32 pos, int n_rot,
                                               float theta_scale, float freq_scale,
                                               const float* factors, int neox) {
    const float factor = factors ? factors[rope_pair(i, n_rot, neox)] : 1.0f;
    return turned_value(head, i,
                        rope_turn(i, pos, n_rot, theta_scale, freq_scale, factor, neox));
}

// Per-head RMSNorm (QK-norm, when `qn` / `kn` are given) and rotary embedding of q and k in
// one pass. Grid: (n_q_heads + n_k_heads, n_tokens); one thread per value of the head. The
// same arithmetic as rms_norm_groups followed by rope_rows (`theta_scales` as there).
// NOTE: fused into the decode step's wide attention kernel (each block norming and rotating
// its own query head and new key, the same bits) it was no faster on an H100: Qwen3-0.6B Q8_0
// tg128 979-996 against 982-1,008 tok/s (BENCHMARKS.md, 2026-11-27, evening). Fused again
// into the one-pass attention of short spans, each warp norming and rotating the query across
// its lanes (no block barrier), the angles worked out before the wait, it was slower still:
// tg128 `--greedy` 1,092 against 1,178 tok/s (BENCHMARKS.md, 2026-11-28, morning). Working
// the angles out before this kernel's own wait measured no faster either (1,177 / 1,178
// against 1,177 / 1,170; Llama-3.2-1B 1,109 / 1,111 against 1,121 / 1,118). Done instead by
// the q/k/v GEMV (the warp that stored a head's last rows, found through a counter a head),
// it was slower again: 1,025-1,061 against 1,166-1,175 tok/s, Llama-3.2-1B 1,063-1,085 against
// 1,115-1,122 (BENCHMARKS.md, 2026-11-28, later).
// NOTE (H200, BENCHMARKS.md, 2026-11-30, night): fused into the wide attention a fifth time,
// now that the q/k/v GEMV lets the kernel after it launch once its own wait is over
// (gemv_q8a.cu Q8A_TRIGGER) and attention loads its earlier rows before its wait: the same
// bits as this kernel, and Qwen3-0.6B Q8_0 tg128 1,504.5-1,504.8 -> 1,432.4-1,433.6 tok/s,
// Q4_K_M 1,500.7-1,501.5 -> 1,392.7-1,403.0. A likely cause, not checked: its blocks of 1,024
// threads, launched early, hold half the threads of as many multiprocessors while the q/k/v
// GEMV runs, where this kernel's blocks are of 64.
// NOTE (H200, BENCHMARKS.md, 2026-11-29, last): the loads below all at once after the wait
// took Qwen3-0.6B Q8_0 tg128 `--greedy` from 1,339-1,343 to 1,353-1,358 tok/s. The same loads
// and the angles before the wait (with rms_norm_quantize asking L2 for its weight before its
// own) were 0.6-1% slower than after it: this kernel launches only as the q/k/v GEMV's blocks
// leave, so work before its wait is on the step's chain too.
extern "C" __global__ void qk_norm_rope(float* q, float* k, const float* qn, const float* kn,
                                        const u32* positions, int n_q_heads, int n_k_heads,
                                        int head_dim, float eps, int n_rot, float theta_scale,
                                        const float* theta_scales, float freq_scale,
                                        const float* factors, int neox) {
    await_previous_kernels();
    let_dependents_launch();
    __shared__ float head[256];
    const int t = blockIdx.y, hi = blockIdx.x;
    const bool is_q = hi < n_q_heads;
    float* row = is_q ? q + ((size_t)t * n_q_heads + hi) * head_dim
                      : k + ((size_t)t * n_k_heads + (hi - n_q_heads)) * head_dim;
    const float* norm = is_q ? qn : kn;
    const int i = threadIdx.x;
    const bool turns = i < n_rot;
    // Every load at once, the head's values with the norm's weight and the rotation's inputs:
    // read after the norm's sum, each was one more wait on memory.
    const float v = i < head_dim ? row[i] : 0.f;
    const float weight = norm && i < head_dim ? norm[i] : 1.f;
    const u32 pos = turns ? positions[t] : 0;
    if (turns && theta_scales) theta_scale = theta_scales[t];
    const float factor = turns && factors ? factors[rope_pair(i, n_rot, neox)] : 1.f;
    float scale = 1.f;
    if (norm) {
        const double ss = block_sum_f64_once((double)v * (double)v);
        scale = 1.0f / sqrtf((float)(ss / (double)head_dim) + eps);
    }
    if (i < head_dim) head[i] = norm ? v * scale * weight : v;
    RopeTurn turn = {i, i, 1.f, 0.f};
    if (turns) turn = rope_turn(i, pos, n_rot, theta_scale, freq_scale, factor, neox);
    __syncthreads();
    if (i >= head_dim) return;
    row[i] = turns ? turned_value(head, i, turn) : head[i];
}

// qk_norm_rope with a thread for each pair of values that rotate together, both in its
// registers: (i, i + head_dim / 2) where rotary pairs are neox's and span the whole head,
// (2i, 2i + 1) for the normal layout (backend/mod.rs picks; the values past n_rot are normed
// only). Grid as qk_norm_rope's; head_dim / 2 threads (a multiple of 32 at least). The same
// arithmetic but for the order of the norm's f64 sum, without the pass through shared memory
// and the block barrier that bring each value its partner.
// NOTE (H200, BENCHMARKS.md, 2026-11-29, closing): Qwen3-0.6B Q4_K_M tg128 1,382 -> 1,395
// tok/s, `--greedy` 1,415 -> 1,424; Q8_0 within a round's spread (-0.3% / +0.2%).
extern "C" __global__ void qk_norm_rope_pairs(float* q, float* k, const float* qn,
                                              const float* kn, const u32* positions,
                                              int n_q_heads, int n_k_heads, int head_dim,
                                              float eps, int n_rot, float theta_scale,
                                              const float* theta_scales, float freq_scale,
                                              const float* factors, int neox) {
    await_previous_kernels();
    let_dependents_launch();
    const int t = blockIdx.y, hi = blockIdx.x;
    const bool is_q = hi < n_q_heads;
    float* row = is_q ? q + ((size_t)t * n_q_heads + hi) * head_dim
                      : k + ((size_t)t * n_k_heads + (hi - n_q_heads)) * head_dim;
    const float* norm = is_q ? qn : kn;
    const int p = threadIdx.x, half = head_dim / 2;
    const bool live = p < half;
    const int a = neox ? p : 2 * p, b = neox ? p + half : 2 * p + 1;
    const bool turns = live && b < n_rot;
    // Every load at once, as qk_norm_rope.
    const float va = live ? row[a] : 0.f, vb = live ? row[b] : 0.f;
    const float wa = norm && live ? norm[a] : 1.f, wb = norm && live ? norm[b] : 1.f;
    const u32 pos = turns ? positions[t] : 0;
    if (turns && theta_scales) theta_scale = theta_scales[t];
    const float factor = turns && factors ? factors[p] : 1.f;  // pair p's
    float scale = 1.f;
    if (norm) {
        const double ss = block_sum_f64_once((double)va * (double)va + (double)vb * (double)vb);
        scale = 1.0f / sqrtf((float)(ss / (double)head_dim) + eps);
    }
    if (!live) return;
    const float xa = norm ? va * scale * wa : va, xb = norm ? vb * scale * wb : vb;
    if (!turns) {
        row[a] = xa;
        row[b] = xb;
        return;
    }
    const RopeTurn r = rope_turn(a, pos, n_rot, theta_scale, freq_scale, factor, neox);
    row[a] = xa * r.c - xb * r.s;
    row[b] = xa * r.s + xb * r.c;
}
