//! Ollama's API (`/api/*` and `GET /`), for the `ollama` clients and the many tools built on
//! them. Wire formats follow Ollama's server: NDJSON streams, durations in nanoseconds,
//! errors as `{"error": "..."}`.

mod body;
mod chat;
mod embed;
mod generate;
mod gguf_facts;
mod lines;
mod listing;
mod options;
mod stream;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::app::AppState;

/// The Ollama routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(root))
        .route("/api/version", get(version))
        .route("/api/chat", post(chat::chat))
        .route("/api/generate", post(generate::generate))
        .route("/api/embed", post(embed::embed))
        .route("/api/embeddings", post(embed::embeddings))
        .route("/api/tags", get(listing::tags))
        .route("/api/show", post(listing::show))
        .route("/api/ps", get(listing::ps))
}

/// Clients probe `GET /` (and `HEAD /`, which axum answers from the same route) to see
/// whether a server is up.
async fn root() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "Ollama is running",
    )
        .into_response()
}

async fn version() -> Json<serde_json::Value> {
    Json(serde_json::json!({"version": env!("CARGO_PKG_VERSION")}))
}

/// Now as Ollama writes times: RFC 3339 with nanoseconds, UTC.
pub(crate) fn timestamp(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// The name Ollama lists a model under: a tag is part of every name (`name:latest`).
pub(crate) fn tagged_name(name: &str) -> String {
    if name.contains(':') {
        name.to_string()
    } else {
        format!("{name}:latest")
    }
}
