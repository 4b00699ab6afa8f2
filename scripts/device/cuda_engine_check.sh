#!/usr/bin/env bash
# One device call: the engine on the CUDA backend against the CPU backend and the references.
#   1. the engine's CUDA-vs-CPU test and the Hugging Face fixture tests (transformers goldens)
#      with HEARTH_TEST_DEVICE=cuda, from test binaries built with Rust elsewhere and carried in
#      .device-bin/ (scripts/device/build_cuda_bins.sh);
#   2. a real-shape synthetic model (synth_gguf.py, carried), quantized by hearth, checked
#      CUDA-vs-CPU and benchmarked with `hearth bench --device cuda`.
# Logs go to $OUT. MODELS (default qwen3-0.6b) and QUANTS (default Q8_0) pick the models;
# SKIP_TESTS=1 skips step 1; HEARTHS (default .device-bin/hearth) lists the binaries whose
# benchmarks step 2 runs one after the other on each model (to compare two builds in one call).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/.device-bin
out=${OUT:-$(mktemp -d)}
work=${WORK:-$(mktemp -d)}
MODELS=${MODELS:-qwen3-0.6b}
QUANTS=${QUANTS:-Q8_0}
HEARTHS=${HEARTHS:-$bin/hearth}
status=0

if ! ldconfig -p | grep -q 'libnvrtc\.so'; then
  lib=$(find /usr/local /usr/lib /opt -name 'libnvrtc.so.1[0-9]*' 2>/dev/null | sort | head -1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv | tee "$out/gpu.csv" || true
export XDG_CACHE_HOME=$work/cache

[ "${SKIP_TESTS:-0}" = 1 ] || echo "== engine tests on cuda"
for t in cuda_vs_cpu hf_folder hf_archs moe_gguf mlx_folder; do
  [ "${SKIP_TESTS:-0}" = 1 ] && break
  HEARTH_TEST_DEVICE=cuda "$bin/test-engine-$t" --test-threads=1 --nocapture \
    >"$out/test-$t.log" 2>&1 || status=1
  grep -E "^test |test result|relative|skipped|panicked|near-tie" "$out/test-$t.log"
done

export PYTHONPATH=$work/py
python3 -c 'import gguf' 2>/dev/null ||
  python3 -m pip install -q --no-index --find-links "$bin/wheels" --no-deps --target "$work/py" \
    gguf $(python3 -c 'import yaml' 2>/dev/null || echo pyyaml) >/dev/null
for preset in $MODELS; do
  f16=$work/$preset-F16.gguf
  python3 "$bin/synth_gguf.py" "$preset" "$f16" >"$out/synth-$preset.log" 2>&1 || {
    status=1
    tail -5 "$out/synth-$preset.log"
    continue
  }
  for q in $QUANTS; do
    m=$work/$preset-$q.gguf
    "$bin/hearth" quantize "$f16" "$m" "$q" >"$out/quantize-$preset-$q.log" 2>&1 || status=1
    echo "== $preset $q: cuda vs cpu"
    HEARTH_CUDA_TEST_MODELS=$m "$bin/test-engine-cuda_vs_cpu" models_from_the_environment \
      --nocapture 2>&1 | grep -E "relative|near-tie|panicked|test result|skipped" || status=1
    for h in $HEARTHS; do
      tag=$(basename "$h")
      echo "== $preset $q: $tag bench"
      RUST_LOG=warn,hearth_cuda=debug "$h" bench "$m" --device cuda -p 512 -n 128 -r 3 2>&1 |
        tee "$out/bench-$tag-$preset-$q.txt"
      "$h" bench "$m" --device cuda -p 128 -n 128 -r 1 --parallel 64 2>&1 |
        tee "$out/bench-$tag-$preset-$q-par64.txt"
      echo "== $preset $q: $tag time to first token (one 32-token prompt step)"
      "$h" bench "$m" --device cuda -p 32 -n 0 -r 10 2>&1 | grep pp32
    done
    echo "== $preset $q: GPU memory while serving (weights $(stat -c %s "$m") bytes)"
    "$bin/hearth" serve --model "$m" --device cuda --port 18123 --ctx-size 4096 \
      >"$out/serve-$preset-$q.log" 2>&1 &
    pid=$!
    for _ in $(seq 60); do
      curl -sf http://127.0.0.1:18123/health >/dev/null 2>&1 && break
      sleep 0.5
    done
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
    grep -o 'kv_tokens=[0-9]*' "$out/serve-$preset-$q.log" | head -1
    kill "$pid"
    wait "$pid" 2>/dev/null
  done
done
echo "== exit status $status"
exit $status
