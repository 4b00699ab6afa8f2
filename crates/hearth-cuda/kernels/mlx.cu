// MLX affine group quantization (the mlx-community layout) on the GPU: a GEMV over the packed
// words, a dequantizer to f16 for the cuBLAS path, and embedding rows.
//
//   w       [rows, cols * bits / 32] u32   value j of a word in bits [j*bits, (j+1)*bits)
//   scales  [rows, cols / group]           f32, f16 or bf16 (scale_type: GGML's code 0, 1, 30)
//   biases  like scales
//   w[r, c] = scales[r, c / group] * q[r, c] + biases[r, c / group]
//
// bits is 4 or 8 and group 32, 64 or 128, so a word (8 or 4 values) never straddles a group.
// The GEMV never widens the weight: per four words it adds scale * Σ q·x + bias * Σ x, as the
// CPU backend does per group (hearth-quant's mlx.rs), so the two differ only in f32 summation
// order.

#define MLX_WARPS 4

// Scale or bias `i` of a table of type `type` (GGML codes: 0 f32, 1 f16, 30 bf16).
__device__ __forceinline__ float mlx_param(const u8* p, int type, size_t i) {
    if (type == 0) return reinterpret_cast<const float*>(p)[i];
    const u16 h = reinterpret_cast<const u16*>(p)[i];
    return type == 1 ? half_to_f32(h) : __uint_as_float((u32)h << 16);
}

// Value c of row r, dequantized.
__device__ __forceinline__ float mlx_value(const u32* w, const u8* scales, const u8* biases,
                                           int type, int bits, int group, int cols, size_t r,
                                           int c) {
    const int per_word = 32 / bits;
    const u32 word = w[r * (cols / per_word) + c / per_word];
    const u32 q = (word >> ((c % per_word) * bits)) & ((1u << bits) - 1u);
    const size_t g = r * (cols / group) + c / group;
    return mlx_param(scales, type, g) * (float)q + mlx_param(biases, type, g);
}

// Σ q·x and Σ x over the 32 / BITS values of one packed word, whose x values start at `x4`.
template <int BITS>
__device__ __forceinline__ void mlx_word(u32 word, const float4* x4, float& qx, float& xs) {
    constexpr u32 MASK = (1u << BITS) - 1u;
#pragma unroll
    for (int h = 0; h < 8 / BITS; h++) {
        const float4 v = x4[h];
        const int s = 4 * h * BITS;  // value 4h of the word
        qx += (float)((word >> s) & MASK) * v.x + (float)((word >> (s + BITS)) & MASK) * v.y +
              (float)((word >> (s + 2 * BITS)) & MASK) * v.z +
              (float)((word >> (s + 3 * BITS)) & MASK) * v.w;
        xs += (v.x + v.y) + (v.z + v.w);
    }
}

// out[t, r] (+)= Σ_c w[r, c] x[t, c]: one warp per row, blockIdx.y = token t. Each lane takes
// four consecutive words at a time, one 16-byte load (rows are whole groups of at least 32
// values, so a row starts 16-byte aligned and four words never straddle a group), reads their
// x values as float4 and the group's scale and bias once.
template <int BITS>
__device__ __forceinline__ float mlx_row_dot(const u32* wr, const u8* scales, const u8* biases,
                                             int type, int group, const float* xt, int cols,
                                             size_t params, int lane) {
    constexpr int PER_WORD = 32 / BITS;
    const int words = cols / PER_WORD;
    float acc = 0.f;
    for (int i = 4 * lane; i < words; i += 4 * WARP_SIZE) {
        const uint4 w4 = *reinterpret_cast<const uint4*>(wr + i);
        const int c0 = i * PER_WORD;
        const float4* x4 = reinterpret_cast<const float4*>(xt + c0);
        float qx = 0.f, xs = 0.f;
        mlx_word<BITS>(w4.x, x4, qx, xs);
        mlx_word<BITS>(w4.y, x4 + PER_WORD / 4, qx, xs);
        mlx_word<BITS>(w4.z, x4 + 2 * PER_WORD / 4, qx, xs);
        mlx_word<BITS>(w4.w, x4 + 3 * PER_WORD / 4, qx, xs);
        const size_t g = params + c0 / group;
        acc += mlx_param(scales, type, g) * qx + mlx_param(biases, type, g) * xs;
    }
    return acc;
}

extern "C" __global__ void gemv_mlx(const u32* w, const u8* scales, const u8* biases, int type,
                                    int bits, int group, const float* x, float* out, int rows,
                                    int cols, int accumulate) {
    await_previous_kernels();
    const int lane = threadIdx.x % WARP_SIZE;
    const int r = blockIdx.x * MLX_WARPS + threadIdx.x / WARP_SIZE;
    if (r >= rows) return;
    const float* xt = x + (size_t)blockIdx.y * cols;
    const u32* wr = w + (size_t)r * (cols * bits / 32);
    const size_t params = (size_t)r * (cols / group);
    float acc = bits == 4
                    ? mlx_row_dot<4>(wr, scales, biases, type, group, xt, cols, params, lane)
                    : mlx_row_dot<8>(wr, scales, biases, type, group, xt, cols, params, lane);
    acc = warp_sum(acc);
    if (lane == 0) {
        float* o = out + (size_t)blockIdx.y * rows + r;
        *o = accumulate ? *o + acc : acc;
    }
}

// The whole [rows, cols] matrix to f16 (row-major) for cuBLAS: one thread per packed word.
extern "C" __global__ void dequant_mlx_to_f16(const u32* w, const u8* scales, const u8* biases,
                                              int type, int bits, int group, int rows, int cols,
                                              u16* out) {
    await_previous_kernels();
    const int per_word = 32 / bits;
    const u32 mask = (1u << bits) - 1u;
    const size_t words = (size_t)rows * (cols / per_word);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
         i += (size_t)gridDim.x * blockDim.x) {
        // Row-major words: word i holds elements i * per_word .. of the flattened matrix, all
        // in one row and one group (cols is a whole number of groups).
        const size_t e0 = i * per_word;
        const size_t r = e0 / cols;
        const size_t g = r * (cols / group) + (e0 % cols) / group;
        const float s = mlx_param(scales, type, g), b = mlx_param(biases, type, g);
        const u32 word = w[i];
        for (int j = 0; j < per_word; j++) {
            out[e0 + j] = f32_to_half(s * (float)((word >> (j * bits)) & mask) + b);
        }
    }
}

// out[t] = table[tokens[t]] for an MLX-quantized embedding table.
extern "C" __global__ void embed_mlx_rows(const u32* w, const u8* scales, const u8* biases,
                                          int type, int bits, int group, int cols,
                                          const u32* tokens, float* out) {
    await_previous_kernels();
    const size_t token = tokens[blockIdx.x];
    float* o = out + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        o[c] = mlx_value(w, scales, biases, type, bits, group, cols, token, c);
    }
}
