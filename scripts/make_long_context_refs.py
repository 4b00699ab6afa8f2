#!/usr/bin/env python3
"""Add transformers' outputs on long prompts to tiny HF fixtures: reference_long.json.

For rope scalings that change with the sequence length (LongRoPE switches to its long factors
once a sequence outgrows original_max_position_embeddings), the prompts in reference.json are
too short to reach the change. This loads an existing fixture folder (weights unchanged) and
writes, beside its reference.json, the same per-prompt outputs for prompts longer than that
original context, in reference.json's format (prompts only).

Needs torch, transformers and tokenizers. Usage: make_long_context_refs.py FIXTURE_DIR...
(default: tests/fixtures/hf-tiny-phi3-longrope)
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

from make_hf_fixtures import prompt_reference

LENGTHS = [80, 100]


def long_prompt(n, vocab):
    # Ordinary tokens only: the fixtures' special tokens follow a 300-token BPE vocabulary.
    return [(i * 37 + 11) % min(vocab, 300) for i in range(n)]


def main():
    dirs = sys.argv[1:] or ["tests/fixtures/hf-tiny-phi3-longrope"]
    for d in dirs:
        model = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager",
                                                     dtype=torch.float32)
        model.eval()
        vocab = model.config.vocab_size
        prompts = [prompt_reference(model, long_prompt(n, vocab)) for n in LENGTHS]
        out = {"prompts": prompts, "transformers": transformers.__version__}
        with open(os.path.join(d, "reference_long.json"), "w") as f:
            json.dump(out, f)
        print(d, [len(p["ids"]) for p in prompts])


if __name__ == "__main__":
    main()
