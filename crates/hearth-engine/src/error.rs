use std::path::PathBuf;

/// Why loading or running a model failed; each variant says what it is about.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{path}: {source}")]
    Gguf {
        path: PathBuf,
        source: hearth_gguf::GgufError,
    },
    #[error("{path}: {source}")]
    Model {
        path: PathBuf,
        source: hearth_models::ModelError,
    },
    #[error("{path}: tokenizer: {source}")]
    Tokenizer {
        path: PathBuf,
        source: hearth_tokenizer::TokenizerError,
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
}
