//! Hugging Face checkpoint folders: `config.json`, safetensors weights (one file or shards),
//! `generation_config.json`.
//!
//! The weights stay memory-mapped; the decoder asks for them under GGUF names, and
//! [`HfTensors`] maps those to the HF module names.

pub mod config;
pub mod convert;
mod gguf_vocab;
pub mod mlx;
mod rope;
pub mod safetensors;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hearth_backend::HostWeight;

use crate::{registry, DecoderConfig, ModelError, TensorSource};
use config::HfConfig;
use safetensors::{ggml_type, AlignedBytes, SafetensorsBytes, SafetensorsFolder};

/// A checkpoint folder, opened and configured, its weights mapped.
pub struct HfCheckpoint {
    pub dir: PathBuf,
    /// The HF `architectures[0]` name (`LlamaForCausalLM`).
    pub hf_arch: String,
    pub config: DecoderConfig,
    /// Token ids that end generation, from `generation_config.json`, else `config.json`.
    pub eos_ids: Vec<u32>,
    pub bos_id: Option<u32>,
    pub tensors: Arc<HfTensors>,
}

impl HfCheckpoint {
    /// Read `dir/config.json`, configure the architecture it names and map the weights.
    pub fn open(dir: &Path) -> Result<Self, ModelError> {
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Err(ModelError::BadFile {
                path: config_path,
                reason: "is missing: a Hugging Face model folder needs config.json".into(),
            });
        }
        let cfg = HfConfig::open(&config_path)?;
        let hf_arch = match cfg.get("architectures").and_then(|v| v.as_array()) {
            Some(list) => match list.first().and_then(|v| v.as_str()) {
                Some(name) => name.to_string(),
                None => return Err(cfg.error("architectures", "holds no architecture name")),
            },
            None => return Err(cfg.error("architectures", "is missing or not a list")),
        };
        let config_fn = registry::hf_config_fn(&hf_arch)?;
        let config = config_fn(&cfg)?;
        let tied = cfg.bool("tie_word_embeddings", false)?;
        let (eos_ids, bos_id) = generation_ids(dir, &cfg)?;
        let quant = mlx::MlxQuantization::from_config(&cfg)?;
        let folder = Arc::new(SafetensorsFolder::open(dir)?);
        Ok(Self {
            dir: dir.to_path_buf(),
            hf_arch,
            config,
            eos_ids,
            bos_id,
            tensors: Arc::new(HfTensors {
                folder,
                tied,
                quant,
            }),
        })
    }
}

/// EOS ids and the BOS id: `generation_config.json` overrides `config.json`.
fn generation_ids(dir: &Path, cfg: &HfConfig) -> Result<(Vec<u32>, Option<u32>), ModelError> {
    let mut eos = cfg.token_ids("eos_token_id")?;
    let mut bos = cfg.token_ids("bos_token_id")?.first().copied();
    let path = dir.join("generation_config.json");
    if path.is_file() {
        let generation = HfConfig::open(&path)?;
        let ids = generation.token_ids("eos_token_id")?;
        if !ids.is_empty() {
            eos = ids;
        }
        if let Some(&id) = generation.token_ids("bos_token_id")?.first() {
            bos = Some(id);
        }
    }
    Ok((eos, bos))
}

/// The tensors of a checkpoint folder, looked up by the names llama.cpp's GGUF files use.
pub struct HfTensors {
    pub folder: Arc<SafetensorsFolder>,
    /// `tie_word_embeddings`: the output projection is the embedding table.
    pub tied: bool,
    /// The MLX `quantization` block, for checkpoints with quantized layers.
    pub quant: Option<mlx::MlxQuantization>,
}

/// The HF name of a tensor the decoder asks for by its GGUF name.
fn hf_name(gguf: &str) -> Option<String> {
    let top = match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(name) = top {
        return Some(name.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (rest, suffix) = match rest.strip_suffix(".bias") {
        Some(r) => (r, "bias"),
        None => (rest.strip_suffix(".weight")?, "weight"),
    };
    let module = match rest {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_norm" => "post_attention_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{module}.{suffix}"))
}

impl TensorSource for HfTensors {
    fn host(&self, name: &str, rows: usize, cols: usize) -> Result<HostWeight, ModelError> {
        let hf = hf_name(name).ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        if let Some(w) = mlx::quantized_weight(&self.folder, self.quant.as_ref(), &hf, rows, cols)?
        {
            return Ok(w);
        }
        let entry = self
            .folder
            .get(&hf)
            .ok_or_else(|| ModelError::MissingTensor(hf.clone()))?;
        let bad = |reason: String| ModelError::BadTensor {
            name: hf.clone(),
            reason,
        };
        let ty = ggml_type(entry.dtype).ok_or_else(|| {
            bad(format!(
                "dtype {:?} is not supported (F32, F16, BF16)",
                entry.dtype
            ))
        })?;
        let want = if rows == 1 {
            vec![cols]
        } else {
            vec![rows, cols]
        };
        if entry.shape != want {
            return Err(bad(format!("shape {:?}, expected {want:?}", entry.shape)));
        }
        let bytes = self.folder.bytes(entry);
        let elem = if ty == hearth_quant::GgmlType::F32 {
            4
        } else {
            2
        };
        // NOTE: safetensors only aligns the data section to 8 bytes as a whole; a tensor that
        // follows an odd number of 16-bit values is misaligned for f32 and gets copied.
        let data: Arc<dyn hearth_backend::ByteSource> = if bytes.as_ptr().align_offset(elem) == 0 {
            Arc::new(SafetensorsBytes {
                folder: self.folder.clone(),
                entry: entry.clone(),
            })
        } else {
            Arc::new(AlignedBytes::copy_of(bytes))
        };
        Ok(HostWeight {
            name: hf,
            ty,
            rows,
            cols,
            data,
            mlx: None,
        })
    }

    fn contains(&self, name: &str) -> bool {
        // NOTE: an untied checkpoint must have lm_head; answering yes makes its absence an error.
        if name == "output.weight" {
            return !self.tied;
        }
        hf_name(name).is_some_and(|hf| self.folder.get(&hf).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::hf_name;

    #[test]
    fn gguf_names_map_to_hf_modules() {
        assert_eq!(
            hf_name("blk.11.attn_q.weight").as_deref(),
            Some("model.layers.11.self_attn.q_proj.weight")
        );
        assert_eq!(
            hf_name("blk.0.ffn_norm.weight").as_deref(),
            Some("model.layers.0.post_attention_layernorm.weight")
        );
        assert_eq!(hf_name("output.weight").as_deref(), Some("lm_head.weight"));
        assert_eq!(
            hf_name("blk.1.attn_v.bias").as_deref(),
            Some("model.layers.1.self_attn.v_proj.bias")
        );
        assert_eq!(hf_name("blk.0.post_ffw_norm.weight"), None);
        assert_eq!(hf_name("rope_freqs.weight"), None);
    }
}
