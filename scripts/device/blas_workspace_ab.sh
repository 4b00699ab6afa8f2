#!/usr/bin/env bash
# One device call: prompt speed against the size of the cuBLAS workspace hearth sets
# (HEARTH_CUDA_BLAS_WORKSPACE_MIB), in alternating rounds, and the GPU memory of `hearth serve
# --ctx-size 4096` once loaded at each size. Prompts of more than 64 tokens (128 for matrices
# of at most 4M values) are the only work that goes through cuBLAS. Settings: MODELS (default
# "llama-3.1-8b:Q4_K_M qwen3-0.6b:Q8_0"), SIZES (MiB, default "32 8 4 1"), ROUNDS (default 2).
# Carried in .device-bin/: hearth.xz (or hearth), synth_gguf.py, wheels/.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=$PWD/.device-bin
work=${WORK:-$(mktemp -d)}
[ -f "$bin/hearth.xz" ] && { xz -dc "$bin/hearth.xz" >"$bin/hearth" && chmod +x "$bin/hearth"; }
# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh
MODELS=${MODELS:-llama-3.1-8b:Q4_K_M qwen3-0.6b:Q8_0}
SIZES=${SIZES:-32 8 4 1}
status=0
for entry in $MODELS; do
  IFS=: read -r preset quant <<<"$entry"
  m=$work/$preset-$quant.gguf
  python3 "$bin/synth_gguf.py" "$preset" "$work/f16.gguf" >/dev/null 2>&1
  "$bin/hearth" quantize "$work/f16.gguf" "$m" "$quant" >/dev/null 2>&1 || status=1
  rm -f "$work/f16.gguf"
  echo "== $preset $quant"
  for mib in $SIZES; do
    HEARTH_CUDA_BLAS_WORKSPACE_MIB=$mib "$bin/hearth" serve --model "$m" --device cuda \
      --port 18123 --ctx-size 4096 >"$work/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 240); do
      curl -sf http://127.0.0.1:18123/health >/dev/null 2>&1 && break
      sleep 0.5
    done
    echo "workspace $mib MiB: loaded $(nvidia-smi --query-compute-apps=pid,used_memory \
      --format=csv,noheader,nounits | awk -F', ' -v p="$pid" '$1 == p { print $2 }') MiB"
    kill "$pid"
    wait "$pid" 2>/dev/null
  done
  for round in $(seq "${ROUNDS:-2}"); do
    for mib in $SIZES; do
      r=$(HEARTH_CUDA_BLAS_WORKSPACE_MIB=$mib "$bin/hearth" bench "$m" --device cuda -p 512 \
        -n 0 -r 5 2>&1 | grep -E '^pp' | tr -s ' ')
      echo "round $round, workspace $mib MiB: $r"
    done
  done
  rm -f "$m"
done
echo "== exit status $status"
exit $status
