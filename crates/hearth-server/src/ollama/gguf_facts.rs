//! What Ollama's listings say about a model, read from its GGUF file: family, parameter
//! count, quantization, chat template, stop tokens and metadata.

use std::collections::BTreeMap;
use std::path::Path;

use hearth_gguf::{GgufFile, Metadata, Value as GgufValue};
use serde_json::{json, Map, Value};

/// Arrays longer than this (vocabularies, merges, scores) are left out of `model_info`
/// unless the client asks for `verbose`; Ollama likewise leaves their values out.
const MAX_ARRAY_ITEMS: usize = 16;

/// Facts about one GGUF file.
#[derive(Clone, Debug)]
pub struct GgufFacts {
    /// `gguf`, or `safetensors` for a Hugging Face folder.
    pub format: &'static str,
    /// `general.architecture`, e.g. `llama`.
    pub family: String,
    pub n_params: u64,
    /// e.g. `Q4_1`, `Q4_K_M`.
    pub quantization: String,
    pub template: Option<String>,
    pub license: Option<String>,
    /// Texts of the end-of-generation tokens.
    pub stop: Vec<String>,
    /// Metadata as `key: value`.
    pub model_info: Map<String, Value>,
}

impl GgufFacts {
    /// Reads `path`; `verbose` keeps long arrays in `model_info`.
    pub fn read(path: &Path, verbose: bool) -> Result<Self, String> {
        if path.is_dir() {
            return Self::read_folder(path);
        }
        let file = GgufFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let meta = file.metadata();
        let n_params: u64 = file.tensors().iter().map(|t| t.n_elements()).sum();
        let family = meta
            .get_str("general.architecture")
            .ok()
            .flatten()
            .unwrap_or("unknown");
        let mut model_info = Map::new();
        for (key, value) in meta.iter() {
            let long = value.as_array().is_some_and(|a| a.len() > MAX_ARRAY_ITEMS);
            let v = if long && !verbose {
                Value::Null
            } else {
                to_json(value)
            };
            model_info.insert(key.to_string(), v);
        }
        model_info
            .entry("general.parameter_count")
            .or_insert_with(|| json!(n_params));
        Ok(Self {
            format: "gguf",
            family: family.to_string(),
            n_params,
            quantization: quantization(&file),
            template: string(meta, "tokenizer.chat_template"),
            license: string(meta, "general.license"),
            stop: stop_tokens(meta),
            model_info,
        })
    }

    /// Facts about a Hugging Face folder, from its `config.json` and `tokenizer_config.json`.
    /// The parameter count is not read (it would mean opening every shard): 0.
    fn read_folder(dir: &Path) -> Result<Self, String> {
        let read = |name: &str| -> Option<Value> {
            let text = std::fs::read_to_string(dir.join(name)).ok()?;
            serde_json::from_str(&text).ok()
        };
        let config = read("config.json")
            .and_then(|v| v.as_object().cloned())
            .ok_or_else(|| format!("{}: no readable config.json", dir.display()))?;
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        let family = text(config.get("model_type")).unwrap_or_else(|| "unknown".into());
        let dtype = text(config.get("torch_dtype").or_else(|| config.get("dtype")));
        let tokenizer_config = read("tokenizer_config.json");
        let model_info = config
            .iter()
            .filter(|(_, v)| !v.is_object() && !v.is_array())
            .map(|(k, v)| (format!("{family}.{k}"), v.clone()))
            .collect();
        Ok(Self {
            format: "safetensors",
            family,
            n_params: 0,
            quantization: dtype
                .map(|d| d.to_uppercase().replace("FLOAT", "F"))
                .unwrap_or_default(),
            template: text(
                tokenizer_config
                    .as_ref()
                    .and_then(|t| t.get("chat_template")),
            ),
            license: None,
            stop: Vec::new(),
            model_info,
        })
    }

    /// Ollama's `details` object.
    pub fn details(&self) -> Value {
        json!({
            "parent_model": "",
            "format": self.format,
            "family": self.family,
            "families": [self.family],
            "parameter_size": human_number(self.n_params),
            "quantization_level": self.quantization,
        })
    }
}

fn string(meta: &Metadata, key: &str) -> Option<String> {
    meta.get_str(key).ok().flatten().map(str::to_string)
}

/// The texts of the end-of-generation tokens the metadata names.
fn stop_tokens(meta: &Metadata) -> Vec<String> {
    let tokens = meta
        .get("tokenizer.ggml.tokens")
        .and_then(GgufValue::as_array)
        .unwrap_or(&[]);
    let mut out: Vec<String> = Vec::new();
    for key in ["eos", "eot", "eom"] {
        let id = meta
            .get(&format!("tokenizer.ggml.{key}_token_id"))
            .and_then(GgufValue::as_integer);
        let text = id
            .and_then(|id| usize::try_from(id).ok())
            .and_then(|id| tokens.get(id))
            .and_then(GgufValue::as_str);
        if let Some(text) = text {
            if !out.iter().any(|t| t == text) {
                out.push(text.to_string());
            }
        }
    }
    out
}

/// A GGUF value as JSON; floats keep their shortest decimal form (`0.1`, not `0.100000001`).
fn to_json(v: &GgufValue) -> Value {
    match v {
        GgufValue::F32(f) => format!("{f}")
            .parse::<f64>()
            .map_or(Value::Null, |f| json!(f)),
        GgufValue::F64(f) => json!(f),
        GgufValue::Bool(b) => json!(b),
        GgufValue::String(s) => json!(s),
        GgufValue::Array(items) => Value::Array(items.iter().map(to_json).collect()),
        other => other.as_integer().map_or(Value::Null, |i| {
            i64::try_from(i).map_or_else(|_| json!(i as u64), |i| json!(i))
        }),
    }
}

/// The quantization name Ollama shows: from `general.file_type` (llama.cpp's file types),
/// else the tensor type holding the most bytes.
fn quantization(file: &GgufFile) -> String {
    let meta = file.metadata();
    let file_type = meta
        .get("general.file_type")
        .and_then(GgufValue::as_integer);
    if let Some(name) = file_type.and_then(file_type_name) {
        return name.to_string();
    }
    let mut by_type: BTreeMap<&str, u64> = BTreeMap::new();
    for t in file.tensors() {
        *by_type.entry(t.ty.name()).or_default() += t.n_bytes;
    }
    by_type
        .into_iter()
        .max_by_key(|(_, bytes)| *bytes)
        .map_or_else(|| "unknown".to_string(), |(ty, _)| ty.to_string())
}

/// llama.cpp's `llama_ftype` values by name.
fn file_type_name(ftype: i128) -> Option<&'static str> {
    Some(match ftype {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        _ => return None,
    })
}

/// A count as Ollama prints parameter sizes: `135M`, `134.52M`, `1.2B`, `7B`, `350K`.
pub fn human_number(n: u64) -> String {
    let x = n as f64;
    let whole = |v: f64| v == v.floor();
    if n >= 1_000_000_000 {
        let v = x / 1e9;
        return if whole(v) {
            format!("{v:.0}B")
        } else {
            format!("{v:.1}B")
        };
    }
    if n >= 1_000_000 {
        let v = x / 1e6;
        return if whole(v) {
            format!("{v:.0}M")
        } else {
            format!("{v:.2}M")
        };
    }
    if n >= 1_000 {
        return format!("{:.0}K", x / 1e3);
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_like_ollamas() {
        // Ollama's format.HumanNumber: whole numbers bare, else 2 decimals (M) or 1 (B).
        assert_eq!(human_number(134_515_008), "134.52M");
        assert_eq!(human_number(135_000_000), "135M");
        assert_eq!(human_number(7_000_000_000), "7B");
        assert_eq!(human_number(1_240_000_000), "1.2B");
        assert_eq!(human_number(350_400), "350K");
        assert_eq!(human_number(999), "999");
    }

    #[test]
    fn values_become_json() {
        assert_eq!(to_json(&GgufValue::F32(0.1)), json!(0.1));
        assert_eq!(to_json(&GgufValue::U64(u64::MAX)), json!(u64::MAX));
        assert_eq!(to_json(&GgufValue::I32(-3)), json!(-3));
        let arr = GgufValue::Array(vec![GgufValue::Bool(true), GgufValue::String("x".into())]);
        assert_eq!(to_json(&arr), json!([true, "x"]));
        assert_eq!(file_type_name(3), Some("Q4_1"));
        assert_eq!(file_type_name(15), Some("Q4_K_M"));
    }
}
