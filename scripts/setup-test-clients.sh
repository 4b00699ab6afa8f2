#!/usr/bin/env bash
# Installs the official OpenAI and Ollama Python clients into a virtual environment that the
# server tests drive. Idempotent: an environment with the pinned versions is left alone.
set -euo pipefail

VENV="${HEARTH_TEST_VENV:-$HOME/.cache/hearth-test-venv}"
OPENAI_VERSION="3.54.0"
OLLAMA_VERSION="0.6.3"

want="openai==$OPENAI_VERSION ollama==$OLLAMA_VERSION"
stamp="$VENV/.hearth-clients"
if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi
echo "setting up the test clients in $VENV ($want)" >&2
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check $want
echo "$want" > "$stamp"
