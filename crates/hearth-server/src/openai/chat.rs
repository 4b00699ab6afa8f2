//! `POST /v1/chat/completions`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_tokenizer::{ChatMessage, Tokenizer};
use serde_json::{json, Value};

use super::fields::{kind, wrong_type, Body};
use super::jobs::{collect_all, submit_all, Head, Usage};
use super::logprobs;
use super::options::{not_supported, read_options};
use super::stream::{sse, ChoiceWriter, StreamRequest};
use crate::app::AppState;
use crate::error::ApiError;
use crate::generation::log_generation;
use crate::runner::Chunk;

const ENDPOINT: &str = "/v1/chat/completions";
/// OpenAI's limit on `top_logprobs`.
const MAX_TOP_LOGPROBS: i128 = 20;

/// The handler.
pub async fn chat_completions(State(state): State<AppState>, body: Bytes) -> Response {
    match handle(state, &body).await {
        Ok(r) => r,
        Err(e) => e.into_openai(),
    }
}

async fn handle(state: AppState, body: &[u8]) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let body = Body::parse(body)?;
    let opts = read_options(&body)?;
    let messages = read_messages(&body)?;
    let logprobs = read_logprobs(&body)?;
    let runner = state.models.get(&opts.model, None).await?;
    let prompt = runner
        .prompt()
        .chat(&messages)
        .map_err(|e| ApiError::bad_field("messages", e.to_string()))?;
    let receivers = submit_all(&runner, &[prompt], &opts, logprobs, arrived)?;
    let head = Head::new("chatcmpl-", runner.name());
    let tokenizer = runner.prompt().tokenizer.clone();
    if opts.stream {
        let request = StreamRequest {
            head,
            endpoint: ENDPOINT,
            include_usage: opts.include_usage,
            n_prompts: 1,
            n: opts.n,
            runner: Some(runner),
        };
        return Ok(sse(receivers, ChatWriter { tokenizer }, request));
    }
    let results = collect_all(receivers).await?;
    let mut usage = Usage::new(1, opts.n);
    let mut choices = Vec::with_capacity(results.len());
    for (index, (out, summary)) in results.into_iter().enumerate() {
        log_generation(&head.id, ENDPOINT, &head.model, &summary);
        usage.add(index, &summary);
        let lp = match logprobs {
            Some(_) => logprobs::chat(&tokenizer, &out.logprobs),
            None => Value::Null,
        };
        choices.push(json!({
            "index": index,
            "message": {"role": "assistant", "content": out.text},
            "logprobs": lp,
            "finish_reason": summary.finish.as_str(),
        }));
    }
    let mut response = head.object("chat.completion");
    response.insert("choices".into(), choices.into());
    response.insert("usage".into(), usage.to_json());
    Ok(Json(Value::Object(response)).into_response())
}

/// Streamed chat choices: a role delta, content deltas, an empty delta with the reason.
struct ChatWriter {
    tokenizer: Arc<Tokenizer>,
}

impl ChoiceWriter for ChatWriter {
    const OBJECT: &'static str = "chat.completion.chunk";

    fn start(&mut self, index: usize) -> Option<Value> {
        Some(json!({
            "index": index,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": null,
            "finish_reason": null,
        }))
    }

    fn chunk(&mut self, index: usize, chunk: Chunk) -> Option<Value> {
        if chunk.text.is_empty() && chunk.logprobs.is_empty() {
            return None;
        }
        let lp = if chunk.logprobs.is_empty() {
            Value::Null
        } else {
            logprobs::chat(&self.tokenizer, &chunk.logprobs)
        };
        Some(json!({
            "index": index,
            "delta": {"content": chunk.text},
            "logprobs": lp,
            "finish_reason": null,
        }))
    }

    fn finish(&mut self, index: usize, reason: &str) -> Value {
        json!({"index": index, "delta": {}, "logprobs": null, "finish_reason": reason})
    }
}

/// `logprobs` (bool) and `top_logprobs` (0..=20, only with `logprobs: true`).
fn read_logprobs(body: &Body) -> Result<Option<usize>, ApiError> {
    let on = body.bool("logprobs")?.unwrap_or(false);
    let top = body.integer_in("top_logprobs", 0, MAX_TOP_LOGPROBS)?;
    match (on, top) {
        (false, Some(_)) => Err(ApiError::bad_field(
            "top_logprobs",
            "`top_logprobs` needs `logprobs: true`",
        )),
        (false, None) => Ok(None),
        (true, top) => Ok(Some(top.map_or(0, |t| t as usize))),
    }
}

/// `messages`: a non-empty list of `{role, content}`; content a string or text parts.
fn read_messages(body: &Body) -> Result<Vec<ChatMessage>, ApiError> {
    let list = match body.get("messages") {
        None => {
            return Err(ApiError::bad_field(
                "messages",
                "`messages` is required: a non-empty list of {\"role\", \"content\"} objects",
            ))
        }
        Some(Value::Array(list)) => list,
        Some(v) => return Err(wrong_type("messages", "a list of messages", v)),
    };
    if list.is_empty() {
        return Err(ApiError::bad_field(
            "messages",
            "`messages` must hold at least one message",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| read_message(i, m))
        .collect()
}

fn read_message(i: usize, m: &Value) -> Result<ChatMessage, ApiError> {
    let field = |name: &str| format!("messages[{i}].{name}");
    let Value::Object(m) = m else {
        return Err(wrong_type(&format!("messages[{i}]"), "an object", m));
    };
    let role = match m.get("role") {
        Some(Value::String(r)) => r.as_str(),
        Some(v) => return Err(wrong_type(&field("role"), "a string", v)),
        None => {
            return Err(ApiError::bad_field(
                &field("role"),
                format!("`{}` is required", field("role")),
            ))
        }
    };
    let role = match role {
        "system" | "user" | "assistant" | "tool" => role,
        // NOTE: OpenAI's newer name for system instructions; templates know only "system".
        "developer" => "system",
        other => {
            return Err(ApiError::bad_field(
                &field("role"),
                format!(
                    "`{}` {other:?} is not one of system, developer, user, assistant, tool",
                    field("role")
                ),
            ))
        }
    };
    if m.get("tool_calls")
        .is_some_and(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()))
    {
        return Err(not_supported(
            &field("tool_calls"),
            "`tool_calls` in messages (tool calling)",
        ));
    }
    let content = match m.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => read_parts(&field("content"), parts)?,
        Some(v) => {
            return Err(wrong_type(
                &field("content"),
                "a string or a list of content parts",
                v,
            ))
        }
    };
    Ok(ChatMessage::new(role, content))
}

/// Text parts joined by newlines; any other part type is refused.
fn read_parts(field: &str, parts: &[Value]) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let here = format!("{field}[{j}]");
        match part.get("type").and_then(Value::as_str) {
            Some("text") => match part.get("text") {
                Some(Value::String(t)) => texts.push(t.as_str()),
                Some(v) => return Err(wrong_type(&format!("{here}.text"), "a string", v)),
                None => {
                    return Err(ApiError::bad_field(
                        &here,
                        format!("`{here}.text` is required"),
                    ))
                }
            },
            Some(other) => {
                return Err(not_supported(
                    &here,
                    &format!("content part type {other:?} (only \"text\")"),
                ))
            }
            None => {
                let got = part.get("type").map_or_else(|| "nothing".into(), kind);
                return Err(ApiError::bad_field(
                    &here,
                    format!("`{here}.type` must be a string such as \"text\", got {got}"),
                ));
            }
        }
    }
    Ok(texts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(json: &str) -> Result<Vec<ChatMessage>, ApiError> {
        read_messages(&Body::parse(json.as_bytes()).unwrap())
    }

    #[test]
    fn content_may_be_a_string_or_text_parts() {
        let m = messages(
            r#"{"messages": [{"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": null}]}"#,
        )
        .unwrap();
        assert_eq!(
            m,
            vec![
                ChatMessage::new("system", "be brief"),
                ChatMessage::new("user", "a\nb"),
                ChatMessage::new("assistant", ""),
            ]
        );
    }

    #[test]
    fn bad_messages_name_the_place() {
        for (json, param, says) in [
            (r#"{}"#, "messages", "is required"),
            (r#"{"messages": []}"#, "messages", "at least one"),
            (r#"{"messages": "hi"}"#, "messages", "must be a list"),
            (
                r#"{"messages": [{"content": "x"}]}"#,
                "messages[0].role",
                "is required",
            ),
            (
                r#"{"messages": [{"role": "robot", "content": "x"}]}"#,
                "messages[0].role",
                "not one of",
            ),
            (
                r#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}"#,
                "messages[0].content[0]",
                "\"image_url\" (only \"text\") is not supported",
            ),
            (
                r#"{"messages": [{"role": "user", "content": 5}]}"#,
                "messages[0].content",
                "must be a string",
            ),
        ] {
            let e = messages(json).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{json}");
            assert!(e.message.contains(says), "{json}: {}", e.message);
        }
    }

    #[test]
    fn top_logprobs_needs_logprobs() {
        let read = |j: &str| read_logprobs(&Body::parse(j.as_bytes()).unwrap());
        assert_eq!(read(r#"{}"#).unwrap(), None);
        assert_eq!(read(r#"{"logprobs": true}"#).unwrap(), Some(0));
        assert_eq!(
            read(r#"{"logprobs": true, "top_logprobs": 3}"#).unwrap(),
            Some(3)
        );
        assert!(read(r#"{"top_logprobs": 3}"#).is_err());
        assert!(read(r#"{"logprobs": true, "top_logprobs": 21}"#).is_err());
    }
}
