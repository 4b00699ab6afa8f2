#!/usr/bin/env bash
# One device call: hearth and llama.cpp side by side on one CUDA GPU, from a fresh machine with
# no internet and no Rust. Everything it needs is carried in .device-bin/:
#   llama-src.tar.xz   llama.cpp source (CMake project, built here with CUDA)
#   llama-cuda-bin.tar.xz.part*  (optional) llama.cpp binaries an earlier call built from the
#                      same source and packed (SAVE_LLAMA_BIN): unpacked instead of building
#   synth_gguf.py      writes a random-weight F16 GGUF with a real model's shapes
#   wheels/            the gguf Python package (and PyYAML, which it imports) for synth_gguf.py
#   hearth             hearth's release binary, built with the CUDA backend
# Phases (each timed, each logging to $OUT/<phase>.log, each skipped with SKIP_<PHASE>=1):
#   build models llama hearth depth bandwidth memory, then $OUT/summary.txt.
# Settings (environment):
#   MODELS       synth_gguf.py presets                 (default: qwen3-0.6b)
#   QUANTS       llama-quantize types made from F16    (default: Q8_0 Q4_K_M)
#   BENCH_TYPES  which files are benchmarked           (default: the QUANTS)
#   REPS         llama-bench / hearth repetitions      (default: 5)
#   NPL          parallel sequences, batched test      (default: 64)
#   DEPTHS       contexts before pp512 and tg128,      (default: 2048 8192; llama-bench -d)
#                depth phase
#   HEARTH       hearth binary                         (default: .device-bin/hearth)
#   WORK         scratch folder (llama.cpp build, model files; default: a new temporary folder)
#   LLAMA_PREBUILT  folder with llama-cuda-bin.tar.xz.part* (default: .device-bin)
#   SAVE_LLAMA_BIN  after building llama.cpp, pack its binaries into this folder (for
#                LLAMA_PREBUILT later; scripts/device/llama_prebuilt.sh)
# Exit status: non-zero if any phase that ran failed.
# The phase_* functions are called by name from the loop at the end.
# shellcheck disable=SC2317
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=.device-bin
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
MODELS=${MODELS:-qwen3-0.6b}
QUANTS=${QUANTS:-Q8_0 Q4_K_M}
BENCH_TYPES=${BENCH_TYPES:-$QUANTS}
REPS=${REPS:-5}
NPL=${NPL:-64}
DEPTHS=${DEPTHS:-2048 8192}
HEARTH=${HEARTH:-$bin/hearth}
llama_src=$work/llama.cpp
llama_bin=$llama_src/build/bin
# Prebuilt binaries find their shared libraries here wherever they were built.
export LD_LIBRARY_PATH="$llama_bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# shellcheck source=scripts/device/llama_prebuilt.sh
source scripts/device/llama_prebuilt.sh
models_dir=$work/models
pylib=$work/pylib
jobs=$(nproc)

# The CUDA toolkit is not always on PATH or the loader's path.
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
  if [ -x "$d/nvcc" ]; then
    export PATH="$PATH:$d"
    break
  fi
done
if ! ldconfig -p | grep -q 'libnvrtc\.so'; then
  lib=$(find /usr/local /usr/lib /opt -name 'libnvrtc.so.1[0-9]*' 2>/dev/null | sort | head -1)
  if [ -n "$lib" ]; then
    LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
  fi
fi

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit \
  --format=csv >"$out/gpu.csv" || echo "nvidia-smi failed"
cat "$out/gpu.csv"
echo "cpus: $jobs  nvcc: $(command -v nvcc || echo none)  cmake: $(command -v cmake || echo none)"

# Model files that the llama and hearth phases measure, by name (PRESET-TYPE).
bench_models() {
  local preset t
  for preset in $MODELS; do
    for t in $BENCH_TYPES; do
      echo "$preset-$t"
    done
  done
}

phase_build() {
  rm -rf "$llama_src"
  tar -C "$work" -xJf "$bin/llama-src.tar.xz" || return 1
  local commit
  commit=$(awk '/^commit /{print $2}' "$llama_src/LLAMA-SOURCE.txt")
  head -1 "$llama_src/LLAMA-SOURCE.txt"
  echo "commit $commit"
  if llama_prebuilt_unpack "${LLAMA_PREBUILT:-$bin}" "$commit" "$llama_bin"; then
    return 0
  fi
  if ! command -v cmake >/dev/null; then
    echo "cmake not found on PATH: llama.cpp cannot be built on this machine (no internet to" \
      "install it); set SKIP_BUILD=1 and WORK to a folder with a prebuilt llama.cpp/build/bin"
    return 1
  fi
  if ! command -v nvcc >/dev/null; then
    echo "nvcc not found (looked on PATH and in /usr/local/cuda*/bin): cannot build the CUDA backend"
    return 1
  fi
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$llama_src" -B "$llama_src/build" "${gen[@]}" \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_COMMIT="${commit:0:7}" -DLLAMA_BUILD_NUMBER=0 ||
    return 1
  cmake --build "$llama_src/build" -j"$jobs" \
    --target llama-bench llama-batched-bench llama-quantize || return 1
  "$llama_bin/llama-bench" --help | head -3 || true
  if [ -n "${SAVE_LLAMA_BIN:-}" ]; then
    llama_prebuilt_save "$llama_bin" "$commit" "$SAVE_LLAMA_BIN" \
      llama-bench llama-batched-bench llama-quantize || return 1
  fi
}

# gguf (and PyYAML, which it imports) from the carried wheels, offline, into a private folder;
# packages the system already has (numpy) are left alone.
ensure_gguf() {
  export PYTHONPATH="$pylib${PYTHONPATH:+:$PYTHONPATH}"
  python3 -c 'import gguf' 2>/dev/null && return 0
  local want=(gguf)
  python3 -c 'import yaml' 2>/dev/null || want+=(pyyaml)
  python3 -c 'import tqdm' 2>/dev/null || want+=(tqdm)
  python3 -m pip install --no-index --find-links "$bin/wheels" --no-deps --target "$pylib" \
    "${want[@]}" || return 1
  python3 -c 'import gguf; print("gguf", gguf.__file__)'
}

phase_models() {
  if [ ! -x "$llama_bin/llama-quantize" ]; then
    echo "no llama-quantize in $llama_bin: the build phase did not run or failed"
    return 1
  fi
  ensure_gguf || return 1
  mkdir -p "$models_dir"
  local preset q f16
  for preset in $MODELS; do
    f16=$models_dir/$preset-F16.gguf
    echo "== synth $preset"
    python3 "$bin/synth_gguf.py" "$preset" "$f16" || return 1
    for q in $QUANTS; do
      echo "== quantize $preset $q"
      "$llama_bin/llama-quantize" "$f16" "$models_dir/$preset-$q.gguf" "$q" "$jobs" || return 1
    done
  done
  ls -la "$models_dir"
}

phase_llama() {
  local t
  for t in llama-bench llama-batched-bench; do
    if [ ! -x "$llama_bin/$t" ]; then
      echo "no $t in $llama_bin: the build phase did not run or failed"
      return 1
    fi
  done
  local name f status=0
  for name in $(bench_models); do
    f=$models_dir/$name.gguf
    echo "== llama-bench $name"
    # JSON on stdout for the summary, the markdown table on stderr for people.
    "$llama_bin/llama-bench" -m "$f" -ngl 99 -fa 1 -r "$REPS" -p 512 -n 128 -o json -oe md \
      >"$out/llama-bench-$name.json" 2>"$out/llama-bench-$name.md" || status=1
    cat "$out/llama-bench-$name.md"
    echo "== llama-batched-bench $name: $NPL sequences, 128 prompt + 128 generated tokens each"
    "$llama_bin/llama-batched-bench" -m "$f" -ngl 99 -fa on -c 40960 -npp 128 -ntg 128 -npl "$NPL" \
      --output-format jsonl >"$out/llama-batched-$name.jsonl" || status=1
    cat "$out/llama-batched-$name.jsonl"
  done
  return "$status"
}

# hearth's side of one model file: single-sequence pp512 / tg128.
hearth_bench() { # model, extra flags
  "$HEARTH" bench "$1" --device cuda -p 512 -n 128 -r "$REPS" --json "${@:2}"
}

# hearth's side of the batched test: NPL sequences decoding together.
hearth_bench_parallel() { # model, extra flags
  "$HEARTH" bench "$1" --device cuda -p 128 -n 128 -r "$REPS" --parallel "$NPL" --json "${@:2}"
}

phase_hearth() {
  if [ ! -x "$HEARTH" ]; then
    echo "no hearth binary at $HEARTH"
    return 1
  fi
  local name f status=0
  for name in $(bench_models); do
    f=$models_dir/$name.gguf
    echo "== hearth $name"
    hearth_bench "$f" >"$out/hearth-$name.json" || status=1
    cat "$out/hearth-$name.json"
    echo "== hearth $name, $NPL sequences"
    hearth_bench_parallel "$f" >"$out/hearth-$name-par.json" || status=1
    cat "$out/hearth-$name-par.json"
    # Greedy decoding as a server runs it: the argmax on the GPU, no logits brought back.
    echo "== hearth $name, --greedy, 1 and $NPL sequences"
    hearth_bench "$f" --greedy >"$out/hearth-$name-greedy.json" || status=1
    hearth_bench_parallel "$f" --greedy >"$out/hearth-$name-par-greedy.json" || status=1
    cat "$out/hearth-$name-greedy.json" "$out/hearth-$name-par-greedy.json"
    # Sampling at the default settings as a server runs it: top-k on the GPU, draws on the CPU.
    echo "== hearth $name, --sample, 1 and $NPL sequences"
    hearth_bench "$f" --sample >"$out/hearth-$name-sample.json" || status=1
    hearth_bench_parallel "$f" --sample >"$out/hearth-$name-par-sample.json" || status=1
    cat "$out/hearth-$name-sample.json" "$out/hearth-$name-par-sample.json"
  done
  return "$status"
}

# pp512 and tg128 after DEPTHS tokens of context (run untimed first), both engines: llama-bench -d.
phase_depth() {
  local name f d status=0
  for name in $(bench_models); do
    f=$models_dir/$name.gguf
    echo "== llama-bench $name, depths $DEPTHS"
    "$llama_bin/llama-bench" -m "$f" -ngl 99 -fa 1 -r "$REPS" -p 512 -n 128 -d "${DEPTHS// /,}" \
      -o json -oe md >"$out/depth-llama-$name.json" 2>"$out/depth-llama-$name.md" || status=1
    cat "$out/depth-llama-$name.md"
    for d in $DEPTHS; do
      echo "== hearth $name, depth $d"
      "$HEARTH" bench "$f" --device cuda -p 512 -n 128 -d "$d" -r "$REPS" --json \
        >"$out/depth-hearth-$name-d$d.json" || status=1
      cat "$out/depth-hearth-$name-d$d.json"
    done
  done
  return "$status"
}

phase_bandwidth() {
  python3 - "$out/bandwidth.json" <<'EOF'
import json, sys
import torch

# Device-to-device copy of a 2 GiB buffer; each copy reads and writes every byte.
n = 2 << 30
src = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
dst = torch.empty_like(src)
for _ in range(3):
    dst.copy_(src)
torch.cuda.synchronize()
ms = []
for _ in range(20):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    dst.copy_(src)
    b.record()
    b.synchronize()
    ms.append(a.elapsed_time(b))
ms.sort()
med = ms[len(ms) // 2]
gbps = 2 * n / (med / 1e3) / 1e9
res = {"bytes": n, "median_ms": med, "copy_GBps_read_plus_write": gbps,
       "device": torch.cuda.get_device_name(0)}
print(json.dumps(res))
print(f"device-to-device copy: {gbps:.1f} GB/s (read + write, median of 20)")
json.dump(res, open(sys.argv[1], "w"))
EOF
}

# GPU memory in use (MiB, all processes: only the one under test runs) sampled every 0.2 s
# while process $1 lives or until the file $2 exists; prints the peak.
peak_memory() {
  local pid=$1 stop=$2 peak=0 m
  while kill -0 "$pid" 2>/dev/null && [ ! -e "$stop" ]; do
    m=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits |
      awk '{s += $1} END {print s + 0}')
    [ "$m" -gt "$peak" ] && peak=$m
    sleep 0.2
  done
  echo "$peak"
}

# Each engine holding a model and a 16,384-token f16 KV cache: hearth serving with
# --ctx-size 4096 (4 slots), llama.cpp's batched bench with -c 16384 (one 512-token prompt and
# 32 generated tokens, so its compute buffers are in use too). The peak of each.
phase_memory() {
  local name f pid status=0
  for name in $(bench_models); do
    f=$models_dir/$name.gguf
    echo "== $name: weights $(stat -c %s "$f") bytes"
    "$llama_bin/llama-batched-bench" -m "$f" -ngl 99 -fa on -c 16384 -npp 8192 -ntg 512 -npl 1 \
      >"$out/memory-llama-$name.log" 2>&1 &
    pid=$!
    echo "llama.cpp peak MiB: $(peak_memory "$pid" /nonexistent)"
    wait "$pid" || status=1
    rm -f "$work/ready"
    "$HEARTH" serve --model "$f" --device cuda --port 18123 --ctx-size 4096 \
      >"$out/memory-hearth-$name.log" 2>&1 &
    pid=$!
    (for _ in $(seq 120); do
      curl -sf http://127.0.0.1:18123/health >/dev/null 2>&1 && break
      sleep 0.5
    done
    sleep 2
    touch "$work/ready") &
    echo "hearth serve peak MiB: $(peak_memory "$pid" "$work/ready")" \
      "($(grep -o 'kv_tokens=[0-9]*' "$out/memory-hearth-$name.log" | head -1))"
    kill "$pid"
    wait "$pid" 2>/dev/null
  done
  return "$status"
}

status=0
for p in build models llama hearth depth bandwidth memory; do
  skip_var=SKIP_${p^^}
  if [ "${!skip_var:-0}" = 1 ]; then
    echo "== $p: skipped ($skip_var=1)"
    continue
  fi
  t0=$(date +%s.%N)
  "phase_$p" >"$out/$p.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  echo "$p	$rc	$secs" >>"$out/phases.tsv"
  echo "== $p: exit $rc, $secs s"
  if [ $rc -ne 0 ]; then
    status=1
    tail -n 25 "$out/$p.log"
  fi
  # Rewritten after every phase so that a call cut off by its time limit still leaves one.
  python3 scripts/device/summarize_bench.py "$out" >"$out/summary.txt" 2>&1
done

cat "$out/summary.txt"
echo "== exit status $status"
exit $status
