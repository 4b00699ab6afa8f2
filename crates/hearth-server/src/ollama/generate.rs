//! `POST /api/generate`: a completion of `prompt` (through the chat template unless `raw`),
//! optionally continuing an earlier reply's `context`.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_tokenizer::ChatMessage;
use serde_json::Value;

use super::body::{kind, Body};
use super::lines::Line;
use super::options::RequestOptions;
use super::stream::{self, Api, Job};
use crate::app::AppState;
use crate::error::{ApiError, OllamaError};
use crate::models::KeepAlive;
use crate::runner::RunnerHandle;

pub async fn generate(
    State(state): State<AppState>,
    bytes: Bytes,
) -> Result<Response, OllamaError> {
    let started = Instant::now();
    let body = Body::parse(&bytes)?;
    let model = body.model()?;
    body.refuse_unsupported()?;
    let stream = body.stream()?;
    let keep_alive = body.keep_alive()?;
    let options = RequestOptions::parse(body.get("options"))?;
    let prompt = body.str("prompt")?.unwrap_or("");
    let system = body.str("system")?.filter(|s| !s.is_empty());
    let raw = body.bool("raw")?.unwrap_or(false);
    let context = context_ids(body.get("context"))?;
    if prompt.is_empty() {
        return Ok(load_or_unload(&state, Api::Generate, &model, keep_alive).await?);
    }
    let runner = state.models.get(&model, keep_alive).await?;
    let load_duration = started.elapsed();
    let system = if raw { None } else { system };
    let prompt = prompt_tokens(&runner, prompt, system, raw, &context)?;
    let job = Job {
        api: Api::Generate,
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

/// A request with nothing to generate loads the model, or with `keep_alive: 0` unloads it;
/// the reply says which in `done_reason`.
pub async fn load_or_unload(
    state: &AppState,
    api: Api,
    model: &str,
    keep_alive: Option<KeepAlive>,
) -> Result<Response, ApiError> {
    if state.models.resolve(model).is_none() {
        return Err(ApiError::model_not_found(model));
    }
    if keep_alive == Some(KeepAlive::For(std::time::Duration::ZERO)) {
        state.models.unload(model).await;
        return Ok(Json(Line::status(api, model, "unload")).into_response());
    }
    state.models.get(model, keep_alive).await?;
    Ok(Json(Line::status(api, model, "load")).into_response())
}

/// `context`: token ids an earlier reply returned.
fn context_ids(v: Option<&Value>) -> Result<Vec<u32>, ApiError> {
    let bad = |what: String| ApiError::bad_field("context", what);
    match v {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or_else(|| bad(format!("context[{i}] must be a token id, not {item}")))
            })
            .collect(),
        Some(other) => Err(bad(format!(
            "context must be a list of token ids, not {}",
            kind(other)
        ))),
    }
}

/// The prompt's token ids: `context`, then `prompt` (raw, or as a user message after the
/// optional system message through the model's chat template).
fn prompt_tokens(
    runner: &RunnerHandle,
    prompt: &str,
    system: Option<&str>,
    raw: bool,
    context: &[u32],
) -> Result<Vec<u32>, ApiError> {
    let builder = runner.prompt();
    let n_vocab = builder.tokenizer.vocab_size();
    if let Some((i, id)) = context
        .iter()
        .enumerate()
        .find(|(_, id)| **id as usize >= n_vocab)
    {
        return Err(ApiError::bad_field(
            "context",
            format!(
                "context[{i}] = {id} is not a token of this model (its vocabulary has {n_vocab})"
            ),
        ));
    }
    let new = if raw {
        builder.raw(prompt)
    } else if builder.template_name().is_none() {
        return Err(no_template(runner.name()));
    } else {
        let mut messages = Vec::with_capacity(2);
        if let Some(system) = system {
            messages.push(ChatMessage::new("system", system));
        }
        messages.push(ChatMessage::new("user", prompt));
        builder.chat(&messages)
    }
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if context.is_empty() {
        return Ok(new);
    }
    // NOTE: a continuation is not a new sequence, so it gets no second BOS.
    let bos = builder.tokenizer.bos_id();
    let skip = usize::from(bos.is_some() && new.first().copied() == bos);
    Ok(context.iter().chain(&new[skip..]).copied().collect())
}

/// 400 for a chat-formatted request to a model without a chat template.
pub fn no_template(model: &str) -> ApiError {
    ApiError::bad_request(format!(
        "model '{model}' has no chat template: send a prompt already formatted with raw: true \
         to /api/generate, or start the server with --template chatml|llama3|gemma|mistral"
    ))
}
