//! The OpenAI-compatible API's answers to bad requests: the right status, OpenAI's error
//! shape naming the field at fault, and a server that goes on serving.

mod common;

use common::http::{check_openai_error as check_error, post};
use common::{smollm2, TestServer};
use serde_json::{json, Value};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

fn server() -> TestServer {
    TestServer::start(&[smollm2().to_str().unwrap(), "--ctx-size", "512"])
}

#[test]
fn bad_requests_get_openai_errors_and_the_server_goes_on() {
    let server = server();
    for (path, body, status, param, says) in bad_requests() {
        let r = reqwest::blocking::Client::new()
            .post(server.url(path))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{path} {body}");
        let e: Value = r.json().unwrap();
        check_error(&e, status, param, says, &body);
    }
    for (raw, says) in [("{\"model\": ", "malformed JSON"), ("", "body is empty")] {
        for path in ["/v1/chat/completions", "/v1/completions"] {
            let r = reqwest::blocking::Client::new()
                .post(server.url(path))
                .body(raw)
                .send()
                .unwrap();
            assert_eq!(r.status(), 400);
            check_error(&r.json().unwrap(), 400, None, says, &json!(raw));
        }
    }
    let (status, r) = post(
        &server,
        "/v1/chat/completions",
        json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    );
    assert_eq!(status, 200, "{r}");
}

#[test]
fn huge_max_tokens_is_capped_to_the_context() {
    let server = server();
    let prompt = vec![1u32; 500];
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 1_000_000_000u64,
                      "temperature": 0, "stop": ["zzzz"]});
    let (status, r) = post(&server, "/v1/completions", body);
    assert_eq!(status, 200, "{r}");
    let n = r["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(n <= 12, "{n} tokens generated past a 512-token context");
    if n == 12 {
        assert_eq!(r["choices"][0]["finish_reason"], "length");
    }
}

/// Bad requests: (path, body, status, param, words the message must contain).
fn bad_requests() -> Vec<(&'static str, Value, u16, Option<&'static str>, &'static str)> {
    let chat = "/v1/chat/completions";
    let cmpl = "/v1/completions";
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let with = |extra: Value| {
        let mut b = json!({"model": MODEL, "messages": msgs});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let prompt = |extra: Value| {
        let mut b = json!({"model": MODEL, "prompt": "hi"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let long_prompt = "word ".repeat(600);
    vec![
        (chat, json!("not an object"), 400, None, "JSON object"),
        (
            chat,
            json!({"model": MODEL}),
            400,
            Some("messages"),
            "required",
        ),
        (
            chat,
            json!({"model": MODEL, "messages": []}),
            400,
            Some("messages"),
            "at least one",
        ),
        (
            chat,
            with(json!({"model": "nope"})),
            404,
            Some("model"),
            "'nope' not found",
        ),
        (
            chat,
            with(json!({"max_tokens": 0})),
            400,
            Some("max_tokens"),
            "from 1",
        ),
        (
            chat,
            with(json!({"max_tokens": -5})),
            400,
            Some("max_tokens"),
            "from 1",
        ),
        (
            chat,
            with(json!({"max_tokens": 2.5})),
            400,
            Some("max_tokens"),
            "an integer",
        ),
        (
            chat,
            with(json!({"max_completion_tokens": "9"})),
            400,
            Some("max_completion_tokens"),
            "an integer",
        ),
        (chat, with(json!({"n": 0})), 400, Some("n"), "from 1 to 16"),
        (chat, with(json!({"n": 17})), 400, Some("n"), "from 1 to 16"),
        (
            chat,
            with(json!({"temperature": -1})),
            400,
            Some("temperature"),
            "temperature",
        ),
        (chat, with(json!({"top_p": 0})), 400, Some("top_p"), "top_p"),
        (
            chat,
            with(json!({"stop": ["a", "b", "c", "d", "e"]})),
            400,
            Some("stop"),
            "at most 4",
        ),
        (
            chat,
            with(json!({"stop": ""})),
            400,
            Some("stop"),
            "must not be empty",
        ),
        (
            chat,
            with(json!({"top_logprobs": 2})),
            400,
            Some("top_logprobs"),
            "logprobs",
        ),
        (
            chat,
            with(json!({"logprobs": true, "top_logprobs": 21})),
            400,
            Some("top_logprobs"),
            "0 to 20",
        ),
        (
            chat,
            with(json!({"tools": [{"type": "function", "function": {"name": "f"}}]})),
            400,
            Some("tools"),
            "not supported",
        ),
        (
            chat,
            with(json!({"tool_choice": "required"})),
            400,
            Some("tool_choice"),
            "not supported",
        ),
        (
            chat,
            with(json!({"response_format": {"type": "json_object"}})),
            400,
            Some("response_format"),
            "not supported",
        ),
        (
            chat,
            with(json!({"logit_bias": {"1": 5}})),
            400,
            Some("logit_bias"),
            "not supported",
        ),
        (
            chat,
            with(
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            ),
            400,
            Some("messages[0].content[0]"),
            "\"image_url\" (only \"text\") is not supported",
        ),
        (
            cmpl,
            json!({"model": MODEL}),
            400,
            Some("prompt"),
            "required",
        ),
        (
            cmpl,
            prompt(json!({"prompt": ""})),
            400,
            Some("prompt"),
            "empty",
        ),
        (
            cmpl,
            prompt(json!({"prompt": [[]]})),
            400,
            Some("prompt"),
            "empty",
        ),
        (
            cmpl,
            prompt(json!({"prompt": [99_999_999]})),
            400,
            Some("prompt"),
            "vocabulary",
        ),
        (
            cmpl,
            prompt(json!({"prompt": long_prompt})),
            400,
            None,
            "context holds 512",
        ),
        (
            cmpl,
            prompt(json!({"logprobs": 6})),
            400,
            Some("logprobs"),
            "0 to 5",
        ),
        (
            cmpl,
            prompt(json!({"suffix": "end"})),
            400,
            Some("suffix"),
            "not supported",
        ),
        (
            cmpl,
            prompt(json!({"model": "nope"})),
            404,
            Some("model"),
            "not found",
        ),
    ]
}
