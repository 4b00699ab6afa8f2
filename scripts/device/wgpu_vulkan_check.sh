#!/usr/bin/env bash
# One device call: hearth's wgpu backend through NVIDIA's Vulkan driver, next to its CUDA
# backend on the same model, from binaries built elsewhere (scripts/device/build_cuda_bins.sh)
# and carried in .device-bin/.
#   1. the wgpu op conformance table against the CPU (where the adapter's fma is fused, the
#      8-bit matmuls use it and must give the CPU's bits), the decode projections that norm
#      and quantize their own input (same bits), then the golden model tests on the
#      tiny Qwen3 f16 and Q8_0 fixtures (logits and greedy) with HEARTH_TEST_DEVICE=wgpu;
#   2. a real-shape synthetic Qwen3-0.6B (synth_gguf.py, carried), quantized by hearth to Q8_0,
#      benchmarked with `hearth bench --device wgpu` and `--device cuda`;
#   3. a decode profile (HEARTH_WGPU_PROFILE=1: GPU time per kernel) and the GPU's clocks and
#      utilization during unprofiled decode;
#   4. MLX weights: the wgpu MLX tests (bits against the CPU) and the MLX folder goldens on
#      wgpu, then random Qwen3-0.6B-shape MLX folders (scripts/make_random_mlx.py, 4 and 8
#      bits) and the Q4_0 GGUF benchmarked on wgpu and CUDA next to the Q8_0 one, two rounds.
# The Vulkan loader is not installed there: carry its Debian packages in .gl/ (see the device
# notes) and this script unpacks them. Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/.device-bin
out=${OUT:-$(mktemp -d)}
work=${WORK:-$(mktemp -d)}
status=0

# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh

echo "== wgpu op conformance table"
HEARTH_REQUIRE_WGPU=1 "$bin/test-wgpu-conformance" --test-threads=1 --nocapture 2>&1 |
  tee "$out/conformance-wgpu.log" | grep -E "^running on|fused|^test |test result|panicked" ||
  status=1

echo "== 8-bit matmuls that norm and quantize their own input, against the CPU"
HEARTH_REQUIRE_WGPU=1 "$bin/test-wgpu-normed_input" --test-threads=1 2>&1 |
  tee "$out/normed-input-wgpu.log" | grep -E "^test |test result|panicked" || status=1

echo "== golden tests on wgpu (tiny Qwen3 f16 and Q8_0 fixtures, logits and greedy)"
HEARTH_TEST_DEVICE=wgpu HEARTH_REQUIRE_WGPU=1 "$bin/test-engine-golden_models" qwen3_tiny_f16 \
  qwen3_tiny_q8_0 --test-threads=1 --nocapture 2>&1 | tee "$out/golden-wgpu.log" |
  grep -E "^test |test result|panicked|worst|position" || status=1

python3 "$bin/synth_gguf.py" qwen3-0.6b "$work/f16.gguf" >"$out/synth.log" 2>&1 || status=1
m=$work/qwen3-0.6b-Q8_0.gguf
"$bin/hearth" quantize "$work/f16.gguf" "$m" Q8_0 >"$out/quantize.log" 2>&1 || status=1
for device in wgpu cuda; do
  echo "== hearth bench --device $device"
  timeout 240 "$bin/hearth" bench "$m" --device "$device" -p 512 -n 128 -r 3 2>&1 |
    tee "$out/bench-$device.txt" || status=1
done
# Where a decode step's GPU time goes (see crates/hearth-wgpu/src/profile.rs), and the GPU's
# clock and utilization while it decodes without the profiler.
echo "== wgpu decode profile"
HEARTH_WGPU_PROFILE=1 timeout 240 "$bin/hearth" bench "$m" --device wgpu -p 16 -n 64 -r 1 \
  >"$out/profile-wgpu.txt" 2>&1 || status=1
sed -n '/GPU time by kernel/,$p' "$out/profile-wgpu.txt" | head -24
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=clocks.sm,pstate,utilization.gpu --format=csv,noheader -lms 500 \
    >"$out/clocks-wgpu.txt" 2>&1 &
  smi=$!
  timeout 120 "$bin/hearth" bench "$m" --device wgpu -p 16 -n 256 -r 1 2>&1 | grep '^tg'
  kill "$smi"
  echo "clocks while decoding (SM clock, P-state, utilization; count of 0.5 s samples):"
  sort "$out/clocks-wgpu.txt" | uniq -c | sort -rn | head -5
fi
echo "== MLX weights on wgpu: bits against the CPU, folder goldens"
HEARTH_REQUIRE_WGPU=1 "$bin/test-wgpu-mlx" --test-threads=1 2>&1 | tee "$out/mlx-wgpu.log" |
  grep -E "^test |test result|panicked" || status=1
HEARTH_TEST_DEVICE=wgpu HEARTH_REQUIRE_WGPU=1 "$bin/test-engine-mlx_folder" --test-threads=1 \
  --nocapture 2>&1 | tee "$out/mlx-folder-wgpu.log" | grep -E "test result|panicked|: max" ||
  status=1
echo "== MLX folders and Q4_0 / Q8_0 GGUF, wgpu and CUDA (pp512 / tg128, two rounds)"
for bits in 4 8; do
  python3 scripts/make_random_mlx.py "$work/mlx$bits" tests/fixtures/mlx-tiny-qwen3-q8 "$bits" \
    64 >>"$out/synth.log" 2>&1 || status=1
done
"$bin/hearth" quantize "$work/f16.gguf" "$work/qwen3-0.6b-Q4_0.gguf" Q4_0 \
  >>"$out/quantize.log" 2>&1 || status=1
for round in 1 2; do
  for model in "$work/mlx4" "$work/mlx8" "$work/qwen3-0.6b-Q4_0.gguf" "$m"; do
    for device in wgpu cuda; do
      echo "$(basename "$model") $device: $(timeout 120 "$bin/hearth" bench "$model" \
        --device "$device" -p 512 -n 128 -r 3 2>&1 | grep -E '^(pp|tg)' | tr '\n' ' ')"
    done
  done
done | tee "$out/bench-mlx.txt"
echo "== exit status $status"
exit $status
