//! Reading a Hugging Face `config.json` into a [`DecoderConfig`].

use std::path::{Path, PathBuf};

use hearth_backend::{Activation, RopeKind, RopeSpec};
use serde_json::{Map, Value};

use crate::config::CommonHparams;
use crate::{DecoderConfig, ModelError};

/// A parsed `config.json` (or `generation_config.json`), with typed getters whose errors
/// name the file and key.
pub struct HfConfig {
    path: PathBuf,
    json: Map<String, Value>,
}

impl HfConfig {
    /// Read and parse `path`, which must hold a JSON object.
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        let bad = |reason: String| ModelError::BadFile {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        match serde_json::from_str(&text).map_err(|e| bad(e.to_string()))? {
            Value::Object(json) => Ok(Self {
                path: path.to_path_buf(),
                json,
            }),
            _ => Err(bad("is not a JSON object".into())),
        }
    }

    /// A config from an already parsed object; `path` names it in errors.
    pub fn from_json(path: &Path, json: Map<String, Value>) -> Self {
        Self {
            path: path.to_path_buf(),
            json,
        }
    }

    /// An error about `key` of this file.
    pub fn error(&self, key: &str, reason: impl Into<String>) -> ModelError {
        ModelError::HfConfig {
            path: self.path.clone(),
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    /// The value of `key`; a JSON `null` reads as absent.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }

    /// A positive integer, or `None` when absent.
    pub fn usize(&self, key: &str) -> Result<Option<usize>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 => Ok(Some(n as usize)),
                _ => Err(self.error(key, format!("is {v}, expected a positive integer"))),
            },
        }
    }

    /// A positive integer that must be present.
    pub fn require_usize(&self, key: &str) -> Result<usize, ModelError> {
        self.usize(key)?
            .ok_or_else(|| self.error(key, "is missing"))
    }

    /// A number, or `None` when absent.
    pub fn f64(&self, key: &str) -> Result<Option<f64>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.error(key, format!("is {v}, expected a number"))),
        }
    }

    /// A boolean, `default` when absent.
    pub fn bool(&self, key: &str, default: bool) -> Result<bool, ModelError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.error(key, format!("is {v}, expected true or false"))),
        }
    }

    /// A string, or `None` when absent.
    pub fn str(&self, key: &str) -> Result<Option<&str>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.error(key, format!("is {v}, expected a string"))),
        }
    }

    /// Token ids under `key`: one integer or a list of them (`eos_token_id`).
    pub fn token_ids(&self, key: &str) -> Result<Vec<u32>, ModelError> {
        let one = |v: &Value| {
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| self.error(key, format!("holds {v}, expected token ids")))
        };
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items.iter().map(one).collect(),
            Some(v) => Ok(vec![one(v)?]),
        }
    }

    /// A key that hearth has no support for unless it has one of the `allowed` values.
    pub fn require_one_of(&self, key: &str, allowed: &[Value]) -> Result<(), ModelError> {
        match self.get(key) {
            Some(v) if !allowed.contains(v) => Err(self.error(
                key,
                format!("is {v}; hearth supports only {allowed:?} here"),
            )),
            _ => Ok(()),
        }
    }
}

/// The config of a plain pre-norm SwiGLU decoder (Llama and its siblings) with `rope_kind`;
/// architecture files change what differs.
pub fn decoder_config(
    cfg: &HfConfig,
    arch: &str,
    rope_kind: RopeKind,
) -> Result<DecoderConfig, ModelError> {
    let n_embd = cfg.require_usize("hidden_size")?;
    let n_heads = cfg.require_usize("num_attention_heads")?;
    let n_kv_heads = cfg.usize("num_key_value_heads")?.unwrap_or(n_heads);
    if n_heads % n_kv_heads != 0 {
        return Err(cfg.error(
            "num_key_value_heads",
            format!("{n_kv_heads} KV heads cannot serve {n_heads} heads"),
        ));
    }
    let head_dim = match cfg.usize("head_dim")? {
        Some(d) => d,
        None if n_embd % n_heads == 0 => n_embd / n_heads,
        None => {
            return Err(cfg.error(
                "head_dim",
                "is missing and hidden_size / heads is not whole",
            ))
        }
    };
    if head_dim % 2 != 0 {
        return Err(cfg.error("head_dim", format!("{head_dim} is odd; rope needs pairs")));
    }
    let activation = activation(cfg, arch)?;
    cfg.require_one_of("attention_bias", &[false.into()])?;
    cfg.require_one_of("mlp_bias", &[false.into()])?;
    let n_vocab = cfg.require_usize("vocab_size")?;
    let mut rope = super::rope::read(cfg, head_dim, Some("full_attention"))?;
    let dynamic_ntk = rope.dynamic_ntk.take();
    let long_rope = rope.long_rope.take();
    let hp = CommonHparams {
        n_embd,
        n_layers: cfg.require_usize("num_hidden_layers")?,
        n_heads,
        n_kv_heads,
        head_dim,
        n_ff: cfg.require_usize("intermediate_size")?,
        n_ctx_train: cfg.usize("max_position_embeddings")?.unwrap_or(2048),
        rms_eps: cfg.f64("rms_norm_eps")?.unwrap_or(1e-6) as f32,
        n_rot: rope.n_rot,
        freq_base: rope.theta as f32,
        freq_scale: rope.freq_scale,
        freq_factors: rope.freq_factors,
        attn_factor: rope.attn_factor,
    };
    let mut c = hp.into_config(arch, n_vocab, rope_kind);
    c.activation = activation;
    if rope.attn_factor != 1.0 && rope.n_rot != head_dim {
        // NOTE: the factor scales the rotated values only; with a partial rotation that is
        // not one scale of q·k.
        return Err(cfg.error(
            "partial_rotary_factor",
            "a rope attention factor with a partial rotation is not supported yet",
        ));
    }
    c.rope_sliding = c.rope.clone();
    c.dynamic_ntk = dynamic_ntk;
    c.long_rope = long_rope;
    Ok(c)
}

/// The rope of `layer_type` layers (`sliding_attention`) where a config gives each layer type
/// its own (Gemma 3); `None` when its scaling changes the attention scale, which the decoder
/// keeps one of.
pub fn layer_type_rope(
    cfg: &HfConfig,
    head_dim: usize,
    kind: RopeKind,
    layer_type: &str,
) -> Result<RopeSpec, ModelError> {
    let rope = super::rope::read(cfg, head_dim, Some(layer_type))?;
    if rope.attn_factor != 1.0 || rope.dynamic_ntk.is_some() || rope.long_rope.is_some() {
        return Err(cfg.error(
            &format!("rope_parameters.{layer_type}"),
            "this scaling for one layer type is not supported yet",
        ));
    }
    Ok(RopeSpec {
        kind,
        n_rot: rope.n_rot,
        freq_base: rope.theta as f32,
        freq_scale: rope.freq_scale,
        freq_factors: rope.freq_factors,
    })
}

/// The feed-forward nonlinearity: `hidden_activation` (Gemma), else `hidden_act`.
fn activation(cfg: &HfConfig, arch: &str) -> Result<Activation, ModelError> {
    let key = if cfg.get("hidden_activation").is_some() {
        "hidden_activation"
    } else {
        "hidden_act"
    };
    match cfg.str(key)? {
        // transformers' defaults when the key is absent.
        None if arch.starts_with("gemma") => Ok(Activation::GeluTanh),
        None | Some("silu") => Ok(Activation::Silu),
        Some("gelu_pytorch_tanh") => Ok(Activation::GeluTanh),
        // NOTE: released Gemma configs say "gelu"; transformers reads that as the tanh
        // approximation for Gemma (and only there).
        Some("gelu") if arch.starts_with("gemma") => Ok(Activation::GeluTanh),
        Some(other) => Err(cfg.error(
            key,
            format!("'{other}' is not supported (silu, gelu_pytorch_tanh)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: Value) -> HfConfig {
        match json {
            Value::Object(m) => HfConfig::from_json(Path::new("config.json"), m),
            _ => unreachable!("tests pass objects"),
        }
    }

    fn llama(extra: Value) -> Value {
        let mut v = serde_json::json!({
            "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 300,
        });
        if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        v
    }

    #[test]
    fn rope_scaling_and_rope_parameters_read_the_same() {
        let scaling = serde_json::json!({"rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64});
        let old = config(llama(serde_json::json!({
            "rope_theta": 50000.0, "rope_scaling": scaling.clone()})));
        let mut params = scaling;
        params["rope_theta"] = 50000.0.into();
        let new = config(llama(serde_json::json!({"rope_parameters": params})));
        let a = decoder_config(&old, "llama", RopeKind::Neox).expect("old style");
        let b = decoder_config(&new, "llama", RopeKind::Neox).expect("new style");
        assert_eq!(a, b);
        assert_eq!(a.rope.freq_base, 50000.0);
        assert_eq!(a.head_dim, 16);
        // The highest frequencies keep their speed, the lowest are slowed by `factor`.
        assert_eq!(a.rope.freq_factors.first(), Some(&1.0));
        assert_eq!(a.rope.freq_factors.last(), Some(&8.0));
    }

    #[test]
    fn unsupported_keys_are_named() {
        let bad = |extra: Value| {
            decoder_config(&config(llama(extra)), "llama", RopeKind::Neox)
                .expect_err("must fail")
                .to_string()
        };
        let e = bad(serde_json::json!({"rope_scaling": {"type": "ntk", "factor": 2.0}}));
        assert!(
            e.contains("'rope_scaling.rope_type'") && e.contains("ntk"),
            "{e}"
        );
        let e = bad(serde_json::json!({"rope_scaling": {"type": "yarn", "factor": 2.0}}));
        assert!(
            e.contains("'rope_scaling.original_max_position_embeddings'") && e.contains("missing"),
            "{e}"
        );
        let e = bad(serde_json::json!({"partial_rotary_factor": 0.1}));
        assert!(e.contains("'partial_rotary_factor'"), "{e}");
        let e = bad(serde_json::json!({"hidden_act": "gelu"}));
        assert!(e.contains("'hidden_act'") && e.contains("gelu"), "{e}");
        let e = bad(serde_json::json!({"attention_bias": true}));
        assert!(e.contains("'attention_bias'"), "{e}");
        let e = bad(serde_json::json!({"num_key_value_heads": 3}));
        assert!(e.contains("'num_key_value_heads'"), "{e}");
        let e = bad(serde_json::json!({"hidden_size": "64"}));
        assert!(e.contains("'hidden_size'"), "{e}");
    }

    /// Yi checkpoints are `LlamaForCausalLM` with Yi's own numbers (01-ai/Yi-6B's config).
    #[test]
    fn a_yi_config_loads_as_llama() {
        let yi = config(serde_json::json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 4, "vocab_size": 64000,
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 5000000.0,
            "hidden_act": "silu", "pretraining_tp": 1, "tie_word_embeddings": false,
            "rope_scaling": null, "attention_bias": false, "bos_token_id": 1,
            "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "bfloat16"
        }));
        let c = crate::arch::llama::hf_config(&yi).expect("Yi config");
        assert_eq!((c.n_heads, c.n_kv_heads, c.head_dim), (32, 4, 128));
        assert_eq!(c.rope.freq_base, 5_000_000.0);
        assert_eq!(c.activation, Activation::Silu);
        assert_eq!(c.n_ctx_train, 4096);
    }

    /// Older Gemma 3 configs: `rope_scaling` applies to the global layers only, the sliding
    /// ones use `rope_local_base_freq`.
    #[test]
    fn an_old_style_gemma3_config_splits_its_rope() {
        let g = config(llama(serde_json::json!({
            "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 4,
            "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
            "query_pre_attn_scalar": 24, "sliding_window_pattern": 2,
        })));
        let c = crate::arch::gemma3::hf_config(&g).expect("Gemma 3 config");
        assert_eq!((c.rope.freq_base, c.rope.freq_scale), (1_000_000.0, 0.125));
        assert_eq!(
            (c.rope_sliding.freq_base, c.rope_sliding.freq_scale),
            (10_000.0, 1.0)
        );
        assert_eq!(c.layer_kinds[0], crate::LayerKind::Sliding);
        assert_eq!(c.layer_kinds[1], crate::LayerKind::Global);
        assert_eq!(c.activation, Activation::GeluTanh);
        assert!((c.attn_scale - 24f32.sqrt().recip()).abs() < 1e-7);
    }
}
