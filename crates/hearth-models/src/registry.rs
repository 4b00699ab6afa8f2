//! Which architectures hearth runs, keyed by GGUF `general.architecture` and by the HF
//! `architectures` name of a `config.json`.

use std::sync::Arc;

use hearth_backend::Backend;
use hearth_gguf::GgufFile;

use crate::hf::config::HfConfig;
use crate::{arch, DecoderConfig, DecoderModel, ModelError, TensorLoader};

type ConfigFn = fn(&GgufFile) -> Result<DecoderConfig, ModelError>;
type HfConfigFn = fn(&HfConfig) -> Result<DecoderConfig, ModelError>;

/// `general.architecture` → how to configure it.
pub const ARCHITECTURES: &[(&str, ConfigFn)] = &[
    ("llama", arch::llama::config),
    ("qwen2", arch::qwen2::config),
    ("qwen3", arch::qwen3::config),
    ("gemma3", arch::gemma3::config),
    ("qwen3moe", arch::qwen3moe::config),
];

/// HF `architectures[0]` → how to configure it from `config.json`.
pub const HF_ARCHITECTURES: &[(&str, HfConfigFn)] = &[
    ("LlamaForCausalLM", arch::llama::hf_config),
    ("Qwen2ForCausalLM", arch::qwen2::hf_config),
    ("Qwen3ForCausalLM", arch::qwen3::hf_config),
    ("MixtralForCausalLM", arch::mixtral::hf_config),
    ("Qwen3MoeForCausalLM", arch::qwen3moe::hf_config),
];

/// How to configure the HF architecture `name`.
pub fn hf_config_fn(name: &str) -> Result<HfConfigFn, ModelError> {
    HF_ARCHITECTURES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            let names: Vec<&str> = HF_ARCHITECTURES.iter().map(|(n, _)| *n).collect();
            ModelError::UnknownArchitecture(name.to_string(), names.join(", "))
        })
}

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
