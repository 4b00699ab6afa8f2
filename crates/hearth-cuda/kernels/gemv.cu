// Fused dequantize + GEMV over weights in GGUF block layout, byte for byte as on disk:
// y[row] = sum_k W[row, k] * x[k], with x and y in f32; blockIdx.y selects one of several
// x / y rows (tokens) that share the weights.
//
// One warp per ROWS_PER_WARP output rows (F16: one row), WARPS_PER_BLOCK warps per block. The
// quantized block sizes (18, 34, 144, 210 bytes) are not multiples of 16, so a row is not
// 16-byte aligned and cannot be read with 16-byte loads in place. Each warp instead stages its row through a shared-memory
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
// warp read consecutive x values (coalesced float4 loads) and consecutive quant bytes. The
// x values are loaded once and used for all ROWS_PER_WARP rows: x is read from L1 far more
// often than weights from memory, and L1 bandwidth is shared with the staging window.
//
// NOTE (measured on an H200, 2026-11-22): the quantized kernels are bound by instruction issue,
// not by memory latency. Prefetching the next window into registers while decoding the current
// one (grid-stride over row groups) changed nothing or lost time, while cutting the
// per-element work (byte_perm instead of int-to-float conversions, x shared by two rows) gained
// 1.3-1.5x. What remains per element is byte_perm + add + fma, plus per-block f16 scale
// conversions (1/8 rate); going further means int8 activations with dp4a or a repacked layout.

// NOTE (H200, `scripts/device/binary_ab.sh`, BENCHMARKS.md 2026-11-29, end of day): 8 warps
// a block (half as many blocks a decode GEMV, whose link to the next kernel costs more the
// more blocks it has; the int8 windows cut to 1504 bytes to fit, which alone changed
// nothing) took Qwen3-0.6B Q8_0 tg128 from 1,374-1,385 to 1,370-1,392 tok/s (`--greedy`
// +1%) but Q4_K_M from 1,422-1,429 to 1,385-1,397 (-2.5%), and the F16 GEMV's host side
// assumed 4 warps. Kept at 4.
#define WARPS_PER_BLOCK 4
#define ROWS_PER_WARP 2
#define WINDOW_BYTES 2048
#define WINDOW_VECS (WINDOW_BYTES / 16)
// Bytes of each row a warp asks L2 for before the kernel before it has ended (see gemv_rows).
// 0, as Q8A_PREFETCH_BYTES (gemv_q8a.cu), where more measured slower.
#ifndef GEMV_PREFETCH_BYTES
#define GEMV_PREFETCH_BYTES 0
#endif
#define VECS_PER_LANE (WINDOW_VECS / WARP_SIZE)

// Small integers to f32 without the (1/8-rate) integer-to-float conversion: a byte placed in
// the mantissa of 2^23 gives the float 2^23 + byte exactly, and subtracting 2^23 + offset
// (exact too) leaves byte - offset. `k` must be a compile-time constant (unrolled loops).
#define MAGIC 8388608.0f
__device__ __forceinline__ float byte_plus_magic(u32 w, int k) {
    return __int_as_float(__byte_perm(w, 0x4B000000u, 0x7440 | k));
}

// 4 bytes at a 2-byte aligned shared-memory address (block fields are only 2-byte aligned).
__device__ __forceinline__ u32 load_u32_a2(const u8* p) {
    const u16* h = reinterpret_cast<const u16*>(p);
    return (u32)h[0] | ((u32)h[1] << 16);
}

// Each block type: BYTES per block, QK elements, LANES lanes per block, EPL elements per lane,
// HAS_MIN when the dot needs the sum of its x values, and dot(): the lane's share of
// block · x, with its EPL x values (and their sum) already in registers.

// Q8_0: d (f16) | qs[32] (i8).  x = d * q.
struct BlockQ8_0 {
    static const int BYTES = 34, QK = 32, LANES = 8, EPL = 4;
    static const bool HAS_MIN = false;
    __device__ static __forceinline__ float dot(const u8* b, const float* xs, float, int sub) {
        const u32 w = load_u32_a2(b + 2 + 4 * sub) ^ 0x80808080u;  // q + 128, unsigned
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < 4; ++k) s = fmaf(byte_plus_magic(w, k) - (MAGIC + 128.f), xs[k], s);
        return load_half(b) * s;
    }
};

// Q4_0: d (f16) | qs[16]; elements 0..16 in the low nibbles, 16..32 in the high ones.
// x = d * (q - 8).
struct BlockQ4_0 {
    static const int BYTES = 18, QK = 32, LANES = 8, EPL = 4;
    static const bool HAS_MIN = false;
    __device__ static __forceinline__ float dot(const u8* b, const float* xs, float, int sub) {
        const u32 w = (load_u32_a2(b + 2 + 4 * (sub & 3)) >> (4 * (sub >> 2))) & 0x0F0F0F0Fu;
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < 4; ++k) s = fmaf(byte_plus_magic(w, k) - (MAGIC + 8.f), xs[k], s);
        return load_half(b) * s;
    }
};

// Q4_K: d (f16) | dmin (f16) | scales[12] (8 packed 6-bit scales and mins) | qs[128].
// Group g (32 elements) uses nibble g % 2 of qs[32 * (g / 2) ..]; x = d*sc*q - dmin*m.
struct BlockQ4_K {
    static const int BYTES = 144, QK = 256, LANES = 32, EPL = 8;
    static const bool HAS_MIN = true;
    __device__ static __forceinline__ float dot(const u8* b, const float* xs, float sx,
                                                int lane) {
        const int g = lane >> 2;
        const u8* sc = b + 4;
        int scale, min;
        scale_min_k4(sc, g, scale, min);
        // NOTE: 144-byte blocks keep every row 16-byte aligned, so the window holds blocks at
        // 16-byte boundaries and this 8-byte load is aligned.
        const uint2 q8 = *reinterpret_cast<const uint2*>(b + 16 + 32 * (g >> 1) + 8 * (lane & 3));
        const int shift = 4 * (g & 1);
        const u32 w0 = (q8.x >> shift) & 0x0F0F0F0Fu, w1 = (q8.y >> shift) & 0x0F0F0F0Fu;
        float sq = 0.f;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            sq = fmaf(byte_plus_magic(w0, k) - MAGIC, xs[k], sq);
            sq = fmaf(byte_plus_magic(w1, k) - MAGIC, xs[k + 4], sq);
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
    static const bool HAS_MIN = false;
    __device__ static __forceinline__ float dot(const u8* b, const float* xs, float, int lane) {
        const int n = lane >> 4, s = (lane >> 2) & 3, l = 8 * (lane & 3);
        const u8* ql = b + 64 * n + 32 * (s & 1) + l;
        const u8* qh = b + 128 + 32 * n + l;
        const int lshift = 4 * (s >> 1), hshift = 2 * s;
        float sq = 0.f;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const u32 lo = (load_u32_a2(ql + 4 * half) >> lshift) & 0x0F0F0F0Fu;
            const u32 hi = ((load_u32_a2(qh + 4 * half) >> hshift) & 0x03030303u) << 4;
            const u32 w = lo | hi;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                sq = fmaf(byte_plus_magic(w, k) - (MAGIC + 32.f), xs[4 * half + k], sq);
            }
        }
        const float scale = (float)reinterpret_cast<const i8*>(b + 192)[lane >> 1];
        return load_half(b + 208) * scale * sq;
    }
};

// ROWS_PER_WARP rows per warp: the x values (and their sums) a lane loads serve every row.
// How a GEMV writes its result: y = W·x, y += W·x, or (two matrices) y = act(G·x) * (U·x).
// GEMV_STORE_BLOCK stores as GEMV_STORE, a block's rows by one instruction (see gemv_finish).
#define GEMV_STORE_BLOCK (-1)
#define GEMV_STORE 0
#define GEMV_ACCUMULATE 1
#define GEMV_GLU_SILU 2
#define GEMV_GLU_GELU 3

// The gated-activation of a GLU, as the glu kernel (model.cu) and the CPU backend compute it.
__device__ __forceinline__ float glu_act(float g, int gelu) {
    if (!gelu) return g / (1.0f + expf(-g));
    if (g <= -10.f) return 0.f;
    if (g >= 10.f) return g;
    const float x = round_f16(g);
    return round_f16(0.5f * x * (1.0f + tanhf(0.7978846f * x * (1.0f + 0.044715f * x * x))));
}

// Stages blocks b0 .. b0 + nb of each row of the warp into its shared-memory window with
// coalesced 16-byte loads; skew[r]: where row r's first block starts in its window.
template <int BYTES>
__device__ __forceinline__ void stage_rows(const u8* const* rows, int b0, int nb,
                                           uint4 (*window)[WINDOW_VECS], int* skew, int lane) {
    uint4 staged[ROWS_PER_WARP][VECS_PER_LANE];
    // All loads first, then all stores: every load of the window in flight at once.
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        const u8* start = rows[r] + (size_t)b0 * BYTES;
        const uint4* aligned =
            reinterpret_cast<const uint4*>(reinterpret_cast<size_t>(start) & ~(size_t)15);
        skew[r] = (int)(start - reinterpret_cast<const u8*>(aligned));
        const int n_vecs = (skew[r] + nb * BYTES + 15) / 16;
#pragma unroll
        for (int k = 0; k < VECS_PER_LANE; ++k) {
            const int v = lane + k * WARP_SIZE;
            if (v < n_vecs) staged[r][k] = aligned[v];
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        const int n_vecs = (skew[r] + nb * BYTES + 15) / 16;
#pragma unroll
        for (int k = 0; k < VECS_PER_LANE; ++k) {
            const int v = lane + k * WARP_SIZE;
            if (v < n_vecs) window[r][v] = staged[r][k];
        }
    }
    __syncwarp();
}

// What an accumulating GEMV adds its sums to (GEMV_ACCUMULATE: the rows' values before it,
// 0 otherwise), loaded by lane 0 right after await_previous_kernels, so that the load is in
// flight during the loop over the row instead of one more wait on L2 after the warp's sums.
// GEMV_EARLY_RESIDUAL 0 loads them in gemv_finish instead (y's own values either way).
// NOTE (H200, `scripts/device/binary_ab.sh`, tg128 / `--greedy`, two rounds, tok/s): Qwen3-0.6B
// Q8_0 1,263.6 / 1,275.8 and 1,301.2 / 1,297.2 -> 1,270.5 / 1,279.1 and 1,318.4 / 1,314.0;
// Llama-3.1-8B Q4_K_M 433.8 / 433.1 and 436.7 / 436.7 -> 437.2 / 439.5 and 442.6 / 441.9.
#ifndef GEMV_EARLY_RESIDUAL
#define GEMV_EARLY_RESIDUAL 1
#endif
// R rows a warp: ROWS_PER_WARP, or more in the int8 kernels for short rows (gemv_q8a.cu
// gemv_rows4_q8a).
template <int R>
struct RowsOf {
    float v[R];
};
typedef RowsOf<ROWS_PER_WARP> RowsBase;
template <int R = ROWS_PER_WARP>
__device__ __forceinline__ RowsOf<R> gemv_rows_base(const float* y, int row0, int n_rows,
                                                    int mode, int lane) {
    RowsOf<R> base;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const bool load = GEMV_EARLY_RESIDUAL && mode == GEMV_ACCUMULATE && lane == 0 &&
                          row0 + r < n_rows;
        base.v[r] = load ? y[row0 + r] : 0.f;
    }
    return base;
}

// Whether four rows a warp are summed by warp_sum4 (1) or one by one (0): the same bits, fewer
// instructions, one more shuffle's latency; for the throughput-bound kernels of four rows a
// warp (gemv_q8a.cu gemv_rows4_q8a).
// NOTE (H200, BENCHMARKS.md 2026-11-29, "before midnight"; Nsight Compute, one decode step's
// output GEMV): Qwen3-0.6B Q4_K_M (Q6_K) 41.24 -> 40.99 µs, 29.97 M -> 29.44 M instructions;
// Q8_0 45.91 -> 45.40 µs, 25.87 M -> 25.15 M.
#ifndef GEMV_SUM4
#define GEMV_SUM4 1
#endif
// Sums each row's per-lane partials over the warp; lane 0 writes the result as `mode` says,
// accumulating modes onto `base` (gemv_rows_base).
template <int R>
__device__ __forceinline__ void gemv_finish(const float* acc, float* y, int row0, int n_rows,
                                            int mode, int lane, const RowsOf<R>& base) {
    float v[R];
    if constexpr (R == 4 && GEMV_SUM4) {
        warp_sum4(acc, v);
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) v[r] = warp_sum(acc[r]);
    }
    if (mode == GEMV_STORE_BLOCK) {
        // For y in page-locked host memory (the logits of a pass that reads them back): over
        // the bus every store instruction is a transfer of its own, so the block's rows go
        // as 32-byte stores rather than as 4-byte ones. Every warp of the block must get
        // here (the host side launches it only for rows in whole blocks).
        constexpr int BLOCK_ROWS = WARPS_PER_BLOCK * R;
        __shared__ float block_rows[BLOCK_ROWS];
        const int warp = threadIdx.x / WARP_SIZE, first = row0 - warp * R;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (lane == 0) block_rows[warp * R + r] = v[r];
        }
        __syncthreads();
        if (threadIdx.x < BLOCK_ROWS) y[first + threadIdx.x] = block_rows[threadIdx.x];
        return;
    }
    if (lane != 0) return;
    if (mode >= GEMV_GLU_SILU) {
        y[row0] = glu_act(v[0], mode == GEMV_GLU_GELU) * v[1];
        return;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (row0 + r >= n_rows) continue;
        const bool late = !GEMV_EARLY_RESIDUAL && mode == GEMV_ACCUMULATE;
        y[row0 + r] = (late ? y[row0 + r] : base.v[r]) + v[r];
    }
}

// Plain modes: a warp computes rows row0, row0+1 of w. GLU modes: a warp computes row r of w
// (the gate) and row r of w2 (the up projection) and writes one value.
template <class B>
__device__ __forceinline__ void gemv_rows(const u8* __restrict__ w, const u8* __restrict__ w2,
                                          const float* __restrict__ x, float* __restrict__ y,
                                          int n_rows, int n_cols, int mode, int block) {
    __shared__ uint4 window[WARPS_PER_BLOCK][ROWS_PER_WARP][WINDOW_VECS];
    // Several tokens: blockIdx.y picks the token's x and y rows (the weights are shared).
    x += (size_t)blockIdx.y * n_cols;
    y += (size_t)blockIdx.y * n_rows;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const bool glu = mode >= GEMV_GLU_SILU;
    const int row0 = (block * WARPS_PER_BLOCK + warp) * (glu ? 1 : ROWS_PER_WARP);
    // NOTE: a whole warp leaves together and no block-wide barrier follows, so this is safe.
    if (row0 >= n_rows) return;
    const int n_blocks = n_cols / B::QK;
    const size_t row_bytes = (size_t)n_blocks * B::BYTES;
    const u8* rows[ROWS_PER_WARP];
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        // Rows past the end repeat the last row (computed, never written).
        rows[r] = glu ? (r == 0 ? w : w2) + (size_t)row0 * row_bytes
                      : w + (size_t)min(row0 + r, n_rows - 1) * row_bytes;
    }
    // The weights no kernel writes: the first GEMV_PREFETCH_BYTES of each row on their way to
    // L2 while the kernel before still runs.
    const size_t early = min(row_bytes, (size_t)GEMV_PREFETCH_BYTES);
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) prefetch_l2(rows[r], early, lane);
    await_previous_kernels();
    const RowsBase base = gemv_rows_base(y, row0, n_rows, mode, lane);
    const int lane_block = lane / B::LANES, sub = lane % B::LANES;
    const int blocks_per_step = WARP_SIZE / B::LANES;
    // Every row of the warp stages the same blocks; room for the worst skew of 15 bytes.
    const int blocks_per_window = (WINDOW_BYTES - 15) / B::BYTES;
    float acc[ROWS_PER_WARP];
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) acc[r] = 0.f;
    for (int b0 = 0; b0 < n_blocks; b0 += blocks_per_window) {
        const int nb = min(blocks_per_window, n_blocks - b0);
        int skew[ROWS_PER_WARP];
        stage_rows<B::BYTES>(rows, b0, nb, window[warp], skew, lane);
        for (int b = lane_block; b < nb; b += blocks_per_step) {
            const float4* xv =
                reinterpret_cast<const float4*>(x + (size_t)(b0 + b) * B::QK + sub * B::EPL);
            float xs[B::EPL];
#pragma unroll
            for (int i = 0; i < B::EPL / 4; ++i) {
                const float4 v = xv[i];
                xs[4 * i] = v.x;
                xs[4 * i + 1] = v.y;
                xs[4 * i + 2] = v.z;
                xs[4 * i + 3] = v.w;
            }
            float sx = 0.f;
            if (B::HAS_MIN) {
#pragma unroll
                for (int i = 0; i < B::EPL; ++i) sx += xs[i];
            }
#pragma unroll
            for (int r = 0; r < ROWS_PER_WARP; ++r) {
                const u8* blk = reinterpret_cast<const u8*>(window[warp][r]) + skew[r];
                acc[r] += B::dot(blk + b * B::BYTES, xs, sx, sub);
            }
        }
        __syncwarp();
    }
    gemv_finish(acc, y, row0, n_rows, mode, lane, base);
}

#define GEMV_THREADS (WARPS_PER_BLOCK * WARP_SIZE)
#define GEMV_ROWS_PER_BLOCK (WARPS_PER_BLOCK * ROWS_PER_WARP)

// Three matrices of one type that read the same x (the q, k and v projections) in one launch:
// the grid's blocks are split among them in order, each segment as many blocks of PER_BLOCK rows
// as its rows need (none for a matrix of 0 rows). Picks this block's matrix (w, y, n_rows) and
// its block number within it.
#define SEGMENT3(PER_BLOCK)                                                               \
    const int b0 = (rows0 + (PER_BLOCK) - 1) / (PER_BLOCK);                               \
    const int b1 = (rows1 + (PER_BLOCK) - 1) / (PER_BLOCK);                               \
    const int seg = blockIdx.x < b0 ? 0 : (blockIdx.x < b0 + b1 ? 1 : 2);                 \
    const u8* w = seg == 0 ? w0 : (seg == 1 ? w1 : w2);                                   \
    float* y = seg == 0 ? y0 : (seg == 1 ? y1 : y2);                                      \
    const int n_rows = seg == 0 ? rows0 : (seg == 1 ? rows1 : rows2);                     \
    const int block = blockIdx.x - (seg == 0 ? 0 : (seg == 1 ? b0 : b0 + b1));

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q8_0(const u8* w, const u8* w2, const float* x, float* y, int n_rows, int n_cols, int mode) {
    gemv_rows<BlockQ8_0>(w, w2, x, y, n_rows, n_cols, mode, blockIdx.x);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv3_q8_0(const u8* w0, const u8* w1, const u8* w2, const float* x, float* y0, float* y1,
          float* y2, int rows0, int rows1, int rows2, int n_cols) {
    SEGMENT3(GEMV_ROWS_PER_BLOCK)
    gemv_rows<BlockQ8_0>(w, nullptr, x, y, n_rows, n_cols, GEMV_STORE, block);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q4_0(const u8* w, const u8* w2, const float* x, float* y, int n_rows, int n_cols, int mode) {
    gemv_rows<BlockQ4_0>(w, w2, x, y, n_rows, n_cols, mode, blockIdx.x);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv3_q4_0(const u8* w0, const u8* w1, const u8* w2, const float* x, float* y0, float* y1,
          float* y2, int rows0, int rows1, int rows2, int n_cols) {
    SEGMENT3(GEMV_ROWS_PER_BLOCK)
    gemv_rows<BlockQ4_0>(w, nullptr, x, y, n_rows, n_cols, GEMV_STORE, block);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q4_k(const u8* w, const u8* w2, const float* x, float* y, int n_rows, int n_cols, int mode) {
    gemv_rows<BlockQ4_K>(w, w2, x, y, n_rows, n_cols, mode, blockIdx.x);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv3_q4_k(const u8* w0, const u8* w1, const u8* w2, const float* x, float* y0, float* y1,
          float* y2, int rows0, int rows1, int rows2, int n_cols) {
    SEGMENT3(GEMV_ROWS_PER_BLOCK)
    gemv_rows<BlockQ4_K>(w, nullptr, x, y, n_rows, n_cols, GEMV_STORE, block);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_q6_k(const u8* w, const u8* w2, const float* x, float* y, int n_rows, int n_cols, int mode) {
    gemv_rows<BlockQ6_K>(w, w2, x, y, n_rows, n_cols, mode, blockIdx.x);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv3_q6_k(const u8* w0, const u8* w1, const u8* w2, const float* x, float* y0, float* y1,
          float* y2, int rows0, int rows1, int rows2, int n_cols) {
    SEGMENT3(GEMV_ROWS_PER_BLOCK)
    gemv_rows<BlockQ6_K>(w, nullptr, x, y, n_rows, n_cols, GEMV_STORE, block);
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
extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
gemv_f16(const u8* __restrict__ w, const u8* __restrict__ w2, const float* __restrict__ x,
         float* __restrict__ y, int n_rows, int n_cols, int mode) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * WARPS_PER_BLOCK + warp;
    if (row >= n_rows) return;
    x += (size_t)blockIdx.y * n_cols;
    y += (size_t)blockIdx.y * n_rows;
    const bool glu = mode >= GEMV_GLU_SILU;
    const size_t early = min((size_t)n_cols * 2, (size_t)GEMV_PREFETCH_BYTES);
    prefetch_l2(w + (size_t)row * n_cols * 2, early, lane);
    if (glu) prefetch_l2(w2 + (size_t)row * n_cols * 2, early, lane);
    await_previous_kernels();
    const RowsBase base = gemv_rows_base(y, row, row + 1, mode, lane);  // one row a warp
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int n_vecs = n_cols / 8;
    float acc[2] = {0.f, 0.f};
    for (int m = 0; m < (glu ? 2 : 1); ++m) {
        const uint4* wr =
            reinterpret_cast<const uint4*>((m == 0 ? w : w2) + (size_t)row * n_cols * 2);
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
                if (v < n_vecs) acc[m] += dot8_f16(r[k], x4[2 * v], x4[2 * v + 1]);
            }
        }
        acc[m] = warp_sum(acc[m]);
    }
    if (lane != 0) return;
    if (glu) {
        y[row] = glu_act(acc[0], mode == GEMV_GLU_GELU) * acc[1];
    } else {
        const bool late = !GEMV_EARLY_RESIDUAL && mode == GEMV_ACCUMULATE;
        y[row] = (late ? y[row] : base.v[0]) + acc[0];
    }
}
