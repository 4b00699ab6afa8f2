#!/usr/bin/env python3
"""Fold Nsight Compute's per-launch CSV (--metrics gpu__time_duration.sum[,dram__bytes_read.sum]
--csv) into a table: per kernel name, launches, total time, mean time, share of all kernel time
and, when the CSV has DRAM reads, the bandwidth the kernel reached (bytes read / its time).

Usage: summarize_ncu.py NCU.csv [TOP]   (TOP: rows to print, default 25)
"""
import csv
import sys
from collections import defaultdict


def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages are not quoted
    return csv.DictReader(lines)


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    total = defaultdict(float)
    count = defaultdict(int)
    read = defaultdict(float)
    byte_units = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}
    for r in rows(path):
        if r.get("Metric Name") == "dram__bytes_read.sum":
            unit = byte_units.get(r.get("Metric Unit", "byte"), 1)
            read[r["Kernel Name"].split("(")[0]] += float(r["Metric Value"].replace(",", "")) * unit
            continue
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}.get(unit, 1e-3)
        name = r["Kernel Name"].split("(")[0]
        total[name] += value * scale
        count[name] += 1
    all_us = sum(total.values())
    print(f"{'kernel':<48} {'launches':>8} {'total ms':>10} {'mean us':>9} {'share':>6} "
          f"{'GB/s':>6}")
    for name, us in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        bw = f"{read[name] / (us * 1e3):>6.0f}" if name in read else f"{'':>6}"
        print(f"{name[:48]:<48} {count[name]:>8} {us / 1e3:>10.3f} {us / count[name]:>9.2f} "
              f"{100 * us / max(all_us, 1e-9):>5.1f}% {bw}")
    print(f"{'all kernels':<48} {sum(count.values()):>8} {all_us / 1e3:>10.3f}")


if __name__ == "__main__":
    main()
