//! `POST /v1/embeddings`: vectors for a string, a list of strings, or token ids, as floats or
//! as base64 of little-endian f32 (what the official client asks for by default).

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde_json::{json, Value};

use super::fields::Body;
use crate::app::AppState;
use crate::embedding::{read_dimensions, read_inputs, shorten};
use crate::error::ApiError;

/// The handler.
pub async fn embeddings(State(state): State<AppState>, body: Bytes) -> Response {
    match handle(state, &body).await {
        Ok(r) => r,
        Err(e) => e.into_openai(),
    }
}

async fn handle(state: AppState, body: &[u8]) -> Result<Response, ApiError> {
    let body = Body::parse(body)?;
    let model = match body.string("model")? {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => return Err(ApiError::bad_field("model", "model is required")),
    };
    let inputs = read_inputs(body.get("input"), "input", true)?;
    let base64 = match body.string("encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_field(
                "encoding_format",
                format!("encoding_format must be \"float\" or \"base64\", not \"{other}\""),
            ))
        }
    };
    let embedder = state.models.get_embedder(&model, None).await?;
    let dims = read_dimensions(body.get("dimensions"), embedder.info().n_embd)?;
    // NOTE: as OpenAI does, a text longer than the model takes is an error, not cut.
    let ids = embedder.tokenize(&inputs, false, "input")?;
    let n_tokens: usize = ids.iter().map(Vec::len).sum();
    let mut vectors = embedder.embed(ids).await?;
    shorten(&mut vectors, dims);
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    }))
    .into_response())
}
