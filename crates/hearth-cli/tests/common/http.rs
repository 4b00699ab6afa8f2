//! Plain HTTP helpers for the server tests.

use serde_json::{json, Value};

use super::TestServer;

/// POSTs `body` as JSON; the status and the JSON answer.
pub fn post(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::blocking::Client::new()
        .post(server.url(path))
        .json(&body)
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap())
}

/// POSTs a streaming request and checks the SSE framing: `text/event-stream`, every event a
/// single `data: ` line ended by a blank line (comments aside), `[DONE]` last. Returns the
/// JSON chunks before `[DONE]`.
pub fn post_sse(server: &TestServer, path: &str, body: Value) -> Vec<Value> {
    let r = reqwest::blocking::Client::new()
        .post(server.url(path))
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let ctype = r.headers()["content-type"].to_str().unwrap().to_string();
    assert_eq!(ctype, "text/event-stream");
    let text = r.text().unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let events: Vec<&str> = text
        .strip_suffix("\n\n")
        .unwrap()
        .split("\n\n")
        .filter(|e| !e.starts_with(':'))
        .collect();
    let (done, chunks) = events.split_last().unwrap();
    assert_eq!(*done, "data: [DONE]");
    chunks
        .iter()
        .map(|e| {
            assert!(!e.contains('\n'), "one line per event: {e:?}");
            let data = e.strip_prefix("data: ").unwrap_or_else(|| panic!("{e:?}"));
            let chunk: Value = serde_json::from_str(data).unwrap();
            assert!(chunk.get("error").is_none(), "{chunk}");
            chunk
        })
        .collect()
}

/// OpenAI's error shape: `{"error": {message, type, param, code}}`.
pub fn check_openai_error(e: &Value, status: u16, param: Option<&str>, says: &str, body: &Value) {
    let err = &e["error"];
    let message = err["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}: {e}"));
    assert!(message.contains(says), "{body}: {message:?} lacks {says:?}");
    let kind = if status == 404 {
        "not_found_error"
    } else {
        "invalid_request_error"
    };
    assert_eq!(err["type"], kind, "{body}");
    if let Some(p) = param {
        assert_eq!(err["param"], p, "{body}: {message}");
    }
    let code = if status == 404 {
        json!("model_not_found")
    } else {
        Value::Null
    };
    assert_eq!(err["code"], code, "{body}");
    assert_eq!(err.as_object().unwrap().len(), 4, "{e}");
}
