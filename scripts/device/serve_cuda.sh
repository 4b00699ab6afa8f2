#!/usr/bin/env bash
# One device call: hearth's server and llama.cpp's llama-server side by side on one CUDA GPU,
# driven by scripts/bench_serve.py (streaming OpenAI requests from 1 to many concurrent
# clients), from a fresh machine with no internet and no Rust. Carried in .device-bin/:
#   llama-src.tar.xz   llama.cpp source (built here with CUDA: llama-server, llama-quantize)
#   synth_gguf.py      writes a random-weight F16 GGUF with a real model's shapes
#   wheels/            gguf, PyYAML and tqdm (for synth_gguf.py); httpx and its dependencies
#                      (for bench_serve.py)
#   hearth             hearth's release binary
# The model is quantized by llama.cpp and both servers load the same file. Random weights
# have no chat template, so the requests go to /v1/completions. Logs go to $OUT.
# Settings: MODEL (synth_gguf.py preset, default qwen3-0.6b), QUANT (default Q8_0), CLIENTS
# (default 1,16,64), REQUESTS (per client, default 4), MAX_TOKENS (default 128), SAMPLED
# (default 1: a second round drawing at temperature 0.8 with top-k 40, Ollama's defaults).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=$PWD/.device-bin
out=${OUT:-$(mktemp -d)}
work=${WORK:-$(mktemp -d)}
mkdir -p "$out" "$work"
MODEL=${MODEL:-qwen3-0.6b}
QUANT=${QUANT:-Q8_0}
CLIENTS=${CLIENTS:-1,16,64}
REQUESTS=${REQUESTS:-4}
MAX_TOKENS=${MAX_TOKENS:-128}
SAMPLED=${SAMPLED:-1}
llama_src=$work/llama.cpp
status=0

for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
  [ -x "$d/nvcc" ] && export PATH="$PATH:$d" && break
done
if ! ldconfig -p | grep -q 'libnvrtc\.so'; then
  lib=$(find /usr/local /usr/lib /opt -name 'libnvrtc.so.1[0-9]*' 2>/dev/null | sort | head -1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export XDG_CACHE_HOME=$work/cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true

echo "== build llama.cpp"
if [ ! -x "$llama_src/build/bin/llama-server" ]; then
  rm -rf "$llama_src"
  tar -C "$work" -xJf "$bin/llama-src.tar.xz" || exit 1
  head -1 "$llama_src/LLAMA-SOURCE.txt"
  commit=$(awk '/^commit /{print $2}' "$llama_src/LLAMA-SOURCE.txt")
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  t0=$(date +%s)
  cmake -S "$llama_src" -B "$llama_src/build" "${gen[@]}" \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_COMMIT="${commit:0:7}" -DLLAMA_BUILD_NUMBER=0 \
    >"$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log"; exit 1; }
  cmake --build "$llama_src/build" -j"$(nproc)" --target llama-server llama-quantize \
    >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
  echo "built in $(($(date +%s) - t0)) s"
fi

echo "== python packages"
export PYTHONPATH=$work/py
want=()
for m in gguf yaml tqdm httpx; do
  python3 -c "import $m" 2>/dev/null && continue
  case $m in
    yaml) want+=(pyyaml) ;;
    httpx) want+=(httpx httpcore h11 anyio idna certifi typing_extensions) ;;
    *) want+=("$m") ;;
  esac
done
if [ ${#want[@]} -gt 0 ]; then
  python3 -m pip install -q --no-index --find-links "$bin/wheels" --no-deps --target "$work/py" \
    "${want[@]}" 2>&1 | grep -v "^$" | tail -3
fi

echo "== model"
f16=$work/$MODEL-F16.gguf
m=$work/$MODEL-$QUANT.gguf
if [ ! -s "$m" ]; then
  python3 "$bin/synth_gguf.py" "$MODEL" "$f16" >"$out/synth.log" 2>&1 || { tail -5 "$out/synth.log"; exit 1; }
  "$llama_src/build/bin/llama-quantize" "$f16" "$m" "$QUANT" >"$out/quantize.log" 2>&1 ||
    { tail -5 "$out/quantize.log"; exit 1; }
  rm -f "$f16"
fi
ls -la "$m"

serve() { # label, extra bench_serve.py arguments
  echo "== $1"
  python3 scripts/bench_serve.py --model "$m" --hearth "$bin/hearth" \
    --llama-server "$llama_src/build/bin/llama-server" --gpu --endpoint completions \
    --clients "$CLIENTS" --requests "$REQUESTS" --max-tokens "$MAX_TOKENS" \
    --json "$out/$1.json" "${@:2}" || status=1
}
serve greedy
[ "$SAMPLED" = 1 ] && serve sampled --temperature 0.8 --top-k 40
echo "== exit status $status"
exit $status
