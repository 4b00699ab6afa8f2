#!/usr/bin/env python3
"""How far a run's logits lie from a committed logits golden, measured the way
crates/hearth-engine/tests/golden_models.rs measures hearth: the largest |ours - golden| over each
golden position's top-10 ids and over the golden's full rows, and top-1 agreement.

usage: golden_check.py GOLDEN_JSON LOGITS_F32 [LABEL]
  LOGITS_F32  [n_ids, n_vocab] little-endian f32 (llama_logits.cpp's output), row i the logits
              after the golden's ids[0..=i]
  Prints one JSON line; LABEL starts with the golden's folder name.
usage: golden_check.py --device-check JSONL OUT_DIR LLAMA_COMMIT GPU_NAME
  From the lines of the first form (golden_gpu.sh collects them), writes
  OUT_DIR/NAME/device_check.json for each golden with GPU runs ("cuda" in the label): the
  largest difference of those runs, which golden_models.rs allows a GPU backend.
"""
import json
import os
import sys

import numpy as np


def main(golden_path, logits_path, label):
    g = json.load(open(golden_path))
    n_ids = len(g["ids"])
    raw = np.fromfile(logits_path, dtype="<f4")
    if raw.size % n_ids:
        sys.exit(f"{logits_path}: {raw.size} values are not {n_ids} rows")
    logits = raw.reshape(n_ids, -1)
    worst, worst_at, agree, decisive = 0.0, None, 0, 0
    for p in g["positions"]:
        row = logits[p["pos"]]
        ids = np.array(p["top_ids"])
        err = np.abs(row[ids] - np.array(p["top_logits"], dtype=np.float32))
        if err.max() > worst:
            worst, worst_at = float(err.max()), p["pos"]
        decisive += 1
        agree += int(np.argmax(row) == p["top_ids"][0])
    full = 0.0
    for r in g.get("full_rows", []):
        full = max(full, float(np.max(np.abs(logits[r["pos"]] - np.array(r["logits"], dtype=np.float32)))))
    print(json.dumps({
        "label": label,
        "max_top10_diff": round(worst, 6),
        "at_position": worst_at,
        "max_full_row_diff": round(full, 6),
        "top1_agree": agree,
        "positions": decisive,
    }))


def device_check(jsonl, out_dir, commit, gpu):
    runs = {}
    for line in open(jsonl):
        r = json.loads(line)
        runs.setdefault(r["label"].split()[0], []).append(r)
    for name, rs in runs.items():
        on_gpu = [r for r in rs if " cuda " in r["label"]]
        if not on_gpu:
            continue
        doc = {
            "how": "llama.cpp built for CUDA, the ids of logits.json in one batch (flash "
            "attention off and on) and one at a time, against logits.json (llama.cpp on the "
            "CPU); max_diff as golden_models.rs measures hearth (top-10 ids and full rows)",
            "llama_cpp_commit": commit,
            "gpu": gpu,
            "max_diff": max(max(r["max_top10_diff"], r["max_full_row_diff"]) for r in on_gpu),
            "min_top1_agree": min(r["top1_agree"] for r in on_gpu),
            "runs": rs,
        }
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
        with open(os.path.join(out_dir, name, "device_check.json"), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(name, "max_diff", doc["max_diff"], "min_top1_agree", doc["min_top1_agree"])


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--device-check":
        device_check(*sys.argv[2:])
    elif len(sys.argv) in (3, 4):
        main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else sys.argv[2])
    else:
        sys.exit(__doc__)
