#!/usr/bin/env python3
"""Summarize one bench_cuda.sh run: one line per model file with llama.cpp's and hearth's
pp512 / tg128 / batched decode numbers, hearth / llama.cpp ratios (above 1: hearth faster),
and the fraction of the measured copy bandwidth that single-sequence decode reaches
(tokens/s x model bytes / bandwidth: every weight is read once per token).

usage: summarize_bench.py OUT_DIR
"""
import json
import sys
from pathlib import Path


def load_json(path):
    """The whole file as one JSON document (a list cut off after a complete element, as
    llama-bench leaves it when stopped, is closed first), else the last line that parses as
    JSON (tools may log before it); None when absent or unreadable."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for tail in ("", "]"):
        try:
            return json.loads(text.rstrip().rstrip(",") + tail)
        except ValueError:
            pass
    for line in reversed(text.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def llama_bench(out, name):
    """(pp512, tg128, model bytes) from llama-bench's JSON list of tests."""
    tests = load_json(out / f"llama-bench-{name}.json") or []
    pp = tg = size = None
    for t in tests if isinstance(tests, list) else []:
        size = t.get("model_size", size)
        if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0:
            pp = t.get("avg_ts")
        elif t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0:
            tg = t.get("avg_ts")
    return pp, tg, size


def llama_batched(out, name):
    """(sequences, combined decode tokens/s) from llama-batched-bench's JSONL."""
    path = out / f"llama-batched-{name}.jsonl"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None, None
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        return row.get("pl"), row.get("speed_tg")
    return None, None


def hearth(out, name, suffix=""):
    """(pp, tg) means from hearth bench --json (`suffix` "-greedy": with --greedy), or Nones."""
    r = load_json(out / f"hearth-{name}{suffix}.json")
    if not isinstance(r, dict):
        return None, None
    return (r.get("pp_tok_s") or {}).get("mean"), (r.get("tg_tok_s") or {}).get("mean")


def hearth_parallel(out, name, suffix=""):
    r = load_json(out / f"hearth-{name}-par{suffix}.json")
    if not isinstance(r, dict):
        return None, None
    return r.get("tg_parallel"), (r.get("tg_tok_s") or {}).get("mean")


def depth_rows(out, name):
    """[(depth, test, llama.cpp tok/s, hearth tok/s)] from the depth phase's files, test being
    "pp512" or "tg128"."""
    llama = {}
    tests = load_json(out / f"depth-llama-{name}.json") or []
    for t in tests if isinstance(tests, list) else []:
        test = "tg128" if t.get("n_gen", 0) > 0 else "pp512"
        llama[(t.get("n_depth", 0), test)] = t.get("avg_ts")
    rows = {}
    for p in out.glob(f"depth-hearth-{name}-d*.json"):
        r = load_json(p)
        if isinstance(r, dict):
            for test, key in (("pp512", "pp_tok_s"), ("tg128", "tg_tok_s")):
                rows[(r.get("depth", 0), test)] = (r.get(key) or {}).get("mean")
    keys = sorted(set(llama) | set(rows))
    return [(d, test, llama.get((d, test)), rows.get((d, test))) for d, test in keys]


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def ratio(h, l):
    return "-" if not h or not l else f"{h / l:.2f}x"


def frac(tps, size, bw):
    return "-" if not tps or not size or not bw else f"{tps * size / bw:.2f}"


def model_names(out):
    names = set()
    for p in out.glob("llama-bench-*.json"):
        names.add(p.name[len("llama-bench-"):-len(".json")])
    for p in out.glob("depth-llama-*.json"):
        names.add(p.name[len("depth-llama-"):-len(".json")])
    for p in out.glob("hearth-*.json"):
        n = p.name[len("hearth-"):-len(".json")]
        for suffix in ("-greedy", "-sample", "-par"):
            n = n[: -len(suffix)] if n.endswith(suffix) else n
        names.add(n)
    return sorted(names)


def main(out):
    out = Path(out)
    gpu = (out / "gpu.csv").read_text().strip().splitlines()[-1:] if (out / "gpu.csv").exists() else []
    bwj = load_json(out / "bandwidth.json") or {}
    bw = bwj.get("copy_GBps_read_plus_write")
    bw_bytes = bw * 1e9 if bw else None
    print("gpu:", gpu[0] if gpu else "-")
    print(f"copy bandwidth: {fmt(bw)} GB/s (device-to-device, read + write)")
    print("columns: tok/s llama.cpp / hearth (hearth ÷ llama.cpp); bw = tg128 x model bytes ÷ copy bandwidth")
    for name in model_names(out):
        lpp, ltg, size = llama_bench(out, name)
        hpp, htg = hearth(out, name)
        lnp, lpar = llama_batched(out, name)
        hnp, hpar = hearth_parallel(out, name)
        npl = lnp or hnp
        print(
            f"{name}: size {fmt(size / 1e9 if size else None, '.3f')} GB"
            f" | pp512 {fmt(lpp)} / {fmt(hpp)} ({ratio(hpp, lpp)})"
            f" | tg128 {fmt(ltg)} / {fmt(htg)} ({ratio(htg, ltg)})"
            f" | tg128 x{npl if npl else '-'} {fmt(lpar)} / {fmt(hpar)} ({ratio(hpar, lpar)})"
            f" | bw llama.cpp {frac(ltg, size, bw_bytes)} hearth {frac(htg, size, bw_bytes)}"
        )
        for suffix, what in (
            ("-greedy", "--greedy (argmax on the GPU)"),
            ("-sample", "--sample (top-k on the GPU, draws on the CPU)"),
        ):
            _, gtg = hearth(out, name, suffix)
            _, gpar = hearth_parallel(out, name, suffix)
            if gtg or gpar:
                print(
                    f"{name}: hearth {what}"
                    f" | tg128 {fmt(ltg)} / {fmt(gtg)} ({ratio(gtg, ltg)})"
                    f" | tg128 x{npl if npl else '-'} {fmt(lpar)} / {fmt(gpar)} ({ratio(gpar, lpar)})"
                )
        for depth, test, lts, hts in depth_rows(out, name):
            print(f"{name}: {test} @ d{depth} {fmt(lts)} / {fmt(hts)} ({ratio(hts, lts)})")
    phases = out / "phases.tsv"
    if phases.exists():
        rows = [line.split("\t") for line in phases.read_text().splitlines() if line.strip()]
        print("phases (exit, s):", ", ".join(f"{r[0]} {r[1]} {r[2]}" for r in rows if len(r) == 3))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: summarize_bench.py OUT_DIR")
    main(sys.argv[1])
