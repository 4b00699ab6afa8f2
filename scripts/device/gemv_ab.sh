#!/usr/bin/env bash
# One device call: decode speed (hearth bench tg128) of GEMV variants in alternating rounds:
# builds (`.device-bin/hearth`, and a previous one carried as `.device-bin/hearth-base`) and
# compile-time settings of the kernels (HEARTH_CUDA_DEFINES). The test binaries named in
# TESTS run first. Carried in .device-bin/: hearth, hearth-base, synth_gguf.py, wheels/, test-*.
# Settings: MODELS (default "llama-3.1-8b:Q4_K_M qwen3-0.6b:Q8_0"), VARIANTS (space-separated
# NAME:BINARY:DEFINES, DEFINES comma-separated), ROUNDS (default 2), TESTS (default none),
# BENCH_ARGS (more `hearth bench` arguments, e.g. --sample).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=$PWD/.device-bin
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh
MODELS=${MODELS:-llama-3.1-8b:Q4_K_M qwen3-0.6b:Q8_0}
VARIANTS=${VARIANTS:-base:hearth-base: new:hearth:}
status=0
for t in ${TESTS:-}; do
  echo "== $t"
  "$bin/$t" 2>&1 | grep -E '^test |test result|panicked|skipped' || status=1
done
for entry in $MODELS; do
  IFS=: read -r preset quant <<<"$entry"
  m=$work/$preset-$quant.gguf
  synth_model "$preset" "$quant" "$m" || status=1
  echo "== $preset $quant"
  for round in $(seq "${ROUNDS:-2}"); do
    for v in $VARIANTS; do
      IFS=: read -r name exe defines <<<"$v"
      # shellcheck disable=SC2086 # BENCH_ARGS is split into arguments on purpose
      r=$(HEARTH_CUDA_DEFINES=${defines//,/ } "$bin/$exe" bench "$m" --device cuda -p 0 -n 128 \
        -r 3 ${BENCH_ARGS:-} 2>&1 | grep -E '^tg' | tr -s ' ')
      echo "round $round $name: $r"
    done
  done
done
echo "== exit status $status"
exit $status
