#!/usr/bin/env bash
# How far llama.cpp's own GPU build lies from the committed CPU goldens of the tiny test models
# (tests/goldens/qwen3-tiny-*), measured as the golden test measures hearth (golden_check.py),
# next to hearth's CUDA backend on the same goldens. One line of JSON per run in
# $OUT/golden-gpu.jsonl, and $OUT/goldens/NAME/device_check.json: the largest difference of the
# GPU runs, which golden_models.rs allows a GPU backend (copy it to tests/goldens/NAME/).
# hearth's test output in $OUT/golden-hearth.log.
#
# Needs the llama.cpp tree that bench_cuda.sh's build phase leaves in $WORK (run it first in the
# same call with the same WORK) and, for hearth's side, .device-bin/test-engine-golden_models.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:?set OUT}
work=${WORK:?set WORK to bench_cuda.sh s scratch folder}
llama=$work/llama.cpp
bin=.device-bin
# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh
status=0
mkdir -p "$out"
rm -f "$out/golden-gpu.jsonl"
g++ -O2 -std=c++17 -I"$llama/include" -I"$llama/ggml/include" scripts/device/llama_logits.cpp \
  -L"$llama/build/bin" -lllama -Wl,-rpath,"$llama/build/bin" -o "$work/llama_logits" || exit 1
for name in qwen3-tiny-f16 qwen3-tiny-q8_0; do
  golden=tests/goldens/$name/logits.json
  model=tests/fixtures/$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['model_file'])" "$golden")
  python3 -c "import json,sys; print(*json.load(open(sys.argv[1]))['ids'])" "$golden" >"$work/ids-$name.txt"
  # device, batched or sequential, flash attention, GPU layers
  for run in "cpu batched 0 0" "cuda batched 0 999" "cuda batched 1 999" "cuda sequential 0 999"; do
    read -r dev mode fa ngl <<<"$run"
    f=$work/logits-$name-$dev-$mode-fa$fa.f32
    if "$work/llama_logits" "$model" "$work/ids-$name.txt" "$f" "$mode" "$fa" "$ngl"; then
      python3 scripts/device/golden_check.py "$golden" "$f" "$name llama.cpp $dev $mode fa$fa" |
        tee -a "$out/golden-gpu.jsonl"
    else
      status=1
    fi
  done
done
commit=$(awk '/^commit /{print $2}' "$llama/LLAMA-SOURCE.txt")
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
python3 scripts/device/golden_check.py --device-check "$out/golden-gpu.jsonl" "$out/goldens" \
  "$commit" "$gpu" || status=1
if [ -x .device-bin/test-engine-golden_models ]; then
  HEARTH_TEST_DEVICE=cuda .device-bin/test-engine-golden_models qwen3_tiny --test-threads 1 \
    --nocapture >"$out/golden-hearth.log" 2>&1
  grep -E "worst logit error|test result|panicked|exceeds" "$out/golden-hearth.log"
fi
exit "$status"
