#!/usr/bin/env bash
# GPU memory of `hearth serve --device cuda` against the issue's bound (weights + KV + 5%),
# for hearth and, where carried, hearth-base (the build to compare with), in one device call:
#   1. the carried test binaries (TESTS=0 skips them): hearth-cuda's, and the engine's
#      (test-engine-*) with HEARTH_TEST_DEVICE=cuda;
#   2. per model (MODELS: preset:quant pairs, default qwen3-0.6b:Q8_0 qwen3-0.6b:Q4_K_M
#      llama-3.1-8b:Q4_K_M; synthetic files from synth_gguf.py, quantized by hearth): each
#      binary serves it with --ctx-size 4096 (16,384 KV tokens), and nvidia-smi's memory of the
#      process is read once the server is up, and again after a 600-token prompt and a
#      16-token answer (a model file already in WORK, as binary_ab.sh and gemv_ab.sh leave
#      them, is used as it is); then ROUNDS (default 2) rounds of `hearth bench -p 512 -n 128 -r 3` of
#      each binary, alternating (BENCH=0 skips them), to show the speed did not move.
# Carried in .device-bin/: hearth.xz, hearth-base.xz (optional), tests.tar.xz (test-*
# binaries: test-<name> for the hearth-cuda tests, test-engine-<name> for the engine's),
# synth_gguf.py, wheels/ (gguf, PyYAML). Logs go to $OUT, packed into logs.tar.xz at the end
# (the device returns only so many files).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=$PWD/.device-bin
out=${OUT:-$(mktemp -d)}
work=${WORK:-$(mktemp -d)}
MODELS=${MODELS:-qwen3-0.6b:Q8_0 qwen3-0.6b:Q4_K_M llama-3.1-8b:Q4_K_M}
status=0

[ -f "$bin/tests.tar.xz" ] && tar -C "$bin" -xJf "$bin/tests.tar.xz"
for name in hearth hearth-base; do
  [ -f "$bin/$name.xz" ] && { xz -dc "$bin/$name.xz" >"$bin/$name" && chmod +x "$bin/$name"; }
done
hearths=$bin/hearth
[ -x "$bin/hearth-base" ] && hearths="$hearths $bin/hearth-base"
# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh

if [ "${TESTS:-1}" = 1 ]; then
  for t in "$bin"/test-*; do
    name=$(basename "$t")
    echo "== $name"
    HEARTH_TEST_DEVICE=cuda "$t" --test-threads=1 --nocapture >"$out/$name.log" 2>&1 || status=1
    grep -E "^test result|panicked|skipped|GPU memory grew|NMSE|^thread" "$out/$name.log" | sort -u
  done
fi

# The process's GPU memory in MiB, as nvidia-smi counts it.
smi_mib() {
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
    awk -F', ' -v p="$1" '$1 == p { print $2 }'
}

prompt=$(python3 -c 'print(" ".join(["the quick brown fox jumps over the lazy dog"] * 66))')
for spec in $MODELS; do
  preset=${spec%%:*} q=${spec##*:}
  f16=$work/$preset-F16.gguf m=$work/$preset-$q.gguf
  # A quantized file left in WORK by an earlier script of the same call is used as it is.
  if [ ! -s "$m" ]; then
    [ -f "$f16" ] || python3 "$bin/synth_gguf.py" "$preset" "$f16" >>"$out/synth.log" 2>&1
    "$bin/hearth" quantize "$f16" "$m" "$q" >>"$out/quantize.log" 2>&1 || {
      status=1
      echo "== $spec: quantize failed"
      continue
    }
  fi
  echo "== $spec: file $(($(stat -c %s "$m") >> 20)) MiB"
  for h in $hearths; do
    tag=$(basename "$h")
    log=$out/serve-$tag-$preset-$q.log
    RUST_LOG=info,hearth_cuda=debug "$h" serve --model "$m" --device cuda --port 18123 \
      --ctx-size 4096 >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 240); do
      curl -sf http://127.0.0.1:18123/health >/dev/null 2>&1 && break
      sleep 0.5
    done
    sleep 1
    loaded=$(smi_mib "$pid")
    curl -sf http://127.0.0.1:18123/v1/completions -H 'content-type: application/json' \
      -d "{\"model\": \"$(basename "$m" .gguf)\", \"prompt\": \"$prompt\", \"max_tokens\": 16}" \
      >"$out/answer-$tag-$preset-$q.json" || echo "request failed"
    echo "$tag: loaded ${loaded} MiB, after a 600-token prompt $(smi_mib "$pid") MiB"
    grep -E "GPU memory after loading|CUDA backend opened" "$log" | sed 's/^.*INFO //; s/^.*DEBUG //'
    grep "transient GPU memory grew" "$log" | tail -1 | sed 's/^.*DEBUG //'
    kill "$pid"
    wait "$pid" 2>/dev/null
  done
  if [ "${BENCH:-1}" = 1 ]; then
    for round in $(seq "${ROUNDS:-2}"); do
      for h in $hearths; do
        echo "$(basename "$h") round $round: $(timeout 200 "$h" bench "$m" --device cuda -p 512 \
          -n 128 -r 3 2>&1 | grep -E '^(pp|tg)' | tr '\n' ' ')"
      done
    done
  fi
done
(cd "$out" && tar -cJf logs.tar.xz --remove-files ./*.log ./*.json 2>/dev/null)
echo "== exit status $status"
exit $status
