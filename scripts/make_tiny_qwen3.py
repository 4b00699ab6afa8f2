#!/usr/bin/env python3
"""Write a tiny random-weight Qwen3 GGUF with the real tensor layout.

usage: make_tiny_qwen3.py OUT.gguf [--type f16|q8_0]

The model is small enough to commit (hidden 64, 2 layers) yet keeps every structural
feature of Qwen3 that an implementation can get wrong:

- head_dim (32) is independent of hidden / n_heads (16), so attn_q maps 64 -> 128 and
  attn_output maps 128 -> 64;
- grouped-query attention (4 query heads over 2 KV heads);
- per-head RMS norm on queries and keys (attn_q_norm / attn_k_norm);
- tied embeddings (no output.weight), rope base 1e6, rms eps 1e-6;
- norm weights that are not all ones, so a missing or misplaced norm changes the logits.

The tokenizer is a byte-level BPE ("gpt2" model, "qwen2" pre-tokenizer): 256 byte tokens,
merges learned from a small English text, and the three Qwen chat control tokens.

Weights are drawn from a fixed seed, so the output is byte-for-byte reproducible. The
q8_0 file holds the same weights as the f16 file (quantized from the f16 values), so the
two files differ only by quantization error.
"""

import argparse
import collections
import re
import sys

import numpy as np
import gguf

HIDDEN = 64
N_LAYERS = 2
FFN = 128
N_HEADS = 4
N_KV_HEADS = 2
HEAD_DIM = 32
VOCAB = 512
CONTEXT = 4096
ROPE_BASE = 1e6
RMS_EPS = 1e-6
SEED = 20250
# Standard deviation of the embedding table; with tied embeddings this sets the logit
# scale (std of logits is about sqrt(HIDDEN) * EMBED_STD for a unit-RMS final state).
EMBED_STD = 0.4
# Linear weights use gain / sqrt(fan_in). The projections that write into the residual
# stream (attn_output, ffn_down) get a larger gain: with tied embeddings a weak residual
# update leaves each position's own embedding dominant, and the model would then mostly
# predict the token it was just given.
GAIN = 1.0
RESIDUAL_GAIN = 3.0

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Training text for the merges. Plain English with a little code and punctuation, so the
# merges look like those of a real tokenizer (" the", "ing", " a", ...).
TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. A small model is still a model: it has
embeddings, attention, a feed-forward network and a final norm, and every one of them
can be wrong in its own way. When we test an inference engine we want the smallest
model that exercises all of these parts, so that a mistake shows up as a different
number rather than as a crash. The weights here are random, but the shapes are the
shapes of the real thing, and the tokenizer is a real byte-level tokenizer that can
encode any string at all, including the ones nobody expected to see.
Reading the file is the first step. Then the engine builds the layers, loads the
tensors, and runs the prompt through the network one token at a time or all at once.
The attention heads look back over the cache; the keys and values are stored for later
so that the next token does not have to recompute them. In the end the logits come out,
and the sampler picks the next token from them.
def forward(self, tokens, positions):
    hidden = self.embed(tokens)
    for layer in self.layers:
        hidden = layer(hidden, positions)
    return self.norm(hidden) @ self.embed.weight.T
fn main() { let x = vec![1, 2, 3]; println!("{:?}", x); }
{"name": "tiny", "layers": 2, "hidden": 64, "heads": 4}
There is nothing in this text that matters except that it is text, and that it has
the kind of words that people write: the, and, of, to, in, is, that, it, for, on, with,
as, was, at, by, this, from, they, we, say, her, she, or, an, will, my, one, all, would.
"""

# ASCII rendering of the qwen2 pre-tokenizer pattern (the training text is ASCII).
PRETOKEN_RE = re.compile(
    r"'(?:s|t|re|ve|m|ll|d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def byte_to_unicode():
    """GPT-2's reversible map from the 256 byte values to printable characters."""
    printable = list(range(ord("!"), ord("~") + 1))
    printable += list(range(ord("\xa1"), ord("\xac") + 1))
    printable += list(range(ord("\xae"), ord("\xff") + 1))
    table = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def learn_merges(text, n_merges):
    """Plain BPE training over pre-tokenized words; ties go to the smaller pair."""
    table = byte_to_unicode()
    words = collections.Counter(
        tuple(table[b] for b in piece.encode("utf-8")) for piece in PRETOKEN_RE.findall(text)
    )
    merges = []
    while len(merges) < n_merges:
        pairs = collections.Counter()
        for word, count in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += count
        if not pairs:
            raise SystemExit(f"training text too small: only {len(merges)} merges")
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        merged = collections.Counter()
        for word, count in words.items():
            out = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return merges


def build_vocab():
    """Token strings, token types and merge rules: bytes, then merges, then control tokens."""
    table = byte_to_unicode()
    tokens = [table[b] for b in range(256)]
    n_merges = VOCAB - 256 - len(SPECIAL_TOKENS)
    merges = learn_merges(TRAINING_TEXT, n_merges)
    tokens += [a + b for a, b in merges]
    assert len(set(tokens)) == len(tokens), "merge produced a duplicate token"
    tokens += SPECIAL_TOKENS
    types = [gguf.TokenType.NORMAL] * (VOCAB - len(SPECIAL_TOKENS))
    types += [gguf.TokenType.CONTROL] * len(SPECIAL_TOKENS)
    return tokens, types, [f"{a} {b}" for a, b in merges]


class Weights:
    """Deterministic random tensors, rounded to f16 so both file types share values."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def linear(self, n_out, n_in, gain=GAIN):
        w = self.rng.standard_normal((n_out, n_in), dtype=np.float32) * (gain / np.sqrt(n_in))
        return w.astype(np.float16)

    def embedding(self):
        w = self.rng.standard_normal((VOCAB, HIDDEN), dtype=np.float32) * EMBED_STD
        return w.astype(np.float16)

    def norm(self, n):
        return (1.0 + 0.1 * self.rng.standard_normal(n, dtype=np.float32)).astype(np.float32)


def add_matrix(writer, name, w16, qtype):
    """Store a 2-D weight either as F16 or quantized to Q8_0."""
    if qtype == "f16":
        writer.add_tensor(name, w16)
    else:
        q = gguf.quants.quantize(w16.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)


def write_model(out_path, qtype):
    writer = gguf.GGUFWriter(out_path, "qwen3")
    writer.add_name(f"tiny-qwen3-{qtype}")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(N_LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(N_HEADS)
    writer.add_head_count_kv(N_KV_HEADS)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    file_type = gguf.LlamaFileType.MOSTLY_F16 if qtype == "f16" else gguf.LlamaFileType.MOSTLY_Q8_0
    writer.add_file_type(file_type)

    tokens, types, merges = build_vocab()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    # NOTE: numpy shapes are [n_out, n_in]; GGUF stores them reversed (ne0 = n_in).
    w = Weights(SEED)
    add_matrix(writer, "token_embd.weight", w.embedding(), qtype)
    writer.add_tensor("output_norm.weight", w.norm(HIDDEN))
    for i in range(N_LAYERS):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", w.norm(HIDDEN))
        add_matrix(writer, p + "attn_q.weight", w.linear(N_HEADS * HEAD_DIM, HIDDEN), qtype)
        add_matrix(writer, p + "attn_k.weight", w.linear(N_KV_HEADS * HEAD_DIM, HIDDEN), qtype)
        add_matrix(writer, p + "attn_v.weight", w.linear(N_KV_HEADS * HEAD_DIM, HIDDEN), qtype)
        add_matrix(writer, p + "attn_output.weight", w.linear(HIDDEN, N_HEADS * HEAD_DIM, RESIDUAL_GAIN), qtype)
        writer.add_tensor(p + "attn_q_norm.weight", w.norm(HEAD_DIM))
        writer.add_tensor(p + "attn_k_norm.weight", w.norm(HEAD_DIM))
        writer.add_tensor(p + "ffn_norm.weight", w.norm(HIDDEN))
        add_matrix(writer, p + "ffn_gate.weight", w.linear(FFN, HIDDEN), qtype)
        add_matrix(writer, p + "ffn_up.weight", w.linear(FFN, HIDDEN), qtype)
        add_matrix(writer, p + "ffn_down.weight", w.linear(HIDDEN, FFN, RESIDUAL_GAIN), qtype)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="path of the GGUF file to write")
    parser.add_argument("--type", choices=["f16", "q8_0"], default="f16", help="weight type")
    args = parser.parse_args(argv)
    write_model(args.out, args.type)


if __name__ == "__main__":
    main(sys.argv[1:])
