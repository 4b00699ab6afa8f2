#!/usr/bin/env bash
# The project's test command: fetch the test models (once; checked by sha256), then run every
# test of the workspace. Works on a fresh machine with Rust, python3 and pip.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-models.sh smollm2 gemma3 minilm >/dev/null
scripts/setup-test-clients.sh
# The wgpu backend's tests run on lavapipe (software Vulkan) where it can be installed; once it
# is, a missing adapter is a test failure rather than a skip.
if scripts/setup-lavapipe.sh; then
    export HEARTH_REQUIRE_WGPU=1
fi
# The CUDA kernels are compiled by NVRTC from NVIDIA's wheel (no GPU needed); once it is
# there, a library that does not load is a test failure rather than a skip.
if nvrtc_lib=$(scripts/setup-nvrtc.sh); then
    export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export HEARTH_REQUIRE_NVRTC=1
fi
# A one-off build gains nothing from incremental state, which would double the build directory.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The workspace builds for Apple Silicon macOS (checked, not run: no Mac here).
scripts/check-macos.sh
cargo test --workspace --locked --no-fail-fast "$@"
# The golden model tests again with the wgpu backend (lavapipe here): small models, few tokens.
# NOTE: `--workspace` selects the test binaries built above; `-p hearth-engine` resolves other
# features and rebuilt much of the tree (about 6 minutes on two cores).
if [[ "${HEARTH_REQUIRE_WGPU:-}" == 1 ]]; then
    HEARTH_TEST_DEVICE=wgpu cargo test --workspace --test golden_models --locked \
        -- qwen3_tiny_f16 qwen3_tiny_q8_0_logits smollm2_logits
    HEARTH_TEST_DEVICE=wgpu cargo test --workspace --test mlx_folder --locked \
        -- matches_transformers
else
    echo "skipping the golden model tests on wgpu: no Vulkan driver (see scripts/setup-lavapipe.sh)"
fi
