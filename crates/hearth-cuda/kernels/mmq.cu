// Quantized matrix times int8 activations on tensor cores, for batches too large for the GEMVs
// (each token would read every weight again) and too small for dequantizing every weight to
// f16 for cuBLAS (which writes and reads back twice the weight bytes per step): decode steps of
// many sequences and short prompts.
//
// y[t][r] (+)= sum over 32-value groups g of dw[r][g] * dx[t][g] * sum_k qw[r][32g+k] qx[t][32g+k]
//
// with the activations as quantize_q8_1 writes them (gemv_q8a.cu): the same 8-bit products as
// the int8 GEMVs, summed per (row, token) over the groups in ascending order (for types with
// a min, the min terms in a sum of their own, subtracted at the end).
//
// A block of MMQ_THREADS computes a tile of MMQ_ROWS weight rows by MMQ_TOKENS tokens, in
// steps of 256 values (one K-quant block, eight Q8_0 blocks). Each step's weights go to shared
// memory as they are stored (raw blocks: no registers, no re-packing), with its activations and
// their scales, by asynchronous copies (cp.async) into a ring of STAGES buffers: the next steps'
// copies are in flight while one step is multiplied. Each warp takes 16 rows by 16 tokens: per
// 32-value group, two m16n8k32 integer products whose int32 sums are scaled into f32 sums. The
// A fragments are decoded straight from the raw blocks, and each thread decodes its two rows'
// group scales once per step.
//
// NOTE (H100, hearth bench, one call each; cuBLAS = dequantizing to f16 for cuBLAS):
// - The first version loaded 128 values a step into registers and stored them as int8 tiles,
//   with one step in flight: each step waited for its loads. A 32-token prompt step of
//   Qwen3-0.6B Q8_0 ran at 7,988 tok/s, and 64-sequence decode lost to cuBLAS (Llama-3.1-8B
//   Q4_K_M 2,560 vs 2,967 tok/s).
// - This ring: 10,389 tok/s for the 32-token prompt (cuBLAS 4,958), Llama-3.1-8B 2,520
//   (cuBLAS 1,889); 64-sequence decode even with cuBLAS (8B 3,171 vs 3,121, 0.6B 12,300 vs
//   12,514); a 512-token prompt far behind it (8B 5,035 vs 19,473). Under Nsight Compute the
//   8B 64-sequence step is 91% MMQ, at 272-482 GB/s.
// - Scales decoded once per step per thread (not once per group and product) and the min terms
//   summed apart: fewer instructions, little speed (scripts/device/binary_ab.sh, two rounds:
//   8B 64 sequences 3,460 / 3,440 -> 3,487 / 3,480 tok/s, 32-token prompts within 1-4%). So
//   the scaling arithmetic is not what holds these kernels back; not found yet what is.
// - Under Nsight Compute (8B, 64 sequences, one 256-block launch of mmq_q4_k): 128 registers
//   a thread, 7.7 warps active per multiprocessor of 16 possible, issue slots 35% busy, no
//   warp eligible 61% of cycles: too few warps to hide the latencies.
// - Tried and dropped: eight warps a block, each pair splitting a step's groups (more warps per
//   tile, sums added at the end): Q4_K slower (8B 64 sequences 3,464 / 3,474 -> 2,960 / 2,966,
//   8B 32-token prompt 2,858 -> 2,528-2,553, 0.6B Q4_K_M 64 sequences 14,310 -> 13,272), Q8_0
//   within 3%.
// - Tried and dropped: 64-token tiles (dynamic shared memory, three stages, each warp 16 rows
//   by 32 tokens) with each warp decoding its rows' scales once per step into shared memory:
//   slower everywhere (8B 64 sequences 2,518, 0.6B 10,482; the 8B prompt step 2,199), with
//   half the blocks per multiprocessor and a shared-memory round trip before each step's
//   products.
// - Split-K (MmqSplit, backend/mmq.rs): the 8B 32-token prompt step 2,797 -> 3,660 tok/s, 64
//   sequences 3,324 -> 3,610; the 0.6B Q8_0 32-token prompt 13,230 -> 16,350. Under Nsight
//   Compute the 8B 64-sequence step is then 90% MMQ: mmq3_q4_k (gate and up) 166 us a launch
//   at 559 GB/s, mmq_q6_k 567 GB/s, mmq_q4_k (q, k, o) 268 GB/s.

#define MMQ_ROWS 32
#define MMQ_TOKENS 32
#define MMQ_THREADS 128
#define MMQ_STEP 256
#define MMQ_STEP_GROUPS (MMQ_STEP / 32)
// Row stride of the activation tile: 256 values + 16 bytes, so that the eight rows a fragment
// load touches fall in distinct banks (68 words a row: bank 4g + t).
#define MMQ_X_STRIDE (MMQ_STEP + 16)

// D = A (16x32 s8, row-major) * B (32x8 s8, column-major) + C, int32.
__device__ __forceinline__ void mma_s8_16832(int* d, const u32* a, const u32* b) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    // The host launches no tensor-core kernel below sm_80 (`GpuInfo::has_mma`).
    __trap();
#endif
}

// 8 bytes from global to shared memory, asynchronously (the activations' scales: float2).
__device__ __forceinline__ void copy8_async(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s), "l"(src));
#else
    *reinterpret_cast<float2*>(dst) = *reinterpret_cast<const float2*>(src);
#endif
}

// Weight types: BYTES per block of QK values; W_STRIDE, the bytes of shared memory a row's
// step takes (its blocks from the 16-byte vector holding their first byte, so up to 15 bytes of
// skew, padded so that rows g = 0..7 of a fragment fall in distinct banks); STAGES, the ring's
// depth within 48 KiB of static shared memory; and
//   frag(row, j, t, lo, hi): the A fragment words of group j (0..7) of the step for fragment
//   thread t (values 4t..4t+3 and 16+4t..), from the row's staged bytes;
//   scales(row, sc): each group j's (d, m) of the step, the group's value = d * q - m (m = 0
//   when the type has no min), decoded once per step rather than per product. Types whose two
//   16-value halves have their own scale (Q6_K) give SPLIT = true and (d of the first half, d
//   of the second) instead.

// Q8_0: d (f16) | qs[32], 34-byte blocks (only 2-byte aligned).
struct MmqQ8_0 {
    static const int BYTES = 34, QK = 32, W_STRIDE = 304, STAGES = 2;
    static const bool HAS_MIN = false, SPLIT = false;
    __device__ static __forceinline__ void frag(const u8* row, int j, int t, u32& lo, u32& hi) {
        const u8* q = row + 34 * j + 2;
        lo = load_u32_a2(q + 4 * t);
        hi = load_u32_a2(q + 16 + 4 * t);
    }
    __device__ static __forceinline__ void scales(const u8* row, float2 (&sc)[MMQ_STEP_GROUPS]) {
#pragma unroll
        for (int j = 0; j < MMQ_STEP_GROUPS; ++j) sc[j] = make_float2(load_half(row + 34 * j), 0.f);
    }
};

// Q4_K: d | dmin | scales[12] | qs[128] per 256 values; group j is nibble j % 2 of
// qs[32 * (j / 2) ..], with a 6-bit scale and min (as the int8 GEMV decodes them), multiplied
// in the GEMV's order: (d * scale) and (dmin * min).
struct MmqQ4_K {
    static const int BYTES = 144, QK = 256, W_STRIDE = 176, STAGES = 3;
    static const bool HAS_MIN = true, SPLIT = false;
    __device__ static __forceinline__ void frag(const u8* row, int j, int t, u32& lo, u32& hi) {
        const u8* q = row + 16 + 32 * (j / 2) + 4 * t;
        const int shift = 4 * (j % 2);
        lo = (*reinterpret_cast<const u32*>(q) >> shift) & 0x0F0F0F0Fu;
        hi = (*reinterpret_cast<const u32*>(q + 16) >> shift) & 0x0F0F0F0Fu;
    }
    __device__ static __forceinline__ void scales(const u8* row, float2 (&sc)[MMQ_STEP_GROUPS]) {
        const float d = load_half(row), dmin = load_half(row + 2);
#pragma unroll
        for (int j = 0; j < MMQ_STEP_GROUPS; ++j) {
            int scale, min;
            scale_min_k4(row + 4, j, scale, min);
            sc[j] = make_float2(d * (float)scale, dmin * (float)min);
        }
    }
};

// Q6_K: ql[128] | qh[64] | scales[16] (i8) | d per 256 values; group j = 4n + s holds values
// 128n + 32s + l: low nibble of ql[64n + 32(s%2) + l] (high nibble for s >= 2), high 2 bits at
// shift 2s of qh[32n + l]; value = d * scale[value / 16] * (q - 32). Each 16-value half of a
// group has its own scale, so its halves are multiplied apart.
struct MmqQ6_K {
    static const int BYTES = 210, QK = 256, W_STRIDE = 240, STAGES = 2;
    static const bool HAS_MIN = false, SPLIT = true;
    __device__ static __forceinline__ u32 values(const u8* row, int j, int at) {
        const int n = j >> 2, s = j & 3;
        const u8* ql = row + 64 * n + 32 * (s & 1);
        const u8* qh = row + 128 + 32 * n;
        const u32 lo = (load_u32_a2(ql + at) >> (4 * (s >> 1))) & 0x0F0F0F0Fu;
        const u32 hi = ((load_u32_a2(qh + at) >> (2 * s)) & 0x03030303u) << 4;
        return sub32_bytes(lo | hi);
    }
    __device__ static __forceinline__ void frag(const u8* row, int j, int t, u32& lo, u32& hi) {
        lo = values(row, j, 4 * t);
        hi = values(row, j, 16 + 4 * t);
    }
    // d * scale of each half of each group.
    __device__ static __forceinline__ void scales(const u8* row, float2 (&sc)[MMQ_STEP_GROUPS]) {
        const float d = load_half(row + 208);
        const i8* scale = reinterpret_cast<const i8*>(row + 192);
#pragma unroll
        for (int j = 0; j < MMQ_STEP_GROUPS; ++j) {
            sc[j] = make_float2(d * (float)scale[2 * j], d * (float)scale[2 * j + 1]);
        }
    }
};

// One ring buffer: the step's raw weight blocks per row, its activations and their
// (d, d * sum q) per group.
template <class W>
struct MmqStage {
    u8 w[MMQ_ROWS][W::W_STRIDE];
    i8 x[MMQ_TOKENS][MMQ_X_STRIDE];
    float2 dx[MMQ_TOKENS][MMQ_STEP_GROUPS];
};

// Where step s of a row starts inside its first staged 16-byte vector.
template <class W>
__device__ __forceinline__ int mmq_skew(const u8* row, int s) {
    return (int)(reinterpret_cast<size_t>(row + (size_t)s * (MMQ_STEP / W::QK) * W::BYTES) & 15);
}

// The copies of step s (groups g0 = 8s ..) into `st`, weights and activations apart: no kernel
// writes the weights, so the first step's may be copied before await_previous_kernels. Rows
// past the end read the last row and tokens past the end the last token (computed, never
// stored); activations of groups past the row's end are not copied (never read).
// (ROWS rows into `dst`, by a block of THREADS: shared with mmq_f16.cu.)
template <class W, int ROWS, int THREADS>
__device__ __forceinline__ void issue_weight_rows(u8 (*dst)[W::W_STRIDE],
                                                  const u8* __restrict__ w, int row0, int s,
                                                  int n_rows, int n_cols) {
    const int n_groups = n_cols / 32;
    const int groups = min(MMQ_STEP_GROUPS, n_groups - s * MMQ_STEP_GROUPS);
    const size_t row_bytes = (size_t)(n_cols / W::QK) * W::BYTES;
    const int step_bytes = groups * 32 / W::QK * W::BYTES;
    const int w_vecs = W::W_STRIDE / 16;
    for (int i = threadIdx.x; i < ROWS * w_vecs; i += THREADS) {
        const int r = i / w_vecs, v = i % w_vecs;
        const u8* row = w + (size_t)min(row0 + r, n_rows - 1) * row_bytes;
        const u8* start = row + (size_t)s * (MMQ_STEP / W::QK) * W::BYTES;
        const int skew = mmq_skew<W>(row, s);
        if (v * 16 < skew + step_bytes) {
            copy16_async(reinterpret_cast<uint4*>(&dst[r][16 * v]),
                         reinterpret_cast<const uint4*>(start - skew) + v);
        }
    }
}

template <class W>
__device__ __forceinline__ void mmq_issue_w(MmqStage<W>& st, const u8* __restrict__ w,
                                            int row0, int s, int n_rows, int n_cols) {
    issue_weight_rows<W, MMQ_ROWS, MMQ_THREADS>(st.w, w, row0, s, n_rows, n_cols);
}

// The activations of step s, VALUE_BYTES each (1: int8, 2: f16), of TOKENS tokens from tok0
// into rows of `dst` (DST_STRIDE bytes apart), by a block of THREADS (shared with
// mmq_f16.cu).
template <int VALUE_BYTES, int TOKENS, int THREADS, int DST_STRIDE>
__device__ __forceinline__ void issue_activation_rows(u8* dst, const u8* __restrict__ x,
                                                      int tok0, int s, int n_cols, int n_tok) {
    const int n_groups = n_cols / 32, g0 = s * MMQ_STEP_GROUPS;
    const int groups = min(MMQ_STEP_GROUPS, n_groups - g0);
    constexpr int vecs = MMQ_STEP * VALUE_BYTES / 16, group_vecs = 32 * VALUE_BYTES / 16;
    for (int i = threadIdx.x; i < TOKENS * vecs; i += THREADS) {
        const int t = i / vecs, v = i % vecs;
        if (v / group_vecs >= groups) continue;
        const size_t tok = (size_t)min(tok0 + t, n_tok - 1);
        copy16_async(reinterpret_cast<uint4*>(dst + t * DST_STRIDE + 16 * v),
                     reinterpret_cast<const uint4*>(
                         x + (tok * n_cols + (size_t)g0 * 32) * VALUE_BYTES) + v);
    }
}

template <class W>
__device__ __forceinline__ void mmq_issue_x(MmqStage<W>& st, const i8* __restrict__ xq,
                                            const float2* __restrict__ xds, int tok0, int s,
                                            int n_cols, int n_tok) {
    const int n_groups = n_cols / 32, g0 = s * MMQ_STEP_GROUPS;
    const int groups = min(MMQ_STEP_GROUPS, n_groups - g0);
    issue_activation_rows<1, MMQ_TOKENS, MMQ_THREADS, MMQ_X_STRIDE>(
        reinterpret_cast<u8*>(&st.x[0][0]), reinterpret_cast<const u8*>(xq), tok0, s, n_cols,
        n_tok);
    for (int i = threadIdx.x; i < MMQ_TOKENS * MMQ_STEP_GROUPS; i += MMQ_THREADS) {
        const int t = i / MMQ_STEP_GROUPS, g = i % MMQ_STEP_GROUPS;
        if (g >= groups) continue;
        const size_t tok = (size_t)min(tok0 + t, n_tok - 1);
        copy8_async(&st.dx[t][g], xds + tok * n_groups + g0 + g);
    }
}

// How a launch splits each tile's steps between `count` blocks (split-K), where the tile's
// rows and tokens alone would leave multiprocessors idle: blockIdx.y = token tile * count +
// split; each split stores its sums in `part` (one slot per tile and split: every thread's
// sums, see mmq_last_split), and the last of a tile's splits to finish, told by the tile's counter in
// `counts` (zeroed, and left zeroed), adds them up in split order. count = 1: no split, part
// and counts unused.
struct MmqSplit {
    int count;
    float* part;
    u32* counts;
};

// Split-K's meeting: stores this split's sums of `tile` and tells whether this block is the
// tile's last split to finish, in which case `sum` becomes the sum of every split's, added in
// split order (so the result does not depend on which finished last). Behind fences on both
// sides, as quantize_when_complete (gemv_q8a.cu): every slot a count reports is visible to the
// block that reads them, from L2.
// J: the thread's 8-token tiles, THREADS: the block's threads (each tile and split's slot
// holds THREADS * J * 4 floats).
template <int J, int THREADS>
__device__ __forceinline__ bool mmq_last_split(float (&sum)[J][4], MmqSplit split, int tile,
                                               int part_of) {
    const size_t slot = (size_t)THREADS * J * 4;
    float4* mine = reinterpret_cast<float4*>(split.part + ((size_t)tile * split.count + part_of) *
                                                              slot + threadIdx.x * J * 4);
#pragma unroll
    for (int j = 0; j < J; ++j) mine[j] = make_float4(sum[j][0], sum[j][1], sum[j][2], sum[j][3]);
    __threadfence();
    __syncthreads();
    bool last = false;
    if (threadIdx.x == 0) last = atomicAdd(split.counts + tile, 1u) == (u32)split.count - 1;
    if (!__syncthreads_or(last)) return false;
    __threadfence();
    for (int p = 0; p < split.count; ++p) {
        const float4* theirs = reinterpret_cast<const float4*>(
            split.part + ((size_t)tile * split.count + p) * slot + threadIdx.x * J * 4);
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const float4 a = __ldcg(theirs + j);
            const float v[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) sum[j][i] = p == 0 ? v[i] : sum[j][i] + v[i];
        }
    }
    if (threadIdx.x == 0) split.counts[tile] = 0;
    return true;
}

// The tile of rows row_block * MMQ_ROWS .. and tokens tok_tile * MMQ_TOKENS .., or the part of
// its steps that `split` gives this block; grid: (row blocks, ceil(n_tok / MMQ_TOKENS) *
// split.count). n_cols is a multiple of 32 (of 256 for K-quants).
template <class W>
__device__ __forceinline__ void mmq(const u8* __restrict__ w, const i8* __restrict__ xq,
                                    const float2* __restrict__ xds, float* __restrict__ y,
                                    int n_rows, int n_cols, int n_tok, int accumulate,
                                    int row_block, MmqSplit split) {
    __shared__ __align__(16) MmqStage<W> ring[W::STAGES];
    const int tok_tile = blockIdx.y / split.count, part_of = blockIdx.y % split.count;
    const int row0 = row_block * MMQ_ROWS, tok0 = tok_tile * MMQ_TOKENS;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, t = lane % 4;  // the fragments' group and thread-in-group
    const int wr = 16 * (warp / 2), wt = 16 * (warp % 2);  // the warp's rows and tokens
    const int n_groups = n_cols / 32;
    const int n_steps = (n_groups + MMQ_STEP_GROUPS - 1) / MMQ_STEP_GROUPS;
    // This block's steps: first .. end.
    const int first = part_of * n_steps / split.count;
    const int end = (part_of + 1) * n_steps / split.count;
    const size_t row_bytes = (size_t)(n_cols / W::QK) * W::BYTES;
    // This thread's two fragment rows (g and g + 8 of the warp's 16).
    const u8* frag_rows[2] = {w + (size_t)min(row0 + wr + g, n_rows - 1) * row_bytes,
                              w + (size_t)min(row0 + wr + g + 8, n_rows - 1) * row_bytes};

    float acc[2][4], mins[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][i] = mins[j][i] = 0.f;

    mmq_issue_w<W>(ring[0], w, row0, first, n_rows, n_cols);
    await_previous_kernels();
#pragma unroll
    for (int p = 0; p < W::STAGES - 1; ++p) {
        if (first + p < end) {
            if (p > 0) mmq_issue_w<W>(ring[p], w, row0, first + p, n_rows, n_cols);
            mmq_issue_x<W>(ring[p], xq, xds, tok0, first + p, n_cols, n_tok);
        }
        copies_commit();
    }
    for (int s = first; s < end; ++s) {
        copies_wait<W::STAGES - 2>();
        // Step s has landed for every thread, and every warp is done with the buffer that the
        // copies issued next overwrite (last read in step s - 1).
        __syncthreads();
        const int ahead = s + W::STAGES - 1;
        if (ahead < end) {
            MmqStage<W>& next = ring[(ahead - first) % W::STAGES];
            mmq_issue_w<W>(next, w, row0, ahead, n_rows, n_cols);
            mmq_issue_x<W>(next, xq, xds, tok0, ahead, n_cols, n_tok);
        }
        copies_commit();
        MmqStage<W>& st = ring[(s - first) % W::STAGES];
        const int groups = min(MMQ_STEP_GROUPS, n_groups - s * MMQ_STEP_GROUPS);
        const u8* rows[2] = {&st.w[wr + g][mmq_skew<W>(frag_rows[0], s)],
                             &st.w[wr + g + 8][mmq_skew<W>(frag_rows[1], s)]};
        // The groups' scales of both fragment rows: (d, m), or d of each half.
        float2 sc[2][MMQ_STEP_GROUPS];
        W::scales(rows[0], sc[0]);
        W::scales(rows[1], sc[1]);
#pragma unroll
        for (int k = 0; k < MMQ_STEP_GROUPS; ++k) {
            if (k >= groups) break;  // the same for the whole block
            u32 a[4];
            W::frag(rows[0], k, t, a[0], a[2]);
            W::frag(rows[1], k, t, a[1], a[3]);
            const float2 dw[2] = {sc[0][k], sc[1][k]};
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int tok = wt + 8 * j;
                u32 b[2];
                b[0] = *reinterpret_cast<const u32*>(&st.x[tok + g][32 * k + 4 * t]);
                b[1] = *reinterpret_cast<const u32*>(&st.x[tok + g][32 * k + 16 + 4 * t]);
                const float2 dx0 = st.dx[tok + 2 * t][k], dx1 = st.dx[tok + 2 * t + 1][k];
                if constexpr (W::SPLIT) {
                    // Each half with its own scale: the other half's values zeroed.
                    const u32 lo_a[4] = {a[0], a[1], 0u, 0u}, hi_a[4] = {0u, 0u, a[2], a[3]};
                    int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
                    mma_s8_16832(lo, lo_a, b);
                    mma_s8_16832(hi, hi_a, b);
                    acc[j][0] += dx0.x * (dw[0].x * (float)lo[0] + dw[0].y * (float)hi[0]);
                    acc[j][1] += dx1.x * (dw[0].x * (float)lo[1] + dw[0].y * (float)hi[1]);
                    acc[j][2] += dx0.x * (dw[1].x * (float)lo[2] + dw[1].y * (float)hi[2]);
                    acc[j][3] += dx1.x * (dw[1].x * (float)lo[3] + dw[1].y * (float)hi[3]);
                } else {
                    int c[4] = {0, 0, 0, 0};
                    mma_s8_16832(c, a, b);
                    // As the int8 GEMVs' dots: (dw * dx) * sum, less mw * (dx * sum qx), the
                    // min terms summed apart (one FMA each, subtracted at the end).
                    acc[j][0] += dw[0].x * dx0.x * (float)c[0];
                    acc[j][1] += dw[0].x * dx1.x * (float)c[1];
                    acc[j][2] += dw[1].x * dx0.x * (float)c[2];
                    acc[j][3] += dw[1].x * dx1.x * (float)c[3];
                    if constexpr (W::HAS_MIN) {
                        mins[j][0] += dw[0].y * dx0.y;
                        mins[j][1] += dw[0].y * dx1.y;
                        mins[j][2] += dw[1].y * dx0.y;
                        mins[j][3] += dw[1].y * dx1.y;
                    }
                }
            }
        }
    }
    float sum[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) sum[j][i] = acc[j][i] - mins[j][i];
    if (split.count > 1 &&
        !mmq_last_split<2, MMQ_THREADS>(sum, split, blockIdx.x + gridDim.x * tok_tile, part_of)) {
        return;
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = row0 + wr + g + 8 * (i / 2);
            const int tok = tok0 + wt + 8 * j + 2 * t + i % 2;
            if (row < n_rows && tok < n_tok) {
                float* dst = y + (size_t)tok * n_rows + row;
                *dst = (accumulate ? *dst : 0.f) + sum[j][i];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(MMQ_THREADS)
mmq_q8_0(const u8* w, const i8* xq, const float2* xds, float* y, int n_rows, int n_cols,
         int n_tok, int accumulate, int splits, float* part, u32* counts) {
    mmq<MmqQ8_0>(w, xq, xds, y, n_rows, n_cols, n_tok, accumulate, blockIdx.x,
             {splits, part, counts});
}

extern "C" __global__ void __launch_bounds__(MMQ_THREADS)
mmq_q4_k(const u8* w, const i8* xq, const float2* xds, float* y, int n_rows, int n_cols,
         int n_tok, int accumulate, int splits, float* part, u32* counts) {
    mmq<MmqQ4_K>(w, xq, xds, y, n_rows, n_cols, n_tok, accumulate, blockIdx.x,
             {splits, part, counts});
}

extern "C" __global__ void __launch_bounds__(MMQ_THREADS)
mmq_q6_k(const u8* w, const i8* xq, const float2* xds, float* y, int n_rows, int n_cols,
         int n_tok, int accumulate, int splits, float* part, u32* counts) {
    mmq<MmqQ6_K>(w, xq, xds, y, n_rows, n_cols, n_tok, accumulate, blockIdx.x,
             {splits, part, counts});
}

// Up to three matrices of one type times the same activations in one launch, stored (q, k
// and v; or gate and up, with rows2 = 0): small matrices alone leave most multiprocessors idle.
extern "C" __global__ void __launch_bounds__(MMQ_THREADS)
mmq3_q8_0(const u8* w0, const u8* w1, const u8* w2, const i8* xq, const float2* xds, float* y0,
          float* y1, float* y2, int rows0, int rows1, int rows2, int n_cols, int n_tok,
          int splits, float* part, u32* counts) {
    SEGMENT3(MMQ_ROWS)
    mmq<MmqQ8_0>(w, xq, xds, y, n_rows, n_cols, n_tok, 0, block, {splits, part, counts});
}

extern "C" __global__ void __launch_bounds__(MMQ_THREADS)
mmq3_q4_k(const u8* w0, const u8* w1, const u8* w2, const i8* xq, const float2* xds, float* y0,
          float* y1, float* y2, int rows0, int rows1, int rows2, int n_cols, int n_tok,
          int splits, float* part, u32* counts) {
    SEGMENT3(MMQ_ROWS)
    mmq<MmqQ4_K>(w, xq, xds, y, n_rows, n_cols, n_tok, 0, block, {splits, part, counts});
}

extern "C" __global__ void __launch_bounds__(MMQ_THREADS)
mmq3_q6_k(const u8* w0, const u8* w1, const u8* w2, const i8* xq, const float2* xds, float* y0,
          float* y1, float* y2, int rows0, int rows1, int rows2, int n_cols, int n_tok,
          int splits, float* part, u32* counts) {
    SEGMENT3(MMQ_ROWS)
    mmq<MmqQ6_K>(w, xq, xds, y, n_rows, n_cols, n_tok, 0, block, {splits, part, counts});
}
