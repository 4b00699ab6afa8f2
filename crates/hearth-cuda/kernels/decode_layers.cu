// Every decoder layer of a one-token decode step in one launch: a persistent kernel whose
// blocks stay resident and meet at grid-wide barriers where the op-by-op step would end one
// kernel and start the next. Per layer, five phases with a barrier after each:
//
//   1. attention norm of x (every block, into its shared memory) -> q, k, v  (int8 GEMVs)
//   2. per query head and chunk of positions: QK-norm and rope of its q and k, the KV write,
//      attention; the last chunk of a head merges them -> ctx (8-bit)
//   3. ctx (every block copies it into shared memory) -> x += Wo · ctx
//   4. feed-forward norm of x (every block) -> act = act(gate · h) * (up · h)
//   5. act (quantized by phase 4's last warp of each group) -> x += Wdown · act
//
// A decode step of a small model is hundreds of short kernels, each waiting for the whole
// previous one; here a phase waits only at a barrier, and the norms that were kernels of
// their own are repeated by every block on data it reads from L2. Every block copies the
// 8-bit activations it multiplies into its shared memory.
//
// The arithmetic is the op-by-op kernels' (gemv_warp_rows_q8a, attend_span, the norm and
// quantization of rms_norm_quantize and qk_norm_rope) but for two orders of summation: the f64
// sums of squares in the norms (see rms_norm_quantize), and attention's softmax, merged from
// chunks of positions (below) rather than from one block's warps alone: each chunk rounds its
// weights to f16 against its own max and sum, not the whole span's.
//
// Not yet faster than the op-by-op step, so off unless asked for (see decode_layers.rs for the
// measurements and where the time goes; DL_PROFILE below measures it).
//
// Blocks must all be resident at once (a cooperative launch checks it). Data written by
// other blocks during the launch is read through L2 (__ldcg) or after the barrier's acquire.

#define DL_THREADS 128
#define DL_WARPS (DL_THREADS / WARP_SIZE)

// Per layer, DL_FIELDS device addresses in the layer table, in this order:
#define DL_ATTN_NORM 0
#define DL_WQ 1
#define DL_WK 2
#define DL_WV 3
#define DL_Q_NORM 4  // 0 without QK-norm
#define DL_K_NORM 5
#define DL_WO 6
#define DL_FFN_NORM 7
#define DL_GATE 8
#define DL_UP 9
#define DL_DOWN 10
#define DL_K_CACHE 11
#define DL_V_CACHE 12
// GGML type codes of wq, wk, wv, wo, gate (= up), down: one byte each from the lowest.
#define DL_TYPES 13
#define DL_FIELDS 14

// All blocks arrive, then all leave: the count reaches `target` (this barrier's number times
// the grid size; the host zeroes the count before each launch). The release before the add and
// the acquire of the spin make every write before the barrier visible after it.
__device__ __forceinline__ void grid_barrier(u32* count, u32& target) {
    target += gridDim.x;
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
        u32 seen;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
        } while (seen < target);
    }
    __syncthreads();
}

// Whether each phase asks L2 for the weight rows of the phases after it that this block's
// warps take first (weights no phase writes), so that they are on chip when the barrier lets
// the block start on them: what overlapping launches do between the op-by-op kernels.
#ifndef DL_PREFETCH
#define DL_PREFETCH 1
#endif
// DL_PROFILE 1: block 0 prints how long each phase took it, summed over the layers, once per
// launch (a measuring aid; the output is a line per decode step).
#ifndef DL_PROFILE
#define DL_PROFILE 0
#endif

#if DL_PROFILE
extern "C" __device__ int vprintf(const char*, const char*);
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define DL_MARKS 12
#define DL_MARK(i)                            \
    {                                         \
        const unsigned long long t = global_ns(); \
        spent[i] += t - last;                 \
        last = t;                             \
    }
#else
#define DL_MARK(i)
#endif

// Bytes of a row of `cols` values of GGML type `ty` (one the kernel decodes).
__device__ __forceinline__ size_t dl_row_bytes(int ty, int cols) {
    switch (ty) {
        case GGML_Q8_0: return (size_t)cols / 32 * 34;
        case GGML_Q4_0: return (size_t)cols / 32 * 18;
        case GGML_Q4_K: return (size_t)cols / 256 * 144;
        default: return (size_t)cols / 256 * 210;  // Q6_K
    }
}

// Asks L2 for the rows this warp takes in its first work unit of a GEMV phase over `n_rows`
// rows of `w` (`per_warp` rows a warp), and of `w2` at the same rows when given (GLU).
__device__ __forceinline__ void prefetch_first_rows(const u8* w, const u8* w2, int ty, int n_rows,
                                                    int cols, int per_warp) {
#if DL_PREFETCH
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int row0 = (blockIdx.x * DL_WARPS + warp) * per_warp;
    if (row0 >= n_rows) return;
    const size_t rb = dl_row_bytes(ty, cols);
    const size_t bytes = (size_t)min(per_warp, n_rows - row0) * rb;
    prefetch_l2(w + (size_t)row0 * rb, bytes, lane);
    if (w2 != nullptr) prefetch_l2(w2 + (size_t)row0 * rb, bytes, lane);
#endif
}

// rms_norm_quantize of the row x (cols values, a multiple of 32) with weight w, by the whole
// block into shared memory: sq the 8-bit values, sds (d, d * sum q) per 32-value group.
// Thread t takes values 4t .. 4t + 3 of each chunk of 4 * DL_THREADS, so 8 lanes hold a group.
__device__ __forceinline__ void block_norm_quantize(const float* x, const float* __restrict__ w,
                                                    int cols, float eps, i8* sq, float2* sds) {
    const int step = 4 * DL_THREADS, first = 4 * threadIdx.x;
    double ss = 0.0;
    for (int i = first; i < cols; i += step) {
        ss = add_squares(ss, __ldcg(reinterpret_cast<const float4*>(x + i)));
    }
    const float mean = (float)(block_sum_f64(ss) / (double)cols);
    const float scale = 1.0f / sqrtf(mean + eps);
    // Every lane calls the quantizer (it shuffles); a 32-value group is wholly inside the row
    // or wholly past it.
    for (int i = first; i - first < cols; i += step) {
        const bool in = i < cols;
        const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
        const float4 xs = in ? __ldcg(reinterpret_cast<const float4*>(x + i)) : zero;
        const float4 ws = in ? *reinterpret_cast<const float4*>(w + i) : zero;
        const float v[4] = {xs.x * scale * ws.x, xs.y * scale * ws.y, xs.z * scale * ws.z,
                            xs.w * scale * ws.w};
        quantize_lane_values_q8_1<4>(v, sq + i, sds + i / 32, in);
    }
    __syncthreads();
}

// An 8-bit row (n values, a multiple of 16, and its group scales) written by other blocks,
// copied into shared memory.
__device__ __forceinline__ void block_copy_q8(const i8* q, const float2* ds, int n, i8* sq,
                                              float2* sds) {
    for (int i = threadIdx.x; i < n / 16; i += DL_THREADS) {
        reinterpret_cast<uint4*>(sq)[i] = __ldcg(reinterpret_cast<const uint4*>(q) + i);
    }
    for (int i = threadIdx.x; i < n / 32; i += DL_THREADS) sds[i] = __ldcg(ds + i);
    __syncthreads();
}

// One head (head_dim <= 2 * DL_THREADS values at `row`, written by other blocks) QK-normed
// when `norm` is given and rotated, into `out` (shared memory): qk_norm_rope's arithmetic.
// `tmp`: head_dim floats of shared scratch.
__device__ __forceinline__ void block_norm_rope_head(const float* row, const float* norm,
                                                     float* tmp, float* out, int head_dim,
                                                     float eps, u32 pos, int n_rot,
                                                     float theta_scale, float freq_scale,
                                                     const float* factors, int neox) {
    double ss = 0.0;
    float v[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const int i = threadIdx.x + k * DL_THREADS;
        v[k] = i < head_dim ? __ldcg(row + i) : 0.f;
        ss += (double)v[k] * (double)v[k];
    }
    float scale = 1.f;
    if (norm != nullptr) {
        scale = 1.0f / sqrtf((float)(block_sum_f64(ss) / (double)head_dim) + eps);
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const int i = threadIdx.x + k * DL_THREADS;
        if (i < head_dim) tmp[i] = norm != nullptr ? v[k] * scale * norm[i] : v[k];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const int i = threadIdx.x + k * DL_THREADS;
        if (i >= head_dim) continue;
        out[i] = i >= n_rot ? tmp[i]
                            : rotated_value(tmp, i, pos, n_rot, theta_scale, freq_scale, factors,
                                            neox);
    }
    __syncthreads();
}

// Attention is split into chunks of at least DL_MIN_CHUNK positions, so that a head's
// positions are shared among blocks: a head in one block is a chain of dependent loads per
// position, and attention was then most of a layer's time (Qwen3-0.6B, tg128: 21.7 of about
// 52 µs a layer).
#ifndef DL_MIN_CHUNK
#define DL_MIN_CHUNK 16
#endif

// Positions of a chunk whose scores attend_span keeps (its kernel's static shared memory is
// at most 48 KiB, and a chunk is rarely longer: see n_chunks in decode_layers).
#define DL_KEPT 256

// Chunk c of n_chunks of a head's attention (attend_span over j0 .. j1 - 1). Each chunk's
// max, sum and weighted values (divided by its sum) go to its slot of `parts` (head_dim + 2
// floats each); the last chunk of the head to arrive (the `done` count) merges them all and
// writes the head's output to outh and its 8-bit copy to oqh / odsh. A head in one chunk is written at once, with
// attend_head's arithmetic.
template <int DPL>
__device__ __forceinline__ void attend_chunk(const float* head_q, const u16* kc, const u16* vc,
                                             u32 j0, u32 j1, u32 pos, const u32* tables,
                                             u32 table, int kv_off, int kv_dim, int head_dim,
                                             int block_size, float scale, const float* knewh,
                                             const float* vnewh, float* parts, int c,
                                             int n_chunks, u32* done, float* outh, i8* oqh,
                                             float2* odsh) {
    const int lane = threadIdx.x % WARP_SIZE, d0 = lane * DPL;
    const int n_mine = max(0, min(DPL, head_dim - d0));
    const AttnSpan sp = {kc, vc,  tables, table, kv_off, kv_dim, head_dim, block_size,
                         j0, j1,  pos,    knewh, vnewh,  d0,     n_mine,   scale,
                         0.f};
    float mx, total, o[DPL];
    if (!attend_span<DPL, DL_WARPS, DL_KEPT>(head_q, sp, mx, total, o)) return;
    if (n_chunks > 1) {
        float* mine = parts + (size_t)c * (head_dim + 2);
        if (lane == 0) {
            mine[0] = mx;
            mine[1] = total;
        }
#pragma unroll
        for (int d = 0; d < DPL; ++d) {
            if (d < n_mine) mine[2 + d0 + d] = o[d];
        }
        __threadfence();
        u32 arrived = 0;
        if (lane == 0) arrived = atomicAdd(done, 1u);
        arrived = __shfl_sync(FULL_MASK, arrived, 0);
        if (arrived != (u32)n_chunks - 1) return;
        __threadfence();
        // The last to arrive: every chunk's slot is written and visible (through L2).
        mx = NEG_INF;
        for (int i = 0; i < n_chunks; ++i) mx = fmaxf(mx, __ldcg(parts + (size_t)i * (head_dim + 2)));
        total = 0.f;
#pragma unroll
        for (int d = 0; d < DPL; ++d) o[d] = 0.f;
        // A chunk's values are already divided by its own sum: weighted by that sum here.
        for (int i = 0; i < n_chunks; ++i) {
            const float* slot = parts + (size_t)i * (head_dim + 2);
            const float w = __ldcg(slot + 1) * expf(__ldcg(slot) - mx);
            total += w;
#pragma unroll
            for (int d = 0; d < DPL; ++d) {
                if (d < n_mine) o[d] += __ldcg(slot + 2 + d0 + d) * w;
            }
        }
        if (lane == 0) *done = 0;
#pragma unroll
        for (int d = 0; d < DPL; ++d) o[d] /= total;
    }
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
        if (d < n_mine) outh[d0 + d] = o[d];
    }
    quantize_lane_values_q8_1<DPL>(o, oqh + d0, odsh + d0 / 32, n_mine > 0);
}

// The bytes of shared memory the kernel takes beyond its static arrays (the host sizes the
// launch with it): the 8-bit activations of the widest row, with their group scales.
//   dynamic = max_cols + max_cols / 32 * 8
//
// `batch`: one token of one sequence in attention's layout (model.cu: tok_seq, tok_pos,
// seq_table, then the table). `x`: the residual stream row, updated in place. q, k, v: the
// projections' rows; ctx, oq, ods: attention's output and its 8-bit copy; act, aq, ads: the
// feed-forward product and its 8-bit copy; parts: attention's chunk results, (head_dim + 2)
// floats for each of max(1, gridDim.x / n_heads) chunks of each head. `counts`: the barrier's
// counter, zeroed before the launch, then n_ff / 32 counters for the 8-bit copy of act (see
// quantize_when_complete) and n_heads for attention's chunks, zero and left zeroed.
extern "C" __global__ void __launch_bounds__(DL_THREADS)
decode_layers(const unsigned long long* __restrict__ layers, int n_layers, float* x, float* q,
              float* k, float* v, float* ctx, i8* oq, float2* ods, float* act, i8* aq,
              float2* ads, float* parts, const u32* batch, u32* counts, int n_embd, int n_heads, int n_kv_heads, int head_dim, int n_ff,
              float eps, float attn_scale, int n_rot, float theta_scale, float freq_scale,
              const float* factors, int neox, int gelu, int block_size) {
    await_previous_kernels();
    __shared__ uint4 windows[DL_WARPS][2][ROWS_PER_WARP][Q8A_WINDOW_VECS];
    __shared__ float head_q[256], head_k[256], head_v[256], scratch[256];
    extern __shared__ uint4 dynamic_shared[];
    i8* sq = reinterpret_cast<i8*>(dynamic_shared);
    const int max_cols = max(max(n_embd, n_heads * head_dim), n_ff);
    float2* sds = reinterpret_cast<float2*>(sq + max_cols);
    Q8aWindows win = windows[threadIdx.x / WARP_SIZE];

    const int q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
    const int group = n_heads / n_kv_heads;
    const u32 pos = batch[1];
    const u32 table = batch[2];
    const u32* tables = batch + 3;
    const int per_block = GEMV_ROWS_PER_BLOCK, glu_per_block = WARPS_PER_BLOCK;
    const int bq = (q_dim + per_block - 1) / per_block, bk = (kv_dim + per_block - 1) / per_block;
    const int n_qkv = bq + 2 * bk;
    const int n_rows_embd = (n_embd + per_block - 1) / per_block;
    const int n_glu = (n_ff + glu_per_block - 1) / glu_per_block;
    // Attention's chunks: this step's positions 0 ..= pos over the heads' share of the grid.
    const u32 n_pos = pos + 1;
    const int per_head = max(1, (int)gridDim.x / n_heads);
    const u32 chunk = max((u32)DL_MIN_CHUNK, (n_pos + per_head - 1) / per_head);
    const int n_chunks = (int)((n_pos + chunk - 1) / chunk);
    u32* head_done = counts + 1 + n_ff / 32;
    u32 target = 0;
#if DL_PROFILE
    unsigned long long spent[DL_MARKS] = {}, last = global_ns();
#endif

    for (int il = 0; il < n_layers; ++il) {
        const unsigned long long* L = layers + (size_t)il * DL_FIELDS;
        const unsigned long long types = L[DL_TYPES];
        const int t_q = types & 255, t_k = (types >> 8) & 255, t_v = (types >> 16) & 255;
        const int t_o = (types >> 24) & 255, t_gu = (types >> 32) & 255, t_d = (types >> 40) & 255;

        // 1. q, k, v of the attention norm of x.
        block_norm_quantize(x, reinterpret_cast<const float*>(L[DL_ATTN_NORM]), n_embd, eps, sq,
                            sds);
        DL_MARK(0)
        for (int b = blockIdx.x; b < n_qkv; b += gridDim.x) {
            const int seg = b < bq ? 0 : (b < bq + bk ? 1 : 2);
            const int ty = seg == 0 ? t_q : (seg == 1 ? t_k : t_v);
            const u8* w = reinterpret_cast<const u8*>(L[DL_WQ + seg]);
            float* y = seg == 0 ? q : (seg == 1 ? k : v);
            gemv_warp_rows_q8a_typed(ty, win, w, nullptr, sq, sds, y, seg == 0 ? q_dim : kv_dim,
                                     n_embd, GEMV_STORE,
                                     b - (seg == 0 ? 0 : (seg == 1 ? bq : bq + bk)), NO_GLU_Q8,
                                     false);
        }
        DL_MARK(1)
        grid_barrier(counts, target);
        DL_MARK(2)

        // 2. Attention, in (head, chunk) work items; first, the rows of Wo, gate and up that
        // this block will take are asked of L2.
        prefetch_first_rows(reinterpret_cast<const u8*>(L[DL_WO]), nullptr, t_o, n_embd, q_dim,
                            ROWS_PER_WARP);
        prefetch_first_rows(reinterpret_cast<const u8*>(L[DL_GATE]),
                            reinterpret_cast<const u8*>(L[DL_UP]), t_gu, n_ff, n_embd, 1);
        u16* kc = reinterpret_cast<u16*>(L[DL_K_CACHE]);
        u16* vc = reinterpret_cast<u16*>(L[DL_V_CACHE]);
        for (int item = blockIdx.x; item < n_heads * n_chunks; item += gridDim.x) {
            const int h = item / n_chunks, c = item % n_chunks;
            const int kv_head = h / group;
            const u32 j0 = (u32)c * chunk, j1 = min(n_pos, j0 + chunk);
            block_norm_rope_head(q + h * head_dim, reinterpret_cast<const float*>(L[DL_Q_NORM]),
                                 scratch, head_q, head_dim, eps, pos, n_rot, theta_scale,
                                 freq_scale, factors, neox);
            // The chunk holding this step's own position has its key and value, rotated and
            // normed, from q's neighbours (the first query head of the group also caches them).
            const bool own = j1 == n_pos;
            if (own) {
                block_norm_rope_head(k + kv_head * head_dim,
                                     reinterpret_cast<const float*>(L[DL_K_NORM]), scratch,
                                     head_k, head_dim, eps, pos, n_rot, theta_scale, freq_scale,
                                     factors, neox);
                for (int i = threadIdx.x; i < head_dim; i += DL_THREADS) {
                    head_v[i] = __ldcg(v + kv_head * head_dim + i);
                }
                __syncthreads();
                if (h % group == 0) {
                    const size_t slot = kv_slot(tables, table, pos, block_size) * kv_dim +
                                        kv_head * head_dim;
                    for (int i = threadIdx.x; i < head_dim; i += DL_THREADS) {
                        kc[slot + i] = f32_to_half(head_k[i]);
                        vc[slot + i] = f32_to_half(head_v[i]);
                    }
                }
            }
            const int at = h * head_dim;
            float* head_parts = parts + (size_t)h * per_head * (head_dim + 2);
            const float* knew = own ? head_k : nullptr;
            const float* vnew = own ? head_v : nullptr;
            if (head_dim == 64) {
                attend_chunk<2>(head_q, kc, vc, j0, j1, pos, tables, table, kv_head * head_dim,
                                kv_dim, head_dim, block_size, attn_scale, knew, vnew, head_parts,
                                c, n_chunks, head_done + h, ctx + at, oq + at, ods + at / 32);
            } else {
                attend_chunk<4>(head_q, kc, vc, j0, j1, pos, tables, table, kv_head * head_dim,
                                kv_dim, head_dim, block_size, attn_scale, knew, vnew, head_parts,
                                c, n_chunks, head_done + h, ctx + at, oq + at, ods + at / 32);
            }
            __syncthreads();
        }
        DL_MARK(3)
        grid_barrier(counts, target);
        DL_MARK(4)

        // 3. x += Wo · ctx.
        block_copy_q8(oq, ods, q_dim, sq, sds);
        for (int b = blockIdx.x; b < n_rows_embd; b += gridDim.x) {
            gemv_warp_rows_q8a_typed(t_o, win, reinterpret_cast<const u8*>(L[DL_WO]), nullptr,
                                     sq, sds, x, n_embd, q_dim, GEMV_ACCUMULATE, b,
                                     NO_GLU_Q8, false);
        }
        prefetch_first_rows(reinterpret_cast<const u8*>(L[DL_DOWN]), nullptr, t_d, n_embd, n_ff,
                            ROWS_PER_WARP);
        DL_MARK(5)
        grid_barrier(counts, target);
        DL_MARK(6)

        // 4. act = act(gate · h) * (up · h), h the feed-forward norm of x.
        block_norm_quantize(x, reinterpret_cast<const float*>(L[DL_FFN_NORM]), n_embd, eps, sq,
                            sds);
        DL_MARK(7)
        const GluQ8 act_q8 = {aq, ads, counts + 1};
        for (int b = blockIdx.x; b < n_glu; b += gridDim.x) {
            gemv_warp_rows_q8a_typed(t_gu, win, reinterpret_cast<const u8*>(L[DL_GATE]),
                                     reinterpret_cast<const u8*>(L[DL_UP]), sq, sds, act, n_ff,
                                     n_embd, gelu ? GEMV_GLU_GELU : GEMV_GLU_SILU, b, act_q8,
                                     false);
        }
        if (il + 1 < n_layers) {
            // The next layer's q, k and v rows (the first work unit's matrix of each warp).
            const unsigned long long* N = L + DL_FIELDS;
            const unsigned long long nt = N[DL_TYPES];
            const int b = blockIdx.x;
            const int seg = b < bq ? 0 : (b < bq + bk ? 1 : 2);
            const int ty = (nt >> (8 * seg)) & 255;
            const int first = seg == 0 ? 0 : (seg == 1 ? bq : bq + bk);
            if (b < n_qkv) {
                const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
                const int rows = seg == 0 ? q_dim : kv_dim;
                const int row0 = ((b - first) * DL_WARPS + warp) * ROWS_PER_WARP;
                const size_t rb = dl_row_bytes(ty, n_embd);
                if (DL_PREFETCH && row0 < rows) {
                    prefetch_l2(reinterpret_cast<const u8*>(N[DL_WQ + seg]) + row0 * rb,
                                (size_t)min(ROWS_PER_WARP, rows - row0) * rb, lane);
                }
            }
        }
        DL_MARK(8)
        grid_barrier(counts, target);
        DL_MARK(9)

        // 5. x += Wdown · act.
        block_copy_q8(aq, ads, n_ff, sq, sds);
        for (int b = blockIdx.x; b < n_rows_embd; b += gridDim.x) {
            gemv_warp_rows_q8a_typed(t_d, win, reinterpret_cast<const u8*>(L[DL_DOWN]), nullptr,
                                     sq, sds, x, n_embd, n_ff, GEMV_ACCUMULATE, b,
                                     NO_GLU_Q8, false);
        }
        DL_MARK(10)
        if (il + 1 < n_layers) grid_barrier(counts, target);
        DL_MARK(11)
    }
#if DL_PROFILE
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        vprintf("decode_layers ns: norm %llu qkv %llu bar %llu attn %llu bar %llu o %llu bar %llu "
                "norm %llu glu %llu bar %llu down %llu bar %llu\n",
                reinterpret_cast<const char*>(spent));
    }
#endif
}
