// Int8 matrix product for Q8_0 weights at batch sizes past the GEMV's (decode steps of many
// sequences, short prompts): the weights' 8-bit values times the activations' (quantize_q8_1)
// on tensor cores, m16n8k32 with 32-bit integer sums per 32-value block, scaled by both
// blocks' f16 scales into f32 sums, which is the CPU backend's Q8_0 x Q8_0 dot product
// (per block an exact integer sum times d_w * d_x) in another order. No f16 copy of the
// weights is made.
//
// out[t, r] (+)= sum over blocks b of dw[r, b] * dx[t, b] * sum_k qw[r, 32b + k] * qx[t, 32b + k]
// Grid: (ceil(rows / 32), ceil(tokens / 64)); 4 warps, warp w takes tokens 16w .. 16w + 15 of
// the block's 64 and all 32 of its weight rows (4 n-tiles of 8).

#define MMQ_ROWS 32
#define MMQ_TOKENS 64

__device__ __forceinline__ void mma_s8(int (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(128)
mmq_q8_0(const u8* __restrict__ w, const i8* __restrict__ xq, const float2* __restrict__ xds,
         float* __restrict__ out, int rows, int cols, int tokens, int accumulate) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, c = lane % 4;
    const int r0 = blockIdx.x * MMQ_ROWS;
    const int t_a = blockIdx.y * MMQ_TOKENS + warp * 16 + g, t_b = t_a + 8;
    const bool ok_a = t_a < tokens, ok_b = t_b < tokens;
    const int nb = cols / 32;
    const i8* xa = xq + (size_t)t_a * cols + 4 * c;
    const i8* xb = xq + (size_t)t_b * cols + 4 * c;
    float acc[4][4];
#pragma unroll
    for (int n = 0; n < 4; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    if (blockIdx.y * MMQ_TOKENS + warp * 16 >= tokens) return;
    for (int b = 0; b < nb; ++b) {
        u32 a[4];
        a[0] = ok_a ? *reinterpret_cast<const u32*>(xa + 32 * b) : 0u;
        a[1] = ok_b ? *reinterpret_cast<const u32*>(xb + 32 * b) : 0u;
        a[2] = ok_a ? *reinterpret_cast<const u32*>(xa + 32 * b + 16) : 0u;
        a[3] = ok_b ? *reinterpret_cast<const u32*>(xb + 32 * b + 16) : 0u;
        const float dxa = ok_a ? xds[(size_t)t_a * nb + b].x : 0.f;
        const float dxb = ok_b ? xds[(size_t)t_b * nb + b].x : 0.f;
#pragma unroll
        for (int n = 0; n < 4; ++n) {
            // B fragment: weight row r0 + 8n + g, values 4c .. 4c + 3 and 16 + 4c ...
            const int r = r0 + 8 * n + g;
            u32 b0 = 0u, b1 = 0u;
            if (r < rows) {
                const u8* blk = w + ((size_t)r * nb + b) * 34;
                b0 = load_u32_a2(blk + 2 + 4 * c);
                b1 = load_u32_a2(blk + 2 + 16 + 4 * c);
            }
            int s[4] = {0, 0, 0, 0};
            mma_s8(s, a, b0, b1);
            // Scales of the two weight rows this thread's sums belong to: 8n + 2c and + 1.
            const int rc = r0 + 8 * n + 2 * c;
            const float dw0 = rc < rows ? load_half(w + ((size_t)rc * nb + b) * 34) : 0.f;
            const float dw1 = rc + 1 < rows ? load_half(w + ((size_t)(rc + 1) * nb + b) * 34) : 0.f;
            acc[n][0] = fmaf((float)s[0], dxa * dw0, acc[n][0]);
            acc[n][1] = fmaf((float)s[1], dxa * dw1, acc[n][1]);
            acc[n][2] = fmaf((float)s[2], dxb * dw0, acc[n][2]);
            acc[n][3] = fmaf((float)s[3], dxb * dw1, acc[n][3]);
        }
    }
#pragma unroll
    for (int n = 0; n < 4; ++n) {
        const int rc = r0 + 8 * n + 2 * c;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int t = e < 2 ? t_a : t_b, r = rc + (e & 1);
            if (t >= tokens || r >= rows) continue;
            float* o = out + (size_t)t * rows + r;
            *o = accumulate ? *o + acc[n][e] : acc[n][e];
        }
    }
}
