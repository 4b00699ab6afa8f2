#!/usr/bin/env bash
# One device call: two hearth builds side by side, in alternating rounds, so that a change's
# effect is measured within one call. TESTS picks the steps (default "pp32 par64"):
#   pp32       a 32-token prompt
#   pp512      a 512-token prompt (llama-bench's pp512)
#   tg-d512, tg-d2k, tg-d8k, tg-d32k
#              tg128 after 512, 2,048, 8,192 or 32,768 tokens of context (llama-bench -d)
#   pp-d2k, pp-d8k, pp-d32k
#              pp512 after 2,048, 8,192 or 32,768 tokens of context
#   par64      64 sequences decoding together, their logits brought back
#   tg         one sequence decoding 128 tokens, its logits brought back (llama-bench's tg128)
#   tg-greedy  the same with the argmax on the GPU
#   tg256-greedy  one sequence decoding 256 tokens with the argmax on the GPU (positions past
#              the one-pass attention of the first 128)
#   tg-sample, par64-sample    drawing with the default settings (`--sample`)
#   tg-penalty, par64-penalty  the same with Ollama's default repeat penalty (1.1)
#   tg-penalty-logits, par64-penalty-logits  with a repeat penalty of 0.99, which can raise
#              logits: the same work, but the logits come back (the path before penalties
#              could draw from the device's candidates)
# Carried in .device-bin/: hearth (the change), hearth-base (before it), synth_gguf.py and
# wheels/ (gguf, PyYAML); the models are written and quantized here.
# Settings: MODELS (synth_gguf.py presets, default qwen3-0.6b llama-3.1-8b), QUANTS (default
# Q8_0 Q4_K_M for the first model, Q4_K_M for the others), ROUNDS (default 2), TESTS, WORK,
# BINARIES (default "hearth-base hearth": executables in .device-bin/, wrapper scripts that set
# an environment variable included).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=$PWD/.device-bin
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
MODELS=${MODELS:-qwen3-0.6b llama-3.1-8b}
ROUNDS=${ROUNDS:-2}
TESTS=${TESTS:-pp32 par64}
BINARIES=${BINARIES:-hearth-base hearth}
status=0

# shellcheck source=scripts/device/gpu_env.sh
source scripts/device/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true

first=1
files=()
for preset in $MODELS; do
  quants=${QUANTS:-$([ $first = 1 ] && echo "Q8_0 Q4_K_M" || echo Q4_K_M)}
  first=0
  f16=$work/$preset-F16.gguf
  for q in $quants; do
    m=$work/$preset-$q.gguf
    files+=("$m")
    [ -s "$m" ] && continue
    [ -s "$f16" ] || python3 "$bin/synth_gguf.py" "$preset" "$f16" >/dev/null 2>&1 || status=1
    "$bin/hearth" quantize "$f16" "$m" "$q" >/dev/null 2>&1 || status=1
  done
  rm -f "$f16"
done

run() { # binary, model, flags
  timeout 300 "$bin/$1" bench "$2" --device cuda "${@:3}" 2>&1 | grep -E '^(pp|tg)[0-9]' |
    tr -s ' ' | tr '\n' ' '
}
for round in $(seq "$ROUNDS"); do
  for m in "${files[@]}"; do
    for b in $BINARIES; do
      echo "round $round $(basename "$m" .gguf) $b"
      for t in $TESTS; do
        case $t in
          pp32) echo "  32-token prompt: $(run "$b" "$m" -p 32 -n 0 -r 10)" ;;
          pp512) echo "  pp512:           $(run "$b" "$m" -p 512 -n 0 -r 5)" ;;
          tg-d512) echo "  tg128 @ d512:    $(run "$b" "$m" -p 0 -n 128 -r 3 -d 512)" ;;
          tg-d2k) echo "  tg128 @ d2048:   $(run "$b" "$m" -p 0 -n 128 -r 3 -d 2048)" ;;
          tg-d8k) echo "  tg128 @ d8192:   $(run "$b" "$m" -p 0 -n 128 -r 3 -d 8192)" ;;
          tg-d32k) echo "  tg128 @ d32768:  $(run "$b" "$m" -p 0 -n 128 -r 2 -d 32768)" ;;
          pp-d2k) echo "  pp512 @ d2048:   $(run "$b" "$m" -p 512 -n 0 -r 3 -d 2048)" ;;
          pp-d8k) echo "  pp512 @ d8192:   $(run "$b" "$m" -p 512 -n 0 -r 3 -d 8192)" ;;
          pp-d32k) echo "  pp512 @ d32768:  $(run "$b" "$m" -p 512 -n 0 -r 2 -d 32768)" ;;
          par64) echo "  64 streams:      $(run "$b" "$m" -p 128 -n 128 -r 1 --parallel 64)" ;;
          tg) echo "  tg128:           $(run "$b" "$m" -p 0 -n 128 -r 5)" ;;
          tg-greedy) echo "  tg128 greedy:    $(run "$b" "$m" -p 0 -n 128 -r 5 --greedy)" ;;
          tg256-greedy) echo "  tg256 greedy:    $(run "$b" "$m" -p 0 -n 256 -r 3 --greedy)" ;;
          tg-sample) echo "  $t: $(run "$b" "$m" -p 0 -n 128 -r 5 --sample)" ;;
          tg-penalty) echo "  $t: $(run "$b" "$m" -p 0 -n 128 -r 5 --sample --repeat-penalty 1.1)" ;;
          tg-penalty-logits)
            echo "  $t: $(run "$b" "$m" -p 0 -n 128 -r 5 --sample --repeat-penalty=0.99)" ;;
          par64-sample)
            echo "  $t: $(run "$b" "$m" -p 128 -n 128 -r 1 --parallel 64 --sample)" ;;
          par64-penalty)
            echo "  $t: $(run "$b" "$m" -p 128 -n 128 -r 1 --parallel 64 --sample --repeat-penalty 1.1)" ;;
          par64-penalty-logits)
            echo "  $t: $(run "$b" "$m" -p 128 -n 128 -r 1 --parallel 64 --sample --repeat-penalty=0.99)" ;;
          *) echo "  unknown test $t" && status=1 ;;
        esac
      done
    done
  done
done
echo "== exit status $status"
exit $status
