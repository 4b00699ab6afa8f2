//! Encoder-only models (BERT), which turn a whole text into hidden states at once: no causal
//! mask, no KV cache, no logits. They serve embeddings.

mod bert;

pub use bert::{BertConfig, BertModel};

use std::path::Path;
use std::sync::Arc;

use hearth_backend::HostWeight;

use crate::hf::safetensors::SafetensorsFolder;
use crate::hf::{config::HfConfig, host_weight};
use crate::{ModelError, TensorSource};

/// Whether the `config.json` of a folder describes a BERT encoder (`model_type: "bert"`).
pub fn is_bert(config: &HfConfig) -> bool {
    config.get("model_type").and_then(|v| v.as_str()) == Some("bert")
}

/// The tensors of a BERT checkpoint folder, asked for by their HF names without the `bert.`
/// prefix that checkpoints saved from `BertFor*` heads carry.
pub struct BertTensors {
    folder: Arc<SafetensorsFolder>,
    prefix: &'static str,
}

impl BertTensors {
    /// Map the safetensors weights of `dir`.
    pub fn open(dir: &Path) -> Result<Self, ModelError> {
        let folder = Arc::new(SafetensorsFolder::open(dir)?);
        let prefix = if folder
            .get("bert.embeddings.word_embeddings.weight")
            .is_some()
        {
            "bert."
        } else {
            ""
        };
        Ok(Self { folder, prefix })
    }

    /// The mapped folder (sizes for `hearth show`).
    pub fn folder(&self) -> &SafetensorsFolder {
        &self.folder
    }
}

impl TensorSource for BertTensors {
    fn host(&self, name: &str, rows: usize, cols: usize) -> Result<HostWeight, ModelError> {
        host_weight(&self.folder, &format!("{}{name}", self.prefix), rows, cols)
    }

    fn contains(&self, name: &str) -> bool {
        self.folder.get(&format!("{}{name}", self.prefix)).is_some()
    }

    fn expert(
        &self,
        name: &str,
        _expert: usize,
        _n_expert: usize,
        _rows: usize,
        _cols: usize,
    ) -> Result<HostWeight, ModelError> {
        Err(ModelError::BadTensor {
            name: name.to_string(),
            reason: "BERT has no experts".into(),
        })
    }
}
