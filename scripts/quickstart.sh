#!/usr/bin/env bash
# Fetch the default model (SmolLM2-135M-Instruct, GGUF Q4_1), build hearth and chat with it.
#   scripts/quickstart.sh                      # interactive chat
#   scripts/quickstart.sh "Tell me a joke."    # one reply
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(scripts/fetch-models.sh smollm2 | cut -f2)
cargo build --release --locked -p hearth-cli
exec target/release/hearth run "$model" "$@"
