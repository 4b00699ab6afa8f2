"""Checks `hearth serve` with the official `ollama` Python client.

Usage: ollama_client.py BASE_URL. Prints one line per check; exits non-zero on the first
failure.
"""

import sys

import ollama

MODEL = "SmolLM2-135M-Instruct.Q4_1"
GREEDY = {"temperature": 0, "repeat_penalty": 1.0, "num_predict": 8}
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def check(name, ok, detail=""):
    if not ok:
        print(f"FAIL {name}: {detail}")
        sys.exit(1)
    print(f"ok   {name}")


def main():
    client = ollama.Client(host=sys.argv[1])

    whole = client.chat(model=MODEL, messages=MESSAGES, options=GREEDY)
    check(
        "chat",
        whole.done and whole.message.role == "assistant" and whole.message.content,
        whole,
    )
    check(
        "chat counts",
        whole.eval_count and whole.prompt_eval_count and whole.total_duration > 0,
        whole,
    )

    parts = list(client.chat(model=MODEL, messages=MESSAGES, options=GREEDY, stream=True))
    text = "".join(p.message.content for p in parts)
    last = parts[-1]
    check("chat stream", last.done and not any(p.done for p in parts[:-1]), parts)
    check("chat stream text equals chat", text == whole.message.content, (text, whole))
    check("chat stream done_reason", last.done_reason in ("stop", "length"), last)

    gen = client.generate(
        model=MODEL, prompt="The capital of France is", raw=True, options=GREEDY
    )
    check("generate", gen.done and gen.response and gen.done_reason == "length", gen)
    check("generate context", len(gen.context) == gen.prompt_eval_count + 8, gen)
    pieces = list(
        client.generate(
            model=MODEL,
            prompt="The capital of France is",
            raw=True,
            options=GREEDY,
            stream=True,
        )
    )
    check(
        "generate stream",
        "".join(p.response for p in pieces) == gen.response and pieces[-1].context == gen.context,
        pieces,
    )

    models = client.list().models
    check("list", [m.model for m in models] == [MODEL + ":latest"], models)
    details = models[0].details
    check(
        "list details",
        details.format == "gguf"
        and details.family == "llama"
        and details.quantization_level == "Q4_1"
        and models[0].size > 0
        and models[0].modified_at is not None,
        models[0],
    )

    shown = client.show(MODEL)
    check(
        "show",
        shown.template
        and shown.capabilities == ["completion"]
        and shown.modelinfo["general.architecture"] == "llama"
        and shown.modified_at is not None,
        shown,
    )

    loaded = client.ps().models
    check("ps", [m.name for m in loaded] == [MODEL + ":latest"], loaded)
    check("ps expires_at", loaded[0].expires_at is not None, loaded[0])

    try:
        client.chat(model="no-such-model", messages=MESSAGES)
        check("unknown model raises", False, "no error")
    except ollama.ResponseError as e:
        check("unknown model raises", e.status_code == 404 and "not found" in e.error, e)

    try:
        client.generate(model=MODEL, prompt="hi", options={"num_predict": 0})
        check("bad option raises", False, "no error")
    except ollama.ResponseError as e:
        check("bad option raises", e.status_code == 400 and "num_predict" in e.error, e)

    unloaded = client.chat(model=MODEL, messages=[], keep_alive=0)
    check("unload", unloaded.done_reason == "unload", unloaded)
    check("ps after unload", client.ps().models == [], client.ps())
    loaded = client.generate(model=MODEL, keep_alive="10m")
    check("load", loaded.done_reason == "load" and loaded.response == "", loaded)
    check("ps after load", [m.model for m in client.ps().models] == [MODEL + ":latest"])

    print("all checks passed")


if __name__ == "__main__":
    main()
