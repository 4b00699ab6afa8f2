#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers: N concurrent streaming clients.

Starts each server it is given (hearth and, for comparison, llama.cpp's llama-server) on the
same model, one after the other, and reports for every client count: aggregate generated
tokens per second, time to first token (TTFT) and inter-token latency (ITL) percentiles.

    scripts/bench_serve.py --model m.gguf --hearth target/release/hearth \\
        [--llama-server path/to/llama-server] [--clients 1,4,16] [--requests 4] [--max-tokens 64]
        [--gpu] [--endpoint chat|completions] [--temperature T] [--top-k K]

--gpu runs both on the GPU (hearth `--device cuda`, llama-server `-ngl 99 -fa on`).
--endpoint completions sends the prompts as they are to /v1/completions, for models without a
chat template (the random-weight ones of synth_gguf.py). Requests are greedy unless
--temperature says otherwise; --top-k is sent with it (both servers read it).

Soak mode (--soak SECONDS): the largest client count keeps sending for that long; every
response is compared with the same prompt's response from a single client (temperature 0,
so they must be identical), and the server's resident memory is sampled before and after.

Runs with the Python of scripts/setup-test-clients.sh (it needs httpx). Prints a Markdown
table; --json writes the raw numbers.
"""
import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx

PROMPTS = [
    "Explain why the sky is blue in three sentences.",
    "Write a short poem about a lighthouse.",
    "List five uses of a paperclip.",
    "What is the difference between a list and a tuple in Python?",
    "Describe the water cycle to a ten-year-old.",
    "Give me a recipe idea that uses rice and eggs.",
    "Summarize the plot of a heist movie you invent.",
    "How do vaccines train the immune system?",
    "Suggest three names for a bakery and explain each.",
    "Why do cats purr? Answer briefly.",
    "Write a haiku about autumn rain.",
    "What are the pros and cons of remote work?",
    "Explain recursion with an example.",
    "Describe a sunrise over the ocean.",
    "How does a bicycle stay upright?",
    "Tell me a fun fact about octopuses.",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Server:
    def __init__(self, name, argv, port):
        self.name, self.argv, self.port = name, argv, port
        self.base = f"http://127.0.0.1:{port}"
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"{self.name} exited at start: {' '.join(self.argv)}")
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        sys.exit(f"{self.name} did not become healthy")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# What every request asks besides its prompt (set from the command line in main).
REQUEST = {"endpoint": "chat", "temperature": 0.0, "top_k": None}


async def one_request(client, base, model, prompt, max_tokens):
    """One streaming chat (or text) completion: (text, n_tokens, ttft_s, [itl_s...])."""
    body = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": REQUEST["temperature"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if REQUEST["top_k"] is not None:
        body["top_k"] = REQUEST["top_k"]
    chat = REQUEST["endpoint"] == "chat"
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    path = "/v1/chat/completions" if chat else "/v1/completions"
    t0 = time.perf_counter()
    stamps, text, usage = [], [], None
    async with client.stream("POST", base + path, json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices", []):
                piece = (c.get("delta") or {}).get("content") if chat else c.get("text")
                if piece:
                    stamps.append(time.perf_counter())
                    text.append(piece)
    n_tokens = usage["completion_tokens"] if usage else len(stamps)
    ttft = (stamps[0] - t0) if stamps else float("nan")
    itl = [b - a for a, b in zip(stamps, stamps[1:])]
    return "".join(text), n_tokens, ttft, itl


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def run_load(base, model, n_clients, n_requests, max_tokens, until=None, expected=None):
    """n_clients concurrent clients, each sending n_requests (or until `until`) in turn."""
    results, failures = [], []
    limits = httpx.Limits(max_connections=n_clients + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        async def worker(w):
            i = 0
            while (until is None and i < n_requests) or (until is not None and time.time() < until):
                prompt = PROMPTS[(w + i) % len(PROMPTS)]
                i += 1
                try:
                    text, n, ttft, itl = await one_request(client, base, model, prompt, max_tokens)
                except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                    failures.append(f"client {w}: {e}")
                    continue
                if expected is not None and text != expected[prompt]:
                    failures.append(f"client {w}: response differs from the single-client one for {prompt!r}")
                results.append((n, ttft, itl))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(n_clients)))
        wall = time.perf_counter() - t0
    tokens = sum(r[0] for r in results)
    ttfts = [r[1] for r in results]
    itls = [x for r in results for x in r[2]]
    return {
        "clients": n_clients,
        "requests": len(results),
        "failures": failures,
        "tokens": tokens,
        "wall_s": wall,
        "tok_s": tokens / wall if wall else 0.0,
        "ttft_p50_ms": pct(ttfts, 50) * 1e3,
        "ttft_p99_ms": pct(ttfts, 99) * 1e3,
        "itl_p50_ms": pct(itls, 50) * 1e3,
        "itl_p99_ms": pct(itls, 99) * 1e3,
    }


async def references(base, model, max_tokens):
    async with httpx.AsyncClient(timeout=600) as client:
        return {p: (await one_request(client, base, model, p, max_tokens))[0] for p in PROMPTS}


def server_argv(kind, binary, model, port, clients, ctx, threads, gpu):
    if kind == "hearth":
        return [binary, "serve", "--model", f"bench={model}", "--port", str(port), "--ctx-size", str(ctx),
                "--max-seqs", str(max(clients)), "--kv-tokens", str(ctx * max(clients))] + (
                    ["--threads", str(threads)] if threads else []) + (["--device", "cuda"] if gpu else [])
    # NOTE: --poll 0: llama.cpp's worker threads otherwise spin while waiting for work, which on
    # a machine with few cores starves the HTTP thread and the clients (multi-second stalls
    # measured on 2 cores); without polling it is several times faster there.
    return [binary, "-m", model, "--alias", "bench", "--port", str(port), "-c", str(ctx * max(clients)),
            "-np", str(max(clients)), "--no-webui", "--poll", "0"] + (["-t", str(threads)] if threads else []) + (
                ["-ngl", "99", "-fa", "on"] if gpu else [])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--hearth", required=True, help="the hearth binary")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary, for comparison")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=1024, help="context per sequence")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--soak", type=float, default=0, help="seconds of soak at the largest client count")
    ap.add_argument("--gpu", action="store_true", help="run both servers on the GPU")
    ap.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.soak and args.temperature != 0:
        ap.error("--soak compares every response with a single client's, so it needs --temperature 0")
    REQUEST.update(endpoint=args.endpoint, temperature=args.temperature, top_k=args.top_k)
    clients = [int(c) for c in args.clients.split(",")]
    engines = [("hearth", args.hearth)] + ([("llama.cpp", args.llama_server)] if args.llama_server else [])
    report = {}
    for kind, binary in engines:
        port = free_port()
        argv = server_argv(kind, binary, args.model, port, clients, args.ctx, args.threads, args.gpu)
        with Server(kind, argv, port) as srv:
            asyncio.run(run_load(srv.base, "bench", 1, 1, 8))  # warm-up
            rows = [asyncio.run(run_load(srv.base, "bench", c, args.requests, args.max_tokens)) for c in clients]
            report[kind] = {"load": rows}
            if args.soak:
                expected = asyncio.run(references(srv.base, "bench", args.max_tokens))
                rss_before = rss_mib(srv.proc.pid)
                soak = asyncio.run(run_load(srv.base, "bench", max(clients), 0, args.max_tokens,
                                            until=time.time() + args.soak, expected=expected))
                soak["rss_before_mib"], soak["rss_after_mib"] = rss_before, rss_mib(srv.proc.pid)
                report[kind]["soak"] = soak
    print("| engine | clients | requests | failed | gen tok/s | vs 1 client | TTFT p50 / p99 ms | ITL p50 / p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, r in report.items():
        base = r["load"][0]["tok_s"]
        for row in r["load"]:
            print(f"| {kind} | {row['clients']} | {row['requests']} | {len(row['failures'])} | {row['tok_s']:.1f} | "
                  f"{row['tok_s'] / base:.2f}x | {row['ttft_p50_ms']:.0f} / {row['ttft_p99_ms']:.0f} | "
                  f"{row['itl_p50_ms']:.1f} / {row['itl_p99_ms']:.1f} |")
    for kind, r in report.items():
        if "soak" in r:
            s = r["soak"]
            print(f"\nsoak {kind}: {s['clients']} clients, {s['wall_s']:.0f} s, {s['requests']} responses, "
                  f"{len(s['failures'])} failed or differing, {s['tok_s']:.1f} tok/s, "
                  f"RSS {s['rss_before_mib']:.0f} -> {s['rss_after_mib']:.0f} MiB")
            for f in s["failures"][:10]:
                print("  ", f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
