#!/usr/bin/env bash
# One device call for the one-kernel decode step (kernels/decode_layers.cu):
#   1. its test against the layers op by op and the CPU, the attention test (whose code it
#      shares), and the engine's CUDA-vs-CPU test on the fixtures, then on real-shape
#      synthetic models with the one-kernel step turned on (HEARTH_CUDA_DECODE_LAYERS=1: one
#      sequence alone takes it);
#   2. binary_ab.sh: the same binary op by op (the default) against the one-kernel step
#      (hearth-one-kernel, a wrapper setting HEARTH_CUDA_DECODE_LAYERS=1).
# Carried in .device-bin/: hearth, test-decode_layers, test-attention,
# test-engine-cuda_vs_cpu, test-engine-scheduled, synth_gguf.py and wheels/.
# Settings: MODELS, QUANTS, ROUNDS, TESTS as binary_ab.sh (defaults: qwen3-0.6b and
# llama-3.1-8b, "tg tg-greedy"); CHECK_QUANTS (default "Q8_0 Q4_K_M") for step 1's synthetic
# Qwen3-0.6B models.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=$PWD/.device-bin
export WORK=${WORK:-$(mktemp -d)}
work=$WORK
status=0
# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh

echo "== op-level and engine tests"
for t in decode_layers attention; do
  timeout 300 "$bin/test-$t" --test-threads=1 --nocapture 2>&1 |
    grep -E "^test |test result|one kernel|panicked|skipped|nmse" || status=1
done
if [ $status != 0 ]; then
  echo "== the one-kernel test failed: no benchmark"
  exit 1
fi
# (The SmolLM2 cases need models that are not carried.)
HEARTH_TEST_DEVICE=cuda timeout 300 "$bin/test-engine-scheduled" tiny_qwen3 --test-threads=1 2>&1 |
  grep -E "^test |test result|panicked" || status=1
timeout 300 "$bin/test-engine-cuda_vs_cpu" --test-threads=1 --nocapture 2>&1 |
  grep -E "^test |test result|relative|near-tie|panicked|skipped" || status=1
models=()
for q in ${CHECK_QUANTS:-Q8_0 Q4_K_M}; do
  m=$work/qwen3-0.6b-$q.gguf
  [ -s "$work/qwen3-0.6b-F16.gguf" ] || python3 "$bin/synth_gguf.py" qwen3-0.6b \
    "$work/qwen3-0.6b-F16.gguf" >/dev/null 2>&1 || status=1
  "$bin/hearth" quantize "$work/qwen3-0.6b-F16.gguf" "$m" "$q" >/dev/null 2>&1 || status=1
  models+=("$m")
done
rm -f "$work/qwen3-0.6b-F16.gguf"
echo "== synthetic models, cuda vs cpu: ${models[*]}"
HEARTH_CUDA_DECODE_LAYERS=1 HEARTH_CUDA_TEST_MODELS=$(IFS=:; echo "${models[*]}") timeout 600 \
  "$bin/test-engine-cuda_vs_cpu" models_from_the_environment --nocapture 2>&1 |
  grep -E "relative|near-tie|panicked|test result|skipped|\.gguf" || status=1

printf '#!/bin/sh\nHEARTH_CUDA_DECODE_LAYERS=1 exec "$(dirname "$0")/hearth" "$@"\n' \
  >"$bin/hearth-one-kernel"
chmod +x "$bin/hearth-one-kernel"
BINARIES="hearth hearth-one-kernel" TESTS=${TESTS:-tg tg-greedy} bash scripts/device/binary_ab.sh ||
  status=1
echo "== exit status $status"
exit $status
