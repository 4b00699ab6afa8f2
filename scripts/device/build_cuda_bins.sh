#!/usr/bin/env bash
# Builds the CUDA conformance binary and the hearth-cuda test binaries in release mode and
# stages them in .device-bin/ (ignored by git through .git/info/exclude), to be carried to the
# GPU machine, which has no Rust toolchain. Run from the repository root.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude=.git/info/exclude
grep -qxF '/.device-bin/' "$exclude" || echo '/.device-bin/' >>"$exclude"

cargo build --release -p hearth-cuda --bin cuda-conformance
tests_json=$(cargo test --release -p hearth-cuda --no-run --message-format=json 2>/dev/null)
target_dir=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

rm -rf .device-bin && mkdir -p .device-bin
cp "$target_dir/release/cuda-conformance" .device-bin/
# One executable per test target: the library's unit tests and tests/gpu.rs.
echo "$tests_json" | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    msg = json.loads(line)
    exe = msg.get("executable")
    kind = msg.get("target", {}).get("kind", [""])[0]
    if msg.get("reason") == "compiler-artifact" and exe and kind in ("lib", "test"):
        name = msg["target"]["name"]
        dest = ".device-bin/test-" + ("unit" if kind == "lib" else name)
        shutil.copy(exe, dest)
        print("staged", dest)
'
strip .device-bin/* 2>/dev/null || true
ls -la .device-bin
