//! `GET /api/tags` (every model), `POST /api/show` (one model in detail) and `GET /api/ps`
//! (the loaded ones).

use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::body::Body;
use super::gguf_facts::GgufFacts;
use super::{tagged_name, timestamp};
use crate::app::AppState;
use crate::error::{ApiError, OllamaError};
use crate::models::ModelListing;
use sha2::{Digest, Sha256};

/// Reads a GGUF's facts off the async threads (it parses the whole metadata section).
async fn facts(path: PathBuf, verbose: bool) -> Result<GgufFacts, ApiError> {
    tokio::task::spawn_blocking(move || GgufFacts::read(&path, verbose))
        .await
        .map_err(|e| ApiError::internal(format!("reading the model file failed: {e}")))?
        .map_err(|e| ApiError::internal(format!("cannot read the model file: {e}")))
}

/// A stable identifier for a model file: the SHA-256 of its name, size and modification
/// time. It is not a hash of the file's content (that would mean reading gigabytes), so it
/// changes when the file is replaced, which is what clients use it to notice.
fn digest(m: &ModelListing) -> String {
    let mtime = m
        .modified
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let hash = Sha256::digest(format!("{}\0{}\0{mtime}", m.name, m.size).as_bytes());
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

fn utc(t: SystemTime) -> String {
    timestamp(DateTime::<Utc>::from(t))
}

/// `GET /api/tags`: every model this server has, loaded or not.
pub async fn tags(State(state): State<AppState>) -> Result<Json<Value>, OllamaError> {
    let mut models = Vec::new();
    for m in state.models.list().await {
        let facts = facts(m.path.clone(), false).await?;
        let name = tagged_name(&m.name);
        models.push(json!({
            "name": name,
            "model": name,
            "modified_at": utc(m.modified),
            "size": m.size,
            "digest": digest(&m),
            "details": facts.details(),
        }));
    }
    Ok(Json(json!({ "models": models })))
}

/// `GET /api/ps`: the loaded models and when each unloads.
pub async fn ps(State(state): State<AppState>) -> Result<Json<Value>, OllamaError> {
    let mut models = Vec::new();
    for m in state.models.list().await {
        let Some(expiry) = m.loaded else { continue };
        let facts = facts(m.path.clone(), false).await?;
        let name = tagged_name(&m.name);
        models.push(json!({
            "name": name,
            "model": name,
            "size": m.size,
            "digest": digest(&m),
            "details": facts.details(),
            "expires_at": expires_at(expiry),
            "size_vram": 0,
            "context_length": m.context_length,
        }));
    }
    Ok(Json(json!({ "models": models })))
}

/// When a model unloads, as a time; a model kept forever shows the farthest time a Go
/// duration reaches (about 292 years ahead), as Ollama does.
fn expires_at(expiry: Option<Instant>) -> String {
    let now = Utc::now();
    let left = match expiry {
        Some(t) => chrono::Duration::from_std(t.saturating_duration_since(Instant::now()))
            .unwrap_or(chrono::Duration::MAX),
        None => chrono::Duration::nanoseconds(i64::MAX),
    };
    timestamp(
        now.checked_add_signed(left)
            .unwrap_or(DateTime::<Utc>::MAX_UTC),
    )
}

/// `POST /api/show {model, verbose}`: one model's details, template and metadata.
pub async fn show(State(state): State<AppState>, bytes: Bytes) -> Result<Json<Value>, OllamaError> {
    let body = Body::parse(&bytes)?;
    // NOTE: older clients send `name` instead of `model`.
    let model = match body.str("name")? {
        Some(name) if body.get("model").is_none() && !name.is_empty() => name.to_string(),
        _ => body.model()?,
    };
    let verbose = body.bool("verbose")?.unwrap_or(false);
    let spec = state
        .models
        .resolve(&model)
        .ok_or_else(|| ApiError::model_not_found(&model))?;
    let (name, path) = (spec.name.clone(), spec.path.clone());
    let listing = state
        .models
        .list()
        .await
        .into_iter()
        .find(|m| m.name == name)
        .ok_or_else(|| ApiError::model_not_found(&model))?;
    let facts = facts(path.clone(), verbose).await?;
    let parameters: Vec<String> = facts
        .stop
        .iter()
        .map(|s| format!("{:<30} {}", "stop", json!(s)))
        .collect();
    let mut modelfile = format!("FROM {}\n", path.display());
    for s in &facts.stop {
        modelfile.push_str(&format!("PARAMETER stop {}\n", json!(s)));
    }
    Ok(Json(json!({
        "license": facts.license.clone().unwrap_or_default(),
        "modelfile": modelfile,
        "parameters": parameters.join("\n"),
        "template": facts.template.clone().unwrap_or_default(),
        "details": facts.details(),
        "model_info": facts.model_info,
        "capabilities": ["completion"],
        "modified_at": utc(listing.modified),
    })))
}
