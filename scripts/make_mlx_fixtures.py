#!/usr/bin/env python3
"""Make tiny MLX-quantized checkpoints (mlx-community layout) from the tiny HF fixtures, and HF
transformers' outputs on their dequantized weights.

Quantizes with MLX's affine scheme, written here with numpy (the `mlx` package needs Apple
silicon): per group of `group_size` values along a row,
    scale = (max - min) / (2^bits - 1), signed and snapped so that the larger-magnitude edge is
    exact, bias = that edge, q = clip(round((w - bias) / scale), 0, 2^bits - 1),
and packs q little-endian into uint32 words (32/bits values a word, lowest bits first). Every
linear layer of the decoder, the embedding table and an untied lm_head are quantized, as
mlx_lm.convert does; `config.json` gets the `quantization` block (and `quantization_config`,
as mlx_lm writes both) with one per-layer override.

The reference (reference.json, same format as make_hf_fixtures.py's) is transformers run on
the source model with every quantized weight replaced by scale * q + bias, so it measures how
faithfully a loader runs the packed format, not the quantization error.

Needs numpy, torch, transformers (and make_hf_fixtures.py next to this file).
Usage: make_mlx_fixtures.py SRC_FIXTURES_DIR [OUT_DIR]
(reads SRC/hf-tiny-llama and SRC/hf-tiny-qwen3; writes OUT/mlx-tiny-llama-q4 and
OUT/mlx-tiny-qwen3-q8; OUT defaults to SRC)
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_hf_fixtures import reference  # noqa: E402

# name, source, bits, group size, scale dtype, per-layer overrides
JOBS = [
    ("mlx-tiny-llama-q4", "hf-tiny-llama", 4, 64, "float16",
     {"model.layers.0.mlp.down_proj": {"group_size": 32, "bits": 8}}),
    ("mlx-tiny-qwen3-q8", "hf-tiny-qwen3", 8, 32, "bfloat16",
     {"model.layers.1.self_attn.o_proj": False}),
]
COPY = ["tokenizer.json", "tokenizer_config.json", "generation_config.json",
        "chat_template.jinja"]


def affine_quantize(w, bits, group_size):
    """(packed uint32 [rows, cols*bits/32], scales [rows, groups], biases, q) as MLX makes them."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // group_size, group_size).astype(np.float32)
    n_bins = 2 ** bits - 1
    w_max, w_min = g.max(axis=-1), g.min(axis=-1)
    mask = np.abs(w_min) > np.abs(w_max)
    scales = np.maximum((w_max - w_min) / n_bins, 1e-7)
    scales = np.where(mask, scales, -scales)
    edge = np.where(mask, w_min, w_max)
    q0 = np.round(edge / scales)
    scales = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), scales)
    biases = np.where(q0 == 0, 0, edge)
    return scales.astype(np.float32), biases.astype(np.float32), g


def pack(q, bits):
    """q [rows, cols] in 0..2^bits-1 → uint32 [rows, cols*bits/32], lowest bits first."""
    rows, cols = q.shape
    per = 32 // bits
    q = q.astype(np.uint32).reshape(rows, cols // per, per)
    shifts = (np.arange(per, dtype=np.uint32) * bits)[None, None, :]
    return np.bitwise_or.reduce(q << shifts, axis=-1).astype(np.uint32)


def round_scales(x, dtype):
    """x rounded to the stored scale dtype: (raw bytes, safetensors dtype, values as f32)."""
    t = torch.from_numpy(np.ascontiguousarray(x)).to(getattr(torch, dtype))
    name = {"float16": "F16", "bfloat16": "BF16"}[dtype]
    return t.view(torch.int16).numpy().tobytes(), name, t.float().numpy()


def quantize_layer(w, bits, group_size, dtype):
    """Tensors to store for one layer, and its dequantized weight."""
    scales, biases, g = affine_quantize(w, bits, group_size)
    s_bytes, s_dtype, s = round_scales(scales, dtype)
    b_bytes, _, b = round_scales(biases, dtype)
    q = np.clip(np.round((g - b[..., None]) / s[..., None]), 0, 2 ** bits - 1)
    deq = (s[..., None] * q + b[..., None]).reshape(w.shape).astype(np.float32)
    packed = pack(q.reshape(w.shape), bits)
    groups = [w.shape[0], w.shape[1] // group_size]
    stored = {
        "weight": ("U32", list(packed.shape), packed.tobytes()),
        "scales": (s_dtype, groups, s_bytes),
        "biases": (s_dtype, groups, b_bytes),
    }
    return stored, deq


def write_safetensors(path, tensors):
    """tensors: name → (dtype, shape, raw bytes), written in name order."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    header["__metadata__"] = {"format": "mlx"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def is_quantized(name, param):
    return param.dim() == 2 and ("proj" in name or "embed_tokens" in name or "lm_head" in name)


def build(src_root, out_root, name, source, bits, group_size, dtype, overrides):
    src = os.path.join(src_root, source)
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(src)
    tensors = {}
    state = model.state_dict()
    seen = set()
    for pname, p in state.items():
        # NOTE: a tied lm_head is the embedding table; MLX stores it once.
        if pname == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        w = p.detach().float().numpy()
        module = pname.removesuffix(".weight")
        layer = overrides.get(module, {"bits": bits, "group_size": group_size})
        if is_quantized(pname, p) and layer is not False and w.shape[1] % layer["group_size"] == 0:
            stored, deq = quantize_layer(w, layer["bits"], layer["group_size"], dtype)
            for suffix, t in stored.items():
                tensors[f"{module}.{suffix}"] = t
            p.data.copy_(torch.from_numpy(deq))
            seen.add(module)
        else:
            tensors[pname] = ("F32", list(w.shape), np.ascontiguousarray(w).tobytes())
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    block = {"group_size": group_size, "bits": bits, **overrides}
    cfg["quantization"] = block
    cfg["quantization_config"] = block
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for fname in COPY:
        if os.path.exists(os.path.join(src, fname)):
            shutil.copy(os.path.join(src, fname), os.path.join(out, fname))
    # The tied head follows the (dequantized) embedding table, as in MLX.
    model.tie_weights()
    ref = reference(model, tok)
    ref["dtype"] = f"mlx-{bits}bit-g{group_size}"
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f)
    print(name, len(seen), "quantized modules", sorted(os.listdir(out)))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    src_root = sys.argv[1]
    out_root = sys.argv[2] if len(sys.argv) > 2 else src_root
    for job in JOBS:
        build(src_root, out_root, *job)


if __name__ == "__main__":
    main()
