#!/usr/bin/env bash
# One device call: tg128 (argmax on the GPU) of the one-kernel decode step in variants of its
# compile-time settings and grid size, against the op-by-op step of the same binary, and one
# profiled run (DL_PROFILE: block 0's time per phase, summed over the layers, averaged over
# the steps). Carried in .device-bin/: hearth, synth_gguf.py, wheels/.
# Settings: MODELS (default qwen3-0.6b), QUANT (default Q8_0), VARIANTS (space-separated
# entries NAME:DEFINES:BLOCKS_PER_SM, DEFINES comma-separated, empty for none; BLOCKS_PER_SM
# "op" runs the step op by op with those defines).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=$PWD/.device-bin
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh
MODELS=${MODELS:-qwen3-0.6b}
QUANT=${QUANT:-Q8_0}
VARIANTS=${VARIANTS:-default::2 no-prefetch:DL_PREFETCH=0:2 bps1::1 bps3::3 bps4::4}
for preset in $MODELS; do
  m=$work/$preset-$QUANT.gguf
  if [ ! -s "$m" ]; then
    python3 "$bin/synth_gguf.py" "$preset" "$work/f16.gguf" >/dev/null 2>&1
    "$bin/hearth" quantize "$work/f16.gguf" "$m" "$QUANT" >/dev/null 2>&1
    rm -f "$work/f16.gguf"
  fi
  tg() { "$bin/hearth" bench "$m" --device cuda -p 0 -n 128 -r 3 --greedy 2>&1 |
    grep -E '^tg' | tr -s ' '; }
  echo "== $preset $QUANT"
  for round in 1 2; do
    echo "op by op: $(HEARTH_CUDA_DECODE_LAYERS=0 tg)"
    for v in $VARIANTS; do
      IFS=: read -r name defines bps <<<"$v"
      layers=1
      [ "$bps" = op ] && layers=0
      echo "$name: $(HEARTH_CUDA_DEFINES=${defines//,/ } HEARTH_CUDA_DECODE_LAYERS=$layers \
        HEARTH_CUDA_DECODE_BLOCKS_PER_SM=$bps tg)"
    done
  done
  echo "profile (µs per step):"
  HEARTH_CUDA_DEFINES=DL_PROFILE=1 "$bin/hearth" bench "$m" --device cuda -p 0 -n 128 -r 3 \
    --greedy 2>&1 | grep '^decode_layers ns' | tail -300 | awk '{for (i = 3; i <= NF; i += 2) {
      name[i] = $i; sum[i] += $(i + 1)} n++} END {for (i = 3; i <= NF; i += 2)
      printf "  %s %.1f\n", name[i], sum[i] / n / 1000}'
done
