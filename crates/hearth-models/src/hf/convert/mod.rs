//! A Hugging Face checkpoint folder to a GGUF file with the tensor names, metadata keys and
//! tensor transforms llama.cpp's `convert_hf_to_gguf.py` writes, so llama.cpp loads it too.
//!
//! The file is streamed: the header first (every tensor's type and shape is known up front),
//! then one tensor at a time, its rows converted in parallel on the current rayon pool.
//! Finally the written header is read back through hearth's own GGUF path and its
//! configuration compared with the folder's: a setting llama.cpp's keys cannot carry is an
//! error naming config.json, never a silently different model.

mod hparams;
mod plan;
mod verify;

use std::path::Path;

use hearth_gguf::{GgufFile, GgufWriter, StreamedTensor};
use hearth_quant::GgmlType;

use super::config::HfConfig;
use super::{gguf_vocab, HfCheckpoint};
use crate::ModelError;

/// How one HF architecture becomes a GGUF one; a new family adds a row to [`CONVERT_ARCHS`].
pub struct ConvertArch {
    /// HF `architectures[0]`.
    pub hf: &'static str,
    /// GGUF `general.architecture`.
    pub gguf: &'static str,
    /// llama.cpp runs this family with adjacent-pair ("normal") rope, so its converter
    /// reorders the rows of each Q / K head from HF's rotate-half layout.
    pub permute_qk: bool,
    /// `tokenizer.ggml.pre` for its byte-level BPE tokenizer.
    pub pre: &'static str,
    /// Added to every `*norm.weight`: Gemma's HF norms scale by 1 + w, and llama.cpp's
    /// converter stores 1 + w.
    pub norm_offset: f32,
    /// The `{arch}.*` key holding an expert's width (mixture-of-experts checkpoints).
    pub expert_ff_key: &'static str,
    /// llama.cpp's fixed sliding-window layout for this architecture: every `n`-th layer
    /// global (Gemma 2: 2, Gemma 3: 6); 0 for none. Layer types that differ from it are
    /// written as `{arch}.attention.sliding_window_pattern`.
    pub swa_pattern: usize,
    /// llama.cpp derives the attention scale from the head size; a checkpoint whose
    /// `query_pre_attn_scalar` says otherwise gets `{arch}.attention.scale`.
    pub scale_key: bool,
}

const LLAMA: ConvertArch = ConvertArch {
    hf: "LlamaForCausalLM",
    gguf: "llama",
    permute_qk: true,
    pre: "llama-bpe",
    norm_offset: 0.0,
    expert_ff_key: "feed_forward_length",
    swa_pattern: 0,
    scale_key: false,
};

const GEMMA: ConvertArch = ConvertArch {
    hf: "GemmaForCausalLM",
    gguf: "gemma",
    permute_qk: false,
    // NOTE: released Gemma tokenizers are SentencePiece (refused by name); a byte-level one
    // gets llama.cpp's fallback pre-tokenizer.
    pre: "default",
    norm_offset: 1.0,
    ..LLAMA
};

const QWEN: ConvertArch = ConvertArch {
    hf: "Qwen2ForCausalLM",
    gguf: "qwen2",
    permute_qk: false,
    pre: "qwen2",
    expert_ff_key: "expert_feed_forward_length",
    ..LLAMA
};

/// Every architecture `hearth convert` writes. Mistral and Mixtral are GGUF "llama", as
/// llama.cpp's converter writes them (Yi checkpoints are `LlamaForCausalLM`).
pub const CONVERT_ARCHS: &[ConvertArch] = &[
    LLAMA,
    ConvertArch {
        hf: "MistralForCausalLM",
        // Mistral's byte-level tokenizers (Nemo, Small 3) are llama.cpp's "tekken".
        pre: "tekken",
        ..LLAMA
    },
    ConvertArch {
        hf: "MixtralForCausalLM",
        pre: "default",
        ..LLAMA
    },
    QWEN,
    ConvertArch {
        hf: "Qwen3ForCausalLM",
        gguf: "qwen3",
        ..QWEN
    },
    ConvertArch {
        hf: "Qwen3MoeForCausalLM",
        gguf: "qwen3moe",
        ..QWEN
    },
    GEMMA,
    ConvertArch {
        hf: "Gemma2ForCausalLM",
        gguf: "gemma2",
        swa_pattern: 2,
        scale_key: true,
        ..GEMMA
    },
    ConvertArch {
        hf: "Gemma3ForCausalLM",
        gguf: "gemma3",
        swa_pattern: 6,
        scale_key: true,
        ..GEMMA
    },
    ConvertArch {
        hf: "Phi3ForCausalLM",
        gguf: "phi3",
        permute_qk: false,
        // Phi 4 mini, the byte-level Phi3ForCausalLM, uses the GPT-4o pre-tokenizer.
        pre: "gpt-4o",
        ..LLAMA
    },
];

/// What a finished conversion wrote.
#[derive(Debug)]
pub struct ConvertSummary {
    pub arch: &'static str,
    pub n_tensors: usize,
    pub n_bytes: u64,
}

/// `general.file_type` of an output type (llama.cpp's `LLAMA_FTYPE_*`).
fn file_type(ty: GgmlType) -> Result<u32, ModelError> {
    match ty {
        GgmlType::F32 => Ok(0),
        GgmlType::F16 => Ok(1),
        GgmlType::Q8_0 => Ok(7),
        GgmlType::BF16 => Ok(32),
        other => Err(ModelError::BadConfig {
            key: "--type".into(),
            reason: format!("{other} is not an output type of convert (f32, f16, bf16, q8_0)"),
        }),
    }
}

/// The row of config.json's `architectures[0]`; the error names the file and key.
fn convert_arch(cfg: &HfConfig) -> Result<&'static ConvertArch, ModelError> {
    let key = "architectures";
    let name = cfg
        .get(key)
        .and_then(|v| v.as_array())
        .and_then(|list| list.first())
        .and_then(|v| v.as_str())
        .ok_or_else(|| cfg.error(key, "is missing or names no architecture"))?;
    CONVERT_ARCHS.iter().find(|a| a.hf == name).ok_or_else(|| {
        let names: Vec<&str> = CONVERT_ARCHS.iter().map(|a| a.hf).collect();
        let reason = format!(
            "names {name}, which convert does not write (it writes {})",
            names.join(", ")
        );
        cfg.error(key, reason)
    })
}

/// Converts folder `dir` to GGUF file `out`, matrices as `ty` (F32, F16, BF16 or Q8_0;
/// vectors and expert routers stay F32 and Q8_0 falls back to F16 for rows that are not
/// whole blocks, as llama.cpp's converter does).
pub fn convert_folder(dir: &Path, out: &Path, ty: GgmlType) -> Result<ConvertSummary, ModelError> {
    let file_type = file_type(ty)?;
    let cfg = HfConfig::open(&dir.join("config.json"))?;
    let arch = convert_arch(&cfg)?;
    let ck = HfCheckpoint::open(dir)?;
    if ck.tensors.quant.is_some() {
        return Err(ModelError::BadFile {
            path: dir.join("config.json"),
            reason: "converting MLX-quantized checkpoints is not supported yet".into(),
        });
    }
    let mut w = GgufWriter::new();
    let extra = hparams::add_hparams(&mut w, &ck, &cfg, arch, file_type)?;
    gguf_vocab::add_tokenizer(&mut w, dir, &ck, arch.pre)?;
    let plan = plan::tensor_plan(&ck, arch, ty, extra)?;
    let heads: Vec<StreamedTensor> = plan.iter().map(|(t, _)| t.clone()).collect();
    let mut stream = w.start_stream(out, &heads)?;
    let mut n_bytes = 0;
    for (t, source) in &plan {
        let data = plan::tensor_bytes(&ck, t, source)?;
        n_bytes += data.len() as u64;
        stream.write_tensor(&data)?;
    }
    stream.finish()?;
    let checked = GgufFile::open(out)
        .map_err(ModelError::from)
        .and_then(|file| crate::registry::config(&file))
        .and_then(|written| {
            verify::same_model(&ck.config, &written, arch).map_err(|reason| ModelError::BadFile {
                path: dir.join("config.json"),
                reason,
            })
        });
    if let Err(e) = checked {
        let _ = std::fs::remove_file(out);
        return Err(e);
    }
    Ok(ConvertSummary {
        arch: arch.gguf,
        n_tensors: plan.len(),
        n_bytes,
    })
}
