#!/usr/bin/env python3
"""Write a random-weight MLX-quantized folder (mlx-community layout) of Qwen3-0.6B's shape, for
benchmarks of the MLX matmuls (the weights are noise, the folder is not for committing).

Shape: hidden 1024, intermediate 3072, 28 layers, 16 heads of 128, 8 KV heads, QK-norm, vocab
151936, tied embeddings. Every linear layer and the embedding table are BITS-bit affine groups
of GROUP_SIZE values with f16 scales and biases, as mlx_lm.convert writes them; norms are bf16.
The packed words are uniform noise and scales/biases small, so activations stay finite.
The tokenizer files are copied from a small folder given as the second argument.

Needs numpy. Usage: make_random_mlx.py OUT_DIR TOKENIZER_DIR [BITS [GROUP_SIZE]]
(BITS 4 or 8, default 4; GROUP_SIZE 32, 64 or 128, default 64)
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
    "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 40960, "rope_theta": 1000000.0, "tie_word_embeddings": True,
    "hidden_act": "silu", "eos_token_id": 302, "torch_dtype": "bfloat16",
}


def tensors(c):
    """name → shape of every weight; quantized ones are the 2-D ones."""
    h, f = c["hidden_size"], c["intermediate_size"]
    q, kv, d = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"], c["head_dim"]
    out = {"model.embed_tokens": [c["vocab_size"], h], "model.norm.weight": [h]}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_norm.weight": [d], p + "self_attn.k_norm.weight": [d],
            p + "self_attn.q_proj": [q, h], p + "self_attn.k_proj": [kv, h],
            p + "self_attn.v_proj": [kv, h], p + "self_attn.o_proj": [h, q],
            p + "mlp.gate_proj": [f, h], p + "mlp.up_proj": [f, h], p + "mlp.down_proj": [h, f],
        })
    return out


def f16_bytes(x):
    return x.astype(np.float16).tobytes()


def main():
    if len(sys.argv) not in (3, 4, 5):
        sys.exit(__doc__)
    out, tok_dir = sys.argv[1:3]
    bits = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    group = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    # name → (dtype, shape, bytes-producing function), written in name order.
    stored = {}
    for name, shape in tensors(CONFIG).items():
        if len(shape) == 1:
            stored[name] = ("BF16", shape, lambda n=shape[0]: (np.ones(n, np.float32)
                                                              .view(np.uint32) >> 16)
                            .astype(np.uint16).tobytes())
            continue
        rows, cols = shape
        groups = [rows, cols // group]
        max_q = 2 ** bits - 1
        stored[name + ".weight"] = ("U32", [rows, cols * bits // 32],
                                    lambda n=rows * cols * bits // 32:
                                    rng.integers(0, 2 ** 32, n, dtype=np.uint32).tobytes())
        # Weights in about ±0.02: scale · q + bias with q up to max_q.
        stored[name + ".scales"] = ("F16", groups, lambda n=groups[0] * groups[1]:
                                    f16_bytes(rng.uniform(0.5, 1.5, n) * 0.04 / max_q))
        stored[name + ".biases"] = ("F16", groups, lambda n=groups[0] * groups[1]:
                                    f16_bytes(rng.uniform(-0.025, -0.015, n)))
    size = {"U32": 4, "F16": 2, "BF16": 2}
    header, offset = {}, 0
    for name in sorted(stored):
        dtype, shape, _ = stored[name]
        n = int(np.prod(shape)) * size[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in sorted(stored):
            f.write(stored[name][2]())
    block = {"group_size": group, "bits": bits}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(dict(CONFIG, quantization=block, quantization_config=block), f, indent=2)
    for fname in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(os.path.join(tok_dir, fname), os.path.join(out, fname))
    print(out, offset / 1e9, "GB")


if __name__ == "__main__":
    main()
