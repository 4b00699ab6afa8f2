#!/usr/bin/env python3
"""Write a GGUF file from a tiny HF checkpoint folder made by make_hf_fixtures.py.

The file uses llama.cpp's tensor names and metadata keys, as llama.cpp's converter writes them:
Gemma norm weights get their 1 added (HF stores w of the 1 + w scale), and Llama's q/k rows are
permuted for llama.cpp's adjacent-pair rope. Weights stay f32. The hearth test then checks that
the GGUF gives the same logits as the folder's transformers reference.

With --check-llama-cpp the script also loads the written file with llama.cpp (the
llama-cpp-python package) and compares llama.cpp's greedy tokens with transformers' (from the
folder's reference.json), printing the result; it exits non-zero when they differ.

The committed tests/fixtures/tiny-{gemma,gemma2,qwen2,llama-linear,llama-yarn,phi3-longrope}
-f32.gguf were written with --check-llama-cpp: llama.cpp (llama-cpp-python 0.3.16) gave
transformers' 8 greedy tokens after each of the three reference prompts, for every file. For
tiny-phi3-f32.gguf it does not: that llama.cpp ignores phi3.attention.sliding_window (its tokens
are the same without the key, and equal transformers' for the same checkpoint with
sliding_window null), while transformers and hearth apply the 4-token window.

Needs numpy and gguf (and llama_cpp for --check-llama-cpp).
Usage: make_gguf_from_hf.py HF_DIR OUT.gguf [--check-llama-cpp]
"""
import json
import math
import os
import sys

import numpy as np

import gguf

ARCH = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Phi3ForCausalLM": "phi3",
}
LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.qkv_proj": "attn_qkv",
    "mlp.gate_up_proj": "ffn_up",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def load_safetensors(path):
    """The f32 tensors of a single-file safetensors checkpoint (the format is a JSON header)."""
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {e['dtype']}; this script reads F32 only")
        start, end = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + start:8 + n + end], dtype="<f4").reshape(e["shape"])
    return out


def gguf_name(hf, post_norms):
    top = {"model.embed_tokens.weight": "token_embd.weight",
           "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".")
    layer, module, suffix = parts[2], ".".join(parts[3:-1]), parts[-1]
    names = dict(LAYER_NAMES)
    if post_norms:
        names.update({"post_attention_layernorm": "post_attention_norm",
                      "pre_feedforward_layernorm": "ffn_norm",
                      "post_feedforward_layernorm": "post_ffw_norm"})
    else:
        names["post_attention_layernorm"] = "ffn_norm"
    return f"blk.{layer}.{names[module]}.{suffix}"


def permute(w, n_head):
    """HF rotate-half row order → llama.cpp's adjacent pairs (llama.cpp's converter does this)."""
    rows = w.shape[0]
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_tokenizer(w, hf_dir, cfg):
    tok = json.load(open(os.path.join(hf_dir, "tokenizer.json")))
    vocab = dict(tok["model"]["vocab"])
    special = set()
    for t in tok.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
        if t.get("special"):
            special.add(t["id"])
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
                       for i in range(len(tokens))])
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_token_merges(merges)
    eos = cfg["eos_token_id"]
    w.add_eos_token_id(eos[0] if isinstance(eos, list) else eos)
    if cfg.get("bos_token_id") is not None:
        w.add_bos_token_id(cfg["bos_token_id"])
    return len(tokens)


def write_rope(w, rope, cfg, n_rot):
    """Rope scaling as llama.cpp's converter writes it: keys, or LongRoPE factor tensors."""
    kind = rope.get("rope_type", "default")
    if kind == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    elif kind == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    elif kind == "longrope":
        old = rope["original_max_position_embeddings"]
        factor = cfg["max_position_embeddings"] / old
        attn = rope.get("attention_factor") or (
            math.sqrt(1 + math.log(factor) / math.log(old)) if factor > 1 else 1.0)
        w.add_rope_scaling_attn_factors(attn)
        w.add_rope_scaling_orig_ctx_len(old)
        for name in ("long", "short"):
            f = np.array(rope[f"{name}_factor"], dtype=np.float32)
            assert f.shape == (n_rot // 2,)
            w.add_tensor(f"rope_factors_{name}.weight", f)
    elif kind != "default":
        sys.exit(f"rope type {kind} is not written by this script")


def write(hf_dir, out):
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    arch = ARCH[cfg["architectures"][0]]
    gemma = arch.startswith("gemma")
    post_norms = arch == "gemma2"
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    rope = cfg.get("rope_parameters") or {}
    n_rot = int(head_dim * rope.get("partial_rotary_factor", 1.0))
    w = gguf.GGUFWriter(out, arch)
    write_rope(w, rope, cfg, n_rot)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(n_rot)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(rope.get("rope_theta", 10000.0))
    if arch == "phi3" and cfg.get("sliding_window"):
        w.add_sliding_window(cfg["sliding_window"])
    if arch == "gemma2":
        w.add_sliding_window(cfg["sliding_window"])
        w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    n_vocab = write_tokenizer(w, hf_dir, cfg)
    tensors = load_safetensors(os.path.join(hf_dir, "model.safetensors"))
    assert tensors["model.embed_tokens.weight"].shape[0] == n_vocab
    for name in sorted(tensors):
        t = tensors[name].astype(np.float32)
        if gemma and name.endswith("norm.weight"):
            t = t + 1.0
        if arch == "llama" and name.endswith("q_proj.weight"):
            t = permute(t, n_head)
        if arch == "llama" and name.endswith("k_proj.weight"):
            t = permute(t, n_kv)
        w.add_tensor(gguf_name(name, post_norms), np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{out}: {arch}, {len(tensors)} tensors")


def check_llama_cpp(hf_dir, out):
    """llama.cpp's greedy tokens on the reference prompts against transformers'."""
    from llama_cpp import Llama

    ref = json.load(open(os.path.join(hf_dir, "reference.json")))
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    # llama.cpp picks LongRoPE's long factors for contexts beyond the original one;
    # transformers uses the short ones for sequences this short.
    n_ctx = min(256, (cfg.get("rope_parameters") or {}).get("original_max_position_embeddings", 256))
    llm = Llama(model_path=out, n_ctx=n_ctx, logits_all=False, verbose=False, seed=0)
    ok = True
    for p in ref["prompts"]:
        llm.reset()
        got = []
        for t in llm.generate(p["ids"], top_k=1, temp=0.0, reset=True):
            got.append(int(t))
            if len(got) == len(p["greedy"]):
                break
        same = got == p["greedy"]
        ok &= same
        print(f"llama.cpp greedy after {p['ids']}: {got} "
              f"{'==' if same else '!='} transformers {p['greedy']}")
    return ok


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        sys.exit(__doc__)
    hf_dir, out = args
    write(hf_dir, out)
    if "--check-llama-cpp" in sys.argv and not check_llama_cpp(hf_dir, out):
        sys.exit(1)


if __name__ == "__main__":
    main()
