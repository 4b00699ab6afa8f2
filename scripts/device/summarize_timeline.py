#!/usr/bin/env python3
"""What each kernel adds to a decode step, from an Nsight Systems kernel trace.

Usage: summarize_timeline.py TRACE.csv [API.csv]
  TRACE.csv  nsys stats --report cuda_gpu_trace --format csv
  API.csv    nsys stats --report cuda_api_trace --format csv (optional: the host's side)
  STEP_SLICE (environment)  which of the summarized steps to average, as a Python slice
             ("-32:" the last 32, e.g. the latest positions of a run; default all)

Kernels are cut into steps where the GPU idled more than GAP_NS between two of them, and at
each gate of a step queued ahead of the host (`step_gate`, which keeps the GPU busy while it
waits for the host): the gates are left out of the steps and summarized on their own, with
the time from the kernel before each to the kernel after it. For the steps with the most
common kernel count (the recorded ones), each kernel's time is
  added   its end minus the end of the kernel before it (what it adds to the step),
  runs    its own duration (it may start before the kernel before it ends),
averaged over the steps. Printed: the step's time, then the kernels grouped by name and by the
name of the kernel before them (which tells the o projection from the down projection), then
the first layer kernel by kernel. With API.csv also: between two graph launches, how long the
host took from the read-back's wait returning to the next launch, and how long the GPU idled
between the steps' kernels.
"""
import collections
import csv
import os
import statistics
import sys

GAP_NS = 5000
GATE = "step_gate"


def kernels(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            name = r.get("Name", "")
            if name.startswith("[") or not name:
                continue
            start = int(float(r["Start (ns)"]))
            dur = int(float(r["Duration (ns)"]))
            rows.append((start, start + dur, name.split("(")[0]))
    rows.sort()
    return rows


def steps(rows):
    out, cur, last_end = [], [], None
    for start, end, name in rows:
        if name == GATE or (last_end is not None and start - last_end > GAP_NS):
            if cur:
                out.append(cur)
            cur = []
        if name != GATE:
            cur.append((start, end, name))
        last_end = end if last_end is None else max(last_end, end)
    if cur:
        out.append(cur)
    return out


def gates(rows):
    """Per gate between two kernels: the time from the kernel before it ending to it
    starting, its own time, and from its end to the kernel after it starting (us)."""
    out = []
    for i, (start, end, name) in enumerate(rows):
        if name != GATE or i == 0 or i + 1 >= len(rows):
            continue
        before = max(r[1] for r in rows[max(0, i - 8) : i])
        out.append(((start - before) / 1000, (end - start) / 1000, (rows[i + 1][0] - end) / 1000))
    if out:
        med = statistics.median
        print(f"gates of steps queued ahead: {len(out)}; medians, us:")
        print(f"  the kernel before ending to the gate's start {med(g[0] for g in out):8.2f}")
        print(f"  the gate (waiting for the host, copying)     {med(g[1] for g in out):8.2f}")
        print(f"  the gate's end to the step's first kernel    {med(g[2] for g in out):8.2f}")


def trace_rows(path):
    """Every row of a trace (API calls, or GPU work with copies and memsets included), as
    (start, end, name) in order of start."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            start = int(float(r["Start (ns)"]))
            rows.append((start, start + int(float(r["Duration (ns)"])), r.get("Name", "")))
    rows.sort()
    return rows


def host_side(calls, gpu):
    """Per graph launch (a decode step): the host's time from its last wait returning to the
    next launch, the GPU's busy span for what the host queued in between, and the GPU's idle
    time before the next step's first work."""
    launches = [c for c in calls if c[2].startswith("cuGraphLaunch")]
    waits = ("cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize")
    host, busy, idle, period = [], [], [], []
    for a, b, c in zip(launches, launches[1:], launches[2:]):
        ends = [x[1] for x in calls if a[1] <= x[0] and x[1] <= b[0] and x[2].startswith(waits)]
        # What the GPU ran for step b: from the first copy queued after step a's wait to the
        # last work before step c's first copy.
        mark_b = max(ends) if ends else a[1]
        later = [x[1] for x in calls if b[1] <= x[0] and x[1] <= c[0] and x[2].startswith(waits)]
        mark_c = max(later) if later else b[1]
        work_b = [r for r in gpu if mark_b <= r[0] < mark_c]
        work_a = [r for r in gpu if a[0] <= r[0] < mark_b]
        if not (ends and work_a and work_b):
            continue
        host.append((b[0] - mark_b) / 1000)
        busy.append((max(r[1] for r in work_b) - work_b[0][0]) / 1000)
        idle.append((work_b[0][0] - max(r[1] for r in work_a)) / 1000)
        period.append((b[0] - a[0]) / 1000)
    if not host:
        print("host: no graph launches with a wait between them in the API trace")
        return
    med = statistics.median
    print(f"graph launches: {len(launches)}; medians over {len(host)} steps, us:")
    print(f"  period between launches       {med(period):8.1f}")
    print(f"  host, wait's return to launch {med(host):8.1f}")
    print(f"  GPU idle between steps        {med(idle):8.1f}")
    print(f"  GPU busy, a step's span       {med(busy):8.1f}")


def main():
    if len(sys.argv) > 2:
        host_side(trace_rows(sys.argv[2]), trace_rows(sys.argv[1]))
    rows = kernels(sys.argv[1])
    if not rows:
        return
    gates(rows)
    all_steps = steps(rows)
    counts = collections.Counter(len(s) for s in all_steps)
    n, _ = counts.most_common(1)[0]
    chosen = [s for s in all_steps if len(s) == n][1:]
    names = [k[2] for k in chosen[0]]
    chosen = [s for s in chosen if [k[2] for k in s] == names]
    cut = os.environ.get("STEP_SLICE", ":").split(":")
    chosen = chosen[slice(*(int(c) if c else None for c in cut))]
    print(f"{len(all_steps)} steps; {len(chosen)} of {n} kernels summarized")
    spans = [s[-1][1] - s[0][0] for s in chosen]
    print(f"step: {statistics.mean(spans) / 1000:.1f} us (first start to last end)")
    added = [[0.0] * n for _ in chosen]
    runs = [[0.0] * n for _ in chosen]
    for si, s in enumerate(chosen):
        prev_end = s[0][0]
        for i, (start, end, _) in enumerate(s):
            added[si][i] = (end - prev_end) / 1000
            runs[si][i] = (end - start) / 1000
            prev_end = max(prev_end, end)
    mean_added = [statistics.mean(a[i] for a in added) for i in range(n)]
    mean_runs = [statistics.mean(r[i] for r in runs) for i in range(n)]
    groups = collections.OrderedDict()
    for i, name in enumerate(names):
        key = (name, names[i - 1] if i else "-")
        g = groups.setdefault(key, [0, 0.0, 0.0])
        g[0] += 1
        g[1] += mean_added[i]
        g[2] += mean_runs[i]
    print(f"\n{'kernel':40} {'after':32} {'count':>5} {'added us':>9} {'each':>6} {'runs':>6}")
    for (name, before), (count, add, run) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:40]:40} {before[:32]:32} {count:5d} {add:9.1f} {add / count:6.2f} {run / count:6.2f}")
    print("\nkernel by kernel, the first 24 of the step:")
    for i in range(min(24, n)):
        print(f"{i:3d} {names[i][:48]:48} added {mean_added[i]:6.2f} runs {mean_runs[i]:6.2f}")
    print("... the last 6:")
    for i in range(max(0, n - 6), n):
        print(f"{i:3d} {names[i][:48]:48} added {mean_added[i]:6.2f} runs {mean_runs[i]:6.2f}")


if __name__ == "__main__":
    main()
