"""Checks `hearth serve` with the official `openai` Python client.

Usage: openai_client.py BASE_URL   (e.g. http://127.0.0.1:8080)
Prints one line per check; exits non-zero on the first failure.
"""

import sys

import openai
from openai import OpenAI


def check(name, cond, detail=""):
    if not cond:
        print(f"FAIL {name}: {detail}")
        sys.exit(1)
    print(f"ok   {name}")


def expect_error(name, cls, call):
    try:
        call()
    except cls as e:
        check(name, e.body is not None and "message" in e.body, repr(e.body))
        return
    except openai.APIError as e:
        check(name, False, f"raised {type(e).__name__}, not {cls.__name__}: {e}")
    check(name, False, f"no {cls.__name__} raised")


def main():
    base = sys.argv[1].rstrip("/")
    client = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)

    models = client.models.list()
    ids = [m.id for m in models.data]
    check("models.list", len(ids) == 1 and models.data[0].owned_by == "hearth", ids)
    model = ids[0]
    m = client.models.retrieve(model)
    check("models.retrieve", m.id == model and m.object == "model" and m.created > 0, m)
    expect_error("models.retrieve unknown -> NotFoundError", openai.NotFoundError,
                 lambda: client.models.retrieve("no-such-model"))

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    r = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=12)
    content = r.choices[0].message.content
    check("chat.completions.create", r.id.startswith("chatcmpl-") and r.object == "chat.completion"
          and r.choices[0].message.role == "assistant" and isinstance(content, str) and content, r)
    u = r.usage
    check("chat usage", u.prompt_tokens > 0 and u.completion_tokens > 0
          and u.total_tokens == u.prompt_tokens + u.completion_tokens
          and u.prompt_tokens_details.cached_tokens >= 0, u)
    check("chat finish_reason", r.choices[0].finish_reason in ("stop", "length"), r.choices[0])

    chunks = list(client.chat.completions.create(
        model=model, messages=messages, temperature=0, max_tokens=12, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check("chat stream content equals non-stream", text == content, (text, content))
    check("chat stream role first", chunks[0].choices[0].delta.role == "assistant", chunks[0])
    check("chat stream one id", len({c.id for c in chunks}) == 1, {c.id for c in chunks})
    last = chunks[-1]
    check("chat stream usage chunk", last.choices == [] and last.usage is not None
          and last.usage.completion_tokens == u.completion_tokens
          and last.usage.prompt_tokens == u.prompt_tokens, last)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    check("chat stream finish_reason", finishes == [r.choices[0].finish_reason], finishes)

    parts = [{"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]}]
    rp = client.chat.completions.create(model=model, messages=parts, temperature=0, max_tokens=12)
    check("chat text content parts", rp.choices[0].message.content == content, rp.choices[0])

    r = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=5,
                                       logprobs=True, top_logprobs=2)
    lp = r.choices[0].logprobs.content
    check("chat logprobs", len(lp) > 0 and all(t.logprob <= 0 and len(t.top_logprobs) == 2
          and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob and t.bytes is not None for t in lp), lp)
    check("chat logprobs tokens spell the content",
          "".join(t.token for t in lp) == r.choices[0].message.content, r.choices[0])

    r = client.chat.completions.create(model=model, messages=messages, n=2, seed=7, max_tokens=6)
    check("chat n=2", [c.index for c in r.choices] == [0, 1], r.choices)

    c = client.completions.create(model=model, prompt="The capital of France is", temperature=0, max_tokens=8)
    check("completions.create", c.object == "text_completion" and c.id.startswith("cmpl-")
          and c.choices[0].text and c.usage.prompt_tokens == 5 and c.usage.completion_tokens == 8
          and c.choices[0].finish_reason == "length", c)
    streamed = list(client.completions.create(model=model, prompt="The capital of France is",
                                              temperature=0, max_tokens=8, stream=True))
    text = "".join(s.choices[0].text for s in streamed if s.choices)
    check("completions stream", text == c.choices[0].text, (text, c.choices[0].text))
    c = client.completions.create(model=model, prompt=["1, 2, 3,", "a, b, c,"], temperature=0,
                                  max_tokens=4, logprobs=1)
    lps = c.choices[1].logprobs
    check("completions prompt list + logprobs", len(c.choices) == 2 and len(lps.tokens) == 4
          and all(lp <= 0 for lp in lps.token_logprobs) and len(lps.top_logprobs[0]) == 1
          and lps.text_offset[0] == 0, c)

    c = client.completions.create(model=model, prompt="The capital of France is", temperature=0,
                                  max_tokens=16, stop=["\n"], user="tester")
    check("completions stop string", c.choices[0].finish_reason == "stop" and "\n" not in c.choices[0].text
          and c.choices[0].text, c.choices[0])

    bad = openai.BadRequestError
    expect_error("max_tokens=0 -> BadRequestError", bad, lambda: client.chat.completions.create(
        model=model, messages=messages, max_tokens=0))
    expect_error("tools -> BadRequestError", bad, lambda: client.chat.completions.create(
        model=model, messages=messages, tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]))
    expect_error("empty messages -> BadRequestError", bad, lambda: client.chat.completions.create(
        model=model, messages=[]))
    expect_error("json response_format -> BadRequestError", bad, lambda: client.chat.completions.create(
        model=model, messages=messages, response_format={"type": "json_object"}))
    expect_error("empty prompt -> BadRequestError", bad, lambda: client.completions.create(
        model=model, prompt=""))
    expect_error("unknown model -> NotFoundError", openai.NotFoundError,
                 lambda: client.chat.completions.create(model="no-such-model", messages=messages))
    print("all checks passed")


if __name__ == "__main__":
    main()
