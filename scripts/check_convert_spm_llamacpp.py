#!/usr/bin/env python3
"""Check that llama.cpp tokenizes the SentencePiece vocabularies `hearth convert` writes as HF
`tokenizers` does.

usage: check_convert_spm_llamacpp.py HEARTH_BINARY FIXTURES_DIR WORK_DIR

For each tokenizer of FIXTURES/spm-tokenizers (scripts/make_spm_tokenizer_fixtures.py), puts it
into a copy of the tiny Mistral checkpoint (305 tokens, as the tokenizers), runs
`hearth convert`, loads the file's vocabulary with llama-cpp-python's `Llama` (a real llama.cpp
build) and tokenizes every reference text with special tokens parsed, without and with BOS,
against the ids HF `tokenizers` gave (reference.json). The Metaspace tokenizer ("mistral") is
held to the "llama" tokenizer's ids: its converted vocabulary is the same, space prefix and all,
as SentencePiece and llama.cpp run such a model (HF's Metaspace adds no "▁" before text that
starts with a space or follows an added token). Prints one line per tokenizer and each text that
differs; exits non-zero when llama.cpp cannot load a file or any text differs.

Needs llama_cpp (llama-cpp-python).
"""
import json
import os
import shutil
import subprocess
import sys

import llama_cpp

# (tokenizer, the reference whose ids its converted file must give)
VARIANTS = [("llama", "llama"), ("gemma", "gemma"), ("mistral", "llama")]


def folder_with(fixtures, variant, work):
    """A copy of hf-tiny-mistral with the fixture tokenizer `variant` in place of its own."""
    dst = os.path.join(work, f"spm-{variant}")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(os.path.join(fixtures, "hf-tiny-mistral"), dst)
    os.remove(os.path.join(dst, "chat_template.jinja"))
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(os.path.join(fixtures, "spm-tokenizers", variant, name), dst)
    return dst


def check(path, reference):
    """The texts llama.cpp tokenizes unlike HF, as (text, add_bos, llama.cpp ids, HF ids)."""
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    wrong = []
    for t in reference["texts"]:
        text = t["text"].encode("utf-8")
        for add_bos, want in [(False, t["ids"]), (True, t["ids_with_special"])]:
            got = llm.tokenize(text, add_bos=add_bos, special=True)
            if got != want:
                wrong.append((t["text"], add_bos, got, want))
    return wrong


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    hearth, fixtures, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    failed = False
    for variant, expected in VARIANTS:
        with open(os.path.join(fixtures, "spm-tokenizers", expected, "reference.json")) as f:
            reference = json.load(f)
        out = os.path.join(work, f"spm-{variant}.gguf")
        subprocess.run([hearth, "convert", folder_with(fixtures, variant, work), "-o", out,
                        "--type", "f16"], check=True, stdout=subprocess.DEVNULL)
        wrong = check(out, reference)
        n = 2 * len(reference["texts"])
        print(f"{variant}: llama.cpp loads the vocabulary; {n - len(wrong)} of {n} "
              f"tokenizations equal HF's ({expected} tokenizer)", flush=True)
        for text, add_bos, got, want in wrong:
            print(f"  {text!r} (BOS {add_bos}): llama.cpp {got}, HF {want}")
        failed |= bool(wrong)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
