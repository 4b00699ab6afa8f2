"""Checks `hearth serve`'s /v1/embeddings with the official `openai` Python client, which asks
for base64 by default and decodes it itself.

Usage: openai_embeddings.py BASE_URL MODEL GOLDEN_JSON
GOLDEN_JSON: tests/fixtures/embeddings/minilm.json (sentence-transformers' vectors).
Prints one line per check; exits non-zero on the first failure.
"""

import json
import math
import sys

import openai
from openai import OpenAI


def check(name, cond, detail=""):
    if not cond:
        print(f"FAIL {name}: {detail}")
        sys.exit(1)
    print(f"ok   {name}")


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def main():
    base, model, golden_path = sys.argv[1:4]
    with open(golden_path, encoding="utf-8") as f:
        golden = json.load(f)
    client = OpenAI(base_url=f"{base.rstrip('/')}/v1", api_key="unused", max_retries=0)
    texts = golden["sentences"][:4]
    r = client.embeddings.create(model=model, input=texts)
    check("embeddings.create list", len(r.data) == 4 and r.object == "list" and r.model == model, r)
    check("indexes in order", [d.index for d in r.data] == [0, 1, 2, 3], r.data)
    worst = min(cosine(d.embedding, g) for d, g in zip(r.data, golden["embeddings"]))
    check("base64 vectors equal sentence-transformers'", worst > 0.9999, worst)
    n = sum(len(ids) for ids in golden["token_ids"][:4])
    check("usage", r.usage.prompt_tokens == n and r.usage.total_tokens == n, r.usage)
    f = client.embeddings.create(model=model, input=texts[0], encoding_format="float")
    check("float equals base64", cosine(f.data[0].embedding, r.data[0].embedding) > 0.999999, f)
    t = client.embeddings.create(model=model, input=golden["token_ids"][1], encoding_format="float")
    check("token ids input", cosine(t.data[0].embedding, golden["embeddings"][1]) > 0.9999, t)
    try:
        client.embeddings.create(model=model, input="x", encoding_format="int8")
        check("bad encoding_format -> BadRequestError", False, "no error")
    except openai.BadRequestError as e:
        check("bad encoding_format -> BadRequestError", e.body["param"] == "encoding_format", e.body)


if __name__ == "__main__":
    main()
