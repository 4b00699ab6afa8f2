// What one dependency between two kernels of a decode step costs, by mechanism. A recorded
// graph runs a chain of K kernels (K = 224: 8 a layer, 28 layers); each block reads a value
// the kernel before wrote, sums its warp and writes. The time per link is the graph's time
// divided by K. Mechanisms:
//   plain        ordinary graph edges
//   pdl-start    programmatic edges, each block lets the next kernel launch at its start,
//                then griddepcontrol.wait (hearth's small kernels)
//   pdl-exit     programmatic edges, the next kernel launches as blocks exit, then
//                griddepcontrol.wait (hearth's GEMVs)
//   flag-start   programmatic edges, trigger at start, no griddepcontrol.wait: block 0's
//                thread 0 spins until every block of the kernel before has bumped its counter
//   flag-exit    the same, the next kernel launching as blocks exit
//   persistent   one cooperative kernel, K phases, a grid barrier (one counter) between them
// Build and run: nvcc -O3 -arch=sm_90 -o sync_latency sync_latency.cu && ./sync_latency
#include <cuda_runtime.h>

#include <cstdio>
#include <initializer_list>
#include <cstdlib>

#define CHECK(x)                                                                         \
    do {                                                                                 \
        cudaError_t e = (x);                                                             \
        if (e != cudaSuccess) {                                                          \
            std::printf("%s failed: %s (line %d)\n", #x, cudaGetErrorString(e), __LINE__); \
            std::exit(1);                                                                \
        }                                                                                \
    } while (0)

constexpr int THREADS = 256;
constexpr int K = 224;

enum Mode { PLAIN, PDL_START, PDL_EXIT, FLAG_START, FLAG_EXIT };

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The work of one phase: a value of the previous phase's output (another block's), a warp
// sum, one write per thread.
__device__ __forceinline__ void phase_work(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = __ldcg(&in[(i * 13 + 7) % n]);
    float s = v;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    out[i] = v * 0.999f + s * 1e-6f;
}

__global__ void link(const float* in, float* out, unsigned* counters, int k, int mode) {
    const int n = gridDim.x * blockDim.x;
    if (mode == PDL_START || mode == FLAG_START)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (mode == PDL_START || mode == PDL_EXIT) asm volatile("griddepcontrol.wait;" ::: "memory");
    if ((mode == FLAG_START || mode == FLAG_EXIT) && k > 0) {
        if (threadIdx.x == 0)
            while (load_acquire(&counters[k - 1]) < gridDim.x) {
            }
        __syncthreads();
    }
    phase_work(in, out, n);
    if (mode == FLAG_START || mode == FLAG_EXIT) {
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(&counters[k], 1u);
        }
    }
}

__global__ void persistent(float* a, float* b, unsigned* barrier) {
    const int n = gridDim.x * blockDim.x;
    for (int k = 0; k < K; ++k) {
        const float* in = (k & 1) ? b : a;
        float* out = (k & 1) ? a : b;
        phase_work(in, out, n);
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(barrier, 1u);
            const unsigned target = (unsigned)(k + 1) * gridDim.x;
            while (load_acquire(barrier) < target) {
            }
        }
        __syncthreads();
    }
}

static const char* NAMES[] = {"plain", "pdl-start", "pdl-exit", "flag-start", "flag-exit"};

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int reps = 200;
    std::printf("%-11s %7s %12s\n", "mechanism", "blocks", "us per link");
    for (int blocks : {16, sms, 2 * sms, 4 * sms}) {
        const size_t n = (size_t)blocks * THREADS;
        float *a, *b;
        unsigned* counters;
        CHECK(cudaMalloc(&a, n * sizeof(float)));
        CHECK(cudaMalloc(&b, n * sizeof(float)));
        CHECK(cudaMalloc(&counters, K * sizeof(unsigned)));
        CHECK(cudaMemset(a, 0, n * sizeof(float)));
        for (int mode = PLAIN; mode <= FLAG_EXIT; ++mode) {
            cudaGraph_t g;
            CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            CHECK(cudaMemsetAsync(counters, 0, K * sizeof(unsigned), s));
            for (int k = 0; k < K; ++k) {
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3(blocks);
                cfg.blockDim = dim3(THREADS);
                cfg.stream = s;
                cudaLaunchAttribute attr[1];
                attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                attr[0].val.programmaticStreamSerializationAllowed = 1;
                cfg.attrs = attr;
                cfg.numAttrs = (mode != PLAIN && k > 0) ? 1 : 0;
                const float* in = (k & 1) ? b : a;
                float* out = (k & 1) ? a : b;
                CHECK(cudaLaunchKernelEx(&cfg, link, in, out, counters, k, mode));
            }
            CHECK(cudaStreamEndCapture(s, &g));
            cudaGraphExec_t ge;
            CHECK(cudaGraphInstantiate(&ge, g, 0));
            for (int i = 0; i < 20; ++i) CHECK(cudaGraphLaunch(ge, s));
            CHECK(cudaEventRecord(e0, s));
            for (int i = 0; i < reps; ++i) CHECK(cudaGraphLaunch(ge, s));
            CHECK(cudaEventRecord(e1, s));
            CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, e0, e1));
            std::printf("%-11s %7d %12.3f\n", NAMES[mode], blocks, ms * 1000.0 / reps / K);
            CHECK(cudaGraphExecDestroy(ge));
            CHECK(cudaGraphDestroy(g));
        }
        // The persistent kernel needs every block resident at once.
        int per_sm = 0;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent, THREADS, 0));
        if (blocks <= per_sm * sms) {
            void* args[] = {&a, &b, &counters};
            float total = 0;
            for (int i = 0; i < 20 + reps; ++i) {
                CHECK(cudaMemsetAsync(counters, 0, sizeof(unsigned), s));
                if (i == 20) CHECK(cudaEventRecord(e0, s));
                CHECK(cudaLaunchCooperativeKernel((void*)persistent, dim3(blocks), dim3(THREADS),
                                                  args, 0, s));
            }
            CHECK(cudaEventRecord(e1, s));
            CHECK(cudaEventSynchronize(e1));
            CHECK(cudaEventElapsedTime(&total, e0, e1));
            std::printf("%-11s %7d %12.3f\n", "persistent", blocks, total * 1000.0 / reps / K);
        }
        CHECK(cudaFree(a));
        CHECK(cudaFree(b));
        CHECK(cudaFree(counters));
    }
    return 0;
}
