use std::path::PathBuf;

/// Why loading or running a model failed; each variant says what it is about.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    // NOTE: the inner errors are part of the message, not a `source`, so that printing the
    // error chain does not repeat them.
    #[error("{path}: {error}")]
    Gguf {
        path: PathBuf,
        error: hearth_gguf::GgufError,
    },
    #[error("{path}: {error}")]
    Model {
        path: PathBuf,
        error: hearth_models::ModelError,
    },
    #[error("{path}: tokenizer: {error}")]
    Tokenizer {
        path: PathBuf,
        error: hearth_tokenizer::TokenizerError,
    },
    #[error(transparent)]
    Backend(#[from] hearth_backend::BackendError),
    #[error(transparent)]
    Run(#[from] hearth_models::ModelError),
    #[error("template: {0}")]
    Template(hearth_tokenizer::TokenizerError),
    #[error("the prompt is {n_prompt} tokens but the context holds {n_ctx} (raise --ctx-size)")]
    PromptTooLong { n_prompt: usize, n_ctx: usize },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the KV cache is full: {0}")]
    OutOfBlocks(String),
    #[error("{0}")]
    Invalid(String),
    /// The device asked for cannot run the model (no such GPU, no driver, an unsupported type).
    #[error("{0}")]
    Device(String),
}
