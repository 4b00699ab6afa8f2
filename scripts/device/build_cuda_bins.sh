#!/usr/bin/env bash
# Builds hearth, the CUDA conformance binary, the hearth-cuda test binaries, the wgpu op
# conformance table and the engine's GPU-relevant test binaries in release mode and
# stages them in .device-bin/ (ignored by git through .git/info/exclude), to be carried to the
# GPU machine, which has no Rust toolchain. Run from the repository root.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude=.git/info/exclude
grep -qxF '/.device-bin/' "$exclude" || echo '/.device-bin/' >>"$exclude"

cargo build --release -p hearth-cuda --bin cuda-conformance
cargo build --release -p hearth-cli
# Only the test targets staged below: every other engine test would be a release link of its own.
engine_tests=(cuda_vs_cpu hf_folder hf_archs moe_gguf mlx_folder golden_models)
tests_json=$(cargo test --release -p hearth-cuda -p hearth-engine -p hearth-wgpu --lib --test gpu \
  --test mlx --test attention --test decode_norm --test rope --test fused_quantize --test mmq \
  --test gemv_mixed \
  --test conformance --test normed_input --test argmax --test top_k --test read_back \
  "${engine_tests[@]/#/--test=}" --no-run --message-format=json 2>/dev/null)
target_dir=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

# Only what this script stages is replaced: other carried files stay.
mkdir -p .device-bin
rm -f .device-bin/test-* .device-bin/cuda-conformance .device-bin/hearth
cp "$target_dir/release/cuda-conformance" "$target_dir/release/hearth" .device-bin/
# One executable per test target: the library's unit tests and tests/gpu.rs.
echo "$tests_json" | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    msg = json.loads(line)
    exe = msg.get("executable")
    kind = msg.get("target", {}).get("kind", [""])[0]
    pkg = msg.get("package_id", "")
    if msg.get("reason") == "compiler-artifact" and exe and kind in ("lib", "test"):
        name = msg["target"]["name"]
        if "hearth-engine" in pkg:
            # The engine tests that need no downloaded model.
            if name not in ("cuda_vs_cpu", "hf_folder", "hf_archs", "moe_gguf", "mlx_folder",
                            "golden_models"):
                continue
            dest = ".device-bin/test-engine-" + name
        elif "hearth-wgpu" in pkg:
            # The op conformance table, the matmuls that quantize (and norm) their own
            # input, the MLX weights and the argmax of greedy decoding through Vulkan (its unit
            # tests need no GPU).
            if name not in ("conformance", "normed_input", "mlx", "argmax", "top_k"):
                continue
            dest = ".device-bin/test-wgpu-" + name
        else:
            dest = ".device-bin/test-" + ("unit" if kind == "lib" else name)
        shutil.copy(exe, dest)
        print("staged", dest)
'
strip .device-bin/hearth .device-bin/cuda-conformance .device-bin/test-* 2>/dev/null || true
ls -la .device-bin
