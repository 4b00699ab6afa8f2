#!/usr/bin/env python3
"""hearth and llama.cpp side by side: the same model files, the same thread count, one run.

usage: bench_compare.py [--threads 2] [--repetitions 3] MODEL.gguf [MODEL.gguf ...]

For each model it runs `hearth bench --json` (target/release/hearth; build it first with
`cargo build --release -p hearth-cli`) and scripts/bench_llamacpp.py (llama-cpp-python
0.3.16), alternating the two engines so that both see the same machine, and prints a Markdown
table with the ratios hearth / llama.cpp. Use a quiet machine: both engines spin their threads.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def hearth(model, threads, reps):
    r = run_json([str(ROOT / "target/release/hearth"), "bench", model, "-t", str(threads),
                  "-r", str(reps), "--json"])
    return {"load_s": r["load_s"], "pp": r["pp_tok_s"]["mean"], "tg": r["tg_tok_s"]["mean"],
            "rss": r["peak_rss_mib"]}


def llama_cpp(model, threads, reps):
    r = run_json([sys.executable, str(ROOT / "scripts/bench_llamacpp.py"), model,
                  "--threads", str(threads), "--repetitions", str(reps)])
    return {"load_s": r["load_s"], "pp": r["pp512"]["mean_tps"], "tg": r["tg128"]["mean_tps"],
            "rss": r["peak_rss_mib"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the two engines")
    a = ap.parse_args()
    print(f"| model | engine | load s | pp512 tok/s | tg128 tok/s | peak RSS MiB |")
    print(f"|---|---|---|---|---|---|")
    for model in a.models:
        runs = {"hearth": [], "llama.cpp": []}
        for _ in range(a.rounds):
            runs["hearth"].append(hearth(model, a.threads, a.repetitions))
            runs["llama.cpp"].append(llama_cpp(model, a.threads, a.repetitions))
        # The best round of each engine: the least disturbed by anything else on the machine.
        best = {e: {k: (min if k in ("load_s", "rss") else max)(r[k] for r in rs) for k in rs[0]}
                for e, rs in runs.items()}
        name = Path(model).name
        for e in ("hearth", "llama.cpp"):
            b = best[e]
            print(f"| {name} | {e} | {b['load_s']:.2f} | {b['pp']:.1f} | {b['tg']:.1f} | {b['rss']:.0f} |")
        h, l = best["hearth"], best["llama.cpp"]
        print(f"| {name} | **ratio** | {l['load_s'] / h['load_s']:.2f}× faster | "
              f"**{h['pp'] / l['pp']:.2f}×** | **{h['tg'] / l['tg']:.2f}×** | "
              f"{h['rss'] / l['rss']:.2f}× |")


if __name__ == "__main__":
    main()
