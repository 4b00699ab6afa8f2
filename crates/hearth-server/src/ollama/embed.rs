//! Ollama's `POST /api/embed` (`input`: a string or a list; `truncate`; `dimensions`) and
//! the legacy `POST /api/embeddings` (`prompt` → `{"embedding": [...]}`).

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::body::{wrong_type, Body};
use crate::app::AppState;
use crate::embedding::{read_dimensions, read_inputs, shorten, EmbeddingHandle};
use crate::error::{ApiError, OllamaError};

/// `options` is accepted as Ollama's clients send it; none of its settings changes how an
/// embedding is computed here, so it must only be an object.
fn check_options(body: &Body) -> Result<(), ApiError> {
    match body.get("options") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(other) => Err(wrong_type("options", "an object", other)),
    }
}

/// The embedding model and how long loading it took (0 when it was loaded already).
async fn embedder(
    state: &AppState,
    body: &Body,
) -> Result<(String, std::sync::Arc<EmbeddingHandle>, u128), ApiError> {
    let model = body.model()?;
    let keep_alive = body.keep_alive()?;
    check_options(body)?;
    let was_loaded = state.models.is_loaded(&model).await;
    let start = Instant::now();
    let handle = state.models.get_embedder(&model, keep_alive).await?;
    let load_ns = if was_loaded {
        0
    } else {
        start.elapsed().as_nanos()
    };
    Ok((model, handle, load_ns))
}

pub async fn embed(State(state): State<AppState>, bytes: Bytes) -> Result<Response, OllamaError> {
    let started = Instant::now();
    let body = Body::parse(&bytes)?;
    let truncate = body.bool("truncate")?.unwrap_or(true);
    let (model, handle, load_ns) = embedder(&state, &body).await?;
    let dims = read_dimensions(body.get("dimensions"), handle.info().n_embd)?;
    let inputs = read_inputs(body.get("input"), "input", false)?;
    let ids = handle.tokenize(&inputs, truncate, "input")?;
    let n_tokens: usize = ids.iter().map(Vec::len).sum();
    let mut vectors = handle.embed(ids).await?;
    shorten(&mut vectors, dims);
    Ok(Json(json!({
        "model": model,
        "embeddings": vectors,
        "total_duration": started.elapsed().as_nanos() as u64,
        "load_duration": load_ns as u64,
        "prompt_eval_count": n_tokens,
    }))
    .into_response())
}

/// The legacy endpoint: one `prompt`, cut to the model's limit when too long.
pub async fn embeddings(
    State(state): State<AppState>,
    bytes: Bytes,
) -> Result<Response, OllamaError> {
    let body = Body::parse(&bytes)?;
    let (_, handle, _) = embedder(&state, &body).await?;
    let prompt = match body.str("prompt")? {
        // NOTE: as Ollama, an empty prompt only loads the model.
        None | Some("") => return Ok(Json(json!({"embedding": []})).into_response()),
        Some(p) => p,
    };
    let inputs = read_inputs(Some(&Value::String(prompt.into())), "prompt", false)?;
    let ids = handle.tokenize(&inputs, true, "prompt")?;
    let vector = handle.embed(ids).await?.pop().unwrap_or_default();
    Ok(Json(json!({"embedding": vector})).into_response())
}
