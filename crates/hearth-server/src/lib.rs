//! `hearth serve`: OpenAI- and Ollama-compatible HTTP APIs over the engine, with continuous
//! batching (one runner thread per model, see [`runner`]).

pub mod app;
pub mod embedding;
pub mod error;
pub mod generation;
pub mod metrics;
pub mod models;
pub mod ollama;
pub mod openai;
pub mod runner;
pub mod stop;

pub use app::{router, serve, AppState, ServeConfig};
