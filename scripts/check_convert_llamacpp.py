#!/usr/bin/env python3
"""Check that llama.cpp loads the GGUF files `hearth convert` writes and runs them as HF
transformers runs the source folders.

usage: check_convert_llamacpp.py HEARTH_BINARY FIXTURES_DIR WORK_DIR

For each tiny HF fixture (hf-tiny-llama, hf-tiny-qwen2, hf-tiny-qwen3) and each output type
(f16, bf16, q8_0), runs `hearth convert`, loads the file with llama-cpp-python's `Llama`
(a real llama.cpp build), feeds every prompt of the fixture's reference.json and prints the
largest |llama.cpp - transformers| difference of the last-position logits and how many of the
8 greedy tokens equal transformers'. Exits non-zero when llama.cpp cannot load a file.

Needs numpy and llama_cpp (llama-cpp-python).
"""
import json
import os
import subprocess
import sys

import numpy as np
import llama_cpp

FIXTURES = ["hf-tiny-llama", "hf-tiny-qwen2", "hf-tiny-qwen3"]
TYPES = ["f16", "bf16", "q8_0"]


def run_llamacpp(path, prompts):
    llm = llama_cpp.Llama(model_path=path, n_ctx=256, logits_all=True, verbose=False,
                          n_threads=2)
    rows = []
    for p in prompts:
        llm.reset()
        llm.eval(p["ids"])
        last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        diff = float(np.max(np.abs(last - np.array(p["last_logits"], dtype=np.float32))))
        seq = []
        for _ in range(len(p["greedy"])):
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            seq.append(tok)
            llm.eval([tok])
        same = sum(1 for a, b in zip(seq, p["greedy"]) if a == b)
        rows.append((diff, seq == p["greedy"], same))
    return rows


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    hearth, fixtures, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    failed = False
    for name in FIXTURES:
        with open(os.path.join(fixtures, name, "reference.json")) as f:
            ref = json.load(f)
        for ty in TYPES:
            out = os.path.join(work, f"{name}-{ty}.gguf")
            subprocess.run([hearth, "convert", os.path.join(fixtures, name), "-o", out,
                            "--type", ty], check=True, stdout=subprocess.DEVNULL)
            try:
                rows = run_llamacpp(out, ref["prompts"])
            except Exception as e:  # llama.cpp refused the file
                print(f"{name} {ty}: llama.cpp failed to load: {e}")
                failed = True
                continue
            max_diff = max(r[0] for r in rows)
            all_same = sum(1 for r in rows if r[1])
            print(f"{name:16} {ty:5} loads in llama.cpp; max |logit diff| vs transformers "
                  f"{max_diff:.2e}; greedy 8/8 equal on {all_same}/{len(rows)} prompts "
                  f"(tokens equal: {[r[2] for r in rows]})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
