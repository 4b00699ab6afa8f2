#!/usr/bin/env bash
# Unpacks NVIDIA's NVRTC library (the runtime CUDA compiler, from its PyPI wheel) into a cache
# folder and prints the folder holding libnvrtc.so.13, so that the CUDA kernels are compiled for
# real GPU architectures on a machine with no GPU and no CUDA toolkit (the kernel compile test
# in crates/hearth-cuda/src/compile.rs). NVRTC needs no GPU. Idempotent: an unpacked library is
# left alone. Exits 1 when it cannot (no pip, no network, not x86_64 or aarch64 Linux): that
# test then says it skipped.
set -uo pipefail

# CUDA 13.0, the toolkit generation of the driver the GPU work is measured with.
VERSION=13.0.88
dir="${HEARTH_NVRTC_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth-nvrtc}/$VERSION"
lib="$dir/nvidia/cu13/lib"

if [[ -f "$lib/libnvrtc.so.13" && -f "$dir/.complete" ]]; then
    echo "$lib"
    exit 0
fi
case "$(uname -s)-$(uname -m)" in
Linux-x86_64 | Linux-aarch64) ;;
*)
    echo "setup-nvrtc: no NVRTC wheel for $(uname -s) $(uname -m); the kernel compile test will be skipped" >&2
    exit 1
    ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "setup-nvrtc: fetching nvidia-cuda-nvrtc $VERSION (about 90 MB) into $dir" >&2
if ! python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$tmp" "nvidia-cuda-nvrtc==$VERSION" >&2; then
    echo "setup-nvrtc: download failed; the kernel compile test will be skipped" >&2
    exit 1
fi
rm -rf "$dir"
mkdir -p "$dir"
# A wheel is a zip file; only the shared libraries are needed.
if ! python3 - "$dir" "$tmp"/*.whl <<'PY'; then
import sys, zipfile
dest, wheel = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    # The ".alt" builds are a variant the loader never asks for.
    libs = [n for n in z.namelist() if n.startswith("nvidia/cu13/lib/") and ".alt." not in n]
    if not libs:
        sys.exit(f"{wheel}: no nvidia/cu13/lib/ in the wheel")
    z.extractall(dest, libs)
PY
    echo "setup-nvrtc: unpacking failed; the kernel compile test will be skipped" >&2
    exit 1
fi
touch "$dir/.complete"
echo "$lib"
