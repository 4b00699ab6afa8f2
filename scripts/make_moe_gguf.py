#!/usr/bin/env python3
"""Write a tiny Hugging Face mixture-of-experts folder (made by make_hf_fixtures.py) as GGUF,
with llama.cpp's tensor names and metadata keys.

usage: make_moe_gguf.py HF_DIR OUT.gguf [--type f32|q8_0] [--split-experts]

- MixtralForCausalLM becomes llama.cpp arch "llama" with `llama.expert_count` /
  `llama.expert_used_count`; q_proj / k_proj rows are permuted the way llama.cpp's converter
  does, so that adjacent-pair rope reproduces HF's rotate-half.
- Qwen3MoeForCausalLM becomes arch "qwen3moe" (`qwen3moe.expert_feed_forward_length` holds
  moe_intermediate_size).
- Each layer's router is `blk.N.ffn_gate_inp.weight`, and its experts are stacked into 3-D
  tensors `blk.N.ffn_{gate,up,down}_exps.weight` (numpy shape [n_expert, rows, cols]).
- With --split-experts each expert is its own tensor `blk.N.ffn_{gate,up,down}.E.weight`
  instead, as in GGUF files converted before llama.cpp stacked them (early Mixtral files).
- The tokenizer is the folder's byte-level BPE (tokenizer.json) as a "gpt2" GGUF vocabulary.

With --type q8_0 the 2-D and 3-D projection matrices are stored as Q8_0; norms and the router
stay f32 (as llama.cpp's quantizer leaves them).

Needs numpy, safetensors and gguf.
"""

import argparse
import json
import os

import gguf
import numpy as np
from safetensors.numpy import load_file


def permute(w, n_head):
    """llama.cpp's row permutation of q_proj / k_proj for the "llama" arch."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def load_tensors(hf_dir):
    tensors = {}
    for name in sorted(os.listdir(hf_dir)):
        if name.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(hf_dir, name)))
    return tensors


def add_vocab(writer, hf_dir, cfg):
    with open(os.path.join(hf_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    vocab = dict(tok["model"]["vocab"])
    special = set()
    for t in tok.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
        if t.get("special"):
            special.add(t["id"])
    n_vocab = cfg["vocab_size"]
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    for text, i in vocab.items():
        tokens[i] = text
    types = [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
             for i in range(n_vocab)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    if cfg.get("bos_token_id") is not None:
        writer.add_bos_token_id(cfg["bos_token_id"])
    writer.add_add_bos_token(False)
    writer.add_eos_token_id(cfg["eos_token_id"])


def add_matrix(writer, name, w, qtype):
    w = np.ascontiguousarray(w, dtype=np.float32)
    if qtype == "q8_0":
        q = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    else:
        writer.add_tensor(name, w)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hf_dir")
    parser.add_argument("out")
    parser.add_argument("--type", choices=["f32", "q8_0"], default="f32")
    parser.add_argument("--split-experts", action="store_true",
                        help="one tensor per expert (the layout before stacked experts)")
    args = parser.parse_args()
    with open(os.path.join(args.hf_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    hf_arch = cfg["architectures"][0]
    mixtral = hf_arch == "MixtralForCausalLM"
    if not mixtral and hf_arch != "Qwen3MoeForCausalLM":
        raise SystemExit(f"{hf_arch}: only Mixtral and Qwen3 MoE folders are converted")
    arch = "llama" if mixtral else "qwen3moe"
    t = load_tensors(args.hf_dir)
    n_embd, n_head = cfg["hidden_size"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    head_dim = cfg.get("head_dim") or n_embd // n_head
    n_expert = cfg.get("num_experts") or cfg["num_local_experts"]
    rope = cfg.get("rope_parameters") or {"rope_theta": cfg["rope_theta"]}

    writer = gguf.GGUFWriter(args.out, arch)
    writer.add_name(f"tiny-{hf_arch}-{args.type}")
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(n_embd)
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(rope["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(cfg["num_experts_per_tok"])
    if not mixtral:
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if args.type == "f32"
                         else gguf.LlamaFileType.MOSTLY_Q8_0)
    add_vocab(writer, args.hf_dir, cfg)

    add_matrix(writer, "token_embd.weight", t["model.embed_tokens.weight"], args.type)
    writer.add_tensor("output_norm.weight", t["model.norm.weight"])
    if not cfg.get("tie_word_embeddings", False):
        add_matrix(writer, "output.weight", t["lm_head.weight"], args.type)
    moe = "block_sparse_moe" if mixtral else "mlp"
    names = {"gate": "w1", "up": "w3", "down": "w2"} if mixtral else {
        "gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    for il in range(cfg["num_hidden_layers"]):
        hf, p = f"model.layers.{il}.", f"blk.{il}."
        q, k = t[hf + "self_attn.q_proj.weight"], t[hf + "self_attn.k_proj.weight"]
        if mixtral:
            q, k = permute(q, n_head), permute(k, n_kv)
        writer.add_tensor(p + "attn_norm.weight", t[hf + "input_layernorm.weight"])
        add_matrix(writer, p + "attn_q.weight", q, args.type)
        add_matrix(writer, p + "attn_k.weight", k, args.type)
        add_matrix(writer, p + "attn_v.weight", t[hf + "self_attn.v_proj.weight"], args.type)
        add_matrix(writer, p + "attn_output.weight", t[hf + "self_attn.o_proj.weight"],
                   args.type)
        if not mixtral:
            writer.add_tensor(p + "attn_q_norm.weight", t[hf + "self_attn.q_norm.weight"])
            writer.add_tensor(p + "attn_k_norm.weight", t[hf + "self_attn.k_norm.weight"])
        writer.add_tensor(p + "ffn_norm.weight", t[hf + "post_attention_layernorm.weight"])
        writer.add_tensor(p + "ffn_gate_inp.weight", t[hf + f"{moe}.gate.weight"])
        for part, hf_part in names.items():
            experts = [t[hf + f"{moe}.experts.{e}.{hf_part}.weight"] for e in range(n_expert)]
            if args.split_experts:
                for e, w in enumerate(experts):
                    add_matrix(writer, p + f"ffn_{part}.{e}.weight", w, args.type)
            else:
                # [n_expert, rows, cols]: GGUF dims [cols, rows, n_expert].
                add_matrix(writer, p + f"ffn_{part}_exps.weight", np.stack(experts), args.type)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(args.out, os.path.getsize(args.out), "bytes")


if __name__ == "__main__":
    main()
