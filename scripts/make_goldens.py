#!/usr/bin/env python3
"""Regenerate the reference ("golden") files under tests/goldens from llama.cpp.

usage: python3 scripts/make_goldens.py [--models-dir DIR] [--only NAME ...]

Needs llama-cpp-python 0.3.16 (the CPU build; see LLAMA_CPP_PYTHON), numpy, and the real
test models (scripts/fetch-models.sh puts them in $HEARTH_TEST_MODELS or
~/.cache/hearth-test-models). The tiny Qwen3 models are the committed fixtures in
tests/fixtures.

For every model it writes tests/goldens/<model>/:

  tokens.json  (real models only) token ids of a text corpus, tokenized without BOS and
               with special tokens parsed: {"model_file", "llama_cpp_python", "cases":
               [{"text", "ids"}]}
  greedy.json  argmax decoding of N_PREDICT tokens per prompt: {"model_file",
               "llama_cpp_python", "n_predict", "cases": [{"prompt", "prompt_ids", "ids",
               "top2_gap"}]}. The prompt is evaluated as one batch, then one token per step.
               Ties go to the lower id; top2_gap[i] is logit(top1) - logit(top2) at step i,
               so a test can tell a real mismatch from a near-tie.
  logits.json  teacher-forced logits of one fixed sequence evaluated as one batch:
               {"model_file", "llama_cpp_python", "n_threads", "ids", "positions":
               [{"pos", "top_ids", "top_logits"}], "full_rows" (tiny models only):
               [{"pos", "logits"}]}. Row `pos` holds the logits after ids[0..=pos], i.e. the
               prediction for ids[pos + 1]. top_ids are sorted by logit, highest first
               (ties: lower id first).

Everything is deterministic: llama.cpp runs on the CPU with a fixed thread count and
batch size, and all inputs are fixed in this file.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

LLAMA_CPP_PYTHON = "0.3.16"
N_THREADS = 2
N_BATCH = 512
N_PREDICT = 32
N_TOP = 10
LOGIT_POSITIONS = list(range(1, 65))
FULL_ROW_POSITIONS = [1, 17, 40, 64]

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
GOLDENS = REPO / "tests" / "goldens"

CHATML_CONVERSATION = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\nThe capital of France is Paris.<|im_end|>\n"
    "<|im_start|>user\nAnd of Germany?<|im_end|>\n"
    "<|im_start|>assistant\n"
)

LONG_PARAGRAPH = (
    "The history of computing is often told as a sequence of machines, each faster and smaller "
    "than the last, but it is just as much a history of ideas about how to describe a problem so "
    "that a machine can solve it. Early programmers wrote directly in the numeric codes of the "
    "hardware, keeping track of every memory address by hand; a single misplaced digit could send "
    "a calculation off into nonsense, and finding the mistake might take days. Assemblers gave "
    "names to those codes, and compilers went further, letting people write formulas and loops "
    "that the computer translated for itself. Each step traded a little control for a great deal "
    "of clarity. Operating systems then took over the chores of sharing a machine among many "
    "users, and networks let machines share work with one another across rooms, cities and "
    "oceans. Today a phone in a pocket holds more memory than the largest installations of the "
    "1970s, yet the central questions have not changed: how do we say precisely what we want, "
    "how do we check that the answer is right, and how do we keep the whole arrangement "
    "understandable as it grows? Language models add a new twist to that story. They are "
    "programs whose behaviour is learned from text rather than written line by line, and running "
    "them efficiently means multiplying very large matrices, again and again, for every word they "
    "produce. Engineers who build inference engines spend their days on caches, memory layouts, "
    "number formats with four or eight bits, and the careful scheduling of many requests at once, "
    "all so that an answer arrives a fraction of a second sooner. It is an old craft in new "
    "clothes: describe the problem well, measure everything, and never trust a result you have "
    "not checked against something independent."
)

LOGITS_TEXT = (
    "Rivers shape the land they cross. Over thousands of years, a river carves valleys, carries "
    "sand and stone toward the sea, and builds wide plains where its water slows and spreads. "
    "People have always settled along rivers, because they offer water for drinking and farming, "
    "a road for trade, and fish for food. Many of the oldest cities in the world grew up on their "
    "banks, and many still depend on them today."
)

# Text corpus shared by every real model: whitespace, Unicode, emoji, code, numbers.
COMMON_TEXTS = [
    "",
    " ",
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "  two leading spaces and two trailing  ",
    "a  b   c    d     e      f       g        h",
    "        eight spaces before",
    "tab\tseparated\tvalues",
    "\t\tdouble tab indent",
    "line one\nline two",
    "paragraph one\n\n\nparagraph two",
    "windows\r\nline endings\r\n",
    "\n",
    "  \n  \n",
    "Café, naïve, façade, résumé, jalapeño, Ångström",
    "Die Straße ist groß und weiß.",
    "Ελληνικά: Καλημέρα κόσμε",
    "Русский текст: Привет, мир!",
    "العربية: مرحبا بالعالم",
    "हिन्दी: नमस्ते दुनिया",
    "Emoji: 😀 🎉 👍🏽 ❤️",
    "Family: 👨‍👩‍👧‍👦 and rainbow flag: 🏳️‍🌈",
    "Flags: 🇺🇸 🇯🇵 🇩🇪 🇫🇷",
    "中文：你好，世界！这是一个测试。",
    "日本語：こんにちは、カタカナ　テスト",
    "한국어: 안녕하세요 세계",
    "def add(a, b):\n    return a + b\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!(\"{:?}\", v);\n}\n",
    '{"name": "hearth", "version": [0, 1, 0], "ok": true, "nested": {"k": null}}',
    '<div class="box"><p>Hello &amp; welcome</p></div>',
    "12345678",
    "3.14159",
    "Numbers 1, 22, 333, 4444, 55555 and 1,000,000.50",
    "don't stop, I'm sure you're right, we'll see, they've gone, she'd know",
    "DON'T SHOUT, I'M HERE",
    "mixed CASE camelCase snake_case kebab-case SCREAMING_CASE",
    "punctuation!!! ??? ... --- *** ((()))",
    "URL: https://example.com/path?query=1&x=y#frag",
    "email: someone@example.org",
    CHATML_CONVERSATION,
    LONG_PARAGRAPH,
]

SPECIAL_TEXTS = {
    "smollm2": [
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "text before<|im_start|>user\nhi<|im_end|>text after",
        "<|endoftext|><|endoftext|>two in a row",
        " <|im_start|> spaces around <|im_end|> ",
    ],
    "gemma3": [
        "<bos>",
        "<start_of_turn>",
        "<end_of_turn>",
        "<bos><start_of_turn>user\nHello there<end_of_turn>\n<start_of_turn>model\n",
        "text before<start_of_turn>middle<end_of_turn>text after",
        " <end_of_turn> spaces around <start_of_turn> ",
    ],
}

GREEDY_PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a",
    "def fibonacci(n):\n",
    "1, 2, 3, 4, 5,",
    "The quick brown fox",
    "In 1969, Neil Armstrong",
    "Water boils at a temperature of",
    "Translate to French: Hello, how are you?",
]

GREEDY_CHAT_PROMPTS = {
    "smollm2": "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "gemma3": "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
}

# Tiny models: prompts given as token ids (their tokenizer is too small to be meaningful).
TINY_GREEDY_PROMPTS = [
    list(range(256, 264)),
    list(range(65, 85)),
    [300, 12, 500, 7, 260, 260, 33],
    [100],
]
TINY_LOGITS_IDS = [(i * 37 + 11) % 509 for i in range(80)]

REAL_MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}
TINY_MODELS = {
    "qwen3-tiny-f16": "tiny-qwen3-f16.gguf",
    "qwen3-tiny-q8_0": "tiny-qwen3-q8_0.gguf",
}


def load(path, n_ctx):
    from llama_cpp import Llama

    return Llama(
        model_path=str(path),
        n_ctx=n_ctx,
        n_threads=N_THREADS,
        n_threads_batch=N_THREADS,
        n_batch=N_BATCH,
        logits_all=True,
        verbose=False,
        seed=0,
    )


def f32(x):
    """Shortest decimal text that reads back as the same float32."""
    return float(str(np.float32(x)))


def top_k(row, k):
    """Indices of the k largest logits, highest first, ties to the lower id."""
    order = np.lexsort((np.arange(row.size), -row.astype(np.float64)))
    return [int(i) for i in order[:k]]


def greedy(llm, prompt_ids):
    """Argmax decoding: the prompt in one batch, then one token per evaluation."""
    llm.reset()
    llm.eval(prompt_ids)
    ids, gaps = [], []
    for step in range(N_PREDICT):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        first, second = top_k(row, 2)
        ids.append(first)
        gaps.append(f32(row[first] - row[second]))
        if step + 1 < N_PREDICT:
            llm.eval([first])
    return ids, gaps


def teacher_forced(llm, ids, full_rows):
    llm.reset()
    llm.eval(ids)
    scores = np.array(llm.scores[: len(ids)], dtype=np.float32)
    positions = []
    for pos in LOGIT_POSITIONS:
        top = top_k(scores[pos], N_TOP)
        positions.append(
            {"pos": pos, "top_ids": top, "top_logits": [f32(scores[pos][i]) for i in top]}
        )
    out = {
        "ids": ids,
        "n_threads": N_THREADS,
        "positions": positions,
        "self_check": self_check(llm, ids, scores, positions),
    }
    if full_rows:
        out["full_rows"] = [
            {"pos": pos, "logits": [f32(v) for v in scores[pos]]} for pos in FULL_ROW_POSITIONS
        ]
    return out


def self_check(llm, ids, batched, positions):
    """How far llama.cpp moves from itself when the same ids run one token per evaluation
    instead of in one batch (other kernels, other summation orders). A difference smaller than
    this is noise, not a disagreement: the Rust tests derive their bounds from it."""
    llm.reset()
    for t in ids:
        llm.eval([t])
    one_by_one = np.array(llm.scores[: len(ids)], dtype=np.float32)
    worst, agree = 0.0, 0
    for p in positions:
        pos, top = p["pos"], p["top_ids"]
        worst = max(worst, float(np.max(np.abs(one_by_one[pos][top] - batched[pos][top]))))
        agree += int(top_k(one_by_one[pos], 1)[0] == top[0])
    return {
        "how": "the same ids evaluated one token at a time instead of in one batch",
        "max_top10_diff": f32(worst),
        "top1_agree": agree,
    }


def header(model_file):
    return {"model_file": model_file, "llama_cpp_python": LLAMA_CPP_PYTHON}


def dump(path, doc):
    """Compact JSON with each element of a list of objects on its own line (readable diffs)."""
    parts = []
    for key, value in doc.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            rows = ",\n".join(compact(item) for item in value)
            parts.append(f"{compact(key)}:[\n{rows}\n]")
        else:
            parts.append(f"{compact(key)}:{compact(value)}")
    text = "{" + ",\n".join(parts) + "}\n"
    if json.loads(text) != doc:
        raise AssertionError(f"{path}: JSON does not read back to the same document")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def compact(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def make_real(name, model_path):
    llm = load(model_path, n_ctx=256)
    out_dir = GOLDENS / name
    base = header(model_path.name)

    texts = COMMON_TEXTS + SPECIAL_TEXTS[name]
    cases = [
        {"text": t, "ids": llm.tokenize(t.encode("utf-8"), add_bos=False, special=True)}
        for t in texts
    ]
    dump(out_dir / "tokens.json", {**base, "cases": cases})

    # NOTE: add_bos=True lets llama.cpp decide from the model metadata
    # (tokenizer.ggml.add_bos_token), exactly as its default tokenization does.
    greedy_cases = []
    for prompt in GREEDY_PROMPTS + [GREEDY_CHAT_PROMPTS[name]]:
        prompt_ids = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        ids, gaps = greedy(llm, prompt_ids)
        greedy_cases.append({"prompt": prompt, "prompt_ids": prompt_ids, "ids": ids, "top2_gap": gaps})
    dump(out_dir / "greedy.json", {**base, "n_predict": N_PREDICT, "cases": greedy_cases})

    ids = llm.tokenize(LOGITS_TEXT.encode("utf-8"), add_bos=True, special=True)
    if len(ids) <= max(LOGIT_POSITIONS):
        raise SystemExit(f"{name}: logits text has only {len(ids)} tokens")
    dump(out_dir / "logits.json", {**base, **teacher_forced(llm, ids, False)})


def make_tiny(name, model_path):
    llm = load(model_path, n_ctx=256)
    out_dir = GOLDENS / name
    base = header(model_path.name)

    greedy_cases = []
    for prompt_ids in TINY_GREEDY_PROMPTS:
        ids, gaps = greedy(llm, prompt_ids)
        greedy_cases.append({"prompt": "", "prompt_ids": prompt_ids, "ids": ids, "top2_gap": gaps})
    dump(out_dir / "greedy.json", {**base, "n_predict": N_PREDICT, "cases": greedy_cases})

    doc = {**base, **teacher_forced(llm, list(TINY_LOGITS_IDS), True)}
    dump(out_dir / "logits.json", doc)


def main(argv):
    default_dir = os.environ.get("HEARTH_TEST_MODELS") or str(
        Path.home() / ".cache" / "hearth-test-models"
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-dir", default=default_dir, help="folder with the real GGUF models")
    parser.add_argument("--only", nargs="*", help="model names to regenerate (default: all)")
    args = parser.parse_args(argv)

    import llama_cpp

    if llama_cpp.__version__ != LLAMA_CPP_PYTHON:
        raise SystemExit(
            f"llama-cpp-python {llama_cpp.__version__} found, the goldens need {LLAMA_CPP_PYTHON}"
        )
    wanted = set(args.only) if args.only else set(REAL_MODELS) | set(TINY_MODELS)
    for name, file in REAL_MODELS.items():
        if name in wanted:
            path = Path(args.models_dir) / file
            if not path.is_file():
                raise SystemExit(f"{path} is missing: run scripts/fetch-models.sh")
            make_real(name, path)
            print(f"{name}: {GOLDENS / name}")
    for name, file in TINY_MODELS.items():
        if name in wanted:
            make_tiny(name, FIXTURES / file)
            print(f"{name}: {GOLDENS / name}")


if __name__ == "__main__":
    main(sys.argv[1:])
