#!/usr/bin/env bash
# What one device call runs: the hearth-cuda tests and the op conformance table on the GPU,
# from binaries built on a machine with Rust (scripts/device/build_cuda_bins.sh) and carried in
# .device-bin/. Logs go to $OUT when it is set. Exit status: non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=.device-bin
logs=${OUT:-$(mktemp -d)}

# NVRTC ships with the toolkit, which is not always on the loader's path.
if ! ldconfig -p | grep -q 'libnvrtc\.so'; then
  lib=$(find /usr/local /usr/lib /opt -name 'libnvrtc.so.1[0-9]*' 2>/dev/null | sort | head -1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
  --format=csv || true

# A fresh kernel cache: the first open compiles, the second must load from the cache.
export XDG_CACHE_HOME=$(mktemp -d)
status=0
echo "== kernel cache: cold, then warm"
"$bin/cuda-conformance" --load-only || status=1
"$bin/cuda-conformance" --load-only || status=1

for t in "$bin"/test-*; do
  echo "== $t"
  "$t" --test-threads=1 2>&1 | tee "$logs/$(basename "$t").log" || status=1
done

echo "== conformance table"
"$bin/cuda-conformance" 2>&1 | tee "$logs/conformance.txt" || status=1
echo "== exit status $status"
exit $status
