#!/usr/bin/env bash
# The wgpu backend through NVIDIA's Vulkan driver, checked and timed next to hearth's CUDA
# backend and llama.cpp; one PART per device call (each well inside the 10-minute limit):
#   PART=tests  the wgpu op table, the normed 8-bit matmuls and the MLX matmuls against the CPU,
#               the tiny Qwen3 goldens with and without f16 KV words, the MLX folder goldens;
#               then ROUNDS rounds of wgpu / wgpu with HEARTH_WGPU_F16=0 / CUDA on synthetic
#               Qwen3-0.6B and Llama-3.2-1B shapes (Q8_0, quantized by hearth), `hearth bench
#               -p 512 -n 128 -r 3`, and a decode profile;
#   PART=profile  decode profiles (PROFILES: HEARTH_WGPU_PROFILE values, default 1: GPU time
#               per kernel; host: the host's recording and waiting) of hearth and, where carried,
#               hearth-base (or hearth-base.xz: the build to compare with) on both shapes, and
#               a tg128 of each;
#   PART=submit  tg128 of both shapes at several batch sizes (FIRST_BATCHES, SUBMIT_EVERY);
#   PART=llama  llama.cpp built with CUDA (scripts/device/bench_cuda.sh's build, models and
#               llama phases on Qwen3-0.6B Q8_0, quantized by llama.cpp), then hearth's wgpu and
#               CUDA backends on the same file, alternating.
# Carried in .device-bin/: hearth (or hearth.xz), the test binaries (test-*, or tests.tar.xz
# holding them: `tar cJf tests.tar.xz test-*` and `xz -9k hearth` keep the carry under the
# device's 64 MiB), synth_gguf.py, wheels/ (gguf, PyYAML) and, for PART=llama,
# llama-src.tar.xz (vendor/llama.cpp of the llama-cpp-python sdist from PyPI, without its docs,
# models, tests and unused ggml backends, and a LLAMA-SOURCE.txt with a `commit SHA` line). The
# Vulkan loader comes from .gl/ (scripts/device/gpu_env.sh).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=$PWD/.device-bin
out=${OUT:-$(mktemp -d)}
work=${WORK:-$(mktemp -d)}
rounds=${ROUNDS:-3}
status=0

[ -f "$bin/tests.tar.xz" ] && tar -C "$bin" -xJf "$bin/tests.tar.xz"
for name in hearth hearth-base; do
  [ -f "$bin/$name.xz" ] && { xz -dc "$bin/$name.xz" >"$bin/$name" && chmod +x "$bin/$name"; }
done
# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh

# Test binary $1 with the rest as its arguments, its summary lines shown, its log kept.
check() {
  local name=$1
  shift
  echo "== $name $*"
  HEARTH_REQUIRE_WGPU=1 "$bin/$name" --test-threads=1 --nocapture "$@" 2>&1 |
    tee -a "$out/$name.log" | grep -E "^running on|SKIPPED|test result|panicked|: max" | sort -u ||
    status=1
}

# One `hearth bench` as `tg128 ... pp512 ...` on a line: environment assignment (or ""),
# model, device.
bench() {
  env ${1:+"$1"} timeout 150 "$bin/hearth" bench "$2" --device "$3" -p 512 -n 128 -r 3 2>&1 |
    grep -E '^(pp|tg)' | tr '\n' ' '
}

# Synthetic Q8_0 files of both shapes in $work, quantized by hearth.
make_models() {
  for preset in qwen3-0.6b llama-3.2-1b; do
    [ -f "$work/$preset-Q8_0.gguf" ] && continue
    python3 "$bin/synth_gguf.py" "$preset" "$work/$preset-f16.gguf" >>"$out/synth.log" 2>&1 &&
      "$bin/hearth" quantize "$work/$preset-f16.gguf" "$work/$preset-Q8_0.gguf" Q8_0 \
        >>"$out/quantize.log" 2>&1 || status=1
    rm -f "$work/$preset-f16.gguf"
  done
}

part_profile() {
  make_models
  for preset in qwen3-0.6b llama-3.2-1b; do
    for name in hearth hearth-base; do
      [ -x "$bin/$name" ] || continue
      echo "== $name $preset: $(bench_with "$bin/$name" "$work/$preset-Q8_0.gguf")"
      for kind in ${PROFILES:-1}; do
        HEARTH_WGPU_PROFILE=$kind timeout 240 "$bin/$name" bench "$work/$preset-Q8_0.gguf" \
          --device wgpu -p 16 -n 64 -r 1 >"$out/profile-$kind-$name-$preset.txt" 2>&1 ||
          status=1
        sed -n '/time by kernel/,$p;/host time/,$p' "$out/profile-$kind-$name-$preset.txt" |
          head -14
      done
    done
  done
}

# tg128 of both shapes at each HEARTH_WGPU_FIRST_BATCH in FIRST_BATCHES (a step's first batch)
# and HEARTH_WGPU_SUBMIT_EVERY in SUBMIT_EVERY (the largest; 0: one batch a step), two rounds.
part_submit() {
  make_models
  for round in 1 2; do
    for preset in qwen3-0.6b llama-3.2-1b; do
      for first in ${FIRST_BATCHES:-8}; do
        for every in ${SUBMIT_EVERY:-16 32 64 128 256 0}; do
          echo "round $round $preset first $first every $every: $(HEARTH_WGPU_FIRST_BATCH=$first \
            HEARTH_WGPU_SUBMIT_EVERY=$every bench_with "$bin/hearth" "$work/$preset-Q8_0.gguf")"
        done
      done
    done
  done
}

# `bench` with another binary: binary, model.
bench_with() {
  timeout 150 "$1" bench "$2" --device wgpu -p 512 -n 128 -r 3 2>&1 | grep -E '^tg' | tr '\n' ' '
}

part_tests() {
  check test-wgpu-conformance
  check test-wgpu-normed_input
  check test-wgpu-mlx
  for f16 in 1 0; do
    HEARTH_WGPU_F16=$f16 HEARTH_TEST_DEVICE=wgpu check test-engine-golden_models qwen3_tiny
  done
  HEARTH_TEST_DEVICE=wgpu check test-engine-mlx_folder
  make_models
  echo "== wgpu, wgpu without f16 KV words, CUDA (Q8_0)"
  for round in $(seq "$rounds"); do
    for preset in qwen3-0.6b llama-3.2-1b; do
      m=$work/$preset-Q8_0.gguf
      echo "round $round $preset wgpu: $(bench "" "$m" wgpu)"
      echo "round $round $preset wgpu HEARTH_WGPU_F16=0: $(bench HEARTH_WGPU_F16=0 "$m" wgpu)"
      echo "round $round $preset cuda: $(bench "" "$m" cuda)"
    done
  done | tee "$out/rounds.txt"
  echo "== decode profile (Qwen3-0.6B shape)"
  HEARTH_WGPU_PROFILE=1 timeout 240 "$bin/hearth" bench "$work/qwen3-0.6b-Q8_0.gguf" \
    --device wgpu -p 16 -n 64 -r 1 >"$out/profile.txt" 2>&1 || status=1
  sed -n '/GPU time by kernel/,$p' "$out/profile.txt" | head -12
}

part_llama() {
  MODELS=qwen3-0.6b QUANTS=Q8_0 REPS=3 SKIP_HEARTH=1 SKIP_BANDWIDTH=1 SKIP_MEMORY=1 \
    WORK=$work OUT=$out bash scripts/device/bench_cuda.sh >"$out/bench_cuda.log" 2>&1 || status=1
  grep -E "^(commit|==|\|)|\"pl\": *64" "$out/bench_cuda.log"
  m=$work/models/qwen3-0.6b-Q8_0.gguf
  echo "== hearth on llama.cpp's file, wgpu and CUDA alternating"
  for round in $(seq "$rounds"); do
    echo "round $round wgpu: $(bench "" "$m" wgpu)"
    echo "round $round cuda: $(bench "" "$m" cuda)"
  done | tee "$out/rounds-llama-file.txt"
}

case "${PART:-tests}" in
  tests) part_tests ;;
  llama) part_llama ;;
  profile) part_profile ;;
  submit) part_submit ;;
  *)
    echo "PART is tests, profile, submit or llama"
    status=1
    ;;
esac
echo "== exit status $status"
exit $status
