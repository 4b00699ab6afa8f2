//! `POST /v1/completions` (the legacy text completion API).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_tokenizer::Tokenizer;
use serde_json::{json, Value};

use super::fields::{as_integer, wrong_type, Body};
use super::jobs::{collect_all, submit_all, Head, Usage};
use super::logprobs;
use super::options::{not_supported, read_options};
use super::stream::{sse, ChoiceWriter, StreamRequest};
use crate::app::AppState;
use crate::error::ApiError;
use crate::generation::log_generation;
use crate::runner::Chunk;

const ENDPOINT: &str = "/v1/completions";
/// OpenAI's limit on the completions `logprobs` count.
const MAX_LOGPROBS: i128 = 5;

/// One prompt as the request gave it.
#[derive(Clone, Debug, PartialEq)]
enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// The handler.
pub async fn completions(State(state): State<AppState>, body: Bytes) -> Response {
    match handle(state, &body).await {
        Ok(r) => r,
        Err(e) => e.into_openai(),
    }
}

async fn handle(state: AppState, body: &[u8]) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let body = Body::parse(body)?;
    let opts = read_options(&body)?;
    let inputs = read_prompts(&body)?;
    let logprobs = body
        .integer_in("logprobs", 0, MAX_LOGPROBS)?
        .map(|n| n as usize);
    let echo = body.bool("echo")?.unwrap_or(false);
    reject_unsupported(&body, opts.n, echo && logprobs.is_some())?;
    let runner = state.models.get(&opts.model, None).await?;
    let tokenizer = runner.prompt().tokenizer.clone();
    let mut prompts = Vec::with_capacity(inputs.len());
    let mut echoes = Vec::with_capacity(inputs.len());
    for input in &inputs {
        let (ids, text) = tokenize(&runner, &tokenizer, input)?;
        prompts.push(ids);
        echoes.push(if echo { text } else { String::new() });
    }
    let receivers = submit_all(&runner, &prompts, &opts, logprobs, arrived)?;
    let head = Head::new("cmpl-", runner.name());
    let n = opts.n;
    if opts.stream {
        let writer = CompletionWriter {
            tokenizer,
            echoes,
            n,
            offsets: vec![0; receivers.len()],
        };
        let request = StreamRequest {
            head,
            endpoint: ENDPOINT,
            include_usage: opts.include_usage,
            n_prompts: prompts.len(),
            n,
            runner: Some(runner),
        };
        return Ok(sse(receivers, writer, request));
    }
    let results = collect_all(receivers).await?;
    let mut usage = Usage::new(prompts.len(), n);
    let mut choices = Vec::with_capacity(results.len());
    for (index, (out, summary)) in results.into_iter().enumerate() {
        log_generation(&head.id, ENDPOINT, &head.model, &summary);
        usage.add(index, &summary);
        let echo = echoes.get(index / n).map_or("", String::as_str);
        let mut offset = echo.chars().count();
        let lp = match logprobs {
            Some(_) => logprobs::completion(&tokenizer, &out.logprobs, &mut offset),
            None => Value::Null,
        };
        choices.push(json!({
            "index": index,
            "text": format!("{echo}{}", out.text),
            "logprobs": lp,
            "finish_reason": summary.finish.as_str(),
        }));
    }
    let mut response = head.object("text_completion");
    response.insert("choices".into(), choices.into());
    response.insert("usage".into(), usage.to_json());
    Ok(Json(Value::Object(response)).into_response())
}

/// The prompt's token ids and its text (for `echo`).
fn tokenize(
    runner: &crate::runner::RunnerHandle,
    tokenizer: &Tokenizer,
    input: &PromptInput,
) -> Result<(Vec<u32>, String), ApiError> {
    match input {
        PromptInput::Text(text) => {
            let ids = runner
                .prompt()
                .raw(text)
                .map_err(|e| ApiError::bad_field("prompt", e.to_string()))?;
            Ok((ids, text.clone()))
        }
        PromptInput::Tokens(ids) => {
            let vocab = tokenizer.vocab_size();
            if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
                return Err(ApiError::bad_field(
                    "prompt",
                    format!("`prompt` holds token id {bad}, but this model's vocabulary has {vocab} tokens"),
                ));
            }
            Ok((ids.clone(), tokenizer.decode(ids)))
        }
    }
}

/// `suffix` (insertion) and `best_of` other than `n` are refused; so is `echo` with
/// `logprobs`, which would need the prompt's log-probabilities.
fn reject_unsupported(body: &Body, n: usize, echo_logprobs: bool) -> Result<(), ApiError> {
    if body.string("suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(not_supported("suffix", "`suffix` (text insertion)"));
    }
    if let Some(b) = body.integer("best_of")? {
        if b != n as i128 && b != 1 {
            return Err(not_supported("best_of", "`best_of` other than `n`"));
        }
    }
    if echo_logprobs {
        return Err(not_supported(
            "echo",
            "`echo` together with `logprobs` (log-probabilities of the prompt)",
        ));
    }
    Ok(())
}

/// `prompt`: a string, a list of strings, a list of token ids, or a list of such lists.
fn read_prompts(body: &Body) -> Result<Vec<PromptInput>, ApiError> {
    let expected = "a string, a list of strings, or token ids";
    let prompts = match body.get("prompt") {
        None => return Err(ApiError::bad_field("prompt", "`prompt` is required")),
        Some(Value::String(s)) => vec![PromptInput::Text(s.clone())],
        Some(Value::Array(items)) if items.first().is_some_and(Value::is_number) => {
            vec![PromptInput::Tokens(token_ids(items)?)]
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(PromptInput::Text(s.clone())),
                Value::Array(ids) => Ok(PromptInput::Tokens(token_ids(ids)?)),
                other => Err(wrong_type("prompt", expected, other)),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(wrong_type("prompt", expected, v)),
    };
    let empty = |p: &PromptInput| match p {
        PromptInput::Text(s) => s.is_empty(),
        PromptInput::Tokens(ids) => ids.is_empty(),
    };
    if prompts.is_empty() || prompts.iter().any(empty) {
        return Err(ApiError::bad_field("prompt", "`prompt` is empty"));
    }
    Ok(prompts)
}

fn token_ids(items: &[Value]) -> Result<Vec<u32>, ApiError> {
    items
        .iter()
        .map(|v| {
            as_integer(v)
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| wrong_type("prompt", "token ids (integers >= 0)", v))
        })
        .collect()
}

/// Streamed completion choices: the echoed prompt first (when asked for), then text.
struct CompletionWriter {
    tokenizer: Arc<Tokenizer>,
    /// Per prompt: the text to echo ("" without `echo`).
    echoes: Vec<String>,
    n: usize,
    /// Per choice: characters sent so far, for `text_offset`.
    offsets: Vec<usize>,
}

impl ChoiceWriter for CompletionWriter {
    const OBJECT: &'static str = "text_completion";

    fn start(&mut self, index: usize) -> Option<Value> {
        let echo = self.echoes.get(index / self.n).filter(|e| !e.is_empty())?;
        if let Some(o) = self.offsets.get_mut(index) {
            *o = echo.chars().count();
        }
        Some(json!({"index": index, "text": echo, "logprobs": null, "finish_reason": null}))
    }

    fn chunk(&mut self, index: usize, chunk: Chunk) -> Option<Value> {
        if chunk.text.is_empty() && chunk.logprobs.is_empty() {
            return None;
        }
        let lp = match self.offsets.get_mut(index) {
            Some(offset) if !chunk.logprobs.is_empty() => {
                logprobs::completion(&self.tokenizer, &chunk.logprobs, offset)
            }
            _ => Value::Null,
        };
        Some(json!({"index": index, "text": chunk.text, "logprobs": lp, "finish_reason": null}))
    }

    fn finish(&mut self, index: usize, reason: &str) -> Value {
        json!({"index": index, "text": "", "logprobs": null, "finish_reason": reason})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompts(json: &str) -> Result<Vec<PromptInput>, ApiError> {
        read_prompts(&Body::parse(json.as_bytes()).unwrap())
    }

    #[test]
    fn every_prompt_shape_is_read() {
        use PromptInput::{Text, Tokens};
        assert_eq!(
            prompts(r#"{"prompt": "a"}"#).unwrap(),
            vec![Text("a".into())]
        );
        assert_eq!(
            prompts(r#"{"prompt": ["a", "b"]}"#).unwrap(),
            vec![Text("a".into()), Text("b".into())]
        );
        assert_eq!(
            prompts(r#"{"prompt": [1, 2]}"#).unwrap(),
            vec![Tokens(vec![1, 2])]
        );
        assert_eq!(
            prompts(r#"{"prompt": [[1], [2, 3]]}"#).unwrap(),
            vec![Tokens(vec![1]), Tokens(vec![2, 3])]
        );
    }

    #[test]
    fn empty_or_malformed_prompts_are_refused() {
        for json in [
            r#"{}"#,
            r#"{"prompt": ""}"#,
            r#"{"prompt": []}"#,
            r#"{"prompt": ["a", ""]}"#,
            r#"{"prompt": [[]]}"#,
            r#"{"prompt": [1, -2]}"#,
            r#"{"prompt": [1, "a"]}"#,
            r#"{"prompt": 5}"#,
        ] {
            let e = prompts(json).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("prompt"), "{json}");
        }
    }
}
