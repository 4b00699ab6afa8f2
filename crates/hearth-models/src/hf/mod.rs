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
mod spm_vocab;

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
        // NOTE: HF Gemma checkpoints store w and scale by (1 + w); llama.cpp's converter stores
        // 1 + w, which is what the decoder's RMS norm multiplies by.
        let norm_offset = if config.arch.starts_with("gemma") {
            1.0
        } else {
            0.0
        };
        let (post_norms, fused) = (config.post_norms, config.fused_projections);
        Ok(Self {
            dir: dir.to_path_buf(),
            hf_arch,
            config,
            eos_ids,
            bos_id,
            tensors: Arc::new(HfTensors {
                folder,
                tied,
                norm_offset,
                post_norms,
                fused,
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
    /// Added to every norm weight as it loads (1 for Gemma, whose norms scale by 1 + w).
    pub norm_offset: f32,
    /// Gemma 2/3 naming: a norm before and after both the attention and the feed-forward.
    pub post_norms: bool,
    /// Phi 3 naming: `qkv_proj` and `gate_up_proj` hold fused matrices.
    pub fused: bool,
    /// The MLX `quantization` block, for checkpoints with quantized layers.
    pub quant: Option<mlx::MlxQuantization>,
}

/// The HF name of a tensor the decoder asks for by its GGUF name.
fn hf_name(gguf: &str, post_norms: bool, fused: bool) -> Option<String> {
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
        "attn_qkv" => "self_attn.qkv_proj",
        "ffn_up" if fused => "mlp.gate_up_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_norm" if post_norms => "pre_feedforward_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "post_attention_norm" if post_norms => "post_attention_layernorm",
        "post_ffw_norm" if post_norms => "post_feedforward_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        "ffn_gate_inp" => "mlp.gate",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{module}.{suffix}"))
}

/// The HF name of expert `expert` of the stacked expert tensor the decoder asks for by its
/// GGUF name (`blk.3.ffn_up_exps.weight`): Qwen MoE names (`mlp.experts.E.up_proj`).
fn hf_expert_name(gguf: &str, expert: usize) -> Option<String> {
    let rest = gguf.strip_prefix("blk.")?.strip_suffix("_exps.weight")?;
    let (layer, module) = rest.split_once('.')?;
    let proj = match module {
        "ffn_gate" => "gate_proj",
        "ffn_up" => "up_proj",
        "ffn_down" => "down_proj",
        _ => return None,
    };
    Some(format!(
        "model.layers.{layer}.mlp.experts.{expert}.{proj}.weight"
    ))
}

/// Mixtral's name for a sparse block's tensor that Qwen MoE names `name`: `block_sparse_moe`
/// for `mlp`, and w1 / w3 / w2 for the gate / up / down projections.
fn mixtral_name(name: &str) -> Option<String> {
    let (head, tail) = name.split_once(".mlp.")?;
    let tail = if tail == "gate.weight" {
        tail.to_string()
    } else {
        let (expert, proj) = tail.strip_prefix("experts.")?.split_once('.')?;
        let w = match proj {
            "gate_proj.weight" => "w1",
            "up_proj.weight" => "w3",
            "down_proj.weight" => "w2",
            _ => return None,
        };
        format!("experts.{expert}.{w}.weight")
    };
    Some(format!("{head}.block_sparse_moe.{tail}"))
}

impl HfTensors {
    /// `hf`, or Mixtral's name for it when the folder has that one instead; the error names
    /// both when neither is there.
    fn resolve(&self, hf: String) -> Result<String, ModelError> {
        if self.folder.get(&hf).is_some() {
            return Ok(hf);
        }
        match mixtral_name(&hf) {
            Some(m) if self.folder.get(&m).is_some() => Ok(m),
            Some(m) => Err(ModelError::MissingTensor(format!("{hf}' or '{m}"))),
            None => Err(ModelError::MissingTensor(hf)),
        }
    }
}

impl TensorSource for HfTensors {
    fn expert(
        &self,
        name: &str,
        expert: usize,
        n_expert: usize,
        rows: usize,
        cols: usize,
    ) -> Result<HostWeight, ModelError> {
        // NOTE: HF checkpoints store each expert as its own tensor; only the name differs.
        let _ = n_expert;
        let hf = hf_expert_name(name, expert)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        self.weight(self.resolve(hf)?, rows, cols)
    }

    fn host(&self, name: &str, rows: usize, cols: usize) -> Result<HostWeight, ModelError> {
        let hf = hf_name(name, self.post_norms, self.fused)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        self.weight(self.resolve(hf)?, rows, cols)
    }

    fn contains(&self, name: &str) -> bool {
        // NOTE: an untied checkpoint must have lm_head; answering yes makes its absence an error.
        if name == "output.weight" {
            return !self.tied;
        }
        hf_name(name, self.post_norms, self.fused).is_some_and(|hf| self.resolve(hf).is_ok())
    }
}

impl HfTensors {
    /// The HF tensor `hf`, checked to be `[rows, cols]`.
    fn weight(&self, hf: String, rows: usize, cols: usize) -> Result<HostWeight, ModelError> {
        if let Some(w) = mlx::quantized_weight(&self.folder, self.quant.as_ref(), &hf, rows, cols)?
        {
            return Ok(w);
        }
        let w = host_weight(&self.folder, &hf, rows, cols)?;
        if self.norm_offset != 0.0 && hf.ends_with("norm.weight") {
            return offset_norm(w, self.norm_offset);
        }
        Ok(w)
    }
}

/// The host view of tensor `hf` (an HF name) of `folder`, checked to be `[rows, cols]`
/// (a vector when `rows == 1`) and stored as F32, F16 or BF16.
pub fn host_weight(
    folder: &Arc<SafetensorsFolder>,
    hf: &str,
    rows: usize,
    cols: usize,
) -> Result<HostWeight, ModelError> {
    let entry = folder
        .get(hf)
        .ok_or_else(|| ModelError::MissingTensor(hf.to_string()))?;
    let bad = |reason: String| ModelError::BadTensor {
        name: hf.to_string(),
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
    let bytes = folder.bytes(entry);
    let elem = if ty == hearth_quant::GgmlType::F32 {
        4
    } else {
        2
    };
    // NOTE: safetensors only aligns the data section to 8 bytes as a whole; a tensor that
    // follows an odd number of 16-bit values is misaligned for f32 and gets copied.
    let data: Arc<dyn hearth_backend::ByteSource> = if bytes.as_ptr().align_offset(elem) == 0 {
        Arc::new(SafetensorsBytes {
            folder: folder.clone(),
            entry: entry.clone(),
        })
    } else {
        Arc::new(AlignedBytes::copy_of(bytes))
    };
    Ok(HostWeight {
        name: hf.to_string(),
        ty,
        rows,
        cols,
        data,
        mlx: None,
    })
}

/// A norm weight with `offset` added to each value, as f32 (norm vectors are small).
fn offset_norm(w: HostWeight, offset: f32) -> Result<HostWeight, ModelError> {
    let mut values = vec![0f32; w.rows * w.cols];
    hearth_quant::dequantize_row(w.ty, w.data.bytes(), &mut values).map_err(|e| {
        ModelError::BadTensor {
            name: w.name.clone(),
            reason: e.to_string(),
        }
    })?;
    values.iter_mut().for_each(|v| *v += offset);
    Ok(HostWeight {
        name: w.name,
        ty: hearth_quant::GgmlType::F32,
        rows: w.rows,
        cols: w.cols,
        data: Arc::new(AlignedBytes::copy_of(bytemuck::cast_slice(&values))),
        mlx: None,
    })
}

#[cfg(test)]
mod tests {
    use super::{hf_expert_name, hf_name, mixtral_name};

    #[test]
    fn expert_names_map_to_qwen_and_mixtral_modules() {
        let up = hf_expert_name("blk.1.ffn_up_exps.weight", 3);
        assert_eq!(
            up.as_deref(),
            Some("model.layers.1.mlp.experts.3.up_proj.weight")
        );
        let m = |s: &str| mixtral_name(s);
        assert_eq!(
            m("model.layers.1.mlp.experts.3.up_proj.weight").as_deref(),
            Some("model.layers.1.block_sparse_moe.experts.3.w3.weight")
        );
        assert_eq!(
            m("model.layers.0.mlp.experts.0.gate_proj.weight").as_deref(),
            Some("model.layers.0.block_sparse_moe.experts.0.w1.weight")
        );
        assert_eq!(
            m("model.layers.0.mlp.experts.0.down_proj.weight").as_deref(),
            Some("model.layers.0.block_sparse_moe.experts.0.w2.weight")
        );
        let router = hf_name("blk.2.ffn_gate_inp.weight", false, false).expect("router");
        assert_eq!(router, "model.layers.2.mlp.gate.weight");
        assert_eq!(
            m(&router).as_deref(),
            Some("model.layers.2.block_sparse_moe.gate.weight")
        );
        assert_eq!(m("model.layers.0.mlp.up_proj.weight"), None);
    }

    #[test]
    fn gguf_names_map_to_hf_modules() {
        assert_eq!(
            hf_name("blk.11.attn_q.weight", false, false).as_deref(),
            Some("model.layers.11.self_attn.q_proj.weight")
        );
        assert_eq!(
            hf_name("blk.0.ffn_norm.weight", false, false).as_deref(),
            Some("model.layers.0.post_attention_layernorm.weight")
        );
        assert_eq!(
            hf_name("blk.0.ffn_norm.weight", true, false).as_deref(),
            Some("model.layers.0.pre_feedforward_layernorm.weight")
        );
        assert_eq!(
            hf_name("blk.2.post_attention_norm.weight", true, false).as_deref(),
            Some("model.layers.2.post_attention_layernorm.weight")
        );
        assert_eq!(
            hf_name("output.weight", false, false).as_deref(),
            Some("lm_head.weight")
        );
        assert_eq!(
            hf_name("blk.1.attn_v.bias", false, false).as_deref(),
            Some("model.layers.1.self_attn.v_proj.bias")
        );
        assert_eq!(hf_name("blk.0.post_ffw_norm.weight", false, false), None);
        assert_eq!(hf_name("rope_freqs.weight", false, false), None);
        assert_eq!(
            hf_name("blk.3.ffn_up.weight", false, true).as_deref(),
            Some("model.layers.3.mlp.gate_up_proj.weight")
        );
    }
}
