// Split decode attention on tensor cores, one block for all the query heads of a KV head:
// attention_split.cu's two launches (scores, then the weighted values) for steps of few
// tokens over long spans, where reading the cache is most of a step's time. attention.rs
// takes these for head sizes 64, 128 and 256 and up to 16 query heads a KV head.
//
// Why: attention_split's blocks are one per query head and split, each lane working a
// position's 8 values at a time. After 32,768 positions of Qwen3-0.6B its two launches read
// the cache at about 2.0 TB/s on an H200 that copies at 4.3 (Nsight Compute: half the issue
// slots used, the rest waiting on loads), and both query heads of a KV head read its keys and
// values. Here the G query heads of a KV head are the rows of m16n8k16 products: q · kᵀ
// takes 8 positions by 16 dimensions an instruction, weights · v 16 positions by 8
// dimensions, and each key and value is read once for the G heads. The tiles come through
// GQA_STAGES shared stages by asynchronous copies, so the loads in flight take no registers.
//
// Numerics: as attention_split (and the CPU backend): q rounded to f16, exact f16 products
// summed in f32 (another order), the head's max M and sum L over all splits, and the weights
// f16(exp(s - M) / L) times the values, f32 sums, the splits' parts added in split order.
//
// Launch: grid (n_kv_heads * n_split, n_tokens), GQA_WARPS * 32 threads, dynamic shared
// memory attention.rs gqa_shared_bytes; split z of KV head kh at blockIdx.x = kh * n_split +
// z. The scratch is attention_split's (AttnSplit; `rows` unused, `kept` a multiple of 4), the
// counters one a (token, KV head) at its first query head's index.
//
// NOTE (H200, `scripts/device/binary_ab.sh`, against attention_split, tg128 tok/s): Qwen3-0.6B
// Q8_0 after 32,768 tokens 369 -> 384-387, after 8,192 618-628 -> 647-658, after 2,048
// 768-773 -> 807-824, after 512 823-833 -> 922-947; Llama-3.1-8B Q4_K_M (4 query heads a KV head) 174 -> 222 and 288 ->
// 308. A first version with 4-warp blocks measured 262 after 32,768 (Nsight Compute: 8 warps
// a multiprocessor, each tile's address arithmetic and barriers on the critical path).
// NOTE (H200, BENCHMARKS.md 2026-11-29): asking L2 for a split's first 2, 4 or 8 tiles before
// await_previous_kernels, as model.cu's attend does for its span, measured no faster.

// Warps of a block (attention.rs GQA_THREADS / 32), positions of a tile, and tiles in flight.
#define GQA_WARPS 8
#define GQA_BK 64
#define GQA_STAGES 4
// Most block-table entries of a split staged in shared memory (gqa_stage_table); longer
// splits read the table from global memory.
#define GQA_TABLE_MAX 512
static_assert(GQA_BK == 8 * GQA_WARPS, "the scores kernel's warps take 8 positions of a tile each");
// Most query heads a KV head may have here (the rows of an m16n8k16 product), and most
// splits of a head (a warp's lanes hold their (m, l)).
#define GQA_MAX_GROUP 16
#define GQA_MAX_SPLITS 32

// u16 words of a shared K or V tile: GQA_BK rows of HD values, padded by 8 against bank
// conflicts.
template <int HD>
__device__ constexpr int gqa_tile_words() { return GQA_BK * (HD + 8); }

// Stages the block-table entries of positions j0 .. j1 - 1 of the table at `table` in
// `staged` (GQA_TABLE_MAX entries) where they fit. Every thread calls it; the caller's next
// barrier makes them visible.
__device__ __forceinline__ BlockTable gqa_stage_table(const AttnArgs& a, u32 table, u32 j0, u32 j1,
                                                    u32* staged) {
    const u32 b0 = j0 / a.block_size, nb = (j1 - 1) / a.block_size - b0 + 1;
    const int shift = block_shift(a.block_size);
    if (nb > GQA_TABLE_MAX) return {a.tables + table + b0, b0, a.block_size, shift};
    for (u32 i = threadIdx.x; i < nb; i += GQA_WARPS * WARP_SIZE) {
        staged[i] = a.tables[table + b0 + i];
    }
    return {staged, b0, a.block_size, shift};
}

// Tile kb .. kb + GQA_BK - 1 of a KV head's keys or values into dst by asynchronous copies,
// committed as one group: positions from j1 on are zeros, and the token's own position takes
// `own` (its new row, rounded to f16 as the cache holds it) where that is not null. As
// flash_prefill.cu's copy_kv_tile: a thread looks up all its rows first, so that its table
// reads are in flight together, and the copies past j1 zero-fill rather than branch.
// NOTE (H200, Qwen3-0.6B Q8_0, tg128 tok/s, BENCHMARKS.md 2026-11-29, later): a lookup and a
// branch for each 16 bytes gave 376.1 after 32,768 tokens, 644.4 after 8,192 and 800.3 after
// 2,048; this gave 393.6 / 391.5, 638.1 / 644.3 and 794.2 / 797.0.
template <int HD>
__device__ __forceinline__ void gqa_copy_tile(u16* dst, const u16* __restrict__ cache,
                                              const float* own, const AttnArgs& a,
                                              const BlockTable& tab, int kv_off, u32 kb, u32 j1,
                                              u32 pos) {
    constexpr u32 STRIDE = HD + 8, CHUNKS = HD / 8, THREADS = GQA_WARPS * WARP_SIZE;
    constexpr u32 ROUNDS = GQA_BK * CHUNKS / THREADS;
    static_assert(GQA_BK * CHUNKS % THREADS == 0, "a tile's copies are whole rounds of the block");
    const u32 kv_dim = a.n_kv_heads * HD;
    // A position from j1 on reads j1 - 1's row: a valid address for the zero-byte copy.
    u32 j[ROUNDS], slot[ROUNDS];
#pragma unroll
    for (u32 round = 0; round < ROUNDS; ++round) {
        j[round] = min(kb + (threadIdx.x + round * THREADS) / CHUNKS, j1 - 1);
    }
    tab.slots(j, slot);
    // Whether the token's own row is in this tile (only in its span's last tile).
    const bool own_here = own != nullptr && pos - kb < GQA_BK && pos < j1;
#pragma unroll
    for (u32 round = 0; round < ROUNDS; ++round) {
        const u32 i = threadIdx.x + round * THREADS;
        const u32 key = i / CHUNKS, ch = i % CHUNKS;
        u16* d = dst + key * STRIDE + ch * 8;
        if (own_here && kb + key == pos) {
            const float* x = own + ch * 8;
            *reinterpret_cast<uint4*>(d) =
                make_uint4(pack_half2(x[0], x[1]), pack_half2(x[2], x[3]),
                           pack_half2(x[4], x[5]), pack_half2(x[6], x[7]));
        } else {
            const size_t at = (size_t)slot[round] * kv_dim + kv_off + ch * 8;
            copy16_async_or_zero(d, cache + at, kb + key < j1);
        }
    }
    copies_commit();
}

// Walks tiles 0 .. n_tiles - 1 through GQA_STAGES shared stages, the next tiles' copies in
// flight while the warps work on this one: copy(tile, stage) queues a tile's copies and
// commits them as one group; take(tile, stage) runs once they have landed. Every thread
// calls it.
template <class Copy, class Take>
__device__ __forceinline__ void gqa_walk_tiles(u32 n_tiles, Copy copy, Take take) {
#pragma unroll
    for (u32 t = 0; t < GQA_STAGES - 1; ++t) {
        if (t < n_tiles) {
            copy(t, (int)t);
        } else {
            copies_commit();  // an empty group keeps the count of groups per tile
        }
    }
    for (u32 t = 0; t < n_tiles; ++t) {
        // The stage of tile t - 1 was released by the barrier that ended it.
        const u32 next = t + GQA_STAGES - 1;
        if (next < n_tiles) {
            copy(next, (int)(next % GQA_STAGES));
        } else {
            copies_commit();
        }
        copies_wait<GQA_STAGES - 1>();
        __syncthreads();  // every thread's copies of tile t have landed
        take(t, (int)(t % GQA_STAGES));
        __syncthreads();  // every warp is done with the stage before copies refill it
    }
}

// This block's split of (token blockIdx.y, KV head kh): the token's first query head of the
// group, the group's size, and the split's positions.
struct GqaSplit {
    TokenHead th;
    int kh, z, group;
    u32 j0, j1;
    int n_active;
    // The slot of query head r of the group (AttnSplit's [token][head][split] order) and of
    // split i of that head.
    size_t first;  // slot of split 0 of the group's first head
    int n_split;
    __device__ __forceinline__ size_t slot(int r, int i) const {
        return first + (size_t)r * n_split + i;
    }
};

__device__ __forceinline__ bool gqa_split(const AttnArgs& a, const AttnSplit& s, GqaSplit& g) {
    g.group = a.n_heads / a.n_kv_heads;
    g.kh = blockIdx.x / s.n_split;
    g.z = blockIdx.x % s.n_split;
    g.th = token_head(a, blockIdx.y, g.kh * g.group);
    g.n_split = s.n_split;
    g.first = ((size_t)blockIdx.y * a.n_heads + g.kh * g.group) * s.n_split;
    return split_range(a, s, g.th.pos, g.z, g.j0, g.j1, g.n_active);
}

// Pass 1: the scores of the group's heads over the split's positions into s.scores (slot's
// row, position j at j - j0), and each head's split max m and sum l of exp(s - m) into
// s.stats. The split-0 block also writes the token's new key and value into the cache.
template <int HD>
__device__ void gqa_scores(const AttnArgs& a, const AttnSplit& s) {
    constexpr int STRIDE = HD + 8, TILE = gqa_tile_words<HD>();
    extern __shared__ __align__(16) u16 gqa_shared[];
    __shared__ float s_max[GQA_WARPS][GQA_MAX_GROUP], s_sum[GQA_WARPS];
    __shared__ u32 s_table[GQA_TABLE_MAX];
    await_previous_kernels();
    let_dependents_launch();
    GqaSplit g;
    const bool active = gqa_split(a, s, g);
    const int kv_dim = a.n_kv_heads * HD, kv_off = g.kh * HD;
    if (g.z == 0 && a.knew != nullptr) {
        const size_t at = kv_slot(a.tables, g.th.table, g.th.pos, a.block_size) * kv_dim + kv_off;
        for (int d = threadIdx.x; d < HD; d += GQA_WARPS * WARP_SIZE) {
            a.kc[at + d] = f32_to_half(a.knew[g.th.own + d]);
            a.vc[at + d] = f32_to_half(a.vnew[g.th.own + d]);
        }
    }
    if (!active) return;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int gr = lane / 4, c = lane % 4;  // fragment row (and row + 8), column pair
    // The query heads as the A fragments of q · kᵀ: row r is head kh * group + r (f16).
    u32 qf[HD / 16][4];
    {
        const float* q = a.q + (size_t)blockIdx.y * a.n_heads * HD + (size_t)g.kh * g.group * HD;
        const bool lo = gr < g.group, hi = gr + 8 < g.group;
        const float* q0 = q + (size_t)gr * HD;
        const float* q1 = q + (size_t)(gr + 8) * HD;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            const int d = kk * 16 + 2 * c;
            qf[kk][0] = lo ? pack_half2(q0[d], q0[d + 1]) : 0u;
            qf[kk][1] = hi ? pack_half2(q1[d], q1[d + 1]) : 0u;
            qf[kk][2] = lo ? pack_half2(q0[d + 8], q0[d + 9]) : 0u;
            qf[kk][3] = hi ? pack_half2(q1[d + 8], q1[d + 9]) : 0u;
        }
    }
    const float* own = a.knew != nullptr ? a.knew + g.th.own : nullptr;
    const u32 n = g.j1 - g.j0, n_tiles = (n + GQA_BK - 1) / GQA_BK;
    const BlockTable tab = gqa_stage_table(a, g.th.table, g.j0, g.j1, s_table);
    __syncthreads();
    float m[2] = {NEG_INF, NEG_INF};  // this thread's largest score of rows gr, gr + 8
    // Where this thread's rows keep their scores (null: a row past the group).
    float* kept_lo = gr < g.group ? s.scores + g.slot(gr, g.z) * s.kept : nullptr;
    float* kept_hi = gr + 8 < g.group ? s.scores + g.slot(gr + 8, g.z) * s.kept : nullptr;
    gqa_walk_tiles(
        n_tiles,
        [&](u32 t, int stage) {
            gqa_copy_tile<HD>(gqa_shared + stage * TILE, a.kc, own, a, tab, kv_off,
                              g.j0 + t * GQA_BK, g.j1, g.th.pos);
        },
        [&](u32 t, int stage) {
            // This warp's 8 positions of the tile (GQA_BK = 8 * GQA_WARPS).
            const u16* ks = gqa_shared + stage * TILE;
            float sc[4] = {0.f, 0.f, 0.f, 0.f};
            const u16* krow = ks + (warp * 8 + gr) * STRIDE + 2 * c;
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                const u32 b0 = *reinterpret_cast<const u32*>(krow + kk * 16);
                const u32 b1 = *reinterpret_cast<const u32*>(krow + kk * 16 + 8);
                mma_f16(sc, qf[kk], b0, b1);
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const u32 i = t * GQA_BK + warp * 8 + 2 * c + e % 2;
                float* kept = e < 2 ? kept_lo : kept_hi;
                if (kept == nullptr || i >= n) continue;
                float x = sc[e] * a.scale;
                if (a.softcap > 0.f) x = a.softcap * tanhf(x / a.softcap);
                kept[i] = x;
                m[e / 2] = fmaxf(m[e / 2], x);
            }
        });
    // Each head's max: over the four lanes of a row, then over the warps.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        m[h] = fmaxf(m[h], __shfl_xor_sync(FULL_MASK, m[h], 1));
        m[h] = fmaxf(m[h], __shfl_xor_sync(FULL_MASK, m[h], 2));
    }
    if (c == 0) {
        s_max[warp][gr] = m[0];
        s_max[warp][gr + 8] = m[1];
    }
    __syncthreads();  // also makes the block's score stores visible to all its threads
    for (int r = 0; r < g.group; ++r) {
        float mx = NEG_INF;
#pragma unroll
        for (int w = 0; w < GQA_WARPS; ++w) mx = fmaxf(mx, s_max[w][r]);
        const float* kept = s.scores + g.slot(r, g.z) * s.kept;
        float sum = 0.f;
        for (u32 i = threadIdx.x; i < n; i += GQA_WARPS * WARP_SIZE) sum += expf(kept[i] - mx);
        sum = warp_sum(sum);
        if (lane == 0) s_sum[warp] = sum;
        __syncthreads();
        if (threadIdx.x == 0) {
            float l = 0.f;
#pragma unroll
            for (int w = 0; w < GQA_WARPS; ++w) l += s_sum[w];
            s.stats[g.slot(r, g.z)] = make_float2(mx, l);
        }
        __syncthreads();
    }
}

// Pass 2: every split's (m, l) give each head's M and L; the split's f16(exp(s - M) / L) times
// the values into its part of each head's output; the group's last split to finish adds the
// parts in split order and writes the heads' outputs (with their 8-bit copy).
template <int HD>
__device__ void gqa_values(const AttnArgs& a, const AttnSplit& s) {
    constexpr int STRIDE = HD + 8, TILE = gqa_tile_words<HD>(), DPL = HD / WARP_SIZE;
    // Dimensions of the output a warp takes, as 8-wide column tiles.
    constexpr int NT = HD / 8 / GQA_WARPS;
    static_assert(NT == 1 || NT % 2 == 0, "a warp takes one column tile or pairs of them");
    // The tile's weights, f16, a row a head (rows past the group stay zero): the A fragments.
    constexpr int WSTRIDE = GQA_BK + 8;
    __shared__ __align__(16) u16 s_w[GQA_MAX_GROUP * WSTRIDE];
    extern __shared__ __align__(16) u16 gqa_shared[];
    // The tile's scores of each head (GQA_MAX_GROUP rows of GQA_BK), per stage, after the V
    // tiles.
    float* scores = reinterpret_cast<float*>(gqa_shared + GQA_STAGES * TILE);
    __shared__ float s_mx[GQA_MAX_GROUP], s_inv[GQA_MAX_GROUP];
    __shared__ u32 s_last;
    __shared__ u32 s_table[GQA_TABLE_MAX];
    await_previous_kernels();
    let_dependents_launch();
    GqaSplit g;
    if (!gqa_split(a, s, g)) return;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int gr = lane / 4, c = lane % 4;
    for (int r = warp; r < g.group; r += GQA_WARPS) {
        const float2 ml = lane < g.n_active ? __ldcg(s.stats + g.slot(r, lane))
                                            : make_float2(NEG_INF, 0.f);
        const float mx = warp_max(ml.x);
        const float total = warp_sum(ml.y > 0.f ? ml.y * expf(ml.x - mx) : 0.f);
        if (lane == 0) {
            s_mx[r] = mx;
            s_inv[r] = 1.f / total;
        }
    }
    const u32 n = g.j1 - g.j0, n_tiles = (n + GQA_BK - 1) / GQA_BK;
    const BlockTable tab = gqa_stage_table(a, g.th.table, g.j0, g.j1, s_table);
    for (int i = threadIdx.x; i < GQA_MAX_GROUP * WSTRIDE; i += GQA_WARPS * WARP_SIZE) s_w[i] = 0;
    __syncthreads();
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    const int kv_off = g.kh * HD;
    gqa_walk_tiles(
        n_tiles,
        [&](u32 t, int stage) {
            // The group's scores of the tile (16-byte pieces; `kept` and j0's offsets are
            // multiples of 4), then its values, as one group of copies.
            float* sc = scores + stage * GQA_MAX_GROUP * GQA_BK;
            for (int i = threadIdx.x; i < g.group * (GQA_BK / 4); i += GQA_WARPS * WARP_SIZE) {
                const int r = i / (GQA_BK / 4), q4 = i % (GQA_BK / 4);
                const float* src = s.scores + g.slot(r, g.z) * s.kept + t * GQA_BK + q4 * 4;
                copy16_async(reinterpret_cast<uint4*>(sc + r * GQA_BK + q4 * 4),
                             reinterpret_cast<const uint4*>(src));
            }
            gqa_copy_tile<HD>(gqa_shared + stage * TILE, a.vc, nullptr, a, tab, kv_off,
                              g.j0 + t * GQA_BK, g.j1, g.th.pos);
        },
        [&](u32 t, int stage) {
            const u16* vs = gqa_shared + stage * TILE;
            const float* sc = scores + stage * GQA_MAX_GROUP * GQA_BK;
            for (int i = threadIdx.x; i < g.group * GQA_BK; i += GQA_WARPS * WARP_SIZE) {
                const int r = i / GQA_BK, key = i % GQA_BK;
                const float w = t * GQA_BK + key < n ? expf(sc[i] - s_mx[r]) * s_inv[r] : 0.f;
                s_w[r * WSTRIDE + key] = f32_to_half(w);
            }
            __syncthreads();
            // Lane l names row (l % 8) + 8 ((l / 8) % 2), column + 8 (l / 16) of a matrix.
            const int frag_row = (lane % 8) + 8 * ((lane / 8) % 2), frag_col = 8 * (lane / 16);
#pragma unroll
            for (int k = 0; k < GQA_BK / 16; ++k) {
                u32 af[4];
                load_fragments_x4(shared_address(s_w + frag_row * WSTRIDE + k * 16 + frag_col),
                                 af);
                const u32 row_addr = shared_address(vs + (k * 16 + frag_row) * STRIDE +
                                                    warp * NT * 8 + frag_col);
                if constexpr (NT == 1) {
                    u32 b0, b1, b2, b3;
                    // Dims 8-15 of the x4 are the next warp's: loaded, not used.
                    load_v_fragments(row_addr, b0, b1, b2, b3);
                    mma_f16(acc[0], af, b0, b1);
                } else {
#pragma unroll
                    for (int nt = 0; nt < NT; nt += 2) {
                        u32 b0, b1, b2, b3;
                        load_v_fragments(row_addr + nt * 8 * 2, b0, b1, b2, b3);
                        mma_f16(acc[nt], af, b0, b1);
                        mma_f16(acc[nt + 1], af, b2, b3);
                    }
                }
            }
        });
    // The split's part of each head: row gr (and gr + 8), dims of column tile nt.
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = gr + 8 * (e / 2);
            if (r >= g.group) continue;
            const int d = warp * NT * 8 + nt * 8 + 2 * c + e % 2;
            s.parts[g.slot(r, g.z) * HD + d] = acc[nt][e];
        }
    }
    __threadfence();
    __syncthreads();
    const size_t counter = (size_t)blockIdx.y * a.n_heads + g.kh * g.group;
    if (threadIdx.x == 0) s_last = atomicAdd(s.counts + counter, 1u) == (u32)g.n_active - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    // Each warp adds up heads r = warp, warp + GQA_WARPS, ..., a lane's DPL dimensions.
    for (int r = warp; r < g.group; r += GQA_WARPS) {
        const TokenHead th = token_head(a, blockIdx.y, g.kh * g.group + r);
        const AttnSpan sp = head_span<DPL>(a, th, 0, 0);
        float o[DPL];
#pragma unroll
        for (int d = 0; d < DPL; ++d) o[d] = 0.f;
        for (int i = 0; i < g.n_active; ++i) {
            // From L2: the other splits' parts may be stale in this multiprocessor's L1.
            const float* p = s.parts + g.slot(r, i) * HD + sp.d0;
#pragma unroll
            for (int d = 0; d < DPL; ++d) o[d] += __ldcg(p + d);
        }
        store_head_output<DPL>(a, th, sp, o);
    }
    if (threadIdx.x == 0) s.counts[counter] = 0;
}

// One pair of kernels per head size (the host finds each by name).
extern "C" __global__ void __launch_bounds__(GQA_WARPS * WARP_SIZE)
attention_gqa_scores_hd64(ATTN_SPLIT_PARAMS) {
    gqa_scores<64>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(GQA_WARPS * WARP_SIZE)
attention_gqa_values_hd64(ATTN_SPLIT_PARAMS) {
    gqa_values<64>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(GQA_WARPS * WARP_SIZE)
attention_gqa_scores_hd128(ATTN_SPLIT_PARAMS) {
    gqa_scores<128>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(GQA_WARPS * WARP_SIZE)
attention_gqa_values_hd128(ATTN_SPLIT_PARAMS) {
    gqa_values<128>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(GQA_WARPS * WARP_SIZE)
attention_gqa_scores_hd256(ATTN_SPLIT_PARAMS) {
    gqa_scores<256>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
extern "C" __global__ void __launch_bounds__(GQA_WARPS * WARP_SIZE)
attention_gqa_values_hd256(ATTN_SPLIT_PARAMS) {
    gqa_values<256>(ATTN_ARGS, ATTN_SPLIT_ARGS);
}
