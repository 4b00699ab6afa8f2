#!/usr/bin/env python3
"""Add transformers' outputs on long prompts to tiny HF fixtures: reference_long.json.

For rope scalings that change with the sequence length (LongRoPE switches to its long factors
once a sequence outgrows original_max_position_embeddings; dynamic NTK raises the rope base
with the length past max_position_embeddings), the prompts in reference.json are too short to
reach the change. This loads an existing fixture folder (weights unchanged) and writes, beside
its reference.json, the same per-prompt outputs for prompts longer than that original context,
in reference.json's format (prompts only).

Dynamic NTK recomputes the frequencies in every forward pass from that pass's length, while
the keys in the KV cache keep the rotation they were written with, so decoding with the cache
differs from running the whole sequence again. For it the greedy tokens come from cached
decoding, one token per forward pass, and each such step's logits are kept (`step_logits`);
prompts start below the original length and cross it while decoding, or start past it.

Needs torch, transformers and tokenizers. Usage: make_long_context_refs.py FIXTURE_DIR...
(default: tests/fixtures/hf-tiny-phi3-longrope tests/fixtures/hf-tiny-llama-dynamic)
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

from make_hf_fixtures import prompt_reference

LENGTHS = [80, 100]
# Dynamic NTK: prompt lengths relative to max_position_embeddings, and cached decode steps.
DYNAMIC_OFFSETS = [-6, 44, 144]
DYNAMIC_STEPS = 12


def long_prompt(n, vocab):
    # Ordinary tokens only: the fixtures' special tokens follow a 300-token BPE vocabulary.
    return [(i * 37 + 11) % min(vocab, 300) for i in range(n)]


def load(d):
    model = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager",
                                                 dtype=torch.float32)
    model.eval()
    return model


def rope_type(config):
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    return (params or {}).get("rope_type", "default")


@torch.no_grad()
def cached_reference(model, ids, n_steps):
    """prompt_reference's fields for `ids` run in one forward pass, with greedy tokens from
    decoding with the KV cache, one token per pass, and the logits after each (`step_logits`)."""
    out = model(torch.tensor([ids]), output_hidden_states=True, use_cache=True)
    norms = [float(h[0, -1].float().norm()) for h in out.hidden_states]
    first = out.logits[0, -1].float()
    logits, cache = first, out.past_key_values
    greedy, step_logits = [], []
    for _ in range(n_steps):
        nxt = int(logits.argmax())
        greedy.append(nxt)
        out = model(torch.tensor([[nxt]]), past_key_values=cache, use_cache=True)
        logits, cache = out.logits[0, -1].float(), out.past_key_values
        step_logits.append(logits.tolist())
    return {"ids": ids, "last_logits": first.tolist(), "greedy": greedy,
            "hidden_norms": norms, "step_logits": step_logits}


def dynamic_prompts(d):
    config = load(d).config
    prompts = []
    for offset in DYNAMIC_OFFSETS:
        ids = long_prompt(config.max_position_embeddings + offset, config.vocab_size)
        # NOTE: a fresh model per prompt: transformers' dynamic rope keeps the grown
        # frequencies between calls, and each prompt must start from the plain ones.
        prompts.append(cached_reference(load(d), ids, DYNAMIC_STEPS))
    return prompts


@torch.no_grad()
def main():
    dirs = sys.argv[1:] or ["tests/fixtures/hf-tiny-phi3-longrope",
                            "tests/fixtures/hf-tiny-llama-dynamic"]
    for d in dirs:
        model = load(d)
        if rope_type(model.config) == "dynamic":
            prompts = dynamic_prompts(d)
        else:
            vocab = model.config.vocab_size
            prompts = [prompt_reference(model, long_prompt(n, vocab)) for n in LENGTHS]
        out = {"prompts": prompts, "transformers": transformers.__version__}
        with open(os.path.join(d, "reference_long.json"), "w") as f:
            json.dump(out, f)
        print(d, [len(p["ids"]) for p in prompts])


if __name__ == "__main__":
    main()
