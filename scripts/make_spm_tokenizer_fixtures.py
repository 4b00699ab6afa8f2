#!/usr/bin/env python3
"""Make small SentencePiece-style tokenizer.json files and HF `tokenizers`' token ids on them.

A SentencePiece BPE model with byte fallback is trained on a tiny corpus, then written as a
tokenizer.json the way transformers converts Llama / Mistral / Gemma SentencePiece models: a
`BPE` model with `byte_fallback: true`, the vocabulary in piece order, and merges listing every
split of every piece into two pieces, ranked by the merged piece's score. Each variant differs
only in how spaces become U+2581:

  llama   normalizer Prepend("▁") + Replace(" ", "▁")   (Llama 2, TinyLlama, Mistral v0.1, Phi 3 mini)
  gemma   normalizer Replace(" ", "▁"), no prefix, and the (no-op) Split at " " that
          transformers writes after it                     (Gemma 1 / 2 / 3)
  mistral Metaspace("▁", prepend_scheme "first") pre-tokenizer, no normalizer
                                                           (Mistral v0.3, non-legacy Llama)

Writes tests/fixtures/spm-tokenizers/<variant>/: tokenizer.json, tokenizer_config.json and
reference.json, which holds the token ids HF `tokenizers` gives for varied texts, without
(`ids`) and with (`ids_with_special`) the post-processor's BOS. The vocabulary has 302 pieces
plus three added tokens, 305 in all: the size of the tiny HF checkpoints in tests/fixtures, so a
test can put these tokenizers into a copy of one and convert it.

Needs sentencepiece and tokenizers. Usage: make_spm_tokenizer_fixtures.py [OUT_DIR]
"""
import io
import json
import os
import sys

import sentencepiece as spm
from tokenizers import (AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors)

# A small alphabet, so that 302 pieces (3 control, 256 bytes) leave room for merges that
# compete: "he", "the", "her", "▁her", "other", ...; every other character falls back to bytes.
TRAIN = [
    "the other brother there then the three threw three trees there",
    "hello hello, her hero held the helm here; where were they? ",
    "in the inn, tin tins: intern interns intent on it, at that hat",
]
VOCAB_SIZE = 302
# Added after the pieces: two control tokens like Llama 2 / Mistral's chat markers, and a
# user-defined (not special) one.
SPECIAL = ["[INST]", "[/INST]"]
USER_DEFINED = ["<tool>"]
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}"
    "{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)
TEXTS = [
    "the other brother",
    "Hello world!",
    " leading space",
    "  two leading spaces and two trailing  ",
    "there    were   runs of spaces",
    "line one\nline two\n\n\ttabbed\r\n",
    "café naïve 日本語 ünïcödé",
    "emoji 🦀🔥 and 👍🏽 skin tone",
    "digits 12345 and 3.14159",
    "thethethe therethere herhero",
    "a literal ▁ lower block ▁▁",
    "[INST] where were they? [/INST] there",
    "[INST]hello[/INST]",
    "x[INST]y [/INST] ",
    "call <tool> then <tool>done",
    "def f(a, b):\n    return a + b\n",
    "",
    " ",
    "\n",
    "h",
]


def train_pieces():
    """(piece, score) in id order: <unk>, <s>, </s>, <0x00>..<0xFF>, merged pieces, characters."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAIN * 50), model_writer=model, vocab_size=VOCAB_SIZE,
        model_type="bpe", byte_fallback=True, character_coverage=1.0,
        allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
        normalization_rule_name="identity", minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.vocab_size())]


def merges_of(pieces):
    """Every split of every piece into two pieces, ordered by the merged piece's score
    (highest first), then by the ids of the left and right parts, as transformers'
    SentencePieceExtractor orders them."""
    vocab = {p: i for i, (p, _) in enumerate(pieces)}
    merges = []
    for piece, score in pieces:
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        merges += sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]]))
    merges.sort(key=lambda m: m[2], reverse=True)
    return vocab, [(left, right) for left, right, _ in merges]


def make_tokenizer(vocab, merges, variant):
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    replace = normalizers.Replace(" ", "▁")
    if variant == "llama":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), replace])
        strip = [decoders.Strip(" ", 1, 0)]
    elif variant == "gemma":
        tok.normalizer = replace
        tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
        strip = []
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace("▁", prepend_scheme="first", split=False)
        strip = [decoders.Strip(" ", 1, 0)]
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()] + strip)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t in ["<unk>", "<s>", "</s>"] + SPECIAL])
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in USER_DEFINED])
    return tok


def write_variant(out_root, variant, vocab, merges):
    out = os.path.join(out_root, variant)
    os.makedirs(out, exist_ok=True)
    tok = make_tokenizer(vocab, merges, variant)
    tok.save(os.path.join(out, "tokenizer.json"))
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "chat_template": TEMPLATE,
        "tokenizer_class": "GemmaTokenizerFast" if variant == "gemma" else "LlamaTokenizerFast",
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
    reference = [{
        "text": text,
        "ids": tok.encode(text, add_special_tokens=False).ids,
        "ids_with_special": tok.encode(text, add_special_tokens=True).ids,
    } for text in TEXTS]
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"texts": reference}, f, indent=1, ensure_ascii=False)
    print(variant, tok.get_vocab_size(), "tokens,", len(merges), "merges")


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/spm-tokenizers"
    vocab, merges = merges_of(train_pieces())
    for variant in ["llama", "gemma", "mistral"]:
        write_variant(out_root, variant, vocab, merges)


if __name__ == "__main__":
    main()
