#!/usr/bin/env bash
# One device call: where the int8 tensor-core matmul (MMQ) stops beating dequantizing to f16 for
# cuBLAS, by prompt length. For each prompt of PROMPTS tokens, `hearth bench -p N -n 0` with
# HEARTH_CUDA_MMQ_MAX_TOKENS=0 (cuBLAS for every matmul above 4 tokens) and =4096 (MMQ for all).
# Carried in .device-bin/: hearth, synth_gguf.py and wheels/ (gguf, PyYAML).
# Settings: MODELS (synth_gguf.py presets, default qwen3-0.6b llama-3.1-8b), QUANT (default
# Q4_K_M), PROMPTS (default 48 64 96 128 192 256), WORK.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=$PWD/.device-bin
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
MODELS=${MODELS:-qwen3-0.6b llama-3.1-8b}
QUANT=${QUANT:-Q4_K_M}
PROMPTS=${PROMPTS:-48 64 96 128 192 256}
status=0

# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh
for preset in $MODELS; do
  m=$work/$preset-$QUANT.gguf
  if [ ! -s "$m" ]; then
    python3 "$bin/synth_gguf.py" "$preset" "$work/f16.gguf" >/dev/null 2>&1 || status=1
    "$bin/hearth" quantize "$work/f16.gguf" "$m" "$QUANT" >/dev/null 2>&1 || status=1
    rm -f "$work/f16.gguf"
  fi
  for p in $PROMPTS; do
    line="$preset $QUANT pp$p:"
    for max in 0 4096; do
      r=$(HEARTH_CUDA_MMQ_MAX_TOKENS=$max timeout 120 "$bin/hearth" bench "$m" --device cuda \
        -p "$p" -n 0 -r 5 2>&1 | grep -E '^pp' | tr -s ' ' | cut -d' ' -f2-4)
      line="$line  mmq max $max: $r"
    done
    echo "$line"
  done
done
echo "== exit status $status"
exit $status
