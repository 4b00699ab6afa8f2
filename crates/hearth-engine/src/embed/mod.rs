//! Embedding models: a text in, one vector out, pooled and normalized as the model's own
//! sentence-transformers configuration says.
//!
//! ```text
//! text ──► tokenizer.json (HF tokenizers: special tokens, truncation) ──► token ids
//!      ──► BERT encoder, or a decoder's final hidden states ──► [n_tokens, n_embd]
//!      ──► Pooling (mean / cls / last token) [──► L2 normalize] ──► [n_embd]
//! ```
//!
//! A folder is an embedding model when its `config.json` is a BERT encoder, or when it holds
//! a sentence-transformers `modules.json` (a decoder-only embedding model such as
//! Qwen3-Embedding). Embedding models run on the CPU backend.

mod pooling;
mod text;

pub use pooling::{l2_normalize, Pooling, PoolingMode};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_backend::cpu::CpuBackend;
use hearth_backend::{AttnSeq, Backend, KvSpec, KvType};
use hearth_models::encoder::{is_bert, BertConfig, BertModel, BertTensors};
use hearth_models::hf::{config::HfConfig, HfCheckpoint};
use hearth_models::{Batch, DecoderModel, ModelError, TensorLoader};

use crate::EngineError;
use text::TextTokenizer;

/// Whether `path` is a folder that [`EmbeddingModel::load`] takes (see the module docs).
pub fn is_embedding_model(path: &Path) -> bool {
    if !path.is_dir() {
        return false;
    }
    if path.join("modules.json").is_file() {
        return true;
    }
    HfConfig::open(&path.join("config.json")).is_ok_and(|c| is_bert(&c))
}

enum Network {
    Bert(Box<BertModel<CpuBackend>>),
    Decoder(Box<DecoderModel<CpuBackend>>),
}

/// Facts about a loaded embedding model.
#[derive(Clone, Debug)]
pub struct EmbeddingInfo {
    pub path: PathBuf,
    /// `bert`, or the decoder architecture (`qwen3`).
    pub arch: String,
    /// Length of every vector.
    pub n_embd: usize,
    /// Token ids below this are valid input.
    pub n_vocab: usize,
    /// The most tokens one text may have (special tokens included).
    pub max_tokens: usize,
    pub pooling: Pooling,
    pub n_params: u64,
    pub backend: String,
    pub load_time: Duration,
}

/// A loaded embedding model.
pub struct EmbeddingModel {
    backend: CpuBackend,
    network: Network,
    tokenizer: TextTokenizer,
    info: EmbeddingInfo,
}

const KV_BLOCK: usize = 32;

/// A loaded network and the facts about it that differ by family.
struct Parts {
    network: Network,
    arch: String,
    n_embd: usize,
    n_vocab: usize,
    /// The longest input the network takes.
    n_positions: usize,
    n_params: u64,
    /// Pooling when the folder has no `modules.json`.
    default_mode: PoolingMode,
}

fn load_bert(dir: &Path, cfg: &HfConfig, backend: &CpuBackend) -> Result<Parts, ModelError> {
    let config = BertConfig::from_hf(cfg)?;
    let tensors = Arc::new(BertTensors::open(dir)?);
    let n_params = tensors.folder().total_elements();
    let loader = TensorLoader::from_source(tensors, backend);
    let (n_embd, n_vocab, n_positions) = (config.n_embd, config.n_vocab, config.n_positions);
    let model = BertModel::load(config, &loader)?;
    Ok(Parts {
        network: Network::Bert(Box::new(model)),
        arch: "bert".into(),
        n_embd,
        n_vocab,
        n_positions,
        n_params,
        default_mode: PoolingMode::Mean,
    })
}

fn load_decoder(dir: &Path, backend: &CpuBackend) -> Result<Parts, ModelError> {
    let ckpt = HfCheckpoint::open(dir)?;
    let n_params = ckpt.tensors.folder.total_elements();
    let loader = TensorLoader::from_source(ckpt.tensors, backend);
    let c = &ckpt.config;
    let (n_embd, n_vocab, n_positions) = (c.n_embd, c.n_vocab, c.n_ctx_train);
    let arch = c.arch.clone();
    let model = DecoderModel::load(ckpt.config, &loader)?;
    Ok(Parts {
        network: Network::Decoder(Box::new(model)),
        arch,
        n_embd,
        n_vocab,
        n_positions,
        n_params,
        default_mode: PoolingMode::LastToken,
    })
}

impl EmbeddingModel {
    /// Load the model folder `dir` on the CPU with `n_threads` threads (0 = all cores).
    pub fn load(dir: &Path, n_threads: usize) -> Result<Self, EngineError> {
        let start = Instant::now();
        let model_err = |error| EngineError::Model {
            path: dir.to_path_buf(),
            error,
        };
        let cfg = HfConfig::open(&dir.join("config.json")).map_err(model_err)?;
        let backend = CpuBackend::new(n_threads)?;
        let parts = if is_bert(&cfg) {
            load_bert(dir, &cfg, &backend)
        } else {
            load_decoder(dir, &backend)
        }
        .map_err(model_err)?;
        let Parts {
            network,
            arch,
            n_embd,
            n_vocab,
            n_positions,
            n_params,
            default_mode,
        } = parts;
        let pooling = Pooling::from_dir(dir, default_mode)?;
        let tokenizer = TextTokenizer::open(dir, n_positions)?;
        let info = EmbeddingInfo {
            path: dir.to_path_buf(),
            arch,
            n_embd,
            n_vocab,
            max_tokens: tokenizer.max_tokens(),
            pooling,
            n_params,
            backend: backend.name(),
            load_time: start.elapsed(),
        };
        Ok(Self {
            backend,
            network,
            tokenizer,
            info,
        })
    }

    pub fn info(&self) -> &EmbeddingInfo {
        &self.info
    }

    /// The token ids of `text` as the model sees them (special tokens added). A text longer
    /// than [`EmbeddingInfo::max_tokens`] is cut to it when `truncate` is set (as
    /// sentence-transformers does), else refused.
    pub fn tokenize(&self, text: &str, truncate: bool) -> Result<Vec<u32>, EngineError> {
        self.tokenizer.encode(text, truncate)
    }

    /// One vector per token sequence, each `n_embd` long.
    pub fn embed_tokens(&self, inputs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EngineError> {
        let max = self.info.max_tokens;
        for (i, ids) in inputs.iter().enumerate() {
            if ids.is_empty() {
                return Err(EngineError::Invalid(format!("input {i} has no tokens")));
            }
            if ids.len() > max {
                return Err(EngineError::Invalid(format!(
                    "input {i} is {} tokens; the model takes at most {max}",
                    ids.len()
                )));
            }
        }
        match &self.network {
            Network::Bert(model) => self.embed_bert(model, inputs),
            Network::Decoder(model) => inputs
                .iter()
                .map(|ids| self.embed_decoder(model, ids))
                .collect(),
        }
    }

    /// All inputs in one forward: attention stays within each input's rows.
    fn embed_bert(
        &self,
        model: &BertModel<CpuBackend>,
        inputs: &[Vec<u32>],
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        let tokens: Vec<u32> = inputs.iter().flatten().copied().collect();
        let mut seqs = Vec::with_capacity(inputs.len());
        let mut start = 0;
        for ids in inputs {
            seqs.push(start..start + ids.len());
            start += ids.len();
        }
        let hidden = model.forward(&self.backend, &tokens, &seqs)?; // [n_tokens, n_embd]
        let n = self.info.n_embd;
        Ok(seqs
            .iter()
            .map(|r| self.info.pooling.apply(&hidden[r.start * n..r.end * n], n))
            .collect())
    }

    /// One input as a fresh sequence with a KV cache of its own size.
    fn embed_decoder(
        &self,
        model: &DecoderModel<CpuBackend>,
        ids: &[u32],
    ) -> Result<Vec<f32>, EngineError> {
        let c = &model.config;
        let n_blocks = ids.len().div_ceil(KV_BLOCK);
        let mut cache = self.backend.new_kv_cache(&KvSpec {
            kv_dims: vec![c.kv_dim(); c.n_layers],
            n_blocks,
            block_size: KV_BLOCK,
            dtype: KvType::default(),
        })?;
        let table: Vec<u32> = (0..n_blocks as u32).collect();
        let positions: Vec<u32> = (0..ids.len() as u32).collect();
        let seqs = [AttnSeq {
            token_start: 0,
            n_tokens: ids.len(),
            first_pos: 0,
            block_table: &table,
        }];
        // Mean and CLS pooling need every row; last-token pooling only the last.
        let rows: Vec<usize> = match self.info.pooling.mode {
            PoolingMode::LastToken => vec![ids.len() - 1],
            _ => (0..ids.len()).collect(),
        };
        let batch = Batch {
            tokens: ids,
            positions: &positions,
            seqs: &seqs,
            logits_rows: &rows,
        };
        let mut hidden = Vec::new();
        model.forward_hidden_into(&self.backend, &batch, &mut cache, KV_BLOCK, &mut hidden)?;
        Ok(self.info.pooling.apply(&hidden, self.info.n_embd))
    }
}
