#!/usr/bin/env bash
# One device call: where hearth's GPU time goes, kernel by kernel. For each model (a synthetic
# real-shape GGUF, quantized by hearth), Nsight Compute times every kernel of three runs:
#   pp    one 512-token prompt step
#   tg    single-sequence decode steps (CUDA graph replays)
#   par   decode steps of NPL sequences at once
# and scripts/device/summarize_ncu.py folds the launches into one table per run (time per
# kernel name, share of the GPU time). Each run is also timed without the profiler, so the gap
# between wall time and the kernels' sum (host work, launches, copies) shows.
# Carried in .device-bin/: hearth, synth_gguf.py, wheels/ (gguf, PyYAML).
# Settings: MODELS (default qwen3-0.6b), QUANTS (default Q8_0), NPL (default 64), RUNS (default
# "pp tg par"; also pp32, one 32-token prompt step, and tg-d2k / tg-d8k / tg-d32k, decode steps
# after 2,048 / 8,192 / 32,768 tokens of context), KERNELS (a regular expression: profile only
# the kernels whose names match, the others run at full speed; default: all).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=$PWD/.device-bin
out=${OUT:-$(mktemp -d)}
work=${WORK:-$(mktemp -d)}
MODELS=${MODELS:-qwen3-0.6b}
QUANTS=${QUANTS:-Q8_0}
NPL=${NPL:-64}
status=0

if ! ldconfig -p | grep -q 'libnvrtc\.so'; then
  lib=$(find /usr/local /usr/lib /opt -name 'libnvrtc.so.1[0-9]*' 2>/dev/null | sort | head -1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
ncu=$(command -v ncu || find /opt/nvidia /usr/local -name ncu -type f 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "ncu not found"; exit 1; }
export XDG_CACHE_HOME=$work/cache
export PYTHONPATH=$work/py
python3 -c 'import gguf' 2>/dev/null ||
  python3 -m pip install -q --no-index --find-links "$bin/wheels" --no-deps --target "$work/py" \
    gguf $(python3 -c 'import yaml' 2>/dev/null || echo pyyaml) >/dev/null

for preset in $MODELS; do
  f16=$work/$preset-F16.gguf
  for q in $QUANTS; do
    m=$work/$preset-$q.gguf
    # Files left in WORK by an earlier call (or by bench_cuda.sh's models/) are used as they are.
    if [ ! -s "$m" ]; then
      [ -s "$f16" ] || python3 "$bin/synth_gguf.py" "$preset" "$f16" >"$out/synth-$preset.log" 2>&1 || {
        status=1
        tail -5 "$out/synth-$preset.log"
        continue
      }
      "$bin/hearth" quantize "$f16" "$m" "$q" >/dev/null 2>&1 || { status=1; continue; }
    fi
    # Warm the kernel cache so that compiling is not profiled.
    "$bin/hearth" bench "$m" --device cuda -p 32 -n 4 -r 1 >/dev/null 2>&1
    for run in ${RUNS:-pp tg par}; do
      case $run in
        pp) args=(-p 512 -n 0 -r 1) ;;
        pp32) args=(-p 32 -n 0 -r 1) ;;
        tg) args=(-p 0 -n 16 -r 1) ;;
        tg-d2k) args=(-p 0 -n 16 -r 1 -d 2048) ;;
        tg-d8k) args=(-p 0 -n 16 -r 1 -d 8192) ;;
        tg-d32k) args=(-p 0 -n 16 -r 1 -d 32768) ;;
        par) args=(-p 0 -n 8 -r 1 --parallel "$NPL") ;;
      esac
      tag=$preset-$q-$run
      echo "== $tag: hearth bench ${args[*]} (no profiler)"
      "$bin/hearth" bench "$m" --device cuda "${args[@]}" 2>&1 | tail -3
      filter=()
      [ -n "${KERNELS:-}" ] && filter=(-k "regex:$KERNELS")
      "$ncu" --clock-control none "${filter[@]}" --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
        "$bin/hearth" bench "$m" --device cuda "${args[@]}" >"$out/ncu-$tag.csv" 2>"$out/ncu-$tag.err" ||
        { status=1; tail -3 "$out/ncu-$tag.err"; }
      python3 scripts/device/summarize_ncu.py "$out/ncu-$tag.csv" | tee "$out/kernels-$tag.txt"
    done
  done
done
echo "== exit status $status"
exit $status
