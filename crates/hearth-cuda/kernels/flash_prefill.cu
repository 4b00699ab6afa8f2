// Flash attention for prompt chunks, on tensor cores: a block takes a tile of up to 64
// consecutive queries of one sequence and one head and walks that sequence's keys in tiles of
// BK through shared memory (two stages: the next tile's asynchronous copies are in flight while
// the warps work on this one), twice: first for each query row's max score and softmax sum
// (online, as flash attention 2 does), then for the weighted values. The decode kernel in
// model.cu reads every key once per query; here a key tile is read twice per 64 queries, and
// q·k and p·v run as m16n8k16 f16 matrix products with f32 sums.
//
// Numerics against the CPU backend (the reference): q is rounded to f16 as there, q·k sums
// exact f16 products in f32 (another order), and the final weights exp(s - max) / sum
// (computed as powers of two, flash_exp2) are rounded to f16 before they multiply V, as there
// (and as ggml's attention does). A one-pass kernel rounds the running, unnormalized weights
// instead: last-bit differences that the 8-bit activations after attention turn into visible
// logit differences (BENCHMARKS.md).
//
// Long spans split: after thousands of cached positions a chunk's (tile, head) blocks are too
// few to fill the GPU (a 512-token chunk of Qwen3-0.6B: 128 blocks, each walking every key
// twice), so several blocks share a (tile, head), each taking a run of its key tiles. Three
// launches: phase 1 (flash_stats, with its own split count) writes each split's max and sum of
// every row to `stats`; phase 2 combines those into the row's own (max, sum), so that every
// split weights its values with the final weights, and writes its part of the output to
// `parts`; flash_combine adds the parts.
//
// NOTE (H100, BENCHMARKS.md 2026-11-28 evening): blocks taking the 2 or 4 heads of one KV
// head, so that each copied key and value tile served them all, measured no faster.
//
// Launch: grid (tiles, heads × n_split), 128 threads (4 warps of 16 query rows). `tiles` holds
// per tile (sequence, first token row, query count); a sequence's tokens are consecutive rows
// with consecutive positions.

#define FLASH_WARPS 4
#define FLASH_ROWS (FLASH_WARPS * 16)

// Pass 2 scores FLASH_SLAB × 16 keys before it weights their values: more products in flight
// against more registers. NOTE (H200, Qwen3-0.6B Q8_0, pp512 tok/s, two rounds): after 32,768
// tokens 1 gave 14,502 / 14,449, 2 15,049 / 15,081, 4 (104 bytes spilled) 11,853 / 11,841;
// after 8,192 38,674 / 38,908, 40,052 / 40,019 and 34,149 / 33,889 (BENCHMARKS.md,
// 2026-11-28, late night).
#ifndef FLASH_SLAB
#define FLASH_SLAB 2
#endif
// Pass 1 scores FLASH_STATS_NT × 8 keys at a time (each slab moves the running max once):
// fewer scores live at once, so fewer registers for flash_stats.
#ifndef FLASH_STATS_NT
#define FLASH_STATS_NT 4
#endif

// Weights are powers of two: scores are taken in units of log2(e) (the scale folded into one
// multiply-add with the subtracted max), and ex2.approx is one instruction where expf's
// extended-precision range reduction takes nine. Its error (a few f32 ulps, growing with
// |x|) stays far below the f16 rounding of the final weights: tests/attention.rs measured the
// same NMSE against the CPU as with expf.
#define FLASH_LOG2E 1.4426950408889634f
__device__ __forceinline__ float flash_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// d += a · b for one m16n8k16 tile (a: 16×16 row-major f16, b: 16×8 column-major f16).
__device__ __forceinline__ void mma_f16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    // The host launches no tensor-core kernel below sm_80 (`GpuInfo::has_mma`).
    __trap();
#endif
}

// Two f32 as f16 in one word, `lo` in the low half (the lower column of a fragment).
__device__ __forceinline__ u32 pack_half2(float lo, float hi) {
    return (u32)f32_to_half(lo) | ((u32)f32_to_half(hi) << 16);
}

__device__ __forceinline__ u32 shared_address(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// Four 8×8 f16 matrices from shared memory, one register each (ldmatrix: lanes 8i .. 8i + 7
// name the rows of matrix i). From a row-major A, or from a B whose columns are rows in
// shared memory (keys for q·kᵀ), they are the fragments of an m16n8k16 product.
__device__ __forceinline__ void load_fragments_x4(u32 addr, u32 (&a)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
}

// Two of them (lanes 0-15 name the rows).
__device__ __forceinline__ void load_fragments_x2(u32 addr, u32& b0, u32& b1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(b0), "=r"(b1)
                 : "r"(addr));
}

// The B fragments of two 8-column tiles of a p·v product from a row-major [key][dim] tile:
// four transposed 8×8 matrices (keys 0-7 and 8-15 of dims 0-7, then of dims 8-15).
__device__ __forceinline__ void load_v_fragments(u32 addr, u32& b0, u32& b1, u32& b2, u32& b3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                 : "r"(addr));
}

// 16 bytes from global to shared memory by an asynchronous copy, or 16 zero bytes where
// `live` is false (the copy then reads none of src, which must still be a valid address).
__device__ __forceinline__ void copy16_async_or_zero(u16* dst, const u16* src, bool live) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(dst)),
                 "l"(src), "r"(live ? 16u : 0u));
#else
    // The host launches no flash or attention_gqa kernel below sm_80 (`GpuInfo::has_mma`).
    __trap();
#endif
}

// Keys kb .. kb + BK - 1 of a head into the shared tile ks, and their values into vs when it
// is not null, 16 bytes at a time by asynchronous copies, then committed as one group; keys
// past p_last are zeros (masked by tile_scores, and zero values keep 0 · v finite). A thread
// looks up all its rows first, so that its block-table reads are in flight together, and the
// copies take no branches.
// NOTE (H200, Qwen3-0.6B Q8_0, pp512 tok/s, two rounds; BENCHMARKS.md 2026-11-29): a lookup
// and a branch for each 16 bytes, where every lookup's use waited on its table read, gave
// 15,301 / 15,349 after 32,768 tokens and 99,984 / 99,546 with no context; this gave 16,521 /
// 16,933 and 108,017 / 106,511.
template <int HD, int BK, int STRIDE>
__device__ __forceinline__ void copy_kv_tile(u16* ks, u16* vs, const u16* __restrict__ kc,
                                             const u16* __restrict__ vc, u32 kb, u32 p_last,
                                             const BlockTable& tab, int kv_dim, int kv_off) {
    constexpr u32 CHUNKS = HD / 8, THREADS = FLASH_WARPS * WARP_SIZE;
    constexpr u32 ROUNDS = BK * CHUNKS / THREADS;
    static_assert(BK * CHUNKS % THREADS == 0, "a tile's copies are whole rounds of the block");
    // A key past p_last reads p_last's row: a valid address for the zero-byte copy.
    u32 j[ROUNDS], slot[ROUNDS];
#pragma unroll
    for (u32 round = 0; round < ROUNDS; ++round) {
        j[round] = min(kb + (threadIdx.x + round * THREADS) / CHUNKS, p_last);
    }
    tab.slots(j, slot);
#pragma unroll
    for (u32 round = 0; round < ROUNDS; ++round) {
        const u32 i = threadIdx.x + round * THREADS;
        const u32 key = i / CHUNKS, to = key * STRIDE + i % CHUNKS * 8;
        const size_t at = (size_t)slot[round] * kv_dim + kv_off + i % CHUNKS * 8;
        const bool live = kb + key <= p_last;
        copy16_async_or_zero(ks + to, kc + at, live);
        if (vs != nullptr) copy16_async_or_zero(vs + to, vc + at, live);
    }
    copies_commit();
}

// A warp's 16 query rows, as the fragments of its threads see them: the rows g and g + 8 of
// the warp's 16 (their positions, and whether the tile has them), the positions of the
// warp's first and last rows, and the first key the last row's window sees.
struct WarpRows {
    bool live;  // the tile has any of the warp's rows
    u32 first_pos, last_pos, last_lo;
    u32 pos[2];
    bool ok[2];
};

// The scores of a warp's 16 query rows against NT × 8 keys from the shared tile ks (key kb
// first): q · kᵀ, soft-capped where the model says so. The score in log2 units is s times the
// returned factor (the scale, folded into the caller's multiply-add, or 1 where the soft cap
// applied it). With `masked`, -inf where the row may not see the key (causal and window
// mask, or a row past the tile); without, the caller knows every row of the warp sees every
// key (rows past the tile then score 0 against zero queries, and are never written).
// s[n][2r + e]: the thread's row r (g, g + 8) and key kb + 8n + 2c + e.
template <int HD, int NT, int STRIDE>
__device__ __forceinline__ float tile_scores(float (&s)[NT][4], const u32 (&qf)[HD / 16][4],
                                            const u16* ks, u32 kb, const WarpRows& w,
                                            int window, float scale, float softcap,
                                            bool masked) {
    const int lane = threadIdx.x % WARP_SIZE, c = lane % 4;
    // ldmatrix: lane l names key (l % 8) of an 8-key tile, dims 8 (l / 8) on of the 32 that
    // two k steps take.
    const u32 k_addr = shared_address(ks + (lane % 8) * STRIDE + 8 * (lane / 8));
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk += 2) {
            const u32 at = k_addr + 2 * (n * 8 * STRIDE + kk * 16);
            if (kk + 1 < HD / 16) {
                u32 b[4];
                load_fragments_x4(at, b);
                mma_f16(s[n], qf[kk], b[0], b[1]);
                mma_f16(s[n], qf[kk + 1], b[2], b[3]);
            } else {
                u32 b0, b1;
                load_fragments_x2(at, b0, b1);
                mma_f16(s[n], qf[kk], b0, b1);
            }
        }
    }
    float factor = scale * FLASH_LOG2E;
    if (softcap > 0.f) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                s[n][i] = softcap * tanhf(s[n][i] * scale / softcap) * FLASH_LOG2E;
            }
        }
        factor = 1.f;
    }
    if (!masked) return factor;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u32 pos = w.pos[r];
        const u32 lo = (window > 0 && pos + 1 > (u32)window) ? pos + 1 - window : 0;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const u32 j = kb + n * 8 + 2 * c + e;
                if (!(w.ok[r] && j <= pos && j >= lo)) s[n][2 * r + e] = NEG_INF;
            }
        }
    }
    return factor;
}

// u16 words of one shared K or V tile, and the kernel's dynamic shared memory: two stages
// of a K and a V tile (flash_shared_bytes in attention.rs must agree).
template <int HD, int BK>
__device__ constexpr int flash_tile_words() { return BK * (HD + 8); }

// Walks the key tiles kb_from, kb_from + BK, .. below kb_end through two shared stages, the
// next tile's copies in flight while the warps work on this one, and hands each tile to
// take(ks, vs, kb, masked) (its shared keys and values, its first key, and whether the
// warp's rows need the mask), for the warps whose rows see any of its keys. A stage is a K
// tile, and a V tile after it WITH_V. Every thread calls it with the same range.
template <int HD, int BK, bool WITH_V, class Take>
__device__ __forceinline__ void walk_key_tiles(u16* smem, const u16* __restrict__ kc,
                                               const u16* __restrict__ vc, u32 kb_from,
                                               u32 kb_end, u32 p_last, const BlockTable& tab,
                                               int kv_dim, int kv_off, const WarpRows& w,
                                               Take take) {
    constexpr int STRIDE = HD + 8, TILE = flash_tile_words<HD, BK>();
    constexpr int STAGE = WITH_V ? 2 * TILE : TILE;
    if (kb_from >= kb_end) return;
    copy_kv_tile<HD, BK, STRIDE>(smem, WITH_V ? smem + TILE : nullptr, kc, vc, kb_from, p_last,
                                 tab, kv_dim, kv_off);
    int stage = 0;
    for (u32 kb = kb_from; kb < kb_end; kb += BK) {
        u16* ks = smem + stage * STAGE;
        if (kb + BK < kb_end) {
            // The other stage was released by the barrier that ended the last tile.
            u16* next = smem + (stage ^ 1) * STAGE;
            copy_kv_tile<HD, BK, STRIDE>(next, WITH_V ? next + TILE : nullptr, kc, vc, kb + BK,
                                         p_last, tab, kv_dim, kv_off);
            copies_wait<1>();
        } else {
            copies_wait<0>();
        }
        __syncthreads();  // every thread's copies of this tile have landed
        if (w.live && kb <= w.last_pos) {
            // Only the tiles on the diagonal or the window's edge need the mask.
            take(ks, ks + TILE, kb, !(kb + BK - 1 <= w.first_pos && kb >= w.last_lo));
        }
        __syncthreads();  // every warp is done with this stage before copies refill it
        stage ^= 1;
    }
}

// What a block of either kernel below knows of its (query tile, head, split): the head, the
// tile's first token row, the keys it walks, its warp's rows, and their queries as A
// fragments rounded to f16 (rows past the tile are zeros).
template <int HD>
struct FlashBlock {
    int h, split;
    u32 t0, p_last;
    u32 kb_from, kb_end;  // the block's keys: all the tile sees, or its split's run of them
    int kv_dim, kv_off;
    BlockTable tab;
    WarpRows w;
    int rows[2];  // the thread's rows g and g + 8 of its warp's 16, as tile rows
    u32 qf[HD / 16][4];
};

template <int HD, int BK>
__device__ __forceinline__ void flash_block(FlashBlock<HD>& b, const float* __restrict__ q,
                                            const u32* tok_pos, const u32* seq_table,
                                            const u32* tables, const u32* tiles, int n_heads,
                                            int n_kv_heads, int block_size, int window,
                                            int n_split) {
    b.h = blockIdx.y % n_heads;
    b.split = blockIdx.y / n_heads;
    const u32 seq = tiles[3 * blockIdx.x];
    b.t0 = tiles[3 * blockIdx.x + 1];
    const int nq = (int)tiles[3 * blockIdx.x + 2];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, c = lane % 4;  // fragment row group and column pair
    b.kv_dim = n_kv_heads * HD;
    b.kv_off = b.h / (n_heads / n_kv_heads) * HD;
    b.tab = BlockTable{tables + seq_table[seq], 0, block_size, block_shift(block_size)};
    const u32 p0 = tok_pos[b.t0];  // position of the tile's first query
    b.p_last = p0 + nq - 1;
    const u32 k_first = (window > 0 && p0 + 1 > (u32)window) ? p0 + 1 - window : 0;
    // A split takes its run of the BK-key tiles (empty where a short span has fewer tiles
    // than splits).
    b.kb_from = k_first;
    b.kb_end = b.p_last + 1;
    if (n_split > 1) {
        const u32 n_key_tiles = (b.p_last + 1 - k_first + BK - 1) / BK;
        b.kb_from = k_first + BK * (b.split * n_key_tiles / n_split);
        b.kb_end = min(b.kb_end, k_first + BK * ((b.split + 1) * n_key_tiles / n_split));
    }

    b.rows[0] = warp * 16 + g;
    b.rows[1] = b.rows[0] + 8;
    WarpRows& w = b.w;
    w.live = warp * 16 < nq;
    w.first_pos = p0 + warp * 16;
    w.last_pos = p0 + min(nq, warp * 16 + 16) - 1;
    w.last_lo = (window > 0 && w.last_pos + 1 > (u32)window) ? w.last_pos + 1 - window : 0;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        w.pos[r] = p0 + b.rows[r];
        w.ok[r] = b.rows[r] < nq;
    }

    const size_t q_stride = (size_t)n_heads * HD;
    const float* q0 = q + (size_t)(b.t0 + b.rows[0]) * q_stride + b.h * HD;
    const float* q1 = q + (size_t)(b.t0 + b.rows[1]) * q_stride + b.h * HD;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const int d = kk * 16 + 2 * c;
        b.qf[kk][0] = w.ok[0] ? pack_half2(q0[d], q0[d + 1]) : 0u;
        b.qf[kk][1] = w.ok[1] ? pack_half2(q1[d], q1[d + 1]) : 0u;
        b.qf[kk][2] = w.ok[0] ? pack_half2(q0[d + 8], q0[d + 9]) : 0u;
        b.qf[kk][3] = w.ok[1] ? pack_half2(q1[d + 8], q1[d + 9]) : 0u;
    }
}

// Pass 1: each row's max score m and softmax sum l (log2 units: l = Σ 2^(s - m)) over the
// block's keys, online, as flash attention 2 does. Each lane keeps (m, l) over its own
// columns of the row; the row's four lanes meet once, after the walk, not at every tile, and
// then hold the same (m, l).
template <int HD, int BK>
__device__ __forceinline__ void flash_row_stats(float (&m)[2], float (&l)[2],
                                                const FlashBlock<HD>& b, u16* smem,
                                                const u16* __restrict__ kc, int window,
                                                float scale, float softcap) {
    constexpr int STRIDE = HD + 8;
    constexpr int NT = FLASH_STATS_NT < BK / 8 ? FLASH_STATS_NT : BK / 8;
    static_assert(BK / 8 % NT == 0, "pass 1's slabs split a key tile evenly");
    m[0] = m[1] = NEG_INF;
    l[0] = l[1] = 0.f;
    walk_key_tiles<HD, BK, false>(
        smem, kc, nullptr, b.kb_from, b.kb_end, b.p_last, b.tab, b.kv_dim, b.kv_off, b.w,
        [&](const u16* ks, const u16*, u32 kb, bool masked) {
#pragma unroll
            for (int n0 = 0; n0 < BK / 8; n0 += NT) {
                float s[NT][4];
                const float f = tile_scores<HD, NT, STRIDE>(
                    s, b.qf, ks + n0 * 8 * STRIDE, kb + n0 * 8, b.w, window, scale, softcap,
                    masked);
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    float mx = NEG_INF;
#pragma unroll
                    for (int n = 0; n < NT; ++n) {
                        mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
                    }
                    const float m_new = fmaxf(m[r], mx * f);
                    // A lane that has seen no key yet keeps m = -inf: subtract 0 so that the
                    // power gives 0.
                    const float base = m_new == NEG_INF ? 0.f : m_new;
                    float sum = 0.f;
#pragma unroll
                    for (int n = 0; n < NT; ++n) {
                        sum += flash_exp2(fmaf(s[n][2 * r], f, -base)) +
                               flash_exp2(fmaf(s[n][2 * r + 1], f, -base));
                    }
                    l[r] = l[r] * flash_exp2(m[r] - base) + sum;
                    m[r] = m_new;
                }
            }
        });
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float mx = fmaxf(m[r], __shfl_xor_sync(FULL_MASK, m[r], 1));
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
        const float base = mx == NEG_INF ? 0.f : mx;
        float lr = l[r] * flash_exp2(m[r] - base);
        lr += __shfl_xor_sync(FULL_MASK, lr, 1);
        lr += __shfl_xor_sync(FULL_MASK, lr, 2);
        m[r] = mx;
        l[r] = lr;
    }
}

// Phase 1 of split attention, a kernel of its own: without pass 2's value tiles and output
// accumulators it needs half the shared memory and fewer registers, so more blocks fit a
// multiprocessor, and it takes its own split count (n_split). Each split writes every row's
// (max, sum) over its keys to stats[split][token][head].
template <int HD, int BK>
__device__ void flash_stats(const float* __restrict__ q, const u16* __restrict__ kc,
                            const u32* tok_pos, const u32* seq_table, const u32* tables,
                            const u32* tiles, int n_heads, int n_kv_heads, int block_size,
                            float scale, int window, float softcap, int n_split, int n_tokens,
                            float2* __restrict__ stats) {
    await_previous_kernels();
    extern __shared__ __align__(16) u16 flash_shared[];
    FlashBlock<HD> b;
    flash_block<HD, BK>(b, q, tok_pos, seq_table, tables, tiles, n_heads, n_kv_heads,
                        block_size, window, n_split);
    float m[2], l[2];
    flash_row_stats<HD, BK>(m, l, b, flash_shared, kc, window, scale, softcap);
    if (threadIdx.x % 4 != 0) return;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (!b.w.ok[r]) continue;
        const size_t at = (size_t)(b.t0 + b.rows[r]) * n_heads + b.h;
        stats[b.split * (size_t)n_tokens * n_heads + at] = make_float2(m[r], l[r]);
    }
}

// The attention of a block's rows over its keys: pass 1 (flash_row_stats) where n_stats is 0,
// else the (max, sum) of the n_stats splits of flash_stats combined into each row's own, so
// that every split weights its values with the final weights; then pass 2. A split's part of
// the output goes to its slice of `parts` (n_split > 1), the whole to `out`.
template <int HD, int BK>
__device__ void flash_prefill(const float* __restrict__ q, const u16* __restrict__ kc,
                              const u16* __restrict__ vc, float* __restrict__ out,
                              const u32* tok_pos, const u32* seq_table, const u32* tables,
                              const u32* tiles, int n_heads, int n_kv_heads, int block_size,
                              float scale, int window, float softcap, int n_split, int n_stats,
                              int n_tokens, const float2* __restrict__ stats,
                              float* __restrict__ parts) {
    await_previous_kernels();
    // Row stride of the shared tiles, padded by 16 bytes: fragment reads of 8 rows then fall
    // in distinct banks.
    constexpr int STRIDE = HD + 8;
    static_assert(BK / 16 % FLASH_SLAB == 0, "pass 2's slabs split a key tile evenly");
    extern __shared__ __align__(16) u16 flash_shared[];
    FlashBlock<HD> b;
    flash_block<HD, BK>(b, q, tok_pos, seq_table, tables, tiles, n_heads, n_kv_heads,
                        block_size, window, n_split);
    const WarpRows& w = b.w;
    const int lane = threadIdx.x % WARP_SIZE, c = lane % 4;

    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
    if (n_stats == 0) {
        flash_row_stats<HD, BK>(m, l, b, flash_shared, kc, window, scale, softcap);
    } else {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (!w.ok[r]) continue;
            const float2* row_stats = stats + (size_t)(b.t0 + b.rows[r]) * n_heads + b.h;
            const size_t split_stride = (size_t)n_tokens * n_heads;
            for (int z = 0; z < n_stats; ++z) m[r] = fmaxf(m[r], row_stats[z * split_stride].x);
            // In split order; an empty split (a span shorter than its splits) adds nothing.
            for (int z = 0; z < n_stats; ++z) {
                const float2 ml = row_stats[z * split_stride];
                if (ml.y > 0.f) l[r] += ml.y * flash_exp2(ml.x - m[r]);
            }
        }
    }
    // Every query sees at least its own position, so a live row has l > 0 (and m finite).
    // The final weights 2^(s - m) / l as 2^(s - (m + log2 l)), a multiply less each; a row
    // without l gets weights 2^-inf = 0.
    // NOTE (H200, Qwen3-0.6B Q8_0, pp512 tok/s, BENCHMARKS.md 2026-11-29, later): with the
    // multiply by 1 / l, 106,223 with no context and 16,357 after 32,768 tokens; this gave
    // 108,714 / 108,111 and 16,766 / 17,483.
    const float fold[2] = {l[0] > 0.f ? m[0] + log2f(l[0]) : -NEG_INF,
                           l[1] > 0.f ? m[1] + log2f(l[1]) : -NEG_INF};

    // Pass 2: o = p · v with the final weights p = 2^(s - m) / l rounded to f16, as the CPU
    // backend rounds them (cpu/attention.rs); the scores are computed again.
    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    walk_key_tiles<HD, BK, true>(
        flash_shared, kc, vc, b.kb_from, b.kb_end, b.p_last, b.tab, b.kv_dim, b.kv_off, w,
        [&](const u16* ks, const u16* vs, u32 kb, bool masked) {
            // FLASH_SLAB × 16 keys at a time (fewer scores live at once keep the o
            // accumulators in registers): the scores' accumulators of each 16 keys, as
            // weights, are the A fragment of those keys (f16: the rounding the CPU applies).
#pragma unroll
            for (int k0 = 0; k0 < BK / 16; k0 += FLASH_SLAB) {
                float s[2 * FLASH_SLAB][4];
                const float f = tile_scores<HD, 2 * FLASH_SLAB, STRIDE>(
                    s, b.qf, ks + k0 * 16 * STRIDE, kb + k0 * 16, w, window, scale, softcap, masked);
#pragma unroll
                for (int k = k0; k < k0 + FLASH_SLAB; ++k) {
                    u32 a[4];
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const float* t = s[2 * (k - k0) + i / 2];
                        const int r = i % 2;
                        a[i] = pack_half2(flash_exp2(fmaf(t[2 * r], f, -fold[r])),
                                          flash_exp2(fmaf(t[2 * r + 1], f, -fold[r])));
                    }
                    // Lane l names row (l % 8) + 8 ((l / 8) % 2) of dims + 8 (l / 16) of its
                    // matrix.
                    const int key = k * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
                    const u32 row_addr = shared_address(vs + key * STRIDE + 8 * (lane / 16));
#pragma unroll
                    for (int n = 0; n < HD / 8; n += 2) {
                        u32 b0, b1, b2, b3;
                        load_v_fragments(row_addr + n * 8 * 2, b0, b1, b2, b3);
                        mma_f16(o[n], a, b0, b1);
                        mma_f16(o[n + 1], a, b2, b3);
                    }
                }
            }
        });

    if (!w.live) return;
    const size_t o_stride = (size_t)n_heads * HD;
    // A split's part goes to its own slice of `parts`, summed by flash_combine.
    float* dst_base = n_split > 1 ? parts + b.split * (size_t)n_tokens * o_stride : out;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (!w.ok[r]) continue;
        float* dst = dst_base + (size_t)(b.t0 + b.rows[r]) * o_stride + b.h * HD + 2 * c;
#pragma unroll
        for (int n = 0; n < HD / 8; ++n) {
            dst[n * 8] = o[n][2 * r];
            dst[n * 8 + 1] = o[n][2 * r + 1];
        }
    }
}

// out[i] = Σ_z parts[z n + i] over the n_split parts of split flash attention, in split order.
extern "C" __global__ void flash_combine(const float* __restrict__ parts, float* __restrict__ out,
                                         int n_split, int n) {
    await_previous_kernels();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float sum = 0.f;
        for (int z = 0; z < n_split; ++z) sum += parts[z * (size_t)n + i];
        out[i] = sum;
    }
}

#define FLASH_PARAMS                                                                        \
    const float *q, const u16 *kc, const u16 *vc, float *out, const u32 *tok_pos,            \
        const u32 *seq_table, const u32 *tables, const u32 *tiles, int n_heads,              \
        int n_kv_heads, int block_size, float scale, int window, float softcap, int n_split, \
        int n_stats, int n_tokens, float2 *stats, float *parts
#define FLASH_ARGS                                                                            \
    q, kc, vc, out, tok_pos, seq_table, tables, tiles, n_heads, n_kv_heads, block_size, scale, \
        window, softcap, n_split, n_stats, n_tokens, stats, parts
#define FLASH_STATS_ARGS                                                                      \
    q, kc, tok_pos, seq_table, tables, tiles, n_heads, n_kv_heads, block_size, scale, window, \
        softcap, n_split, n_tokens, stats

// One kernel per head size with a multiple of 16 (the mma's k); others keep model.cu's kernel.
// BK keeps the two stages of K and V tiles under 70 KiB of shared memory (dynamic), so that
// three blocks fit a multiprocessor. The 128-wide heads' kernel is held to the 168 registers
// that let three fit (from 182; 32 bytes spilled): on an H100, pp512 after 8,192 tokens of
// Qwen3-0.6B 26,200 -> 29,200 tok/s, Llama-3.1-8B 9,210 -> 9,730; after 2,048, 60,000 ->
// 58,400 (BENCHMARKS.md, 2026-11-27, prompts after a long context).
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE)
flash_prefill_hd16(FLASH_PARAMS) { flash_prefill<16, 64>(FLASH_ARGS); }
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE)
flash_prefill_hd32(FLASH_PARAMS) { flash_prefill<32, 64>(FLASH_ARGS); }
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE)
flash_prefill_hd64(FLASH_PARAMS) { flash_prefill<64, 64>(FLASH_ARGS); }
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE)
flash_prefill_hd96(FLASH_PARAMS) { flash_prefill<96, 64>(FLASH_ARGS); }
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE, 3)
flash_prefill_hd128(FLASH_PARAMS) { flash_prefill<128, 64>(FLASH_ARGS); }
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE)
flash_prefill_hd256(FLASH_PARAMS) { flash_prefill<256, 32>(FLASH_ARGS); }

// Phase 1 of split attention (flash_stats), its shared memory two stages of K tiles only,
// held to the registers that let FLASH_STATS_BLOCKS blocks share a multiprocessor.
// NOTE (H200, Qwen3-0.6B Q8_0, pp512 tok/s after 32,768 tokens, two rounds; BENCHMARKS.md
// 2026-11-29): 4 blocks of 32-key slabs gave 15,373 / 15,349, 5 blocks of 16-key slabs 15,036
// / 15,074, 6 of 16 (64 bytes spilled) 13,328 / 13,387.
#ifndef FLASH_STATS_BLOCKS
#define FLASH_STATS_BLOCKS 4
#endif
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE, FLASH_STATS_BLOCKS)
flash_stats_hd16(FLASH_PARAMS) { flash_stats<16, 64>(FLASH_STATS_ARGS); }
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE, FLASH_STATS_BLOCKS)
flash_stats_hd32(FLASH_PARAMS) { flash_stats<32, 64>(FLASH_STATS_ARGS); }
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE, FLASH_STATS_BLOCKS)
flash_stats_hd64(FLASH_PARAMS) { flash_stats<64, 64>(FLASH_STATS_ARGS); }
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE, FLASH_STATS_BLOCKS)
flash_stats_hd96(FLASH_PARAMS) { flash_stats<96, 64>(FLASH_STATS_ARGS); }
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE, FLASH_STATS_BLOCKS)
flash_stats_hd128(FLASH_PARAMS) { flash_stats<128, 64>(FLASH_STATS_ARGS); }
extern "C" __global__ void __launch_bounds__(FLASH_WARPS * WARP_SIZE, FLASH_STATS_BLOCKS)
flash_stats_hd256(FLASH_PARAMS) { flash_stats<256, 32>(FLASH_STATS_ARGS); }
