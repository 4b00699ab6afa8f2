// Element-wise dequantization of every GGUF weight type hearth loads, and the kernels built on
// it: embedding rows, weights to f16 for cuBLAS, and a plain GEMV for the types without a fused
// kernel in gemv.cu. One element at a time (each call re-reads its block's scales): simple and
// exact; the hot decode path uses the fused kernels instead.
//
// Type codes are GGML's (GgmlType in hearth-quant).

#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q2_K 10
#define T_Q3_K 11
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_IQ4_NL 20
#define T_BF16 30

__device__ __forceinline__ u32 load_u32_bytes(const u8* p) {
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

// Elements per block and bytes per block of type `t`.
__device__ __forceinline__ void block_shape(int t, int& qk, int& bytes) {
    switch (t) {
        case T_F32: qk = 1; bytes = 4; break;
        case T_F16: case T_BF16: qk = 1; bytes = 2; break;
        case T_Q4_0: case T_IQ4_NL: qk = 32; bytes = 18; break;
        case T_Q4_1: qk = 32; bytes = 20; break;
        case T_Q5_0: qk = 32; bytes = 22; break;
        case T_Q5_1: qk = 32; bytes = 24; break;
        case T_Q8_0: qk = 32; bytes = 34; break;
        case T_Q2_K: qk = 256; bytes = 84; break;
        case T_Q3_K: qk = 256; bytes = 110; break;
        case T_Q4_K: qk = 256; bytes = 144; break;
        case T_Q5_K: qk = 256; bytes = 176; break;
        case T_Q6_K: qk = 256; bytes = 210; break;
        default: qk = 1; bytes = 0; break;
    }
}

__constant__ float IQ4NL_VALUES[16] = {-127.f, -104.f, -83.f, -65.f, -49.f, -35.f, -22.f, -10.f,
                                       1.f,    13.f,   25.f,  38.f,  53.f,  69.f,  89.f,  113.f};

// Element i of the block at b.
__device__ float dequant_elem(int t, const u8* b, int i) {
    switch (t) {
        case T_F32: return *reinterpret_cast<const float*>(b);
        case T_F16: return load_half(b);
        case T_BF16: return __int_as_float((u32)(*reinterpret_cast<const u16*>(b)) << 16);
        case T_Q4_0: case T_IQ4_NL: {
            const int q = (i < 16) ? (b[2 + i] & 15) : (b[2 + i - 16] >> 4);
            return t == T_Q4_0 ? load_half(b) * (float)(q - 8) : load_half(b) * IQ4NL_VALUES[q];
        }
        case T_Q4_1: {
            const int q = (i < 16) ? (b[4 + i] & 15) : (b[4 + i - 16] >> 4);
            return load_half(b) * (float)q + load_half(b + 2);
        }
        case T_Q5_0: case T_Q5_1: {
            const int off = t == T_Q5_0 ? 2 : 4;
            const u32 qh = load_u32_bytes(b + off);
            const u8* qs = b + off + 4;
            const int lo = (i < 16) ? (qs[i] & 15) : (qs[i - 16] >> 4);
            const int q = lo | (((qh >> i) & 1) << 4);
            return t == T_Q5_0 ? load_half(b) * (float)(q - 16)
                               : load_half(b) * (float)q + load_half(b + 2);
        }
        case T_Q8_0: return load_half(b) * (float)reinterpret_cast<const i8*>(b + 2)[i];
        case T_Q2_K: {
            const int n = i / 128, r = i % 128, j = r / 32, l = r % 32;
            const int sc = b[n * 8 + j * 2 + l / 16];
            const int q = (b[16 + n * 32 + l] >> (2 * j)) & 3;
            return load_half(b + 80) * (float)(sc & 15) * (float)q -
                   load_half(b + 82) * (float)(sc >> 4);
        }
        case T_Q3_K: {
            const int n = i / 128, r = i % 128, j = r / 32, l = r % 32;
            const int k = n * 8 + j * 2 + l / 16;
            const u8* scales = b + 96;
            const int lo = k < 8 ? (scales[k] & 15) : (scales[k - 8] >> 4);
            const int hi = (scales[8 + k % 4] >> (2 * (k / 4))) & 3;
            const int q = (b[32 + n * 32 + l] >> (2 * j)) & 3;
            const int high = (b[l] >> (n * 4 + j)) & 1;
            return load_half(b + 108) * (float)((lo | (hi << 4)) - 32) * (float)(q - (high ? 0 : 4));
        }
        case T_Q4_K: case T_Q5_K: {
            const int g = i / 32, l = i % 32;
            int scale, min;
            scale_min_k4(b + 4, g, scale, min);
            const u8* qs = b + (t == T_Q4_K ? 16 : 48);
            int q = (qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 15;
            if (t == T_Q5_K) q |= ((b[16 + l] >> g) & 1) << 4;
            return load_half(b) * (float)scale * (float)q - load_half(b + 2) * (float)min;
        }
        case T_Q6_K: {
            const int n = i / 128, r = i % 128, s = r / 32, l = r % 32;
            const int lo = (b[64 * n + 32 * (s & 1) + l] >> (4 * (s >> 1))) & 15;
            const int hi = (b[128 + 32 * n + l] >> (2 * s)) & 3;
            const float scale = (float)reinterpret_cast<const i8*>(b + 192)[i / 16];
            return load_half(b + 208) * scale * (float)((lo | (hi << 4)) - 32);
        }
        default: return 0.f;
    }
}

// Element c of row r of a [n_rows, n_cols] matrix of type t.
__device__ __forceinline__ float dequant_at(int t, const u8* w, int n_cols, int r, int c) {
    int qk, bytes;
    block_shape(t, qk, bytes);
    const size_t row_bytes = (size_t)(n_cols / qk) * bytes;
    return dequant_elem(t, w + r * row_bytes + (size_t)(c / qk) * bytes, c % qk);
}

// out[i, :] = table[tokens[i], :]: grid (n_tokens), threads over columns.
extern "C" __global__ void embed_rows(const u8* table, int type, int n_cols, const u32* tokens,
                                      float* out) {
    await_previous_kernels();
    const u32 token = tokens[blockIdx.x];
    float* o = out + (size_t)blockIdx.x * n_cols;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        o[c] = dequant_at(type, table, n_cols, token, c);
    }
}

// A whole [n_rows, n_cols] matrix to f16 (row-major), for cuBLAS; n_cols % 32 == 0 (the host
// checks). Each thread turns 32 consecutive elements of one row into 64 bytes written as four
// 16-byte stores; blocks of every type are 1, 32 or 256 elements, so the block index and the
// element in it are a shift and a mask.
extern "C" __global__ void dequant_to_f16(const u8* w, int type, int n_rows, int n_cols,
                                          u16* out) {
    await_previous_kernels();
    int qk, bytes;
    block_shape(type, qk, bytes);
    const int qk_shift = __ffs(qk) - 1;
    const int groups_per_row = n_cols / 32;
    const size_t row_bytes = (size_t)(n_cols >> qk_shift) * bytes;
    const size_t total = (size_t)n_rows * groups_per_row;
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < total;
         g += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(g / groups_per_row), c0 = (int)(g % groups_per_row) * 32;
        const u8* row = w + r * row_bytes;
        u32 packed[16];
#pragma unroll
        for (int i = 0; i < 32; i += 2) {
            const int c = c0 + i;
            const float a = dequant_elem(type, row + (size_t)(c >> qk_shift) * bytes, c & (qk - 1));
            const float b =
                dequant_elem(type, row + (size_t)((c + 1) >> qk_shift) * bytes, (c + 1) & (qk - 1));
            packed[i / 2] = (u32)f32_to_half(a) | ((u32)f32_to_half(b) << 16);
        }
        uint4* dst = reinterpret_cast<uint4*>(out + (size_t)r * n_cols + c0);
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            dst[v] = make_uint4(packed[4 * v], packed[4 * v + 1], packed[4 * v + 2],
                                packed[4 * v + 3]);
        }
    }
}

// y[t, r] (+)= sum_c W[r, c] * x[t, c] for any type: one warp per row, blockIdx.y = token.
extern "C" __global__ void gemv_any(const u8* w, int type, const float* x, float* y, int n_rows,
                                    int n_cols, int accumulate) {
    await_previous_kernels();
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + warp;
    if (row >= n_rows) return;
    const float* xr = x + (size_t)blockIdx.y * n_cols;
    float acc = 0.f;
    for (int c = lane; c < n_cols; c += WARP_SIZE) {
        acc = fmaf(dequant_at(type, w, n_cols, row, c), xr[c], acc);
    }
    acc = warp_sum(acc);
    if (lane != 0) return;
    float* dst = y + (size_t)blockIdx.y * n_rows + row;
    *dst = (accumulate ? *dst : 0.f) + acc;
}

// f32 to f16 (round to nearest even), n values.
extern "C" __global__ void f32_to_f16(const float* x, u16* out, int n) {
    await_previous_kernels();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = f32_to_half(x[i]);
    }
}

// The 32 values of 32-value group `sub` of the block at `b` of type T, as dequant_elem computes
// them, with the group's scales decoded once (dequant_elem decodes them per value).
template <int T>
__device__ __forceinline__ void group_values(const u8* b, int sub, float v[32]) {
    if (T == T_Q8_0) {
        const float d = load_half(b);
        const i8* q = reinterpret_cast<const i8*>(b + 2);
#pragma unroll
        for (int i = 0; i < 32; ++i) v[i] = d * (float)q[i];
    } else if (T == T_Q4_0) {
        const float d = load_half(b);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            v[i] = d * (float)((b[2 + i] & 15) - 8);
            v[i + 16] = d * (float)((b[2 + i] >> 4) - 8);
        }
    } else if (T == T_Q4_K) {
        int scale, min;
        scale_min_k4(b + 4, sub, scale, min);
        const float d = load_half(b), dmin = load_half(b + 2);
        const u8* qs = b + 16 + 32 * (sub / 2);
        const int shift = 4 * (sub % 2);
#pragma unroll
        for (int l = 0; l < 32; ++l) {
            v[l] = d * (float)scale * (float)((qs[l] >> shift) & 15) - dmin * (float)min;
        }
    } else if (T == T_Q6_K) {
        const int n = sub / 4, s = sub % 4;
        const float d = load_half(b + 208);
        const i8* scales = reinterpret_cast<const i8*>(b + 192);
        const u8* ql = b + 64 * n + 32 * (s & 1);
        const u8* qh = b + 128 + 32 * n;
#pragma unroll
        for (int l = 0; l < 32; ++l) {
            const int lo = (ql[l] >> (4 * (s >> 1))) & 15;
            const int hi = (qh[l] >> (2 * s)) & 3;
            v[l] = d * (float)scales[(sub * 32 + l) / 16] * (float)((lo | (hi << 4)) - 32);
        }
    }
}

// dequant_to_f16 for one type known at compile time: each thread turns one 32-value group into
// 64 bytes of f16, decoding the group's scales once.
template <int T, int QK, int BYTES>
__device__ __forceinline__ void dequant_groups_f16(const u8* w, int n_rows, int n_cols, u16* out) {
    const int groups_per_row = n_cols / 32;
    const size_t row_bytes = (size_t)(n_cols / QK) * BYTES;
    const size_t total = (size_t)n_rows * groups_per_row;
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < total;
         g += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(g / groups_per_row), c0 = (int)(g % groups_per_row) * 32;
        const u8* block = w + r * row_bytes + (size_t)(c0 / QK) * BYTES;
        float v[32];
        group_values<T>(block, (c0 % QK) / 32, v);
        u32 packed[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            packed[i] = (u32)f32_to_half(v[2 * i]) | ((u32)f32_to_half(v[2 * i + 1]) << 16);
        }
        uint4* dst = reinterpret_cast<uint4*>(out + (size_t)r * n_cols + c0);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            dst[i] = make_uint4(packed[4 * i], packed[4 * i + 1], packed[4 * i + 2],
                                packed[4 * i + 3]);
        }
    }
}

// dequant_to_f16 specialized for Q8_0, Q4_0, Q4_K and Q6_K (the host sends other types to the
// generic kernel): the weights' GEMM path for prompts and batched decode runs this every step.
extern "C" __global__ void dequant_to_f16_typed(const u8* w, int type, int n_rows, int n_cols,
                                                u16* out) {
    await_previous_kernels();
    switch (type) {
        case T_Q8_0: dequant_groups_f16<T_Q8_0, 32, 34>(w, n_rows, n_cols, out); break;
        case T_Q4_0: dequant_groups_f16<T_Q4_0, 32, 18>(w, n_rows, n_cols, out); break;
        case T_Q4_K: dequant_groups_f16<T_Q4_K, 256, 144>(w, n_rows, n_cols, out); break;
        case T_Q6_K: dequant_groups_f16<T_Q6_K, 256, 210>(w, n_rows, n_cols, out); break;
        default: break;
    }
}
