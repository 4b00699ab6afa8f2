// Quantized matrix times int8 activations on tensor cores, for batches too large for the GEMVs
// (each token would read every weight again) and too small for dequantizing every weight to
// f16 for cuBLAS (which writes and reads back twice the weight bytes per step): decode steps of
// many sequences and short prompts.
//
// y[t][r] (+)= sum over 32-value groups g of dw[r][g] * dx[t][g] * sum_k qw[r][32g+k] qx[t][32g+k]
//
// with the activations as quantize_q8_1 writes them (gemv_q8a.cu): the same products as the
// int8 GEMVs, so the same bits per group; the groups are summed in the same (ascending) order.
//
// A block of MMQ_THREADS computes a tile of MMQ_ROWS weight rows by MMQ_TOKENS tokens. The
// weight and activation values of MMQ_GROUPS groups at a time go through shared memory as int8
// rows (the weights' block scales apart, as f32); each warp takes 16 rows by 16 tokens:
// per group, two m16n8k32 integer products whose int32 sums are scaled into f32 sums. The next
// stage's global loads are issued before the current stage's products.

#define MMQ_ROWS 32
#define MMQ_TOKENS 32
#define MMQ_GROUPS 4
#define MMQ_THREADS 128
// Row stride of the int8 tiles in shared memory: 128 values + 16 bytes of padding, so that the
// eight rows a fragment load touches fall in distinct banks.
#define MMQ_STRIDE (MMQ_GROUPS * 32 + 16)

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

// One stage held in registers between its global loads and its shared-memory stores. Thread
// i takes weight row i / 4 and token i / 4, group g0 + i % 4 of each (MMQ_THREADS = 4 *
// MMQ_ROWS = 4 * MMQ_TOKENS, MMQ_GROUPS = 4).
struct MmqStage {
    u32 qw[8];  // the weight group's 32 values
    float dw;
    float mw;   // the group's min (types with one; value = dw * q - mw)
    uint4 qx[2];  // the token's 32 values
    float2 dx;  // (d, d * sum q)
};

// The group's activations (zero for tokens or groups past the end).
__device__ __forceinline__ void mmq_load_x(MmqStage& s, const i8* __restrict__ xq,
                                           const float2* __restrict__ xds, int tok0, int g0,
                                           int n_cols, int n_tok) {
    const int n_groups = n_cols / 32;
    const int t = tok0 + threadIdx.x / 4, g = g0 + threadIdx.x % 4;
    const bool in = t < n_tok && g < n_groups;
    const uint4* src = reinterpret_cast<const uint4*>(xq + (size_t)t * n_cols + (size_t)g * 32);
    s.qx[0] = in ? src[0] : make_uint4(0, 0, 0, 0);
    s.qx[1] = in ? src[1] : make_uint4(0, 0, 0, 0);
    s.dx = in ? xds[(size_t)t * n_groups + g] : make_float2(0.f, 0.f);
}

// Weight loaders: `load` puts 32-value group g of row `row` (both in range) into the stage as
// int8 values, its scale and (HAS_MIN) its min.

// Q8_0: d (f16) | qs[32], 34-byte blocks, so only 2-byte aligned: 17 16-bit loads.
struct MmqQ8_0 {
    static const bool HAS_MIN = false;
    __device__ static __forceinline__ void load(MmqStage& s, const u8* __restrict__ w, int row,
                                                int g, int n_cols) {
        const int n_groups = n_cols / 32;
        const unsigned short* b = reinterpret_cast<const unsigned short*>(
            w + (size_t)row * n_groups * 34 + (size_t)g * 34);
        s.dw = half_to_f32(b[0]);
        s.mw = 0.f;
#pragma unroll
        for (int k = 0; k < 8; ++k) s.qw[k] = (u32)b[1 + 2 * k] | ((u32)b[2 + 2 * k] << 16);
    }
};

// Q4_K: d | dmin | scales[12] | qs[128] per 256 values; group j of a block is nibble j % 2 of
// qs[32 * (j / 2) ..], with a 6-bit scale and min (as the int8 GEMV decodes them). The scale
// and min are multiplied in the GEMV's order: (d * scale) and (dmin * min).
struct MmqQ4_K {
    static const bool HAS_MIN = true;
    __device__ static __forceinline__ void load(MmqStage& s, const u8* __restrict__ w, int row,
                                                int g, int n_cols) {
        const u8* b = w + ((size_t)row * (n_cols / 256) + g / 8) * 144;
        const int j = g % 8;
        const u8* sc = b + 4;
        int scale, min;
        scale_min_k4(sc, j, scale, min);
        s.dw = load_half(b) * (float)scale;
        s.mw = load_half(b + 2) * (float)min;
        const uint4* q = reinterpret_cast<const uint4*>(b + 16 + 32 * (j / 2));
        const int shift = 4 * (j % 2);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint4 v = q[h];
            s.qw[4 * h + 0] = (v.x >> shift) & 0x0F0F0F0Fu;
            s.qw[4 * h + 1] = (v.y >> shift) & 0x0F0F0F0Fu;
            s.qw[4 * h + 2] = (v.z >> shift) & 0x0F0F0F0Fu;
            s.qw[4 * h + 3] = (v.w >> shift) & 0x0F0F0F0Fu;
        }
    }
};

// This thread's weight group of the stage starting at group g0. Rows past the end read the last
// row (computed, never stored); groups past the end are zero.
template <class W>
__device__ __forceinline__ void mmq_load_w(MmqStage& s, const u8* __restrict__ w, int row0,
                                           int g0, int n_rows, int n_cols) {
    const int row = min(row0 + (int)threadIdx.x / 4, n_rows - 1), g = g0 + threadIdx.x % 4;
    if (g >= n_cols / 32) {
#pragma unroll
        for (int k = 0; k < 8; ++k) s.qw[k] = 0;
        s.dw = 0.f;
        s.mw = 0.f;
        return;
    }
    W::load(s, w, row, g, n_cols);
}

__device__ __forceinline__ void mmq_store(const MmqStage& s, i8 (*sw)[MMQ_STRIDE],
                                          float2 (*sdw)[MMQ_GROUPS], i8 (*sx)[MMQ_STRIDE],
                                          float2 (*sdx)[MMQ_GROUPS]) {
    const int r = threadIdx.x / 4, g = threadIdx.x % 4;
    uint4* dw = reinterpret_cast<uint4*>(&sw[r][32 * g]);
    dw[0] = make_uint4(s.qw[0], s.qw[1], s.qw[2], s.qw[3]);
    dw[1] = make_uint4(s.qw[4], s.qw[5], s.qw[6], s.qw[7]);
    sdw[r][g] = make_float2(s.dw, s.mw);
    uint4* dx = reinterpret_cast<uint4*>(&sx[r][32 * g]);
    dx[0] = s.qx[0];
    dx[1] = s.qx[1];
    sdx[r][g] = s.dx;
}

// One group's contribution: w = (scale, min) of the weight group, x = (d, d * sum q).
__device__ __forceinline__ float mmq_group(float2 w, float2 x, int sum, bool has_min) {
    const float v = w.x * x.x * (float)sum;
    return has_min ? v - w.y * x.y : v;
}

// Grid: (ceil(n_rows / MMQ_ROWS), ceil(n_tok / MMQ_TOKENS)). n_cols is a multiple of 32 (of
// 256 for K-quants).
template <class W>
__device__ __forceinline__ void mmq(const u8* __restrict__ w, const i8* __restrict__ xq,
                                    const float2* __restrict__ xds, float* __restrict__ y,
                                    int n_rows, int n_cols, int n_tok, int accumulate) {
    await_previous_kernels();
    __shared__ __align__(16) i8 sw[MMQ_ROWS][MMQ_STRIDE];
    __shared__ __align__(16) i8 sx[MMQ_TOKENS][MMQ_STRIDE];
    __shared__ float2 sdw[MMQ_ROWS][MMQ_GROUPS];
    __shared__ float2 sdx[MMQ_TOKENS][MMQ_GROUPS];
    const int row0 = blockIdx.x * MMQ_ROWS, tok0 = blockIdx.y * MMQ_TOKENS;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, t = lane % 4;  // the fragments' group and thread-in-group
    const int wr = 16 * (warp / 2), wt = 16 * (warp % 2);  // the warp's rows and tokens
    const int n_groups = n_cols / 32;

    float acc[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;

    MmqStage stage;
    mmq_load_w<W>(stage, w, row0, 0, n_rows, n_cols);
    mmq_load_x(stage, xq, xds, tok0, 0, n_cols, n_tok);
    for (int g0 = 0; g0 < n_groups; g0 += MMQ_GROUPS) {
        __syncthreads();  // the previous stage's products are done with the tiles
        mmq_store(stage, sw, sdw, sx, sdx);
        __syncthreads();
        if (g0 + MMQ_GROUPS < n_groups) {
            mmq_load_w<W>(stage, w, row0, g0 + MMQ_GROUPS, n_rows, n_cols);
            mmq_load_x(stage, xq, xds, tok0, g0 + MMQ_GROUPS, n_cols, n_tok);
        }
#pragma unroll
        for (int k = 0; k < MMQ_GROUPS; ++k) {
            u32 a[4];
            a[0] = *reinterpret_cast<const u32*>(&sw[wr + g][32 * k + 4 * t]);
            a[1] = *reinterpret_cast<const u32*>(&sw[wr + g + 8][32 * k + 4 * t]);
            a[2] = *reinterpret_cast<const u32*>(&sw[wr + g][32 * k + 16 + 4 * t]);
            a[3] = *reinterpret_cast<const u32*>(&sw[wr + g + 8][32 * k + 16 + 4 * t]);
            const float2 dw0 = sdw[wr + g][k], dw1 = sdw[wr + g + 8][k];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int tok = wt + 8 * j;
                u32 b[2];
                b[0] = *reinterpret_cast<const u32*>(&sx[tok + g][32 * k + 4 * t]);
                b[1] = *reinterpret_cast<const u32*>(&sx[tok + g][32 * k + 16 + 4 * t]);
                int c[4] = {0, 0, 0, 0};
                mma_s8_16832(c, a, b);
                const float2 dx0 = sdx[tok + 2 * t][k], dx1 = sdx[tok + 2 * t + 1][k];
                // As the int8 GEMVs' dots: (dw * dx) * sum, less mw * (dx * sum qx).
                acc[j][0] += mmq_group(dw0, dx0, c[0], W::HAS_MIN);
                acc[j][1] += mmq_group(dw0, dx1, c[1], W::HAS_MIN);
                acc[j][2] += mmq_group(dw1, dx0, c[2], W::HAS_MIN);
                acc[j][3] += mmq_group(dw1, dx1, c[3], W::HAS_MIN);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = row0 + wr + g + 8 * (i / 2);
            const int tok = tok0 + wt + 8 * j + 2 * t + i % 2;
            if (row < n_rows && tok < n_tok) {
                float* dst = y + (size_t)tok * n_rows + row;
                *dst = (accumulate ? *dst : 0.f) + acc[j][i];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(MMQ_THREADS)
mmq_q8_0(const u8* w, const i8* xq, const float2* xds, float* y, int n_rows, int n_cols,
         int n_tok, int accumulate) {
    mmq<MmqQ8_0>(w, xq, xds, y, n_rows, n_cols, n_tok, accumulate);
}

extern "C" __global__ void __launch_bounds__(MMQ_THREADS)
mmq_q4_k(const u8* w, const i8* xq, const float2* xds, float* y, int n_rows, int n_cols,
         int n_tok, int accumulate) {
    mmq<MmqQ4_K>(w, xq, xds, y, n_rows, n_cols, n_tok, accumulate);
}
