#!/usr/bin/env bash
# One device call: kernels launched overlapping (programmatic dependent launch, on by default
# from Hopper on) against ordinary launches, and kernel variants, with one binary.
# Needs .device-bin/ as scripts/device/build_cuda_bins.sh stages it, plus synth_gguf.py and
# wheels/.
#   1. correctness with overlap on: the hearth-cuda tests, the engine's tests on CUDA (goldens,
#      CUDA against CPU, the Hugging Face and MoE fixtures) and CUDA against CPU on a real-shape
#      synthetic model;
#   2. `hearth bench` tg128 with logits, --greedy (also a 32-token prompt) and --sample, and 64
#      streams, for each of CONFIGS (';'-separated sets of environment variables, default:
#      HEARTH_CUDA_OVERLAP=0, then =1), ROUNDS rounds, on each of MODELS (synth_gguf.py presets)
#      in each of QUANTS. HEARTH_CUDA_DEFINES=NAME=VALUE in a config sets a kernel constant.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/.device-bin
out=${OUT:-$(mktemp -d)}
work=${WORK:-$(mktemp -d)}
rounds=${ROUNDS:-2}
MODELS=${MODELS:-qwen3-0.6b llama-3.2-1b}
QUANTS=${QUANTS:-Q8_0 Q4_K_M}
CONFIGS=${CONFIGS:-HEARTH_CUDA_OVERLAP=0;HEARTH_CUDA_OVERLAP=1}
status=0

# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== hearth-cuda tests"
  for t in "$bin"/test-*; do
    case $(basename "$t") in test-engine-* | test-wgpu-*) continue ;; esac
    "$t" --test-threads=1 >"$out/$(basename "$t").log" 2>&1 || status=1
    echo "$(basename "$t"): $(grep -E '^test result' "$out/$(basename "$t").log" | tail -1)"
    grep -E "panicked|FAILED" "$out/$(basename "$t").log" | head -5
  done
  echo "== engine tests on cuda"
  for t in golden_models cuda_vs_cpu hf_archs moe_gguf mlx_folder; do
    HEARTH_TEST_DEVICE=cuda "$bin/test-engine-$t" --test-threads=1 --nocapture \
      >"$out/engine-$t.log" 2>&1 || status=1
    echo "$t: $(grep -E '^test result' "$out/engine-$t.log" | tail -1)"
    grep -E "panicked|FAILED|near-tie" "$out/engine-$t.log" | head -5
  done
fi

for preset in $MODELS; do
  f16=$work/$preset-F16.gguf
  for q in $QUANTS; do
    m=$work/$preset-$q.gguf
    [ -f "$m" ] && continue # from an earlier run with the same $WORK
    [ -f "$f16" ] || python3 "$bin/synth_gguf.py" "$preset" "$f16" >>"$out/synth.log" 2>&1 ||
      status=1
    "$bin/hearth" quantize "$f16" "$m" "$q" >>"$out/quantize.log" 2>&1 || status=1
  done
  rm -f "$f16"
  m=$work/$preset-$(echo "$QUANTS" | cut -d' ' -f1).gguf
  if [ "${SKIP_TESTS:-0}" != 1 ]; then
    echo "== $preset: cuda against cpu, overlap on"
    HEARTH_CUDA_TEST_MODELS=$m "$bin/test-engine-cuda_vs_cpu" models_from_the_environment \
      --nocapture 2>&1 | grep -E "relative|near-tie|panicked|test result|skipped" || status=1
  fi
done

tg() { # config, model, extra flags
  # shellcheck disable=SC2086 # the config is a list of assignments
  timeout 300 env $1 "$bin/hearth" bench "$2" --device cuda "${@:3}" 2>&1 | grep -E '^(pp|tg)' |
    tr -s ' ' | tr '\n' ' '
}
echo "== bench, for each of: $CONFIGS"
IFS=';' read -ra configs <<<"$CONFIGS"
for round in $(seq "$rounds"); do
  for preset in $MODELS; do
    for q in $QUANTS; do
      m=$work/$preset-$q.gguf
      for c in "${configs[@]}"; do
        echo "round $round $preset $q $c"
        echo "  1 stream:   $(tg "$c" "$m" -p 512 -n 128 -r 3)"
        echo "  --greedy:   $(tg "$c" "$m" -p 32 -n 128 -r 3 --greedy)"
        echo "  --sample:   $(tg "$c" "$m" -p 32 -n 128 -r 3 --sample)"
        [ "${SKIP_PARALLEL:-0}" = 1 ] && continue
        echo "  64 streams: $(tg "$c" "$m" -p 128 -n 128 -r 1 --parallel 64)"
        echo "  64 sampled: $(tg "$c" "$m" -p 128 -n 128 -r 1 --parallel 64 --sample)"
      done
    done
  done
done | tee "$out/overlap.txt"
echo "== exit status $status"
exit $status
