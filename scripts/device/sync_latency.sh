#!/usr/bin/env bash
# One device call: the cost of one dependency between two kernels, by mechanism
# (scripts/device/sync_latency.cu), then the CUDA context's memory under environment settings
# that might shrink it (scripts/device/context_memory.py stack0held).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
work=${WORK:-$(mktemp -d)}
nvcc -O3 -arch=sm_90 -o "$work/sync_latency" scripts/device/sync_latency.cu || exit 1
for round in 1 2; do
  echo "== round $round"
  "$work/sync_latency"
done
echo "== context memory"
python3 scripts/device/context_memory.py stack0held
for setting in CUDA_DEVICE_MAX_CONNECTIONS=1 CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=32; do
  echo "-- $setting"
  env "$setting" python3 scripts/device/context_memory.py stack0held
done
