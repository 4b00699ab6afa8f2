#!/usr/bin/env python3
"""Run llama.cpp on a tiny mixture-of-experts GGUF (made by make_moe_gguf.py) over the prompts of
its Hugging Face folder's reference.json, and compare with HF transformers.

usage: check_moe_gguf_llamacpp.py MODEL.gguf HF_DIR [--write OUT.json]

Prints, per prompt, llama.cpp's greedy tokens next to transformers' and the largest
|llama.cpp − transformers| last-position logit. With --write, stores llama.cpp's last-position
logits and greedy tokens per prompt (reference.json's "prompts" layout) as a golden file.

Needs llama-cpp-python (the `llama_cpp` module) and numpy.
"""

import argparse
import json
import os

import numpy as np
from llama_cpp import Llama


def run_prompt(llm, ids, n_greedy):
    """Last-position logits after `ids`, then `n_greedy` greedy tokens (one decode step each)."""
    llm.reset()
    llm.eval(ids)
    last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    logits, greedy = last.copy(), []
    for _ in range(n_greedy):
        t = int(np.argmax(logits))
        greedy.append(t)
        llm.eval([t])
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    return last, greedy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("hf_dir")
    parser.add_argument("--write", help="write llama.cpp's logits and greedy tokens here")
    args = parser.parse_args()
    with open(os.path.join(args.hf_dir, "reference.json"), encoding="utf-8") as f:
        ref = json.load(f)
    llm = Llama(model_path=args.model, n_ctx=256, n_batch=64, logits_all=True, verbose=False,
                n_threads=2, seed=0)
    out, all_equal, worst = {"prompts": []}, True, 0.0
    for p in ref["prompts"]:
        last, greedy = run_prompt(llm, p["ids"], len(p["greedy"]))
        diff = float(np.max(np.abs(last - np.array(p["last_logits"], dtype=np.float32))))
        worst = max(worst, diff)
        all_equal &= greedy == p["greedy"]
        print(f"prompt {p['ids']}: llama.cpp greedy {greedy}, transformers {p['greedy']}, "
              f"max |logit diff| {diff:.3e}")
        out["prompts"].append({"ids": p["ids"], "last_logits": last.tolist(), "greedy": greedy})
    print(f"{os.path.basename(args.model)}: greedy tokens "
          f"{'equal' if all_equal else 'DIFFER'}; max |logit diff| vs transformers {worst:.3e}")
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
