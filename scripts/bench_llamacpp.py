#!/usr/bin/env python3
"""Measure llama.cpp (through llama-cpp-python) on one GGUF model, the way llama-bench does.

usage: bench_llamacpp.py MODEL.gguf [--threads 2] [--repetitions 3]

Prints one JSON line:
  load_s        seconds to open the model and create the context
  pp512         prompt processing: 512 tokens evaluated as one batch of 512, tokens/s
  tg128         text generation: 128 single-token evaluations, tokens/s
  peak_rss_mib  peak resident memory of this process (getrusage)

Each test runs once as a warm-up and then `--repetitions` times from an empty KV cache;
the line reports the mean, the best and every run. Like llama-bench, the prompt is
random token ids (fixed seed) after BOS where the model wants one, and only the last
position's logits are requested.
"""

import argparse
import json
import os
import resource
import sys
import time

import numpy as np

N_PROMPT = 512
N_GEN = 128


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def prompt_ids(llm, n):
    rng = np.random.default_rng(0)
    ids = [int(i) for i in rng.integers(0, llm.n_vocab(), size=n)]
    bos = llm.tokenize(b"", add_bos=True, special=True)
    if bos:
        ids[0] = bos[0]
    return ids


def run_pp(llm, ids):
    llm.reset()
    llm.eval(ids)


def run_tg(llm, ids):
    llm.reset()
    for token in ids:
        llm.eval([token])


def measure(name, n_tokens, fn, repetitions):
    fn()  # NOTE: warm-up, as llama-bench does: first-touch of weights, thread pool start
    seconds = [timed(fn) for _ in range(repetitions)]
    tps = [n_tokens / s for s in seconds]
    return {
        "test": name,
        "mean_tps": round(sum(tps) / len(tps), 2),
        "best_tps": round(max(tps), 2),
        "std_tps": round(float(np.std(tps)), 2),
        "runs_tps": [round(t, 2) for t in tps],
    }


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="GGUF file")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    if not os.path.isfile(args.model):
        raise SystemExit(f"{args.model}: no such file")

    import llama_cpp
    from llama_cpp import Llama

    start = time.perf_counter()
    llm = Llama(
        model_path=args.model,
        n_ctx=N_PROMPT + N_GEN,
        n_batch=N_PROMPT,
        n_ubatch=N_PROMPT,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        logits_all=False,
        verbose=False,
        seed=0,
    )
    load_s = time.perf_counter() - start

    ids = prompt_ids(llm, N_PROMPT)
    pp = measure(f"pp{N_PROMPT}", N_PROMPT, lambda: run_pp(llm, ids), args.repetitions)
    tg = measure(f"tg{N_GEN}", N_GEN, lambda: run_tg(llm, ids[:N_GEN]), args.repetitions)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # NOTE: KiB on Linux

    result = {
        "model": os.path.basename(args.model),
        "size_mib": round(os.path.getsize(args.model) / 2**20, 1),
        "engine": "llama.cpp",
        "llama_cpp_python": llama_cpp.__version__,
        "threads": args.threads,
        "repetitions": args.repetitions,
        "load_s": round(load_s, 3),
        "pp512": pp,
        "tg128": tg,
        "peak_rss_mib": round(peak_kib / 1024, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
