// llama.cpp's logits for a fixed sequence of token ids, at every position, on whatever device the
// linked llama.cpp was built for: what `golden_check.py` compares the committed CPU goldens (and
// hearth's CUDA backend) with, to learn how far llama.cpp's own GPU build moves from its CPU.
//
// usage: llama_logits MODEL IDS_FILE OUT_FILE [batched|sequential] [FLASH_ATTN 0|1] [GPU_LAYERS]
//   IDS_FILE  token ids separated by white space
//   OUT_FILE  [n_ids, n_vocab] little-endian f32, row i the logits after ids[0..=i]
//   batched   all ids in one llama_decode (as the goldens were made); sequential: one at a time
//
// Built on the device machine against the llama.cpp tree that bench_cuda.sh builds.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

static int fail(const char *what) {
    std::fprintf(stderr, "llama_logits: %s\n", what);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL IDS_FILE OUT_FILE [batched|sequential] [FA] [NGL]\n",
                     argv[0]);
        return 2;
    }
    std::vector<llama_token> ids;
    {
        std::ifstream f(argv[2]);
        long t;
        while (f >> t) {
            ids.push_back(static_cast<llama_token>(t));
        }
    }
    if (ids.empty()) {
        return fail("no token ids read");
    }
    const bool sequential = argc > 4 && std::strcmp(argv[4], "sequential") == 0;
    const bool flash = argc > 5 && std::strcmp(argv[5], "1") == 0;
    const int n_gpu_layers = argc > 6 ? std::atoi(argv[6]) : 999;

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = n_gpu_layers;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        return fail("cannot load the model");
    }
    llama_context_params cp = llama_context_default_params();
    // The goldens' settings (scripts/make_goldens.py): a 512-token batch, f16 KV cache.
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.flash_attn_type = flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    // With no layer on the GPU, large batches would still have their matmuls offloaded to it.
    cp.op_offload = n_gpu_layers > 0;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        return fail("cannot create a context");
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::vector<float> out(ids.size() * static_cast<size_t>(n_vocab));
    llama_batch batch = llama_batch_init(static_cast<int32_t>(ids.size()), 0, 1);

    // Decodes ids[from..from + n] and keeps each position's logits.
    auto run = [&](size_t from, size_t n) -> bool {
        batch.n_tokens = static_cast<int32_t>(n);
        for (size_t i = 0; i < n; i++) {
            batch.token[i] = ids[from + i];
            batch.pos[i] = static_cast<llama_pos>(from + i);
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = 1;
        }
        if (llama_decode(ctx, batch) != 0) {
            return false;
        }
        for (size_t i = 0; i < n; i++) {
            const float *row = llama_get_logits_ith(ctx, static_cast<int32_t>(i));
            if (!row) {
                return false;
            }
            std::memcpy(&out[(from + i) * n_vocab], row, sizeof(float) * n_vocab);
        }
        return true;
    };
    bool ok = true;
    if (sequential) {
        for (size_t i = 0; i < ids.size() && ok; i++) {
            ok = run(i, 1);
        }
    } else {
        ok = run(0, ids.size());
    }
    if (!ok) {
        return fail("llama_decode failed");
    }
    std::FILE *f = std::fopen(argv[3], "wb");
    if (!f || std::fwrite(out.data(), sizeof(float), out.size(), f) != out.size()) {
        return fail("cannot write the output file");
    }
    std::fclose(f);
    std::printf("%zu positions x %d logits (%s, flash attention %s, %d GPU layers)\n", ids.size(),
                n_vocab, sequential ? "sequential" : "batched", flash ? "on" : "off",
                n_gpu_layers);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
