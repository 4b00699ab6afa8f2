//! Which architectures hearth runs, keyed by GGUF `general.architecture`.

use std::sync::Arc;

use hearth_backend::Backend;
use hearth_gguf::GgufFile;

use crate::{arch, DecoderConfig, DecoderModel, ModelError, TensorLoader};

type ConfigFn = fn(&GgufFile) -> Result<DecoderConfig, ModelError>;

/// `general.architecture` → how to configure it.
pub const ARCHITECTURES: &[(&str, ConfigFn)] = &[
    ("llama", arch::llama::config),
    ("qwen3", arch::qwen3::config),
    ("gemma3", arch::gemma3::config),
];

/// The names in [`ARCHITECTURES`], comma-separated, for messages.
pub fn supported() -> String {
    ARCHITECTURES
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The configuration of the model in `file`.
pub fn config(file: &GgufFile) -> Result<DecoderConfig, ModelError> {
    let name = file
        .metadata()
        .get_str("general.architecture")?
        .ok_or(ModelError::NoArchitecture)?;
    let (_, f) = ARCHITECTURES
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| ModelError::UnknownArchitecture(name.to_string(), supported()))?;
    f(file)
}

/// Configure and load the model in `file` onto `backend`.
pub fn load<B: Backend>(file: Arc<GgufFile>, backend: &B) -> Result<DecoderModel<B>, ModelError> {
    let config = config(&file)?;
    DecoderModel::load(config, &TensorLoader::new(file, backend))
}
