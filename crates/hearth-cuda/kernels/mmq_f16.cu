// Quantized matrix times f16 activations on tensor cores: the batches mmq.cu takes, with the
// weights dequantized to f16 in registers instead of multiplied as 8-bit integers.
//
// y[t][r] (+)= sum over k of f16(w[r][k]) * x16[t][k], in f32 (m16n8k16 products)
//
// with w[r][k] = q * d - m rounded to f16 once (one fused multiply-add of the exact integer q),
// as the f16 copies that cuBLAS multiplies (dequant.cu), and x16 the activations rounded to f16
// (f32_to_f16). Why: an int8 product (mmq.cu) gives one int32 sum per 32-value group, which
// each thread must convert, scale by both sides' group scales and add, four values per `mma`
// (about 26 instructions per `mma`); here the scales are inside the weights, so a thread
// decodes each weight once per step and every token tile reuses it.
//
// A block of MMF_THREADS computes MMF_ROWS weight rows by MMF_TOKENS tokens in steps of 256
// values, through a ring of two stages in dynamic shared memory: raw weight blocks (mmq.cu's
// layout and skew) and the f16 activations. Each warp takes 16 rows by all 32 tokens.
// NOTE (H200, BENCHMARKS.md 2026-11-29, later): tiles of 64 tokens for batches past 32 (each
// weight decoded once for twice the products: the Q4_K loop's 16.8 instructions a `mma` down
// to 9.2) lost, their shared memory leaving two blocks a multiprocessor instead of four:
// Llama-3.1-8B Q4_K_M 64 sequences 5,461 -> 4,689 tok/s, 96-token prompt 7,165 -> 4,654,
// 128-token prompt 7,579 -> 7,117.
//
// NOTE (H100, 2026-11-26, against the int8 kernels in the same binary, two rounds):
// Llama-3.1-8B Q4_K_M 64-sequence decode 3,583 / 3,600 -> 5,028 / 5,032 tok/s, 32-token prompt
// 3,642 / 3,658 -> 4,587 / 4,617. On every matrix of Qwen3-0.6B it lost (32-token prompt Q8_0
// 16,423 -> 14,019 tok/s, 64 sequences 16,977 -> 15,270): few 64-row tiles over rows of 1,024
// values. So the host takes it for matrices of 4M values or more (backend/mmq.rs).
//
// The order of k inside a 16-value product is free as long as both fragments agree: thread t
// supplies the values 4t .. 4t+3 of each half of a group (fragment columns 2t, 2t+1, 2t+8,
// 2t+9), which are 4 consecutive bytes of the weight block and 8 consecutive bytes of the
// activations.

#define MMF_ROWS 64
#define MMF_TOKENS 32
#define MMF_THREADS 128
#define MMF_N_TILES (MMF_TOKENS / 8)
// Halves per token row of the activation tile: 256 values + 8, so that the eight token rows a
// fragment load touches fall in distinct banks (132 words a row).
#define MMF_X_STRIDE (MMQ_STEP + 8)

// Two f16 lanes at once (PTX; no cuda_fp16.h).
__device__ __forceinline__ u32 sub_f16x2(u32 a, u32 b) {
    u32 d;
    asm("sub.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ u32 fma_f16x2(u32 a, u32 b, u32 c) {
    u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// Bytes b0, b1 (sel 0x4140) or b2, b3 (0x4342) of `u`, unsigned values q + bias, as the f16
// pair (q * s - m): 0x64 above a byte makes the f16 1024 + byte exactly; less 1024 + bias, q.
__device__ __forceinline__ u32 dequant_pair(u32 u, u32 sel, u32 offset, u32 s, u32 m) {
    const u32 h = __byte_perm(u, 0x64646464u, sel);
    return fma_f16x2(sub_f16x2(h, offset), s, m);
}

// The f16 pair (v, v).
__device__ __forceinline__ u32 half2_of(float v) {
    const u32 h = f32_to_half(v);
    return h | (h << 16);
}

// Each weight type's 4 unsigned bytes of group j, values at .. at+3 (q + BIAS each), from the
// row's staged bytes.
struct MmfQ8_0 {
    static const u32 BIAS = 128;
    __device__ static __forceinline__ u32 raw4(const u8* row, int j, int at) {
        return load_u32_a2(row + 34 * j + 2 + at) ^ 0x80808080u;
    }
};
struct MmfQ4_K {
    static const u32 BIAS = 0;
    __device__ static __forceinline__ u32 raw4(const u8* row, int j, int at) {
        const u32 v = *reinterpret_cast<const u32*>(row + 16 + 32 * (j / 2) + at);
        return (v >> (4 * (j % 2))) & 0x0F0F0F0Fu;
    }
};
struct MmfQ6_K {
    static const u32 BIAS = 32;
    __device__ static __forceinline__ u32 raw4(const u8* row, int j, int at) {
        const int n = j >> 2, s = j & 3;
        const u8* ql = row + 64 * n + 32 * (s & 1);
        const u8* qh = row + 128 + 32 * n;
        const u32 lo = (load_u32_a2(ql + at) >> (4 * (s >> 1))) & 0x0F0F0F0Fu;
        const u32 hi = ((load_u32_a2(qh + at) >> (2 * s)) & 0x03030303u) << 4;
        return lo | hi;
    }
};

template <class W>
struct MmfStage {
    u8 w[MMF_ROWS][W::W_STRIDE];
    u16 x[MMF_TOKENS][MMF_X_STRIDE];
};

// The tile of rows row_block * MMF_ROWS .. and tokens tok_tile * MMF_TOKENS .., or the part of
// its steps `split` gives this block; grid: (row blocks, ceil(n_tok / MMF_TOKENS) * split.count).
// W: mmq.cu's type (bytes, staging, scales); F: the f16 decoding above.
template <class W, class F>
__device__ __forceinline__ void mmf(const u8* __restrict__ w, const u16* __restrict__ xh,
                                    float* __restrict__ y, int n_rows, int n_cols, int n_tok,
                                    int accumulate, int row_block, MmqSplit split) {
    extern __shared__ __align__(16) u8 mmf_shared[];
    MmfStage<W>* ring = reinterpret_cast<MmfStage<W>*>(mmf_shared);
    const int tok_tile = blockIdx.y / split.count, part_of = blockIdx.y % split.count;
    const int row0 = row_block * MMF_ROWS, tok0 = tok_tile * MMF_TOKENS;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, t = lane % 4;
    const int wr = 16 * warp;
    const int n_groups = n_cols / 32;
    const int n_steps = (n_groups + MMQ_STEP_GROUPS - 1) / MMQ_STEP_GROUPS;
    const int first = part_of * n_steps / split.count;
    const int end = (part_of + 1) * n_steps / split.count;
    const size_t row_bytes = (size_t)(n_cols / W::QK) * W::BYTES;
    const u8* frag_rows[2] = {w + (size_t)min(row0 + wr + g, n_rows - 1) * row_bytes,
                              w + (size_t)min(row0 + wr + g + 8, n_rows - 1) * row_bytes};
    const u32 offset = half2_of(1024.f + (float)F::BIAS);

    float acc[MMF_N_TILES][4];
#pragma unroll
    for (int n = 0; n < MMF_N_TILES; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;

    issue_weight_rows<W, MMF_ROWS, MMF_THREADS>(ring[0].w, w, row0, first, n_rows, n_cols);
    await_previous_kernels();
    if (first < end) {
        issue_activation_rows<2, MMF_TOKENS, MMF_THREADS, MMF_X_STRIDE * 2>(
            reinterpret_cast<u8*>(&ring[0].x[0][0]), reinterpret_cast<const u8*>(xh), tok0,
            first, n_cols, n_tok);
    }
    copies_commit();
    for (int s = first; s < end; ++s) {
        copies_wait<0>();
        // Step s has landed, and every warp is done with the other buffer (step s - 1).
        __syncthreads();
        if (s + 1 < end) {
            MmfStage<W>& next = ring[(s + 1 - first) % 2];
            issue_weight_rows<W, MMF_ROWS, MMF_THREADS>(next.w, w, row0, s + 1, n_rows, n_cols);
            issue_activation_rows<2, MMF_TOKENS, MMF_THREADS, MMF_X_STRIDE * 2>(
                reinterpret_cast<u8*>(&next.x[0][0]), reinterpret_cast<const u8*>(xh), tok0,
                s + 1, n_cols, n_tok);
        }
        copies_commit();
        MmfStage<W>& st = ring[(s - first) % 2];
        const int groups = min(MMQ_STEP_GROUPS, n_groups - s * MMQ_STEP_GROUPS);
        const u8* rows[2] = {&st.w[wr + g][mmq_skew<W>(frag_rows[0], s)],
                             &st.w[wr + g + 8][mmq_skew<W>(frag_rows[1], s)]};
        float2 sc[2][MMQ_STEP_GROUPS];
        W::scales(rows[0], sc[0]);
        W::scales(rows[1], sc[1]);
#pragma unroll
        for (int k = 0; k < MMQ_STEP_GROUPS; ++k) {
            if (k >= groups) break;  // the same for the whole block
            // a[h]: the A fragment of half h (values 16h ..) of group k: rows g and g + 8,
            // values 4t, 4t + 1 then 4t + 2, 4t + 3.
            u32 a[2][4];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    // Scale and min of this half: (d, m), or for split types d of each half.
                    const float d = W::SPLIT ? (h ? sc[r][k].y : sc[r][k].x) : sc[r][k].x;
                    const float m = (W::HAS_MIN && !W::SPLIT) ? sc[r][k].y : 0.f;
                    const u32 s2 = half2_of(d), m2 = half2_of(-m);
                    const u32 u = F::raw4(rows[r], k, 16 * h + 4 * t);
                    a[h][r] = dequant_pair(u, 0x4140u, offset, s2, m2);
                    a[h][2 + r] = dequant_pair(u, 0x4342u, offset, s2, m2);
                }
            }
#pragma unroll
            for (int n = 0; n < MMF_N_TILES; ++n) {
                const u16* xr = &st.x[8 * n + g][32 * k + 4 * t];
                const uint2 b0 = *reinterpret_cast<const uint2*>(xr);
                const uint2 b1 = *reinterpret_cast<const uint2*>(xr + 16);
                mma_f16(acc[n], a[0], b0.x, b0.y);
                mma_f16(acc[n], a[1], b1.x, b1.y);
            }
        }
    }
    if (split.count > 1 &&
        !mmq_last_split<MMF_N_TILES, MMF_THREADS>(acc, split, blockIdx.x + gridDim.x * tok_tile,
                                                  part_of)) {
        return;
    }
#pragma unroll
    for (int n = 0; n < MMF_N_TILES; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = row0 + wr + g + 8 * (i / 2);
            const int tok = tok0 + 8 * n + 2 * t + i % 2;
            if (row < n_rows && tok < n_tok) {
                float* dst = y + (size_t)tok * n_rows + row;
                *dst = (accumulate ? *dst : 0.f) + acc[n][i];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(MMF_THREADS)
mmf_q8_0(const u8* w, const u16* xh, float* y, int n_rows, int n_cols, int n_tok,
         int accumulate, int splits, float* part, u32* counts) {
    mmf<MmqQ8_0, MmfQ8_0>(w, xh, y, n_rows, n_cols, n_tok, accumulate, blockIdx.x,
                          {splits, part, counts});
}

extern "C" __global__ void __launch_bounds__(MMF_THREADS)
mmf_q4_k(const u8* w, const u16* xh, float* y, int n_rows, int n_cols, int n_tok,
         int accumulate, int splits, float* part, u32* counts) {
    mmf<MmqQ4_K, MmfQ4_K>(w, xh, y, n_rows, n_cols, n_tok, accumulate, blockIdx.x,
                          {splits, part, counts});
}

extern "C" __global__ void __launch_bounds__(MMF_THREADS)
mmf_q6_k(const u8* w, const u16* xh, float* y, int n_rows, int n_cols, int n_tok,
         int accumulate, int splits, float* part, u32* counts) {
    mmf<MmqQ6_K, MmfQ6_K>(w, xh, y, n_rows, n_cols, n_tok, accumulate, blockIdx.x,
                          {splits, part, counts});
}

// Up to three matrices of one type times the same activations in one launch (q, k and v; gate
// and up with rows2 = 0), as mmq3_*.
extern "C" __global__ void __launch_bounds__(MMF_THREADS)
mmf3_q8_0(const u8* w0, const u8* w1, const u8* w2, const u16* xh, float* y0, float* y1,
          float* y2, int rows0, int rows1, int rows2, int n_cols, int n_tok, int splits,
          float* part, u32* counts) {
    SEGMENT3(MMF_ROWS)
    mmf<MmqQ8_0, MmfQ8_0>(w, xh, y, n_rows, n_cols, n_tok, 0, block, {splits, part, counts});
}

extern "C" __global__ void __launch_bounds__(MMF_THREADS)
mmf3_q4_k(const u8* w0, const u8* w1, const u8* w2, const u16* xh, float* y0, float* y1,
          float* y2, int rows0, int rows1, int rows2, int n_cols, int n_tok, int splits,
          float* part, u32* counts) {
    SEGMENT3(MMF_ROWS)
    mmf<MmqQ4_K, MmfQ4_K>(w, xh, y, n_rows, n_cols, n_tok, 0, block, {splits, part, counts});
}

extern "C" __global__ void __launch_bounds__(MMF_THREADS)
mmf3_q6_k(const u8* w0, const u8* w1, const u8* w2, const u16* xh, float* y0, float* y1,
          float* y2, int rows0, int rows1, int rows2, int n_cols, int n_tok, int splits,
          float* part, u32* counts) {
    SEGMENT3(MMF_ROWS)
    mmf<MmqQ6_K, MmfQ6_K>(w, xh, y, n_rows, n_cols, n_tok, 0, block, {splits, part, counts});
}
