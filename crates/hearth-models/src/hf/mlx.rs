//! MLX quantized checkpoints (the mlx-community layout): `config.json`'s `quantization` block
//! and the `weight` / `scales` / `biases` triple of each quantized linear layer.
//!
//! ```text
//! "quantization": {
//!     "group_size": 64, "bits": 4,                          defaults for every quantized layer
//!     "model.layers.0.mlp.down_proj": {"group_size": 32, "bits": 8},   an override
//!     "model.layers.1.self_attn.q_proj": false                         left unquantized
//! }
//! ```
//!
//! A layer is quantized when its `<module>.scales` tensor exists (MLX skips layers whose width
//! is not a multiple of the group size); the config then says how.

use std::collections::HashMap;
use std::sync::Arc;

use hearth_backend::{HostWeight, MlxGroups};
use hearth_quant::{GgmlType, MlxSpec};
use safetensors::Dtype;
use serde_json::Value;

use super::config::HfConfig;
use super::safetensors::{ggml_type, SafetensorsBytes, SafetensorsFolder, TensorEntry};
use crate::ModelError;

/// Bits and group size of one layer (scale type comes from the tensor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LayerQuant {
    bits: u32,
    group_size: usize,
}

/// The `quantization` block of a config: defaults plus per-module overrides.
#[derive(Debug)]
pub struct MlxQuantization {
    /// `config.json: 'quantization'` (for error messages).
    origin: String,
    default: LayerQuant,
    /// Module path → its own setting, or `None` for `false` (not quantized).
    overrides: HashMap<String, Option<LayerQuant>>,
}

impl MlxQuantization {
    /// The block of `cfg` (`quantization`, else `quantization_config`), or `None` without one.
    pub fn from_config(cfg: &HfConfig) -> Result<Option<Self>, ModelError> {
        let key = ["quantization", "quantization_config"]
            .into_iter()
            .find(|k| cfg.get(k).is_some());
        let Some(key) = key else {
            return Ok(None);
        };
        let Some(block) = cfg.get(key).and_then(Value::as_object) else {
            return Err(cfg.error(key, "is not an object"));
        };
        if let Some(method) = block.get("quant_method").and_then(Value::as_str) {
            if method != "mlx" {
                return Err(cfg.error(
                    &format!("{key}.quant_method"),
                    format!("is '{method}': only MLX affine quantization is supported"),
                ));
            }
        }
        if let Some(mode) = block.get("mode").and_then(Value::as_str) {
            if mode != "affine" {
                return Err(cfg.error(
                    &format!("{key}.mode"),
                    format!("is '{mode}': only MLX 'affine' quantization is supported"),
                ));
            }
        }
        let default = layer_quant(cfg, key, block)?;
        let mut overrides = HashMap::new();
        for (module, v) in block {
            let field = format!("{key}.{module}");
            match v {
                Value::Bool(false) => {
                    overrides.insert(module.clone(), None);
                }
                Value::Object(o) => {
                    overrides.insert(module.clone(), Some(layer_quant(cfg, &field, o)?));
                }
                Value::Bool(true) => {
                    overrides.insert(module.clone(), Some(default));
                }
                _ => {}
            }
        }
        Ok(Some(Self {
            origin: format!("'{key}' of config.json"),
            default,
            overrides,
        }))
    }

    /// How `module` is quantized: `None` when the config leaves it unquantized.
    fn for_module(&self, module: &str) -> Option<LayerQuant> {
        match self.overrides.get(module) {
            Some(o) => *o,
            None => Some(self.default),
        }
    }
}

/// `bits` and `group_size` of one object in the block; `field` names it in errors.
fn layer_quant(
    cfg: &HfConfig,
    field: &str,
    o: &serde_json::Map<String, Value>,
) -> Result<LayerQuant, ModelError> {
    let get = |name: &str| -> Result<u64, ModelError> {
        let key = format!("{field}.{name}");
        match o.get(name) {
            None => Err(cfg.error(&key, "is missing")),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| cfg.error(&key, format!("is {v}, expected an integer"))),
        }
    };
    let bits = get("bits")?;
    if !MlxSpec::BITS.contains(&(bits as u32)) || bits > 32 {
        return Err(cfg.error(
            &format!("{field}.bits"),
            format!("is {bits}: MLX quantization with {bits} bits is not supported (4 or 8)"),
        ));
    }
    let group_size = get("group_size")? as usize;
    if !MlxSpec::GROUP_SIZES.contains(&group_size) {
        return Err(cfg.error(
            &format!("{field}.group_size"),
            format!("is {group_size}: not supported (32, 64 or 128)"),
        ));
    }
    Ok(LayerQuant {
        bits: bits as u32,
        group_size,
    })
}

/// The weight `<module>.weight` of `[rows, cols]` when `<module>.scales` exists: `Ok(None)`
/// when the layer is not quantized.
pub fn quantized_weight(
    folder: &Arc<SafetensorsFolder>,
    quant: Option<&MlxQuantization>,
    weight_name: &str,
    rows: usize,
    cols: usize,
) -> Result<Option<HostWeight>, ModelError> {
    let Some(module) = weight_name.strip_suffix(".weight") else {
        return Ok(None);
    };
    let Some(scales) = folder.get(&format!("{module}.scales")) else {
        return Ok(None);
    };
    let bad = |name: &str, reason: String| ModelError::BadTensor {
        name: name.to_string(),
        reason,
    };
    let Some(quant) = quant else {
        return Err(bad(
            &format!("{module}.scales"),
            "is present but config.json has no 'quantization' block".into(),
        ));
    };
    let Some(layer) = quant.for_module(module) else {
        return Err(bad(
            &format!("{module}.scales"),
            format!(
                "is present but {} says '{module}' is not quantized",
                quant.origin
            ),
        ));
    };
    let biases_name = format!("{module}.biases");
    let biases = folder
        .get(&biases_name)
        .ok_or_else(|| ModelError::MissingTensor(biases_name.clone()))?;
    let packed = folder
        .get(weight_name)
        .ok_or_else(|| ModelError::MissingTensor(weight_name.to_string()))?;
    let scale_ty = ggml_type(scales.dtype).ok_or_else(|| {
        bad(
            &format!("{module}.scales"),
            format!("dtype {:?} is not supported (F32, F16, BF16)", scales.dtype),
        )
    })?;
    let spec = MlxSpec {
        bits: layer.bits,
        group_size: layer.group_size,
        scale_ty,
    };
    let check = |name: &str, e: &TensorEntry, dtype: Dtype, shape: [usize; 2]| {
        if e.dtype != dtype || e.shape != shape {
            return Err(bad(
                name,
                format!(
                    "{:?} {:?}, expected {dtype:?} {shape:?} for {}-bit groups of {} ({})",
                    e.dtype, e.shape, layer.bits, layer.group_size, quant.origin
                ),
            ));
        }
        Ok(())
    };
    if !cols.is_multiple_of(layer.group_size) {
        return Err(bad(
            weight_name,
            format!(
                "{cols} columns is not a whole number of groups of {}",
                layer.group_size
            ),
        ));
    }
    let words = cols * layer.bits as usize / 32;
    check(weight_name, packed, Dtype::U32, [rows, words])?;
    let groups = [rows, cols / layer.group_size];
    check(&format!("{module}.scales"), scales, scales.dtype, groups)?;
    check(&biases_name, biases, scales.dtype, groups)?;
    let source = |entry: &TensorEntry| -> Arc<dyn hearth_backend::ByteSource> {
        Arc::new(SafetensorsBytes {
            folder: folder.clone(),
            entry: entry.clone(),
        })
    };
    Ok(Some(HostWeight {
        name: weight_name.to_string(),
        ty: GgmlType::I32,
        rows,
        cols,
        data: source(packed),
        mlx: Some(MlxGroups {
            spec,
            scales: source(scales),
            biases: source(biases),
        }),
    }))
}
