#!/usr/bin/env python3
"""Write a random-weight Hugging Face Llama folder of Llama-3.2-1B's shape (for benchmarks of
`hearth convert`; the weights are noise, the folder is not for committing).

Shape: hidden 2048, intermediate 8192, 16 layers, 32 heads, 8 KV heads, vocab 128256, tied
embeddings, bf16 (1.24 B parameters, 2.5 GB). The tokenizer files are copied from a small
folder given as the second argument (its vocabulary is padded by the converter).

Needs numpy. Usage: make_random_llama_hf.py OUT_DIR TOKENIZER_DIR
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "rms_norm_eps": 1e-5,
    "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": True,
    "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "hidden_act": "silu", "bos_token_id": 300, "eos_token_id": 304, "torch_dtype": "bfloat16",
}


def shapes(c):
    h, f, kv = c["hidden_size"], c["intermediate_size"], c["num_key_value_heads"] * c["head_dim"]
    out = {"model.embed_tokens.weight": [c["vocab_size"], h], "model.norm.weight": [h]}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [h, h], p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, h],
            p + "mlp.gate_proj.weight": [f, h], p + "mlp.up_proj.weight": [f, h],
            p + "mlp.down_proj.weight": [h, f],
        })
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out, tok_dir = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    tensors = shapes(CONFIG)
    header, offset = {}, 0
    for name in sorted(tensors):
        n = int(np.prod(tensors[name])) * 2
        header[name] = {"dtype": "BF16", "shape": tensors[name], "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(0)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in sorted(tensors):
            n = int(np.prod(tensors[name]))
            for start in range(0, n, 1 << 24):
                m = min(1 << 24, n - start)
                x = rng.standard_normal(m, dtype=np.float32) * 0.02
                if "norm" in name:
                    x += 1.0
                f.write((x.view(np.uint32) >> 16).astype(np.uint16).tobytes())
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    for fname in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(os.path.join(tok_dir, fname), os.path.join(out, fname))
    print(out, offset / 1e9, "GB")


if __name__ == "__main__":
    main()
