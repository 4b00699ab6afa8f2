#!/usr/bin/env python3
"""Compare `hearth quantize` with llama.cpp's own quantizer, tensor by tensor.

usage: check_quantize_llamacpp.py HEARTH_BINARY WORK_DIR [--model M.gguf ...] [--presets P ...]
       check_quantize_llamacpp.py --reference-hashes

For each input model and preset, quantizes the model with `llama_cpp.llama_model_quantize`
(llama-cpp-python 0.3.16, no importance matrix) and with `hearth quantize`, then compares the
files: tensor order, types and bytes per tensor, metadata keys and values, and the whole file.
Where bytes differ it prints the largest dequantized difference.

Without --model it writes two synthetic Qwen3 models to WORK_DIR and uses those plus the
repository's tests/fixtures/tiny-qwen3-f16.gguf:

- wide-qwen3-f16.gguf: every row a multiple of 256 (so every k-quant applies), 8 layers (so
  the `use_more_bits` layer pattern of the _M presets shows), 4 query heads per KV head and a
  separate output.weight;
- wide-qwen3-f32.gguf: the same weights stored as F32.

--reference-hashes prints the FNV-1a hashes of llama.cpp's bytes for the input of
crates/hearth-quant/tests/quantize_reference.rs.
"""

import argparse
import ctypes
import hashlib
import os
import subprocess
import sys

import numpy as np
import gguf
import llama_cpp

PRESETS = {  # name -> llama_ftype
    "Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q8_0": 7, "Q2_K": 10, "Q3_K_S": 11,
    "Q3_K_M": 12, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18,
}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_wide_qwen3(path, dtype):
    """A random-weight Qwen3 GGUF whose rows are all multiples of 256."""
    hidden, n_layers, ffn, n_heads, n_kv, head_dim, vocab = 256, 8, 768, 8, 2, 64, 512
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(path, "qwen3")
    w.add_name("wide-qwen3")
    w.add_context_length(4096)
    w.add_embedding_length(hidden)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == np.float16 else gguf.LlamaFileType.ALL_F32)

    def mat(n_out, n_in):
        # Rows with different scales and a few outliers, so scale searches have work to do.
        m = rng.standard_normal((n_out, n_in), dtype=np.float32) / np.sqrt(n_in)
        m *= rng.uniform(0.25, 4.0, size=(n_out, 1)).astype(np.float32)
        m[rng.random(m.shape) < 0.001] *= 20
        return m.astype(dtype)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(vocab, hidden))
    w.add_tensor("output_norm.weight", norm(hidden))
    w.add_tensor("output.weight", mat(vocab, hidden))
    for i in range(n_layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(hidden))
        w.add_tensor(p + "attn_q.weight", mat(n_heads * head_dim, hidden))
        w.add_tensor(p + "attn_k.weight", mat(n_kv * head_dim, hidden))
        w.add_tensor(p + "attn_v.weight", mat(n_kv * head_dim, hidden))
        w.add_tensor(p + "attn_output.weight", mat(hidden, n_heads * head_dim))
        w.add_tensor(p + "attn_q_norm.weight", norm(head_dim))
        w.add_tensor(p + "attn_k_norm.weight", norm(head_dim))
        w.add_tensor(p + "ffn_norm.weight", norm(hidden))
        w.add_tensor(p + "ffn_gate.weight", mat(ffn, hidden))
        w.add_tensor(p + "ffn_up.weight", mat(ffn, hidden))
        w.add_tensor(p + "ffn_down.weight", mat(hidden, ffn))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@llama_cpp.llama_log_callback
def _quiet(level, text, user_data):
    """Drops llama.cpp's per-tensor log lines; failures still show as a non-zero result."""


def llama_quantize(inp, out, ftype):
    llama_cpp.llama_log_set(_quiet, ctypes.c_void_p(0))
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    params.allow_requantize = True
    rc = llama_cpp.llama_model_quantize(inp.encode(), out.encode(), ctypes.byref(params))
    return rc == 0


def hearth_quantize(binary, inp, out, preset):
    r = subprocess.run([binary, "quantize", inp, out, preset, "--allow-requantize"],
                       capture_output=True, text=True)
    return r.returncode == 0, (r.stderr.strip().splitlines() or [""])[-1]


def field_value(f):
    return [bytes(f.parts[i]).hex() for i in f.data]


def compare(ref_path, ours_path):
    """Returns (summary line, list of per-tensor difference lines)."""
    a, b = gguf.GGUFReader(ref_path), gguf.GGUFReader(ours_path)
    problems = []
    ka = [k for k in a.fields if not k.startswith("GGUF.")]
    kb = [k for k in b.fields if not k.startswith("GGUF.")]
    if ka != kb:
        problems.append(f"metadata keys differ: {ka} vs {kb}")
    for k in set(ka) & set(kb):
        if field_value(a.fields[k]) != field_value(b.fields[k]):
            problems.append(f"metadata {k} differs")
    names_a = [t.name for t in a.tensors]
    names_b = [t.name for t in b.tensors]
    if names_a != names_b:
        problems.append("tensor order differs")
    tb = {t.name: t for t in b.tensors}
    n_same = 0
    mix = {}
    for t in a.tensors:
        o = tb.get(t.name)
        mix[t.tensor_type.name] = mix.get(t.tensor_type.name, 0) + 1
        if o is None:
            problems.append(f"{t.name}: missing")
            continue
        if o.tensor_type != t.tensor_type:
            problems.append(f"{t.name}: type {o.tensor_type.name}, llama.cpp {t.tensor_type.name}")
            continue
        if bytes(o.data.tobytes()) == bytes(t.data.tobytes()):
            n_same += 1
            continue
        da = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        db = gguf.quants.dequantize(o.data, o.tensor_type).astype(np.float64)
        problems.append(f"{t.name} ({t.tensor_type.name}): bytes differ, max |dequant diff| "
                        f"{np.abs(da - db).max():.3g}")
    same_file = sha(ref_path) == sha(ours_path)
    mix_s = " ".join(f"{k}:{v}" for k, v in sorted(mix.items()))
    return (f"{n_same}/{len(a.tensors)} tensors byte-identical, whole file "
            f"{'identical' if same_file else 'differs'}; mix {mix_s}"), problems


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def reference_hashes():
    """FNV-1a hashes of llama.cpp's bytes for the input of quantize_reference.rs."""
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    q = lib.ggml_quantize_chunk
    q.restype = ctypes.c_size_t
    q.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                  ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    types = {"Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24),
             "Q8_0": (8, 32, 34), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110),
             "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210),
             "IQ4_NL": (20, 32, 18), "F16": (1, 1, 2), "BF16": (30, 1, 2)}
    mask = (1 << 64) - 1
    row_len, n_rows = 1024, 32
    x = np.zeros(row_len * n_rows, dtype=np.float32)
    s = 0x2545F4914F6CDD1D
    f32 = np.float32
    for i in range(x.size):
        s = (s * 6364136223846793005 + 1442695040888963407) & mask
        u = s >> 32
        b = i // 256
        unit = f32((u >> 8) / 16777216.0)
        sym = f32(unit * f32(2.0) - f32(1.0))
        scale = f32(2.0 ** ((b % 13) - 8))
        x[i] = [sym * scale, unit * scale, -unit * scale, f32(0), f32(0.37),
                sym * scale * (f32(64) if i % 256 == 17 else f32(1)), sym * f32(2.0 ** -70),
                sym * scale if i % 5 == 0 else f32(0)][b % 8]
    for name, (tid, bs, ts) in types.items():
        dst = np.zeros(x.size // bs * ts, dtype=np.uint8)
        q(tid, x.ctypes.data, dst.ctypes.data, 0, n_rows, row_len, None)
        h = 0xcbf29ce484222325
        for byte in dst.tobytes():
            h = ((h ^ byte) * 0x100000001b3) & mask
        print(f"{name} {h:#018x}")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hearth", nargs="?")
    ap.add_argument("work_dir", nargs="?")
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--presets", nargs="*", default=list(PRESETS))
    ap.add_argument("--reference-hashes", action="store_true")
    args = ap.parse_args(argv)
    if args.reference_hashes:
        reference_hashes()
        return 0
    if not args.hearth or not args.work_dir:
        ap.error("HEARTH_BINARY and WORK_DIR are required")
    os.makedirs(args.work_dir, exist_ok=True)
    models = args.model
    if not models:
        for dtype, name in [(np.float16, "wide-qwen3-f16.gguf"), (np.float32, "wide-qwen3-f32.gguf")]:
            path = os.path.join(args.work_dir, name)
            write_wide_qwen3(path, dtype)
            models.append(path)
        models.append(os.path.join(REPO, "tests", "fixtures", "tiny-qwen3-f16.gguf"))
    failures = 0
    for model in models:
        for preset in args.presets:
            stem = os.path.basename(model).removesuffix(".gguf")
            ref = os.path.join(args.work_dir, f"{stem}.{preset}.llama.gguf")
            ours = os.path.join(args.work_dir, f"{stem}.{preset}.hearth.gguf")
            ok_ref = llama_quantize(model, ref, PRESETS[preset])
            ok_ours, err = hearth_quantize(args.hearth, model, ours, preset)
            label = f"{stem} {preset}:"
            if not ok_ref or not ok_ours:
                print(f"{label} llama.cpp {'ok' if ok_ref else 'failed'}, hearth "
                      f"{'ok' if ok_ours else 'failed: ' + err}")
                failures += ok_ref != ok_ours
                continue
            summary, problems = compare(ref, ours)
            print(f"{label} {summary}")
            for p in problems:
                print(f"    {p}")
            failures += bool(problems)
    print(f"{failures} comparisons with differences")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
