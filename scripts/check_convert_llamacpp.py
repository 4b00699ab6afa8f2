#!/usr/bin/env python3
"""Check that llama.cpp loads the GGUF files `hearth convert` writes and runs them as HF
transformers runs the source folders.

usage: check_convert_llamacpp.py HEARTH_BINARY FIXTURES_DIR WORK_DIR [FIXTURE...]

For each tiny HF fixture (FIXTURES: every family convert writes) and each output type
(f32, f16, bf16, q8_0), runs `hearth convert`, loads the file with llama-cpp-python's `Llama`
(a real llama.cpp build), feeds every prompt of the fixture's reference.json and prints the
largest |llama.cpp - transformers| difference of the last-position logits and how many of the
8 greedy tokens equal transformers'. Each file runs in a child process, so a llama.cpp crash
is reported (with its signal) rather than ending the run. Exits non-zero when llama.cpp cannot
load or run a file.

Needs numpy and llama_cpp (llama-cpp-python).
"""
import json
import multiprocessing
import os
import shutil
import subprocess
import sys

import numpy as np
import llama_cpp

FIXTURES = ["hf-tiny-llama", "hf-tiny-qwen2", "hf-tiny-qwen3", "hf-tiny-mistral",
            "hf-tiny-mixtral", "hf-tiny-qwen3-moe", "hf-tiny-gemma", "hf-tiny-gemma2",
            "hf-tiny-gemma3", "hf-tiny-phi3", "hf-tiny-phi3-longrope"]
TYPES = ["f32", "f16", "bf16", "q8_0"]


def context_size(fixture_dir):
    """256, or less where llama.cpp would switch to LongRoPE's long factors: it picks them
    when the context size exceeds the original one, transformers only for sequences that
    long (these prompts are far shorter)."""
    with open(os.path.join(fixture_dir, "config.json")) as f:
        cfg = json.load(f)
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if rope.get("rope_type") not in ("longrope", "su"):
        return 256
    return min(256, rope.get("original_max_position_embeddings") or 256)


def source_dir(fixtures, name, work):
    """The folder to convert: the fixture, or a copy of it under another name.

    NOTE: llama.cpp's vocabulary loader gives Phi 3's special tokens attributes by their text
    (`</s>`, `<unk>`, `<s>`) for every model whose general.name contains "phi3" or "phi-3",
    and fails to load ("unordered_map::at") a vocabulary without them, as these byte-level
    fixtures are. general.name is the folder's name, so such a fixture is converted from a copy
    named without it.
    """
    src = os.path.join(fixtures, name)
    if "phi3" not in name and "phi-3" not in name:
        return src
    dst = os.path.join(work, name.replace("phi3", "phi").replace("phi-3", "phi"))
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


def run_llamacpp(path, prompts, n_ctx):
    llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, logits_all=True, verbose=False,
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


def run_in_child(path, prompts, n_ctx):
    """run_llamacpp in a forked process: its rows, or an exception saying how it failed."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child():
        try:
            send.send(run_llamacpp(path, prompts, n_ctx))
        except Exception as e:  # llama.cpp refused the file
            send.send(e)

    proc = ctx.Process(target=child)
    proc.start()
    send.close()
    try:
        got = recv.recv() if recv.poll(600) else None
    except EOFError:  # the child died without answering
        got = None
    proc.join()
    if got is None:
        return RuntimeError(f"llama.cpp crashed (exit code {proc.exitcode})")
    return got


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    hearth, fixtures, work = sys.argv[1:4]
    names = sys.argv[4:] or FIXTURES
    os.makedirs(work, exist_ok=True)
    failed = False
    for name in names:
        with open(os.path.join(fixtures, name, "reference.json")) as f:
            ref = json.load(f)
        for ty in TYPES:
            out = os.path.join(work, f"{name}-{ty}.gguf")
            subprocess.run([hearth, "convert", source_dir(fixtures, name, work), "-o", out,
                            "--type", ty], check=True, stdout=subprocess.DEVNULL)
            rows = run_in_child(out, ref["prompts"], context_size(os.path.join(fixtures, name)))
            if isinstance(rows, Exception):
                print(f"{name:21} {ty:5} llama.cpp failed: {rows}", flush=True)
                failed = True
                continue
            max_diff = max(r[0] for r in rows)
            all_same = sum(1 for r in rows if r[1])
            per_prompt = ", ".join(f"{len(p['ids'])}: {r[0]:.1e}" for p, r in zip(ref["prompts"], rows))
            print(f"{name:21} {ty:5} loads in llama.cpp; max |logit diff| vs transformers "
                  f"{max_diff:.2e} (by prompt length {per_prompt}); greedy 8/8 equal on "
                  f"{all_same}/{len(rows)} prompts (tokens equal: {[r[2] for r in rows]})",
                  flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
