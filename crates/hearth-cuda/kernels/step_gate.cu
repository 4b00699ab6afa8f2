// The gate of a decode step queued ahead of the host (backend/step_gate.rs): a one-block
// kernel queued before the step's graph that waits until the host has staged the step's data
// (token ids, positions, block tables) in page-locked memory, copies it into the device
// buffer the graph reads, and ends, letting the graph run.
//
// Three words in page-locked memory: the release word, written by the host after the data as
// (bytes << 32) | ticket in one 8-byte store; the last ticket the host called off; and the
// ack. Every gate takes the next ticket (a device counter, in stream order) and waits until
// the release word carries it. A ticket called off copies nothing: the graph runs again on
// the data the device holds from the step before (the same step, replayed, writes the same
// values). A gate that has waited `timeout_ns` does the same, so that a host that never says
// (an error path) delays the stream rather than stopping it. The gate stores the release
// word it acted on in the ack, where the host checks it.

#define GATE_SKIP 0xffffffffu

__device__ __forceinline__ unsigned long long gate_clock_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ unsigned long long gate_word(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// One block. words: the three words, in page-locked host memory (reached at its host address
// under unified addressing); src: the page-locked data; dst: its device copy; ticket: the
// device counter.
extern "C" __global__ void step_gate(unsigned long long* words, const uint4* src, uint4* dst,
                                     u32* ticket, unsigned long long timeout_ns) {
    await_previous_kernels();
    __shared__ unsigned long long seen;
    if (threadIdx.x == 0) {
        const u32 want = *ticket + 1;
        *ticket = want;
        const unsigned long long start = gate_clock_ns();
        unsigned long long h = gate_word(words);
        while ((u32)h != want) {
            if ((u32)gate_word(words + 1) == want || gate_clock_ns() - start > timeout_ns) {
                h = ((unsigned long long)GATE_SKIP << 32) | want;
                break;
            }
            h = gate_word(words);
        }
        seen = h;
        *reinterpret_cast<volatile unsigned long long*>(words + 2) = h;
    }
    __syncthreads();
    const u32 bytes = (u32)(seen >> 32);
    if (bytes == GATE_SKIP) return;
    const u32 n = (bytes + 15) / 16;
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) dst[i] = __ldcv(src + i);
}
