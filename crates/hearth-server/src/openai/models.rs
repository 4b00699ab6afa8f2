//! `GET /v1/models` and `GET /v1/models/{id}`.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::jobs::unix_seconds;
use crate::app::AppState;
use crate::error::ApiError;
use crate::models::ModelListing;

fn entry(m: &ModelListing) -> Value {
    json!({
        "id": m.name,
        "object": "model",
        "created": unix_seconds(m.modified),
        "owned_by": "hearth",
    })
}

/// Every model this server offers, loaded or not.
pub async fn list(State(state): State<AppState>) -> Response {
    let data: Vec<Value> = state.models.list().await.iter().map(entry).collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

/// One model, by any name a request may use for it.
pub async fn retrieve(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let Some(name) = state.models.resolve(&id).map(|s| s.name.clone()) else {
        return ApiError::model_not_found(&id).into_openai();
    };
    match state.models.list().await.iter().find(|m| m.name == name) {
        Some(m) => Json(entry(m)).into_response(),
        None => ApiError::model_not_found(&id).into_openai(),
    }
}
