#!/usr/bin/env bash
# One device call: wgpu decode before and after a change, next to CUDA, on the same models in
# the same call. Needs .device-bin/ as scripts/device/build_cuda_bins.sh stages it, plus
# .device-bin/hearth-base: the hearth binary of the commit to compare with. The Vulkan loader
# comes from .gl/ (scripts/device/gpu_env.sh).
# Rounds alternate base / new / CUDA on a synthetic Qwen3-0.6B shape (Q8_0 and Q4_0, quantized
# by hearth), `hearth bench -p 512 -n 128 -r 3`; then a decode profile of the new binary.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/.device-bin
out=${OUT:-$(mktemp -d)}
work=${WORK:-$(mktemp -d)}
rounds=${ROUNDS:-3}
status=0

# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh
[ -f "$work/f16.gguf" ] ||
  python3 "$bin/synth_gguf.py" qwen3-0.6b "$work/f16.gguf" >"$out/synth.log" 2>&1 || status=1
for ty in Q8_0 Q4_0; do
  [ -f "$work/qwen3-0.6b-$ty.gguf" ] || "$bin/hearth" quantize "$work/f16.gguf" \
    "$work/qwen3-0.6b-$ty.gguf" "$ty" >>"$out/quantize.log" 2>&1 || status=1
done
bench() { # binary, model, device
  timeout 120 "$1" bench "$2" --device "$3" -p 512 -n 128 -r 3 2>&1 | grep -E '^(pp|tg)' |
    tr '\n' ' '
}
echo "== wgpu before (base) and after (new), CUDA alongside"
for round in $(seq "$rounds"); do
  for ty in Q8_0 Q4_0; do
    m=$work/qwen3-0.6b-$ty.gguf
    echo "round $round $ty base wgpu: $(bench "$bin/hearth-base" "$m" wgpu)"
    echo "round $round $ty new  wgpu: $(bench "$bin/hearth" "$m" wgpu)"
    echo "round $round $ty new  cuda: $(bench "$bin/hearth" "$m" cuda)"
  done
done | tee "$out/ab.txt"
echo "== decode profile, new"
HEARTH_WGPU_PROFILE=1 timeout 240 "$bin/hearth" bench "$work/qwen3-0.6b-Q8_0.gguf" \
  --device wgpu -p 16 -n 64 -r 1 >"$out/profile-new.txt" 2>&1 || status=1
sed -n '/GPU time by kernel/,$p' "$out/profile-new.txt" | head -24
echo "== exit status $status"
exit $status
