#!/usr/bin/env python3
"""Make tiny random-weight Hugging Face checkpoints and HF transformers' outputs on them.

Writes tests/fixtures/hf-tiny-<name>/ for each checkpoint: config.json, generation_config.json,
safetensors weights (one file, or shards with model.safetensors.index.json), tokenizer.json,
tokenizer_config.json and reference.json. reference.json holds, per token-id prompt, the
last-position logits, 8 greedy tokens and the per-layer hidden-state norms at the last position,
plus token ids of a few strings and of a rendered chat, as HF `tokenizers` / transformers give them.

Random init leaves biases at zero; every non-norm parameter, biases included, is redrawn below,
so the Qwen2 q/k/v biases are non-zero and the test sees them.

Needs torch, transformers and tokenizers. Usage: make_hf_fixtures.py [OUT_DIR [NAME...]]
(NAME: llama, llama-bf16, qwen3, qwen2, mixtral, qwen3-moe, mistral, gemma, gemma2, gemma3,
llama-linear, llama-yarn, llama-dynamic, phi3, phi3-longrope; all of them when none is given)

The sparse mixture-of-experts checkpoints (mixtral, qwen3-moe) have 4 experts per layer and send
each token to 2 of them; their router weights are redrawn like every other matrix, so tokens
spread over the experts.
"""
import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma3TextConfig, GemmaConfig,
                          LlamaConfig, MistralConfig, MixtralConfig, Phi3Config,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen3Config, Qwen3MoeConfig)

CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Hello world! Hello there, how are you today?",
    "fn main() { println!(\"hello\"); } // code 12345 and 67890",
    "Unicode: café, naïve, 日本語, emoji 🦀🔥 and    whitespace runs\n\n\ttabs",
    "def add(a, b):\n    return a + b\n",
]
PROMPTS = [[1, 2, 3, 4, 5], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50], [7]]
STRINGS = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "café 日本語 🦀  two  spaces\n\tdone",
    "x = f(12345)",
]
CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello world!"},
]
N_GREEDY = 8
# Sliding windows in the fixtures are shorter than the 11-token prompt, so they matter.
WINDOW = 4

QWEN_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + "
    "message['content'] + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)


def make_tokenizer(specials):
    """A byte-level BPE of 300 tokens trained on CORPUS, then the special tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.add_special_tokens(specials)
    return tok


def save_tokenizer(tok, out, template, bos, eos, extra):
    tok.save(os.path.join(out, "tokenizer.json"))
    fast = PreTrainedTokenizerFast(tokenizer_file=os.path.join(out, "tokenizer.json"),
                                   bos_token=bos, eos_token=eos, **extra)
    fast.chat_template = template
    fast.save_pretrained(out)
    # save_pretrained rewrites tokenizer.json with the same content; keep the config it writes.
    return fast


@torch.no_grad()
def prompt_reference(model, ids):
    """Last-position logits and hidden-state norms of `ids`, and N_GREEDY greedy tokens (each
    step runs the whole sequence again, without a cache)."""
    x = torch.tensor([ids])
    res = model(x, output_hidden_states=True)
    logits = res.logits[0, -1].float().tolist()
    norms = [float(h[0, -1].float().norm()) for h in res.hidden_states]
    seq = list(ids)
    for _ in range(N_GREEDY):
        nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
        seq.append(nxt)
    return {"ids": ids, "last_logits": logits, "greedy": seq[len(ids):], "hidden_norms": norms}


@torch.no_grad()
def reference(model, fast):
    model.eval()
    out = {"prompts": [prompt_reference(model, ids) for ids in PROMPTS]}
    out["strings"] = [{"text": s, "ids": fast.encode(s, add_special_tokens=False)}
                      for s in STRINGS]
    out["chat"] = {
        "messages": CHAT,
        "ids": list(fast.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True,
                                             return_dict=False)),
    }
    return out


def build(name, cfg_cls, cfg_kw, specials, template, bos, eos, extra, dtype, shard, out_root):
    out = os.path.join(out_root, f"hf-tiny-{name}")
    os.makedirs(out, exist_ok=True)
    tok = make_tokenizer(specials)
    vocab = tok.get_vocab_size()
    cfg = cfg_cls(vocab_size=vocab, bos_token_id=tok.token_to_id(bos) if bos else None,
                  eos_token_id=tok.token_to_id(eos), **cfg_kw)
    torch.manual_seed(0)
    # Eager attention: the soft-capped Gemma 2 scores need it.
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").to(torch.float32)
    # Random init is small; widen the norms' weights so the test sees them. Gemma norms scale
    # by 1 + w, so theirs are centred on 0 (as in released Gemma checkpoints).
    norm_centre = 0.0 if cfg.model_type.startswith("gemma") else 1.0
    for n, p in model.named_parameters():
        if "norm" in n:
            p.data = norm_centre + 0.5 * torch.randn_like(p)
        else:
            p.data = 0.08 * torch.randn_like(p)
    model = model.to(dtype)
    kw = {"max_shard_size": "300KB"} if shard else {}
    model.save_pretrained(out, **kw)
    fast = save_tokenizer(tok, out, template, bos, eos, extra)
    # The reference runs in f32 on the stored weights (bf16 values widened exactly).
    ref = reference(model.to(torch.float32), fast)
    ref["dtype"] = str(dtype).removeprefix("torch.")
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f)
    print(name, sorted(os.listdir(out)))


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    only = set(sys.argv[2:])
    common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5)
    llama_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                      "<|end_header_id|>", "<|eot_id|>"]
    llama_kw = dict(common, rope_theta=50000.0, tie_word_embeddings=False,
                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 64})
    llama_args = (llama_specials, LLAMA_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>", {})
    qwen_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    qwen_args = (qwen_specials, QWEN_TEMPLATE, None, "<|im_end|>",
                 {"pad_token": "<|endoftext|>"})
    qwen3_kw = dict(common, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=True,
                    rms_norm_eps=1e-6)
    # Qwen2: q/k/v biases, no QK-norm, untied output head (the larger Qwen2.5 models' layout).
    qwen2_kw = dict(common, rope_theta=1000000.0, tie_word_embeddings=False, rms_norm_eps=1e-6)
    # Mixtral: 4 experts of width 64, top-2, renormalised (always, in Mixtral).
    mixtral_kw = dict(common, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                      rope_theta=1000000.0, tie_word_embeddings=False, sliding_window=None)
    # Qwen3 MoE as released: experts in every layer, top-k weights renormalised.
    qwen3_moe_kw = dict(qwen3_kw, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])
    mistral_kw = dict(common, rope_theta=10000.0, tie_word_embeddings=False,
                      sliding_window=WINDOW)
    gemma_specials = ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"]
    gemma_args = (gemma_specials, GEMMA_TEMPLATE, "<bos>", "<end_of_turn>", {})
    # Gemma: a head size that is not hidden_size / heads, tied embeddings.
    gemma_kw = dict(common, head_dim=32, hidden_act="gelu_pytorch_tanh", rope_theta=10000.0,
                    rms_norm_eps=1e-6, tie_word_embeddings=True)
    # Gemma 2: small soft caps so that they change the numbers; layer 0 slides, layer 1 is
    # global. query_pre_attn_scalar = head_dim, as llama.cpp assumes below 27B.
    gemma2_kw = dict(common, head_dim=16, hidden_activation="gelu_pytorch_tanh",
                     rope_theta=10000.0, rms_norm_eps=1e-6, query_pre_attn_scalar=16,
                     sliding_window=WINDOW, attn_logit_softcapping=2.0,
                     final_logit_softcapping=3.0, tie_word_embeddings=True)
    # Gemma 3 text: per-layer-type rope (linear scaling on the global layer only), a query
    # scale that is not 1/√head_dim, QK-norm.
    gemma3_kw = dict(common, head_dim=16, hidden_activation="gelu_pytorch_tanh",
                     rms_norm_eps=1e-6, query_pre_attn_scalar=24, sliding_window=WINDOW,
                     layer_types=["sliding_attention", "full_attention"],
                     rope_parameters={
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0,
                                            "rope_theta": 1000000.0}},
                     tie_word_embeddings=True)
    linear_kw = dict(llama_kw, rope_scaling={"rope_type": "linear", "factor": 4.0})
    yarn_kw = dict(llama_kw, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                           "original_max_position_embeddings": 64})
    # Dynamic NTK equals plain rope up to max_position_embeddings (256), all the prompts here.
    dynamic_kw = dict(llama_kw, rope_scaling={"rope_type": "dynamic", "factor": 4.0})
    # Phi 3: fused qkv / gate-up; a quarter of each head rotates, a sliding window. Phi3Config's
    # pad token default lies outside the tiny vocabulary.
    phi3_kw = dict(common, rope_theta=10000.0, partial_rotary_factor=0.5, sliding_window=WINDOW,
                   pad_token_id=None, tie_word_embeddings=False)
    # LongRoPE as Phi 3 mini 128k has it (short factors up to the original context).
    phi3_long_kw = dict(common, rope_theta=10000.0, pad_token_id=None, tie_word_embeddings=False,
                        original_max_position_embeddings=64,
                        rope_scaling={"rope_type": "longrope",
                                      "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.6, 3.3, 4.0],
                                      "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 12.0, 16.0]})
    jobs = [
        ("mixtral", MixtralConfig, mixtral_kw, llama_args, torch.float32, False),
        ("qwen3-moe", Qwen3MoeConfig, qwen3_moe_kw, qwen_args, torch.float32, False),
        ("llama", LlamaConfig, llama_kw, llama_args, torch.float32, False),
        ("llama-bf16", LlamaConfig, llama_kw, llama_args, torch.bfloat16, False),
        ("qwen3", Qwen3Config, qwen3_kw, qwen_args, torch.float32, True),
        ("qwen2", Qwen2Config, qwen2_kw, qwen_args, torch.float32, False),
        ("mistral", MistralConfig, mistral_kw, llama_args, torch.float32, False),
        ("gemma", GemmaConfig, gemma_kw, gemma_args, torch.float32, False),
        ("gemma2", Gemma2Config, gemma2_kw, gemma_args, torch.float32, False),
        ("gemma3", Gemma3TextConfig, gemma3_kw, gemma_args, torch.float32, False),
        ("llama-linear", LlamaConfig, linear_kw, llama_args, torch.float32, False),
        ("llama-yarn", LlamaConfig, yarn_kw, llama_args, torch.float32, False),
        ("llama-dynamic", LlamaConfig, dynamic_kw, llama_args, torch.float32, False),
        ("phi3", Phi3Config, phi3_kw, llama_args, torch.float32, False),
        ("phi3-longrope", Phi3Config, phi3_long_kw, llama_args, torch.float32, False),
    ]
    for name, cfg_cls, kw, args, dtype, shard in jobs:
        if not only or name in only:
            build(name, cfg_cls, kw, *args, dtype, shard, out_root)


if __name__ == "__main__":
    main()
