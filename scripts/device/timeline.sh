#!/usr/bin/env bash
# One device call: a decode step's kernels on a timeline. Nsight Systems traces every kernel of
# the recorded steps (--cuda-graph-trace=node), overlapping launches kept, and
# scripts/device/summarize_timeline.py says what each kernel adds to the step: the time from
# the end of the kernel before it to its own end.
# Carried in .device-bin/: hearth (xz), synth_gguf.py, wheels/ (gguf, PyYAML), debs/ (libdw1 and
# libelf1 from Debian, for the importer below).
# Settings: MODELS (default "qwen3-0.6b:Q8_0"), STEPS (decode steps, default 32), BENCH_ARGS
# (more `hearth bench` arguments, e.g. --greedy), GRAPH_TRACE (node, the default: every kernel;
# graph: a recorded step as one item, which disturbs the host's timing far less).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=$PWD/.device-bin
work=${WORK:-$(mktemp -d)}
out=${OUT:-$work}
mkdir -p "$work"
# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh
nsys=$(command -v nsys || find /opt/nvidia /usr/local -name nsys -type f -perm -u+x 2>/dev/null | head -1)
[ -n "$nsys" ] || { echo "nsys not found"; exit 1; }
status=0
for entry in ${MODELS:-qwen3-0.6b:Q8_0}; do
  IFS=: read -r preset quant <<<"$entry"
  m=$work/$preset-$quant.gguf
  synth_model "$preset" "$quant" "$m" || status=1
  args=${BENCH_ARGS:-}
  tag=$preset-$quant-${GRAPH_TRACE:-node}${args//[^a-z0-9]/}
  rm -f "$work/$tag.nsys-rep" "$work/$tag.qdstrm"
  echo "== $tag"
  "$bin/hearth" bench "$m" --device cuda -p 0 -n 128 -r 3 ${BENCH_ARGS:-} 2>&1 | grep -E '^tg'
  "$nsys" profile --cuda-graph-trace="${GRAPH_TRACE:-node}" --trace=cuda -o "$work/$tag" --force-overwrite true \
    "$bin/hearth" bench "$m" --device cuda -p 0 -n "${STEPS:-32}" -r 1 ${BENCH_ARGS:-} >"$work/$tag-nsys.log" 2>&1 ||
    { status=1; tail -5 "$work/$tag-nsys.log"; continue; }
  # The nsys of Nsight Compute's folder leaves its raw stream (.qdstrm) unimported where its
  # importer lacks elfutils' libdw: import it with the carried Debian packages (debs/).
  if [ ! -s "$work/$tag.nsys-rep" ] && [ -s "$work/$tag.qdstrm" ]; then
    importer=$(find "$(dirname "$(dirname "$nsys")")" -name QdstrmImporter -type f | head -1)
    for f in "$bin"/debs/*.deb; do dpkg -x "$f" "$work/dw"; done
    LD_LIBRARY_PATH=$work/dw/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
      "$importer" -i "$work/$tag.qdstrm" 2>&1 | tail -2
  fi
  "$nsys" stats --report cuda_gpu_trace,cuda_api_trace --format csv --force-export true \
    --force-overwrite true --output "$work/$tag" \
    "$work/$tag.nsys-rep" >/dev/null 2>&1 || { status=1; echo "nsys stats failed"; continue; }
  csv=$(ls "$work/$tag"*cuda_gpu_trace*.csv | head -1)
  api=$(ls "$work/$tag"*cuda_api_trace*.csv | head -1)
  cp "$csv" "$out/trace-$tag.csv" 2>/dev/null
  python3 scripts/device/summarize_timeline.py "$csv" "$api" | tee "$out/timeline-$tag.txt"
done
echo "== exit status $status"
exit $status
