//! `POST /api/chat`: the next assistant message of a conversation, through the model's chat
//! template.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use hearth_tokenizer::ChatMessage;
use serde_json::Value;

use super::body::{kind, non_empty, Body};
use super::generate::{load_or_unload, no_template};
use super::options::RequestOptions;
use super::stream::{self, Api, Job};
use crate::app::AppState;
use crate::error::{ApiError, OllamaError};

pub async fn chat(State(state): State<AppState>, bytes: Bytes) -> Result<Response, OllamaError> {
    let started = Instant::now();
    let body = Body::parse(&bytes)?;
    let model = body.model()?;
    body.refuse_unsupported()?;
    let stream = body.stream()?;
    let keep_alive = body.keep_alive()?;
    let options = RequestOptions::parse(body.get("options"))?;
    let mut messages = messages(body.get("messages"))?;
    if messages.is_empty() {
        return Ok(load_or_unload(&state, Api::Chat, &model, keep_alive).await?);
    }
    // NOTE: a top-level `system` only fills in for a conversation that has none.
    if let Some(system) = body.str("system")?.filter(|s| !s.is_empty()) {
        if !messages.iter().any(|m| m.role == "system") {
            messages.insert(0, ChatMessage::new("system", system));
        }
    }
    let runner = state.models.get(&model, keep_alive).await?;
    let load_duration = started.elapsed();
    if runner.prompt().template_name().is_none() {
        return Err(no_template(runner.name()).into());
    }
    let prompt = runner
        .prompt()
        .chat(&messages)
        .map_err(|e| ApiError::bad_field("messages", e.to_string()))?;
    let job = Job {
        api: Api::Chat,
        model,
        runner,
        prompt,
        options,
        stream,
        started,
        load_duration,
    };
    Ok(stream::run(job).await?)
}

/// `messages`: `[{role, content}]`; images and tool calls are refused (not supported yet).
fn messages(v: Option<&Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let bad = |message: String| ApiError::bad_field("messages", message);
    let items = match v {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(bad(format!(
                "messages must be a list of messages, not {}",
                kind(other)
            )))
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Object(m) = item else {
                return Err(bad(format!(
                    "messages[{i}] must be an object with role and content, not {}",
                    kind(item)
                )));
            };
            let role = match m.get("role") {
                Some(Value::String(r)) if !r.is_empty() => r.clone(),
                Some(Value::String(_)) | None | Some(Value::Null) => {
                    return Err(bad(format!("messages[{i}].role is required")))
                }
                Some(other) => {
                    return Err(bad(format!(
                        "messages[{i}].role must be a string, not {}",
                        kind(other)
                    )))
                }
            };
            let content = match m.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(c)) => c.clone(),
                Some(other) => {
                    return Err(bad(format!(
                        "messages[{i}].content must be a string, not {}",
                        kind(other)
                    )))
                }
            };
            for (field, what) in [("images", "images"), ("tool_calls", "tool calls")] {
                if non_empty(m.get(field)) {
                    return Err(bad(format!(
                        "messages[{i}].{field}: {what} are not supported yet"
                    )));
                }
            }
            Ok(ChatMessage::new(role, content))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_are_read_and_checked() {
        let m = messages(Some(&json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi", "images": null},
            {"role": "assistant", "content": null}
        ])))
        .unwrap();
        assert_eq!(
            m,
            [
                ChatMessage::new("system", "be brief"),
                ChatMessage::new("user", "hi"),
                ChatMessage::new("assistant", "")
            ]
        );
        for (v, text) in [
            (json!("hi"), "must be a list of messages, not a string"),
            (json!([1]), "messages[0] must be an object"),
            (json!([{"content": "x"}]), "messages[0].role is required"),
            (
                json!([{"role": "user", "content": ["x"]}]),
                "messages[0].content must be a string",
            ),
            (
                json!([{"role": "user", "content": "x", "images": ["aGk="]}]),
                "images are not supported",
            ),
        ] {
            let e = messages(Some(&v)).unwrap_err();
            assert!(e.message.contains(text), "{v}: {}", e.message);
            assert_eq!(e.param.as_deref(), Some("messages"));
        }
    }
}
