use hearth_backend::BackendError;
use hearth_gguf::GgufError;

/// Why a model could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("unknown architecture '{0}' (supported: {1})")]
    UnknownArchitecture(String, String),
    #[error("the file has no architecture ('general.architecture' is missing)")]
    NoArchitecture,
    #[error("tensor '{0}' is missing")]
    MissingTensor(String),
    #[error("tensor '{name}': {reason}")]
    BadTensor { name: String, reason: String },
    #[error("metadata '{key}': {reason}")]
    BadConfig { key: String, reason: String },
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("batch: {0}")]
    BadBatch(String),
    #[error("{}: '{key}' {reason}", path.display())]
    HfConfig {
        path: std::path::PathBuf,
        key: String,
        reason: String,
    },
    #[error("{}: {reason}", path.display())]
    BadFile {
        path: std::path::PathBuf,
        reason: String,
    },
}
