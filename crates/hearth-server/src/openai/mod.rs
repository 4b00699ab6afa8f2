//! The OpenAI-compatible API: chat completions, completions and the model list, with the
//! request fields, response shapes and streaming framing the official clients parse.

mod chat;
mod completions;
mod embeddings;
mod fields;
mod jobs;
mod logprobs;
mod models;
mod options;
mod stream;

use axum::routing::{get, post};
use axum::Router;

use crate::app::AppState;

/// The OpenAI routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/models", get(models::list))
        // NOTE: a wildcard, so a model named with a slash ("org/model") is found too.
        .route("/v1/models/{*id}", get(models::retrieve))
}
