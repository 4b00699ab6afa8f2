//! Where a model comes from: a GGUF file, or a Hugging Face folder (config.json, safetensors
//! weights, tokenizer.json). Both end as the same parts: a decoder config, a tensor source the
//! decoder loads from, a tokenizer and a chat template.

use std::path::Path;
use std::sync::Arc;

use hearth_gguf::GgufFile;
use hearth_models::hf::HfCheckpoint;
use hearth_models::{DecoderConfig, TensorSource};
use hearth_tokenizer::{ChatTemplate, Tokenizer};

use crate::{EngineError, EngineOptions};

/// A model's parts before a backend sees them.
pub(crate) struct ModelSource {
    pub config: DecoderConfig,
    pub tensors: Arc<dyn TensorSource>,
    pub tokenizer: Tokenizer,
    pub template: Option<ChatTemplate>,
    pub n_params: u64,
    pub weight_bytes: u64,
    /// The GGUF file, for a model loaded from one.
    pub gguf: Option<Arc<GgufFile>>,
}

impl ModelSource {
    /// Open `path`: a directory is read as a Hugging Face folder, anything else as GGUF.
    pub fn open(path: &Path, opts: &EngineOptions) -> Result<Self, EngineError> {
        let mut source = if path.is_dir() {
            Self::open_hf(path)?
        } else {
            Self::open_gguf(path)?
        };
        if let Some(name) = &opts.template {
            source.template = Some(ChatTemplate::builtin(name).map_err(EngineError::Template)?);
        }
        Ok(source)
    }

    fn open_gguf(path: &Path) -> Result<Self, EngineError> {
        let file = GgufFile::open(path).map_err(|error| EngineError::Gguf {
            path: path.to_path_buf(),
            error,
        })?;
        let file = Arc::new(file);
        let model_err = |error| EngineError::Model {
            path: path.to_path_buf(),
            error,
        };
        let tokenizer_err = |error| EngineError::Tokenizer {
            path: path.to_path_buf(),
            error,
        };
        let config = hearth_models::registry::config(&file).map_err(model_err)?;
        let tokenizer = Tokenizer::from_gguf(file.metadata()).map_err(tokenizer_err)?;
        let template = ChatTemplate::from_gguf(file.metadata()).map_err(tokenizer_err)?;
        Ok(Self {
            config,
            tensors: Arc::new(file.clone()),
            tokenizer,
            template,
            n_params: file.tensors().iter().map(|t| t.n_elements()).sum(),
            weight_bytes: file.tensors().iter().map(|t| t.n_bytes).sum(),
            gguf: Some(file),
        })
    }

    fn open_hf(dir: &Path) -> Result<Self, EngineError> {
        let ckpt = HfCheckpoint::open(dir).map_err(|error| EngineError::Model {
            path: dir.to_path_buf(),
            error,
        })?;
        let tokenizer_err = |error| EngineError::Tokenizer {
            path: dir.to_path_buf(),
            error,
        };
        let tokenizer =
            Tokenizer::from_hf_dir(dir, &ckpt.eos_ids, ckpt.bos_id).map_err(tokenizer_err)?;
        if tokenizer.vocab_size() > ckpt.config.n_vocab {
            return Err(EngineError::Invalid(format!(
                "{}: tokenizer.json has {} tokens but config.json's vocab_size is {}",
                dir.display(),
                tokenizer.vocab_size(),
                ckpt.config.n_vocab
            )));
        }
        let template = ChatTemplate::from_hf_dir(dir).map_err(tokenizer_err)?;
        let folder = &ckpt.tensors.folder;
        Ok(Self {
            n_params: folder.total_elements(),
            weight_bytes: folder.total_bytes(),
            config: ckpt.config,
            tensors: ckpt.tensors,
            tokenizer,
            template,
            gguf: None,
        })
    }
}
