#!/usr/bin/env bash
# One device call: wgpu decode before and after a change, next to CUDA, on the same models in
# the same call. Needs .device-bin/ as scripts/device/build_cuda_bins.sh stages it, plus
# .device-bin/hearth-base, where there is one: the hearth binary of the commit to compare with
# (rounds leave it out otherwise). The Vulkan loader comes from .gl/ (scripts/device/gpu_env.sh).
# First the wgpu op conformance table, where it is staged (test-wgpu-conformance). Then rounds
# alternate base / new / new under each setting of VARIANTS (space-separated environment
# assignments, e.g. "HEARTH_WGPU_F16=0") / CUDA on a synthetic Qwen3-0.6B shape (TYPES,
# default Q8_0 and Q4_0, quantized by hearth), `hearth bench -p 512 -n 128 -r 3`; then a
# decode profile of the new binary, and of each variant.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/.device-bin
out=${OUT:-$(mktemp -d)}
work=${WORK:-$(mktemp -d)}
rounds=${ROUNDS:-3}
types=${TYPES:-Q8_0 Q4_0}
variants=${VARIANTS:-}
status=0

# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh
if [ -x "$bin/test-wgpu-conformance" ]; then
  echo "== wgpu op conformance table"
  HEARTH_REQUIRE_WGPU=1 "$bin/test-wgpu-conformance" --test-threads=1 --nocapture 2>&1 |
    tee "$out/conformance-wgpu.log" |
    grep -E "^running on|SKIPPED|^test |test result|panicked" || status=1
fi
[ -f "$work/f16.gguf" ] ||
  python3 "$bin/synth_gguf.py" qwen3-0.6b "$work/f16.gguf" >"$out/synth.log" 2>&1 || status=1
for ty in $types; do
  [ -f "$work/qwen3-0.6b-$ty.gguf" ] || "$bin/hearth" quantize "$work/f16.gguf" \
    "$work/qwen3-0.6b-$ty.gguf" "$ty" >>"$out/quantize.log" 2>&1 || status=1
done
bench() { # environment assignment (or ""), binary, model, device
  env ${1:+"$1"} timeout 120 "$2" bench "$3" --device "$4" -p 512 -n 128 -r 3 2>&1 |
    grep -E '^(pp|tg)' | tr '\n' ' '
}
echo "== wgpu before (base) and after (new), CUDA alongside"
for round in $(seq "$rounds"); do
  for ty in $types; do
    m=$work/qwen3-0.6b-$ty.gguf
    if [ -x "$bin/hearth-base" ]; then
      echo "round $round $ty base wgpu: $(bench "" "$bin/hearth-base" "$m" wgpu)"
    fi
    echo "round $round $ty new  wgpu: $(bench "" "$bin/hearth" "$m" wgpu)"
    for v in $variants; do
      echo "round $round $ty new $v wgpu: $(bench "$v" "$bin/hearth" "$m" wgpu)"
    done
    echo "round $round $ty new  cuda: $(bench "" "$bin/hearth" "$m" cuda)"
  done
done | tee "$out/ab.txt"
first=$(echo "$types" | awk '{print $1}')
for v in "" $variants; do
  echo "== decode profile, new ${v:-as built}"
  env ${v:+"$v"} HEARTH_WGPU_PROFILE=1 timeout 240 "$bin/hearth" bench \
    "$work/qwen3-0.6b-$first.gguf" --device wgpu -p 16 -n 64 -r 1 >"$out/profile.txt" 2>&1 ||
    status=1
  sed -n '/GPU time by kernel/,$p' "$out/profile.txt" | head -24
done
echo "== exit status $status"
exit $status
