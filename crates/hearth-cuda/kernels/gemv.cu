// Fused dequantize + GEMV over weights in GGUF block layout, byte for byte as on disk:
// y[row] = sum_k W[row, k] * x[k], with x and y in f32.
//
// One warp per output row, ROWS_PER_BLOCK warps per thread block. The quantized block sizes
// (18, 34, 144, 210 bytes) are not multiples of 16, so a row is not 16-byte aligned and cannot
// be read with 16-byte loads in place. Each warp instead stages its row through a shared-memory
// window with coalesced 16-byte loads from the aligned address at or below the first block it
// still has to decode:
//
//   row bytes:     ..|--blk b0--|--blk b0+1--|--blk b0+2--|-- ...
//   16-byte loads:   [16][16][16][16][16][16][16][16][16] ...   (start rounded down to 16)
//   window:          skew ^ whole blocks decoded from shared memory; the next window starts at
//                    the first block that did not fit
//
// The last load of a row can read up to 15 bytes past it, so the weight buffer carries 16 bytes
// of padding (the host side allocates it) and must start 16-byte aligned.
//
// Decoding: LANES lanes share one block, each taking EPL consecutive elements, so the lanes of a
// warp read consecutive x values (coalesced float4 loads) and consecutive quant bytes.

#define ROWS_PER_BLOCK 4
#define WINDOW_BYTES 2048
#define WINDOW_VECS (WINDOW_BYTES / 16)
#define VECS_PER_LANE (WINDOW_VECS / WARP_SIZE)

// Q8_0: d (f16) | qs[32] (i8).  x = d * q.
struct BlockQ8_0 {
    static const int BYTES = 34, QK = 32, LANES = 8, EPL = 4;
    __device__ static __forceinline__ float dot(const u8* b, const float* x, int sub) {
        const i8* q = reinterpret_cast<const i8*>(b + 2) + 4 * sub;
        const float4 xv = *reinterpret_cast<const float4*>(x);
        float s = (float)q[0] * xv.x;
        s = fmaf((float)q[1], xv.y, s);
        s = fmaf((float)q[2], xv.z, s);
        s = fmaf((float)q[3], xv.w, s);
        return load_half(b) * s;
    }
};

// Q4_0: d (f16) | qs[16]; elements 0..16 in the low nibbles, 16..32 in the high ones.
// x = d * (q - 8).
struct BlockQ4_0 {
    static const int BYTES = 18, QK = 32, LANES = 8, EPL = 4;
    __device__ static __forceinline__ float dot(const u8* b, const float* x, int sub) {
        const u8* qs = b + 2 + 4 * (sub & 3);
        const int shift = 4 * (sub >> 2);
        const float4 xv = *reinterpret_cast<const float4*>(x);
        float s = (float)(((qs[0] >> shift) & 15) - 8) * xv.x;
        s = fmaf((float)(((qs[1] >> shift) & 15) - 8), xv.y, s);
        s = fmaf((float)(((qs[2] >> shift) & 15) - 8), xv.z, s);
        s = fmaf((float)(((qs[3] >> shift) & 15) - 8), xv.w, s);
        return load_half(b) * s;
    }
};

// Q4_K: d (f16) | dmin (f16) | scales[12] (8 packed 6-bit scales and mins) | qs[128].
// Group g (32 elements) uses nibble g % 2 of qs[32 * (g / 2) ..]; x = d*sc*q - dmin*m.
struct BlockQ4_K {
    static const int BYTES = 144, QK = 256, LANES = 32, EPL = 8;
    __device__ static __forceinline__ float dot(const u8* b, const float* x, int lane) {
        const int g = lane >> 2;
        const u8* sc = b + 4;
        int scale, min;
        if (g < 4) {
            scale = sc[g] & 63;
            min = sc[g + 4] & 63;
        } else {
            scale = (sc[g + 4] & 15) | ((sc[g - 4] >> 6) << 4);
            min = (sc[g + 4] >> 4) | ((sc[g] >> 6) << 4);
        }
        const u8* qs = b + 16 + 32 * (g >> 1) + 8 * (lane & 3);
        const int shift = 4 * (g & 1);
        const float4 x0 = *reinterpret_cast<const float4*>(x);
        const float4 x1 = *reinterpret_cast<const float4*>(x + 4);
        const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        float sq = 0.f, sx = 0.f;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            sq = fmaf((float)((qs[t] >> shift) & 15), xs[t], sq);
            sx += xs[t];
        }
        const float dl = load_half(b) * (float)scale;
        const float ml = load_half(b + 2) * (float)min;
        return dl * sq - ml * sx;
    }
};

// Q6_K: ql[128] | qh[64] | scales[16] (i8) | d (f16).  Element 128n + 32s + l: low nibble of
// ql[64n + 32(s%2) + l] (high nibble for s >= 2), high 2 bits at shift 2s of qh[32n + l];
// x = d * scale[i / 16] * (q - 32).
struct BlockQ6_K {
    static const int BYTES = 210, QK = 256, LANES = 32, EPL = 8;
    __device__ static __forceinline__ float dot(const u8* b, const float* x, int lane) {
        const int n = lane >> 4, s = (lane >> 2) & 3, l = 8 * (lane & 3);
        const u8* ql = b + 64 * n + 32 * (s & 1) + l;
        const u8* qh = b + 128 + 32 * n + l;
        const int lshift = 4 * (s >> 1), hshift = 2 * s;
        const float4 x0 = *reinterpret_cast<const float4*>(x);
        const float4 x1 = *reinterpret_cast<const float4*>(x + 4);
        const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        float sq = 0.f;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int q = ((ql[t] >> lshift) & 15) | (((qh[t] >> hshift) & 3) << 4);
            sq = fmaf((float)(q - 32), xs[t], sq);
        }
        const float scale = (float)reinterpret_cast<const i8*>(b + 192)[lane >> 1];
        return load_half(b + 208) * scale * sq;
    }
};

template <class B>
__device__ __forceinline__ void gemv_rows(const u8* __restrict__ w, const float* __restrict__ x,
                                          float* __restrict__ y, int n_rows, int n_cols) {
    __shared__ uint4 window[ROWS_PER_BLOCK][WINDOW_VECS];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * ROWS_PER_BLOCK + warp;
    // NOTE: a whole warp leaves together and no block-wide barrier follows, so this is safe.
    if (row >= n_rows) return;
    const int n_blocks = n_cols / B::QK;
    const u8* row_ptr = w + (size_t)row * n_blocks * B::BYTES;
    uint4* win = window[warp];
    const u8* win_bytes = reinterpret_cast<const u8*>(win);
    const int lane_block = lane / B::LANES, sub = lane % B::LANES;
    const int blocks_per_step = WARP_SIZE / B::LANES;
    float acc = 0.f;
    for (int b0 = 0; b0 < n_blocks;) {
        const u8* start = row_ptr + (size_t)b0 * B::BYTES;
        const uint4* aligned = reinterpret_cast<const uint4*>(
            reinterpret_cast<size_t>(start) & ~(size_t)15);
        const int skew = (int)(start - reinterpret_cast<const u8*>(aligned));
        const int nb = min((WINDOW_BYTES - skew) / B::BYTES, n_blocks - b0);
        const int n_vecs = (skew + nb * B::BYTES + 15) / 16;
        // All loads first, then all stores: VECS_PER_LANE independent loads in flight per lane.
        uint4 staged[VECS_PER_LANE];
#pragma unroll
        for (int k = 0; k < VECS_PER_LANE; ++k) {
            const int v = lane + k * WARP_SIZE;
            if (v < n_vecs) staged[k] = aligned[v];
        }
#pragma unroll
        for (int k = 0; k < VECS_PER_LANE; ++k) {
            const int v = lane + k * WARP_SIZE;
            if (v < n_vecs) win[v] = staged[k];
        }
        __syncwarp();
        const float* xb = x + (size_t)b0 * B::QK + sub * B::EPL;
        for (int b = lane_block; b < nb; b += blocks_per_step) {
            acc += B::dot(win_bytes + skew + b * B::BYTES, xb + (size_t)b * B::QK, sub);
        }
        __syncwarp();
        b0 += nb;
    }
    acc = warp_sum(acc);
    if (lane == 0) y[row] = acc;
}

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * WARP_SIZE)
gemv_q8_0(const u8* w, const float* x, float* y, int n_rows, int n_cols) {
    gemv_rows<BlockQ8_0>(w, x, y, n_rows, n_cols);
}

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * WARP_SIZE)
gemv_q4_0(const u8* w, const float* x, float* y, int n_rows, int n_cols) {
    gemv_rows<BlockQ4_0>(w, x, y, n_rows, n_cols);
}

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * WARP_SIZE)
gemv_q4_k(const u8* w, const float* x, float* y, int n_rows, int n_cols) {
    gemv_rows<BlockQ4_K>(w, x, y, n_rows, n_cols);
}

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * WARP_SIZE)
gemv_q6_k(const u8* w, const float* x, float* y, int n_rows, int n_cols) {
    gemv_rows<BlockQ6_K>(w, x, y, n_rows, n_cols);
}

// Dot of 8 f16 weights (one 16-byte load) with 8 f32 activations.
__device__ __forceinline__ float dot8_f16(uint4 w, float4 a, float4 b) {
    float s = half_to_f32((u16)(w.x & 0xffff)) * a.x;
    s = fmaf(half_to_f32((u16)(w.x >> 16)), a.y, s);
    s = fmaf(half_to_f32((u16)(w.y & 0xffff)), a.z, s);
    s = fmaf(half_to_f32((u16)(w.y >> 16)), a.w, s);
    s = fmaf(half_to_f32((u16)(w.z & 0xffff)), b.x, s);
    s = fmaf(half_to_f32((u16)(w.z >> 16)), b.y, s);
    s = fmaf(half_to_f32((u16)(w.w & 0xffff)), b.z, s);
    s = fmaf(half_to_f32((u16)(w.w >> 16)), b.w, s);
    return s;
}

// F16 rows are 16-byte aligned when n_cols % 8 == 0 (the host checks), so they are read in
// place: 4 independent 16-byte loads per lane per iteration, consecutive across the warp.
extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK * WARP_SIZE)
gemv_f16(const u8* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
         int n_rows, int n_cols) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * ROWS_PER_BLOCK + warp;
    if (row >= n_rows) return;
    const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)row * n_cols * 2);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int n_vecs = n_cols / 8;
    float acc = 0.f;
    for (int v0 = lane; v0 < n_vecs; v0 += 4 * WARP_SIZE) {
        uint4 r[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int v = v0 + k * WARP_SIZE;
            if (v < n_vecs) r[k] = wr[v];
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int v = v0 + k * WARP_SIZE;
            if (v < n_vecs) acc += dot8_f16(r[k], x4[2 * v], x4[2 * v + 1]);
        }
    }
    acc = warp_sum(acc);
    if (lane == 0) y[row] = acc;
}
