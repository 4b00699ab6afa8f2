// Flash attention for prompt chunks, on tensor cores: a block takes a tile of up to 64
// consecutive queries of one sequence and one head and walks that sequence's keys in tiles of
// BK through shared memory (two stages: the next tile's asynchronous copies are in flight while
// the warps work on this one), twice: first for each query row's max score and softmax sum
// (online, as flash attention 2 does), then for the weighted values. The decode kernel in
// model.cu reads every key once per query; here a key tile is read twice per 64 queries, and
// q·k and p·v run as m16n8k16 f16 matrix products with f32 sums.
//
// Numerics against the CPU backend (the reference): q is rounded to f16 as there, q·k sums
// exact f16 products in f32 (another order), and the final weights exp(s - max) / sum are
// rounded to f16 before they multiply V, as there (and as ggml's attention does). A one-pass
// kernel rounds the running, unnormalized weights instead: last-bit differences that the 8-bit
// activations after attention turn into visible logit differences (BENCHMARKS.md).
//
// Long spans split: after thousands of cached positions a chunk's (tile, head) blocks are too
// few to fill the GPU (a 512-token chunk of Qwen3-0.6B: 128 blocks, each walking every key
// twice), so n_split blocks share a (tile, head), each taking a run of its key tiles. Three
// launches: phase 1 writes each split's max and sum of every row to `stats`; phase 2 combines
// the splits' (max, sum) into the row's own, so that every split weights its values with the
// final weights, and writes its part of the output to `parts`; flash_combine adds the parts.
//
// NOTE (H100, BENCHMARKS.md 2026-11-28 evening): blocks taking the 2 or 4 heads of one KV
// head, so that each copied key and value tile served them all, measured no faster.
//
// Launch: grid (tiles, heads × n_split), 128 threads (4 warps of 16 query rows). `tiles` holds
// per tile (sequence, first token row, query count); a sequence's tokens are consecutive rows
// with consecutive positions.

#define FLASH_WARPS 4
#define FLASH_ROWS (FLASH_WARPS * 16)

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

// The B fragments of two 8-column tiles of a p·v product from a row-major [key][dim] tile:
// four transposed 8×8 matrices (keys 0-7 and 8-15 of dims 0-7, then of dims 8-15).
__device__ __forceinline__ void load_v_fragments(u32 addr, u32& b0, u32& b1, u32& b2, u32& b3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                 : "r"(addr));
}

// Keys kb .. kb + BK - 1 of a head into the shared tile ks, and their values into vs when it
// is not null, 16 bytes at a time by asynchronous copies (gemv_q8a.cu's copy16_async), then
// committed as one group; keys past p_last are zeros (masked by tile_scores, and zero values
// keep 0 · v finite).
template <int HD, int BK, int STRIDE>
__device__ __forceinline__ void copy_kv_tile(u16* ks, u16* vs, const u16* __restrict__ kc,
                                             const u16* __restrict__ vc, u32 kb, u32 p_last,
                                             const u32* tables, u32 table, int block_size,
                                             int kv_dim, int kv_off) {
    constexpr int CHUNKS = HD / 8;
    for (int i = threadIdx.x; i < BK * CHUNKS; i += FLASH_WARPS * WARP_SIZE) {
        const int key = i / CHUNKS, ch = i % CHUNKS;
        const u32 j = kb + key;
        uint4* kd = reinterpret_cast<uint4*>(ks + key * STRIDE + ch * 8);
        uint4* vd = vs != nullptr ? reinterpret_cast<uint4*>(vs + key * STRIDE + ch * 8) : nullptr;
        if (j <= p_last) {
            const size_t at = kv_slot(tables, table, j, block_size) * kv_dim + kv_off + ch * 8;
            copy16_async(kd, reinterpret_cast<const uint4*>(kc + at));
            if (vd != nullptr) copy16_async(vd, reinterpret_cast<const uint4*>(vc + at));
        } else {
            *kd = make_uint4(0, 0, 0, 0);
            if (vd != nullptr) *vd = make_uint4(0, 0, 0, 0);
        }
    }
    copies_commit();
}

// The scores of a warp's 16 query rows against the BK keys of the tile ks (from kb): q · kᵀ,
// scaled and soft-capped, -inf where the row may not see the key (causal and window mask, or
// a row past the tile). s[n][2r + e]: the thread's row r (g, g + 8) and key kb + 8n + 2c + e.
template <int HD, int BK, int STRIDE>
__device__ __forceinline__ void tile_scores(float (&s)[BK / 8][4], const u32 (&qf)[HD / 16][4],
                                            const u16* ks, u32 kb, const u32 (&pos_r)[2],
                                            const bool (&row_ok)[2], int window, float scale,
                                            float softcap) {
    const int lane = threadIdx.x % WARP_SIZE, g = lane / 4, c = lane % 4;
#pragma unroll
    for (int n = 0; n < BK / 8; ++n) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
        const u16* krow = ks + (n * 8 + g) * STRIDE + 2 * c;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            const u32 b0 = *reinterpret_cast<const u32*>(krow + kk * 16);
            const u32 b1 = *reinterpret_cast<const u32*>(krow + kk * 16 + 8);
            mma_f16(s[n], qf[kk], b0, b1);
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u32 pos = pos_r[r];
        const u32 lo = (window > 0 && pos + 1 > (u32)window) ? pos + 1 - window : 0;
#pragma unroll
        for (int n = 0; n < BK / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const u32 j = kb + n * 8 + 2 * c + e;
                float x = s[n][2 * r + e] * scale;
                if (softcap > 0.f) x = softcap * tanhf(x / softcap);
                s[n][2 * r + e] = (row_ok[r] && j <= pos && j >= lo) ? x : NEG_INF;
            }
        }
    }
}

// u16 words of one shared K or V tile, and the kernel's dynamic shared memory: two stages
// of a K and a V tile (flash_shared_bytes in attention.rs must agree).
template <int HD, int BK>
__device__ constexpr int flash_tile_words() { return BK * (HD + 8); }

// Walks the key tiles kb_from, kb_from + BK, .. below kb_end through two shared stages, the
// next tile's copies in flight while the warps work on this one, and hands each tile's scores
// (tile_scores) and its values' shared tile to take(s, vs), for the warps whose rows see any
// of its keys. Every thread calls it with the same range.
template <int HD, int BK, bool WITH_V, class Take>
__device__ __forceinline__ void walk_key_tiles(u16* smem, const u32 (&qf)[HD / 16][4],
                                               const u16* __restrict__ kc,
                                               const u16* __restrict__ vc, u32 kb_from,
                                               u32 kb_end, u32 p_last, const u32* tables,
                                               u32 table, int block_size, int kv_dim,
                                               int kv_off, bool warp_live, u32 warp_last_pos,
                                               const u32 (&pos_r)[2], const bool (&row_ok)[2],
                                               int window, float scale, float softcap,
                                               Take take) {
    constexpr int STRIDE = HD + 8, TILE = flash_tile_words<HD, BK>();
    if (kb_from >= kb_end) return;
    copy_kv_tile<HD, BK, STRIDE>(smem, WITH_V ? smem + TILE : nullptr, kc, vc, kb_from, p_last,
                                 tables, table, block_size, kv_dim, kv_off);
    int stage = 0;
    for (u32 kb = kb_from; kb < kb_end; kb += BK) {
        u16* ks = smem + stage * 2 * TILE;
        if (kb + BK < kb_end) {
            // The other stage was released by the barrier that ended the last tile.
            u16* next = smem + (stage ^ 1) * 2 * TILE;
            copy_kv_tile<HD, BK, STRIDE>(next, WITH_V ? next + TILE : nullptr, kc, vc, kb + BK,
                                         p_last, tables, table, block_size, kv_dim, kv_off);
            copies_wait<1>();
        } else {
            copies_wait<0>();
        }
        __syncthreads();  // every thread's copies of this tile have landed
        if (warp_live && kb <= warp_last_pos) {
            float s[BK / 8][4];
            tile_scores<HD, BK, STRIDE>(s, qf, ks, kb, pos_r, row_ok, window, scale, softcap);
            take(s, ks + TILE);
        }
        __syncthreads();  // every warp is done with this stage before copies refill it
        stage ^= 1;
    }
}

template <int HD, int BK>
__device__ void flash_prefill(const float* __restrict__ q, const u16* __restrict__ kc,
                              const u16* __restrict__ vc, float* __restrict__ out,
                              const u32* tok_pos, const u32* seq_table, const u32* tables,
                              const u32* tiles, int n_heads, int n_kv_heads, int block_size,
                              float scale, int window, float softcap, int n_split, int phase,
                              int n_tokens, float2* __restrict__ stats,
                              float* __restrict__ parts) {
    await_previous_kernels();
    // Row stride of the shared tiles, padded by 16 bytes: fragment reads of 8 rows then fall
    // in distinct banks.
    constexpr int STRIDE = HD + 8;
    extern __shared__ __align__(16) u16 flash_shared[];

    const int h = blockIdx.y % n_heads, split = blockIdx.y / n_heads;
    const u32 seq = tiles[3 * blockIdx.x], t0 = tiles[3 * blockIdx.x + 1];
    const int nq = (int)tiles[3 * blockIdx.x + 2];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, c = lane % 4;  // fragment row group and column pair
    const int kv_dim = n_kv_heads * HD;
    const int kv_off = h / (n_heads / n_kv_heads) * HD;
    const u32 table = seq_table[seq];
    const u32 p0 = tok_pos[t0];  // position of the tile's first query
    const u32 p_last = p0 + nq - 1;
    const u32 k_first = (window > 0 && p0 + 1 > (u32)window) ? p0 + 1 - window : 0;
    // The keys this block walks: all the tile sees, or its split's run of the BK-key tiles
    // (empty where a short span has fewer tiles than splits).
    u32 kb_from = k_first, kb_end = p_last + 1;
    if (n_split > 1) {
        const u32 n_key_tiles = (p_last + 1 - k_first + BK - 1) / BK;
        kb_from = k_first + BK * (split * n_key_tiles / n_split);
        kb_end = min(kb_end, k_first + BK * ((split + 1) * n_key_tiles / n_split));
    }

    // This warp's rows g and g + 8 of its 16, as tile rows and positions.
    const int row0 = warp * 16 + g, row1 = row0 + 8;
    const bool warp_live = warp * 16 < nq;
    const u32 warp_last_pos = p0 + min(nq, warp * 16 + 16) - 1;
    const u32 pos_r[2] = {p0 + row0, p0 + row1};
    const bool row_ok[2] = {row0 < nq, row1 < nq};
    const int rows[2] = {row0, row1};

    // The warp's queries as A fragments, rounded to f16 (rows past the tile are zeros).
    u32 qf[HD / 16][4];
    {
        const size_t q_stride = (size_t)n_heads * HD;
        const float* q0 = q + (size_t)(t0 + row0) * q_stride + h * HD;
        const float* q1 = q + (size_t)(t0 + row1) * q_stride + h * HD;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            const int d = kk * 16 + 2 * c;
            qf[kk][0] = row_ok[0] ? pack_half2(q0[d], q0[d + 1]) : 0u;
            qf[kk][1] = row_ok[1] ? pack_half2(q1[d], q1[d + 1]) : 0u;
            qf[kk][2] = row_ok[0] ? pack_half2(q0[d + 8], q0[d + 9]) : 0u;
            qf[kk][3] = row_ok[1] ? pack_half2(q1[d + 8], q1[d + 9]) : 0u;
        }
    }

    // Each row's max score m and softmax sum l: pass 1 over this block's keys, online, or
    // (phase 2) the splits' own combined.
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
    if (phase == 2) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (!row_ok[r]) continue;
            const float2* row_stats = stats + (size_t)(t0 + rows[r]) * n_heads + h;
            const size_t split_stride = (size_t)n_tokens * n_heads;
            for (int z = 0; z < n_split; ++z) m[r] = fmaxf(m[r], row_stats[z * split_stride].x);
            // In split order; an empty split (a span shorter than its splits) adds nothing.
            for (int z = 0; z < n_split; ++z) {
                const float2 ml = row_stats[z * split_stride];
                if (ml.y > 0.f) l[r] += ml.y * expf(ml.x - m[r]);
            }
        }
    } else {
        walk_key_tiles<HD, BK, false>(
            flash_shared, qf, kc, vc, kb_from, kb_end, p_last, tables, table, block_size, kv_dim,
            kv_off, warp_live, warp_last_pos, pos_r, row_ok, window, scale, softcap,
            [&](float (&s)[BK / 8][4], const u16*) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    float mx = NEG_INF;
#pragma unroll
                    for (int n = 0; n < BK / 8; ++n) {
                        mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
                    }
                    mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
                    const float m_new = fmaxf(m[r], mx);
                    // A row that has seen no key yet keeps m = -inf: subtract 0 so that exp
                    // gives 0.
                    const float base = m_new == NEG_INF ? 0.f : m_new;
                    float sum = 0.f;
#pragma unroll
                    for (int n = 0; n < BK / 8; ++n) {
                        sum += expf(s[n][2 * r] - base) + expf(s[n][2 * r + 1] - base);
                    }
                    sum += __shfl_xor_sync(FULL_MASK, sum, 1);
                    sum += __shfl_xor_sync(FULL_MASK, sum, 2);
                    l[r] = l[r] * expf(m[r] - base) + sum;
                    m[r] = m_new;
                }
            });
        if (phase == 1) {
            // The four lanes of a row hold the same (m, l).
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                if (!row_ok[r] || c != 0) continue;
                const size_t at = (size_t)(t0 + rows[r]) * n_heads + h;
                stats[split * (size_t)n_tokens * n_heads + at] = make_float2(m[r], l[r]);
            }
            return;
        }
    }
    // Every query sees at least its own position, so a live row has l > 0.
    const float base[2] = {m[0] == NEG_INF ? 0.f : m[0], m[1] == NEG_INF ? 0.f : m[1]};
    const float inv[2] = {l[0] > 0.f ? 1.f / l[0] : 0.f, l[1] > 0.f ? 1.f / l[1] : 0.f};

    // Pass 2: o = p · v with the final weights p = exp(s - m) / l rounded to f16, as the CPU
    // backend rounds them (cpu/attention.rs); the scores are computed again.
    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    walk_key_tiles<HD, BK, true>(
        flash_shared, qf, kc, vc, kb_from, kb_end, p_last, tables, table, block_size, kv_dim,
        kv_off, warp_live, warp_last_pos, pos_r, row_ok, window, scale, softcap,
        [&](float (&s)[BK / 8][4], const u16* vs) {
            // The s accumulators of key tiles 2k and 2k + 1, as weights, are the A fragment of
            // keys 16k .. 16k + 15 (f16: the rounding the CPU applies).
#pragma unroll
            for (int k = 0; k < BK / 16; ++k) {
                u32 a[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float* t = s[2 * k + i / 2];
                    const int r = i % 2;
                    a[i] = pack_half2(expf(t[2 * r] - base[r]) * inv[r],
                                      expf(t[2 * r + 1] - base[r]) * inv[r]);
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
        });

    if (!warp_live) return;
    const size_t o_stride = (size_t)n_heads * HD;
    // A split's part goes to its own slice of `parts`, summed by flash_combine.
    float* dst_base = n_split > 1 ? parts + split * (size_t)n_tokens * o_stride : out;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (!row_ok[r]) continue;
        float* dst = dst_base + (size_t)(t0 + rows[r]) * o_stride + h * HD + 2 * c;
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
        int phase, int n_tokens, float2 *stats, float *parts
#define FLASH_ARGS                                                                            \
    q, kc, vc, out, tok_pos, seq_table, tables, tiles, n_heads, n_kv_heads, block_size, scale, \
        window, softcap, n_split, phase, n_tokens, stats, parts

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
