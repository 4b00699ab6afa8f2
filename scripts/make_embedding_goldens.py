#!/usr/bin/env python3
"""Reference embeddings for hearth's embedding tests.

Needs: torch, transformers, sentence-transformers, tokenizers, numpy.

Usage:
  make_embedding_goldens.py minilm  <all-MiniLM-L6-v2 folder> <out.json>
      sentence-transformers' vectors (its own pooling and normalization) and HF tokenizers'
      token ids for 20 varied sentences, one of them longer than max_seq_length.
  make_embedding_goldens.py decoder <decoder folder with modules.json> <out.json>
      transformers' last hidden state (after the final norm) of the last token, L2-normalized:
      what last-token pooling with a Normalize module gives, for a few short texts.
"""
import json
import sys

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on stage.",
    "Hi",
    "?",
    "",
    "Ünïcödé: naïve café, façade, Straße, smörgåsbord.",
    "日本語の文章も埋め込みできますか？",
    "Emoji 🚀🔥 and symbols ∑ ∫ √ ≠ ≤ ≥ → ←",
    "fn main() { println!(\"hello, world\"); }",
    "def f(x):\n    return x ** 2  # square",
    "Punctuation!!! Does... it?? work; really: (yes) [no] {maybe} -- 'quotes' \"double\"",
    "   leading and trailing whitespace   ",
    "Tabs\tand\nnewlines\n\nin   text",
    "UPPER CASE AND lower case And Mixed Case",
    "Numbers: 3.14159, 2,718, 1e-10, 42%, $100, #7",
    "https://example.com/path?query=1&x=y#frag and user@example.org",
    "Москва — столица России. Ελληνικά κείμενα. עברית. العربية.",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "The weather today is sunny with a chance of rain in the afternoon.",
    " ".join(
        f"Sentence {i} of a long document about embeddings, tokenizers and encoders."
        for i in range(40)
    ),
]

DECODER_TEXTS = ["hello world", "The cat sat on the mat.", "a", "embeddings, pooled last"]


def rounded(vec):
    return [float(f"{x:.7g}") for x in vec]


def minilm(folder, out):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, device="cpu")
    vectors = model.encode(SENTENCES, convert_to_numpy=True, batch_size=8)
    tok = model.tokenizer
    ids = [
        tok(s.strip(), truncation=True, max_length=model.max_seq_length)["input_ids"]
        for s in SENTENCES
    ]
    return {
        "source": "sentence-transformers SentenceTransformer.encode on all-MiniLM-L6-v2",
        "max_seq_length": model.max_seq_length,
        "sentences": SENTENCES,
        "token_ids": ids,
        "embeddings": [rounded(v) for v in vectors],
    }


def decoder(folder, out):
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    tok = Tokenizer.from_file(f"{folder}/tokenizer.json")
    tok.no_truncation()
    tok.no_padding()
    model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
    ids, vectors = [], []
    for text in DECODER_TEXTS:
        enc = tok.encode(text.strip(), add_special_tokens=True).ids
        with torch.no_grad():
            h = model(torch.tensor([enc])).last_hidden_state[0, -1]
        vectors.append(rounded(torch.nn.functional.normalize(h, dim=0).tolist()))
        ids.append(enc)
    return {
        "source": "transformers AutoModel last_hidden_state of the last token, L2-normalized",
        "texts": DECODER_TEXTS,
        "token_ids": ids,
        "embeddings": vectors,
    }


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("minilm", "decoder"):
        sys.exit(__doc__)
    kind, folder, out = sys.argv[1:]
    data = minilm(folder, out) if kind == "minilm" else decoder(folder, out)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
