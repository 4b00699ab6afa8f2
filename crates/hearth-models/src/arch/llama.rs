//! Llama 1/2/3, Mistral, Yi, SmolLM: the plain pre-norm decoder with SwiGLU and rotary embedding.

use hearth_backend::RopeKind;
use hearth_gguf::GgufFile;

use crate::hf::config::{decoder_config, HfConfig};
use crate::{config::CommonHparams, DecoderConfig, ModelError, MoeConfig};

pub fn config(file: &GgufFile) -> Result<DecoderConfig, ModelError> {
    let arch = "llama";
    let hp = CommonHparams::read(file.metadata(), arch)?;
    // NOTE: llama.cpp's converter permutes Q/K rows so that adjacent-pair rope reproduces HF's
    // rotate-half; so GGUF llama files use the "normal" (adjacent) rope.
    let mut c = hp.into_config(arch, super::n_vocab(file)?, RopeKind::Normal);
    let factors = rope_freq_factors(file, c.rope.n_rot)?;
    if !factors.is_empty() {
        c.rope.freq_factors = factors;
    }
    c.rope_sliding = c.rope.clone();
    // NOTE: llama.cpp runs "llama" without a window; `hearth convert` writes Mistral's
    // `sliding_window` here (llama.cpp ignores it), and every layer then slides.
    let key = "llama.attention.sliding_window";
    if let Some(window) = file.metadata().get_u32(key)? {
        if window > 0 {
            c.sliding_window = Some(window as usize);
            c.layer_kinds = vec![crate::LayerKind::Sliding; c.n_layers];
        }
    }
    // Mixtral is "llama" with experts: each expert is `feed_forward_length` wide.
    c.moe = MoeConfig::from_gguf(file.metadata(), arch, "feed_forward_length")?;
    Ok(c)
}

/// Llama 3.1-style per-frequency divisors, stored as the `rope_freqs.weight` tensor.
fn rope_freq_factors(file: &GgufFile, n_rot: usize) -> Result<Vec<f32>, ModelError> {
    let name = "rope_freqs.weight";
    let Some(info) = file.tensor(name) else {
        return Ok(Vec::new());
    };
    let bad = |reason: String| ModelError::BadTensor {
        name: name.into(),
        reason,
    };
    if info.n_elements() != (n_rot / 2) as u64 {
        return Err(bad(format!(
            "{} values, expected {}",
            info.n_elements(),
            n_rot / 2
        )));
    }
    let mut out = vec![0.0; n_rot / 2];
    hearth_quant::dequantize_row(info.ty, file.tensor_data(info), &mut out)
        .map_err(|e| bad(e.to_string()))?;
    Ok(out)
}

/// A `LlamaForCausalLM` checkpoint's config.
///
/// NOTE: HF stores q_proj / k_proj rows in rotate-half order; llama.cpp's converter permutes
/// them so that adjacent-pair ("normal") rope applies. Running HF weights with NeoX rope
/// instead is the same computation and keeps those two matrices memory-mapped, uncopied.
pub fn hf_config(cfg: &HfConfig) -> Result<DecoderConfig, ModelError> {
    decoder_config(cfg, "llama", RopeKind::Neox)
}
