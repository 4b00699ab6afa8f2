#!/usr/bin/env bash
# One device call: greedy decoding with the argmax taken on the GPU, on both GPU backends.
# Needs .device-bin/ as scripts/device/build_cuda_bins.sh stages it (plus synth_gguf.py and
# wheels/), and the Vulkan loader in .gl/ (scripts/device/gpu_env.sh).
#   1. the argmax kernels against the CPU sampler's rules: the CUDA conformance table's argmax
#      rows and the wgpu argmax test;
#   2. the golden greedy tests on each backend: the device's argmax must pick what the host's
#      argmax of the logits picks at every step (tiny Qwen3 f16 on CUDA, f16 and Q8_0 on wgpu);
#   3. `hearth bench -p 512 -n 128 -r 3` tg128 with and without --greedy, CUDA and wgpu,
#      alternating, on synthetic Qwen3-0.6B and Llama-3.2-1B shapes quantized by hearth to Q8_0.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/.device-bin
out=${OUT:-$(mktemp -d)}
work=${WORK:-$(mktemp -d)}
rounds=${ROUNDS:-3}
status=0

# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh

echo "== argmax kernels against the CPU sampler's rules"
"$bin/cuda-conformance" 2>&1 | tee "$out/conformance-cuda.txt" | grep -iE "argmax|fail" ||
  status=1
HEARTH_REQUIRE_WGPU=1 "$bin/test-wgpu-argmax" --test-threads=1 2>&1 |
  tee "$out/argmax-wgpu.log" | grep -E "^test |test result|panicked" || status=1

echo "== golden greedy tests: the device's argmax equals the host's at every step"
HEARTH_TEST_DEVICE=cuda "$bin/test-engine-golden_models" qwen3_tiny_f16_greedy \
  --test-threads=1 --nocapture 2>&1 | tee "$out/golden-cuda.log" |
  grep -E "^test |test result|panicked|identical|argmax" || status=1
HEARTH_TEST_DEVICE=wgpu HEARTH_REQUIRE_WGPU=1 "$bin/test-engine-golden_models" \
  qwen3_tiny_f16_greedy qwen3_tiny_q8_0_greedy --test-threads=1 --nocapture 2>&1 |
  tee "$out/golden-wgpu.log" | grep -E "^test |test result|panicked|identical|argmax" || status=1

for preset in qwen3-0.6b llama-3.2-1b; do
  [ -f "$work/$preset-Q8_0.gguf" ] && continue # from an earlier run with the same $WORK
  python3 "$bin/synth_gguf.py" "$preset" "$work/$preset-f16.gguf" >>"$out/synth.log" 2>&1 &&
    "$bin/hearth" quantize "$work/$preset-f16.gguf" "$work/$preset-Q8_0.gguf" Q8_0 \
      >>"$out/quantize.log" 2>&1 || status=1
  rm -f "$work/$preset-f16.gguf"
done
bench() { # model, device, extra flags
  timeout 120 "$bin/hearth" bench "$1" --device "$2" -p 512 -n 128 -r 3 "${@:3}" 2>&1 |
    grep -E '^tg' | tr '\n' ' '
}
echo "== tg128 with the logits brought back, and --greedy (argmax on the device)"
for round in $(seq "$rounds"); do
  for preset in qwen3-0.6b llama-3.2-1b; do
    m=$work/$preset-Q8_0.gguf
    for device in cuda wgpu; do
      echo "round $round $preset $device: $(bench "$m" "$device") | $(bench "$m" "$device" --greedy)"
    done
  done
done | tee "$out/greedy.txt"
echo "== exit status $status"
exit $status
