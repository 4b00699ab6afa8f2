// Decode attention with each head's positions split across blocks (as flash-decoding does),
// for steps of few tokens over long sequences: one block a head (attend) leaves all but
// n_heads multiprocessors idle and walks every position of the head in one block.
//
// Two launches over a grid of (n_heads * n_split, n_tokens) wide blocks, split z of head h
// at blockIdx.x = h * n_split + z:
//   attention_split_scores_hd*: the split's scores (attend_span's pass 1) into global memory,
//     and its max m and sum l of exp(s - m);
//   attention_split_values_hd*: every split's m and l give the head's M and L; the split's
//     f16(exp(s - M) / L) times the values (pass 2) into its part of the output; the head's
//     last split to finish adds the parts in split order and writes the output.
// The weights are the ones attend rounds (the same M, L and f16 rounding), so only the order
// of f32 additions differs from one block a head. A head of one split (a short span) runs
// attend's single block in the first launch, and the second launch leaves it alone.

// Fewest positions of a split: a head's span of n positions takes min(n_split, n / this,
// rounded up) splits. It must be at least the launch's n_split, so that no split is empty
// (attention.rs ATTN_SPLIT_MIN, which must be the same).
#define ATTN_SPLIT_MIN 64
// Most splits of a head (attention.rs ATTN_MAX_SPLITS): a warp's lanes hold their (m, l).
#define ATTN_MAX_SPLITS 16

// Where the splits of a launch keep their results between the two launches, R = n_tokens *
// n_heads heads: each split's scores and their cache rows / 8 ([R * n_split][kept] each; the
// host makes `kept` at least the longest split), each split's (m, l) ([R * n_split]), its part
// of the output ([R * n_split][head_dim]), and a counter a head (zero, and left at zero).
struct AttnSplit {
    int n_split, kept;
    float* scores;
    u32* rows;
    float2* stats;
    float* parts;
    u32* counts;
};

#define ATTN_SPLIT_PARAMS                                                                  \
    ATTN_PARAMS, int n_split, int kept, float *scores, u32 *rows, float2 *stats, float *parts, \
        u32 *counts
#define ATTN_SPLIT_ARGS \
    AttnSplit { n_split, kept, scores, rows, stats, parts, counts }

// Split z's positions j0 .. j1 - 1 of a token at `pos`, and how many splits its head has;
// false for the launch's splits past those.
__device__ __forceinline__ bool split_range(const AttnArgs& a, const AttnSplit& s, u32 pos,
                                            int z, u32& j0, u32& j1, int& n_active) {
    const u32 first = window_start(pos, a.window), span = pos + 1 - first;
    n_active = (int)min((u32)s.n_split, (span + ATTN_SPLIT_MIN - 1) / ATTN_SPLIT_MIN);
    const u32 chunk = (span + n_active - 1) / n_active;
    j0 = first + z * chunk;
    j1 = min(j0 + chunk, pos + 1);
    return z < n_active;
}

template <int DPL>
__device__ void attend_split_scores(const AttnArgs& a, const AttnSplit& s) {
    constexpr int WARPS = ATTN_WIDE_WARPS;
    await_previous_kernels();
    let_dependents_launch();
    const int h = blockIdx.x / s.n_split, z = blockIdx.x % s.n_split;
    const TokenHead th = token_head(a, blockIdx.y, h);
    if (z == 0) write_token_kv<DPL>(a, th, h, 0);
    u32 j0, j1;
    int n_active;
    if (!split_range(a, s, th.pos, z, j0, j1, n_active)) return;
    if (n_active == 1) {
        attend_head<DPL, WARPS>(a, th, j0, j1);
        return;
    }
    if (j1 - j0 > (u32)s.kept) __trap();  // the host sizes `kept` for the longest split
    __shared__ float q[DPL * WARP_SIZE];
    __shared__ float s_max[WARPS], s_sum[WARPS];
    const AttnSpan sp = head_span<DPL>(a, th, j0, j1);
    for (int d = threadIdx.x; d < a.head_dim; d += WARPS * WARP_SIZE) {
        q[d] = round_f16(a.q[th.at + d]);
    }
    __syncthreads();
    const size_t slot = ((size_t)blockIdx.y * a.n_heads + h) * s.n_split + z;
    float* kept = s.scores + slot * s.kept;
    float fm, fl;
    const bool prefetch = values_fit_in_l2(th.pos + 1 - window_start(th.pos, a.window), sp.kv_dim);
    const float m = span_scores<DPL, WARPS>(sp, q, kept, s.rows + slot * s.kept, s.kept, prefetch,
                                            fm, fl, s_max);
    const float l = span_exp_sum<WARPS, false>(kept, j1 - j0, m, fm, fl, s_sum);
    if (threadIdx.x == 0) s.stats[slot] = make_float2(m, l);
}

// Positions of a split's values a lane has in flight: VALUE_LOADS 16-byte loads.
//
// NOTE (H100, 2026-11-28, `binary_ab.sh`, Qwen3-0.6B Q8_0, tg128 after 8,192 / 32,768 tokens,
// three rounds): blocks of 16 warps with 8 or 16 loads a lane (more registers each) and of 8
// warps with 16 were all slower than 32 warps with 4: 519-527 / 261 (16 x 8), 494-495 /
// 250-252 (16 x 16) and 417-426 / 177-178 (8 x 16) tok/s against 572-582 / 320-325.
#define VALUE_LOADS 4

// The second pass of a split: this warp's share of the sum over sp's positions of
// f16(exp(s - mx) * inv) times the values, from the first launch's scores and rows (kept,
// kept_row; another launch's results, so read from L2). A warp takes 32 positions at a time:
// each lane reads one position's score and row, and the values are then read 16 bytes (8
// values) a lane, LPP lanes a position (the kernel's largest head / 8), VALUE_LOADS loads in
// flight. acc: the lane's 8 dimensions from (lane % LPP) * 8, summed over the positions this
// lane took.
template <int DPL>
__device__ __forceinline__ void split_values(const AttnSpan& sp, const float* kept,
                                             const u32* kept_row, float mx, float inv,
                                             float (&acc)[8]) {
    constexpr int LPP = DPL * WARP_SIZE / 8, PPI = WARP_SIZE / LPP;
    constexpr int STEP = VALUE_LOADS * PPI;  // positions of one round of loads
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int d0 = (lane % LPP) * 8, sub = lane / LPP;
    const bool mine = d0 < sp.head_dim;
    const u32 n = sp.j1 - sp.j0;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
    constexpr u32 WARPS_STRIDE = ATTN_WIDE_WARPS * WARP_SIZE;
    // The warp's first 32 positions' cache rows and scores; each round then loads the next
    // round's before its values, so that their L2 latency overlaps the values' loads.
    // NOTE (H100, 2026-11-28, `binary_ab.sh`, Qwen3-0.6B Q8_0, three rounds): tg128 after
    // 8,192 tokens 574-581 -> 590-596 tok/s, after 32,768 tokens 324-325 -> 341-342. Asking
    // L2 for the next 32 positions' values as well (prefetch.global.L2), or for the keys of
    // span_scores' rounds two ahead, was slower (H200, two rounds: after 32,768 tokens 367-373
    // -> 358-362 keys, 360 values, 350-352 both): these launches wait on their instructions
    // as much as on memory (Nsight Compute: half the issue slots used).
    u32 next_row = 0;
    float next_score = 0.f;
    if (warp * WARP_SIZE + lane < n) {
        next_row = __ldcg(kept_row + warp * WARP_SIZE + lane);
        next_score = __ldcg(kept + warp * WARP_SIZE + lane);
    }
    for (u32 base = warp * WARP_SIZE; base < n; base += WARPS_STRIDE) {
        const u32 cnt = min((u32)WARP_SIZE, n - base);
        u32 row = 0;
        float w = 0.f;
        if ((u32)lane < cnt) {
            row = next_row;
            w = round_f16(expf(next_score - mx) * inv);
        }
        if (base + WARPS_STRIDE + lane < n) {
            next_row = __ldcg(kept_row + base + WARPS_STRIDE + lane);
            next_score = __ldcg(kept + base + WARPS_STRIDE + lane);
        }
        for (u32 k0 = 0; k0 < cnt; k0 += STEP) {
            uint4 v[VALUE_LOADS];
            float wk[VALUE_LOADS];
#pragma unroll
            for (int g = 0; g < VALUE_LOADS; ++g) {
                const u32 k = k0 + g * PPI + sub;  // < 32: STEP divides 32
                const u32 r = __shfl_sync(FULL_MASK, row, (int)k);
                wk[g] = __shfl_sync(FULL_MASK, w, (int)k);
                v[g] = make_uint4(0, 0, 0, 0);
                if (k < cnt && mine && !sp.own(sp.j0 + base + k)) {
                    v[g] = *reinterpret_cast<const uint4*>(sp.vc + (size_t)r * 8 + d0);
                }
            }
#pragma unroll
            for (int g = 0; g < VALUE_LOADS; ++g) {
                const u32 k = k0 + g * PPI + sub;
                if (k >= cnt || !mine) continue;
                float x[8];
                if (sp.own(sp.j0 + base + k)) {
#pragma unroll
                    for (int e = 0; e < 8; ++e) x[e] = round_f16(sp.vnewh[d0 + e]);
                } else {
                    const u32 words[4] = {v[g].x, v[g].y, v[g].z, v[g].w};
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        x[2 * e] = half_to_f32((u16)(words[e] & 0xffff));
                        x[2 * e + 1] = half_to_f32((u16)(words[e] >> 16));
                    }
                }
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[e] = fmaf(wk[g], x[e], acc[e]);
            }
        }
    }
    // Lanes holding the same dimensions add up: lanes 0 .. LPP - 1 keep the warp's sums.
#pragma unroll
    for (int o = LPP; o < WARP_SIZE; o <<= 1) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += __shfl_xor_sync(FULL_MASK, acc[e], o);
    }
}

template <int DPL>
__device__ void attend_split_values(const AttnArgs& a, const AttnSplit& s) {
    constexpr int WARPS = ATTN_WIDE_WARPS, HD = DPL * WARP_SIZE;
    await_previous_kernels();
    let_dependents_launch();
    const int h = blockIdx.x / s.n_split, z = blockIdx.x % s.n_split;
    const TokenHead th = token_head(a, blockIdx.y, h);
    u32 j0, j1;
    int n_active;
    if (!split_range(a, s, th.pos, z, j0, j1, n_active) || n_active == 1) return;
    if (j1 - j0 > (u32)s.kept) __trap();
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const size_t head = (size_t)blockIdx.y * a.n_heads + h, first = head * s.n_split;
    const size_t slot = first + z;
    // The head's M and L from its splits' (m, l), a lane each.
    const float2 ml = lane < n_active ? __ldcg(s.stats + first + lane) : make_float2(NEG_INF, 0.f);
    const float mx = warp_max(ml.x);
    const float total = warp_sum(ml.y > 0.f ? ml.y * expf(ml.x - mx) : 0.f);
    const AttnSpan sp = head_span<DPL>(a, th, j0, j1);
    float acc[8];
    split_values<DPL>(sp, s.scores + slot * s.kept, s.rows + slot * s.kept, mx, 1.f / total,
                      acc);
    // The warps' sums, then warp 0's lanes take theirs (sp.d0, DPL values) and add them up.
    __shared__ float sacc[WARPS * HD];
    const int d0 = lane * 8;
    if (d0 < HD && d0 < a.head_dim) {
#pragma unroll
        for (int e = 0; e < 8; ++e) sacc[warp * HD + d0 + e] = acc[e];
    }
    __syncthreads();
    if (warp != 0) return;
    float o[DPL];
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
        o[d] = 0.f;
        if (d >= sp.n_mine) continue;
        for (int w = 0; w < WARPS; ++w) o[d] += sacc[w * HD + sp.d0 + d];
    }
    // The split's part, then (in the head's last split) the sum of the parts in split order.
    float* part = s.parts + slot * a.head_dim + sp.d0;
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
        if (d < sp.n_mine) part[d] = o[d];
    }
    __threadfence();
    __syncwarp();
    u32 done = 0;
    if (lane == 0) done = atomicAdd(s.counts + head, 1u);
    if (__shfl_sync(FULL_MASK, done, 0) != (u32)n_active - 1) return;
    __threadfence();
#pragma unroll
    for (int d = 0; d < DPL; ++d) o[d] = 0.f;
#pragma unroll
    for (int i = 0; i < ATTN_MAX_SPLITS; ++i) {
        if (i >= n_active) break;
        // From L2: the other splits' parts may be stale in this multiprocessor's L1.
        const float* p = s.parts + (first + i) * a.head_dim + sp.d0;
#pragma unroll
        for (int d = 0; d < DPL; ++d) {
            if (d < sp.n_mine) o[d] += __ldcg(p + d);
        }
    }
    store_head_output<DPL>(a, th, sp, o);
    if (lane == 0) s.counts[head] = 0;
}

// One pair of kernels per supported head size, as attention_hd*_wide.
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_split_scores_hd32(ATTN_SPLIT_PARAMS) {
    attend_split_scores<1>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_split_values_hd32(ATTN_SPLIT_PARAMS) {
    attend_split_values<1>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_split_scores_hd64(ATTN_SPLIT_PARAMS) {
    attend_split_scores<2>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_split_values_hd64(ATTN_SPLIT_PARAMS) {
    attend_split_values<2>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_split_scores_hd128(ATTN_SPLIT_PARAMS) {
    attend_split_scores<4>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_split_values_hd128(ATTN_SPLIT_PARAMS) {
    attend_split_values<4>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_split_scores_hd256(ATTN_SPLIT_PARAMS) {
    attend_split_scores<8>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(ATTN_WIDE_WARPS * WARP_SIZE)
attention_split_values_hd256(ATTN_SPLIT_PARAMS) {
    attend_split_values<8>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
