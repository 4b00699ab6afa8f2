//! The per-tensor type mix of each preset, as llama.cpp's `llama_tensor_get_type` chooses it
//! (without an importance matrix or user overrides): which tensors are quantized at all, the
//! output / tied-embedding bump to Q6_K, the attn_v and ffn_down bumps of the `_M` presets,
//! and the fallback types for rows that are not a whole number of blocks.

use super::Preset;
use crate::GgmlType;

/// What the mix needs to know about the model, read from its GGUF metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelShape {
    /// `general.architecture` (`llama`, `qwen3`, `falcon`, ...).
    pub arch: String,
    /// `{arch}.block_count`.
    pub n_layer: u32,
    /// `{arch}.attention.head_count` (of layer 0 where it is per layer).
    pub n_head: u32,
    /// `{arch}.attention.head_count_kv` (of layer 0 where it is per layer).
    pub n_head_kv: u32,
    /// `{arch}.expert_count`, 0 for dense models.
    pub n_expert: u32,
}

/// One tensor as the mix sees it.
#[derive(Clone, Copy, Debug)]
pub struct TensorSpec<'a> {
    /// The GGUF tensor name, e.g. `blk.3.attn_v.weight`.
    pub name: &'a str,
    /// Dimensions in GGML order (`dims[0]` is the row length).
    pub dims: &'a [u64],
    /// The type the tensor has now.
    pub ty: GgmlType,
}

/// The type a tensor gets, and whether it is a fallback for a row length that the preferred
/// type cannot hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeChoice {
    /// The type to write; equal to the input type when the tensor is copied unchanged.
    pub ty: GgmlType,
    /// Set when the preferred type needed whole blocks the row length does not have.
    pub fallback: bool,
}

/// Why a preset cannot be applied to a model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MixError {
    /// A tensor's row length fits no type llama.cpp would fall back to.
    RowLength {
        tensor: String,
        row_len: u64,
        ty: GgmlType,
    },
    /// An expert tensor whose name has no valid `blk.N.` layer.
    Layer { tensor: String, n_layer: u32 },
}

impl std::fmt::Display for MixError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MixError::RowLength {
                tensor,
                row_len,
                ty,
            } => write!(
                f,
                "tensor '{tensor}': rows of {row_len} elements are not a whole number of {ty} \
                 blocks ({} elements), and {ty} has no fallback type",
                ty.block_size()
            ),
            MixError::Layer { tensor, n_layer } => write!(
                f,
                "tensor '{tensor}': expected a name 'blk.N....' with N below the block count \
                 {n_layer}"
            ),
        }
    }
}

impl std::error::Error for MixError {}

/// The layer number of a `blk.N.` name, read as C's `sscanf("blk.%d.")` reads it.
fn layer_of(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let sign_len = usize::from(rest.starts_with(['+', '-']));
    let digits = rest[sign_len..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    rest[..sign_len + digits].parse().ok()
}

/// Dimensions that count, trailing 1s ignored (`ggml_n_dims`).
fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// Tensor name fragments llama.cpp never quantizes (small or precision-critical tensors).
const KEEP_FRAGMENTS: &[&str] = &[
    "_norm.weight",
    "ffn_gate_inp.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d.weight",
    "shortconv.conv.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
];

/// Whether llama.cpp quantizes this tensor at all: weights of 2 or more dimensions, except
/// norms, routers, position / token-type embeddings and a few small architecture tensors.
pub fn is_quantizable(name: &str, dims: &[u64]) -> bool {
    name.ends_with("weight")
        && n_dims(dims) >= 2
        && !KEEP_FRAGMENTS.iter().any(|f| name.contains(f))
        && name != "position_embd.weight"
        && name != "token_types.weight"
}

/// Indices of `names` in the order llama.cpp walks and writes tensors: by the layer number of
/// `blk.N.` names (other tensors first), then by name.
pub fn llama_tensor_order(names: &[&str]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by_key(|&i| (layer_of(names[i]).unwrap_or(-1), names[i]));
    order
}

/// The type each tensor gets under `preset`, in the order of `tensors`.
///
/// NOTE: llama.cpp walks tensors sorted by layer number, then name, and its attn_v / ffn_down
/// bumps depend on how many it has seen, so the walk here uses that order too.
pub fn choose_types(
    preset: Preset,
    model: &ModelShape,
    tensors: &[TensorSpec<'_>],
) -> Result<Vec<TypeChoice>, MixError> {
    let names: Vec<&str> = tensors.iter().map(|t| t.name).collect();
    let order = llama_tensor_order(&names);
    let mut state = MixState {
        preset,
        model,
        has_output: tensors.iter().any(|t| t.name == "output.weight"),
        n_attention_wv: tensors
            .iter()
            .filter(|t| {
                ["attn_v.weight", "attn_qkv.weight", "attn_kv_b.weight"]
                    .iter()
                    .any(|f| t.name.contains(f))
            })
            .count() as i64,
        i_attention_wv: 0,
        i_ffn_down: 0,
        i_ffn_gate: 0,
        i_ffn_up: 0,
    };
    let mut out = vec![
        TypeChoice {
            ty: GgmlType::F32,
            fallback: false
        };
        tensors.len()
    ];
    for i in order {
        let t = &tensors[i];
        out[i] = if is_quantizable(t.name, t.dims) {
            let preferred = state.tensor_type(t)?;
            with_fallback(t, preferred)?
        } else {
            TypeChoice {
                ty: t.ty,
                fallback: false,
            }
        };
    }
    Ok(out)
}

/// The type llama.cpp falls back to when rows are not a whole number of `ty` blocks.
fn with_fallback(t: &TensorSpec<'_>, ty: GgmlType) -> Result<TypeChoice, MixError> {
    let row_len = t.dims.first().copied().unwrap_or(0);
    if row_len % ty.block_size() as u64 == 0 {
        return Ok(TypeChoice {
            ty,
            fallback: false,
        });
    }
    let mut fallback = match ty {
        GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::IQ4_NL,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        _ => {
            return Err(MixError::RowLength {
                tensor: t.name.to_string(),
                row_len,
                ty,
            })
        }
    };
    if row_len % fallback.block_size() as u64 != 0 {
        fallback = GgmlType::F16;
    }
    Ok(TypeChoice {
        ty: fallback,
        fallback: true,
    })
}

/// The counters llama.cpp keeps while it walks the tensors.
struct MixState<'a> {
    preset: Preset,
    model: &'a ModelShape,
    has_output: bool,
    n_attention_wv: i64,
    i_attention_wv: i64,
    i_ffn_down: i64,
    i_ffn_gate: i64,
    i_ffn_up: i64,
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third one
/// between them.
fn use_more_bits(i_layer: i64, n_layer: i64) -> bool {
    i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2
}

impl MixState<'_> {
    fn is_falcon(&self) -> bool {
        self.model.arch == "falcon"
    }

    /// Heads per KV head (`n_gqa`), 0 without KV heads.
    fn n_gqa(&self) -> u32 {
        self.model
            .n_head
            .checked_div(self.model.n_head_kv)
            .unwrap_or(0)
    }

    /// llama.cpp's `LLM_TYPE_70B` models (8 query heads per attn_v row).
    fn is_70b(&self) -> bool {
        let m = self.model;
        m.n_layer == 80
            && match m.arch.as_str() {
                "llama" => m.n_expert != 8 && m.n_head != m.n_head_kv,
                "deci" | "qwen2" | "olmo" => true,
                _ => false,
            }
    }

    /// The layer a counted tensor belongs to: its position among its kind, or for MoE models
    /// the `blk.N.` number in its name (experts are not stored in layer order).
    fn layer_info(&self, counter: i64, name: &str) -> Result<(i64, i64), MixError> {
        let n_layer = self.model.n_layer as i64;
        if self.model.n_expert <= 1 {
            return Ok((counter, n_layer));
        }
        match layer_of(name) {
            Some(i) if (0..n_layer).contains(&i) => Ok((i, n_layer)),
            _ => Err(MixError::Layer {
                tensor: name.to_string(),
                n_layer: self.model.n_layer,
            }),
        }
    }

    /// The preferred type of a tensor that is quantized (before any row-length fallback).
    fn tensor_type(&mut self, t: &TensorSpec<'_>) -> Result<GgmlType, MixError> {
        use GgmlType::*;
        use Preset as P;
        let (p, name) = (self.preset, t.name);
        let mut ty = p.default_type();
        let n_expert = self.model.n_expert;
        if name == "output.weight" || (!self.has_output && name == "token_embd.weight") {
            let row_len = t.dims.first().copied().unwrap_or(0);
            if self.is_falcon() || row_len % ty.block_size() as u64 != 0 {
                ty = Q8_0;
            } else if ty != Q8_0 {
                ty = Q6_K;
            }
        } else if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
            // The embedding keeps the default type in every preset written here.
        } else if name.contains("attn_v.weight") {
            ty = self.attn_v_type(ty);
        } else if name.contains("attn_k.weight") {
            if n_expert == 8 {
                ty = Q8_0;
            }
        } else if name.contains("attn_q.weight") {
            // No preset written here changes attn_q.
        } else if name.contains("ffn_down") {
            ty = self.ffn_down_type(ty, name)?;
        } else if name.contains("attn_output.weight") {
            if !self.is_falcon() {
                if n_expert == 8 {
                    if matches!(p, P::Q2_K | P::Q3_K_S | P::Q3_K_M | P::Q4_K_S | P::Q4_K_M) {
                        ty = Q5_K;
                    }
                } else if p == P::Q2_K {
                    ty = Q3_K;
                } else if p == P::Q3_K_M {
                    ty = Q4_K;
                }
            }
        } else if name.contains("attn_qkv.weight") {
            match p {
                P::Q3_K_M => ty = Q4_K,
                P::Q4_K_M => ty = Q5_K,
                P::Q5_K_M => ty = Q6_K,
                _ => {}
            }
        } else if name.contains("ffn_gate") {
            self.layer_info(self.i_ffn_gate, name)?;
            self.i_ffn_gate += 1;
        } else if name.contains("ffn_up") {
            self.layer_info(self.i_ffn_up, name)?;
            self.i_ffn_up += 1;
        }
        Ok(ty)
    }

    /// attn_v: more bits for the first layers (Q3_K_M, Q4_K_S) or the `use_more_bits` layers
    /// (Q4_K_M, Q5_K_M); Q2_K keeps 3 or 4 bits depending on how many heads share a KV head.
    fn attn_v_type(&mut self, default: GgmlType) -> GgmlType {
        use GgmlType::*;
        use Preset as P;
        let i = self.i_attention_wv;
        self.i_attention_wv += 1;
        let mut ty = match self.preset {
            P::Q2_K if self.n_gqa() >= 4 => Q4_K,
            P::Q2_K => Q3_K,
            P::Q3_K_M if i < 2 => Q5_K,
            P::Q3_K_M => Q4_K,
            P::Q4_K_M | P::Q5_K_M if use_more_bits(i, self.n_attention_wv) => Q6_K,
            P::Q4_K_S if i < 4 => Q5_K,
            _ => default,
        };
        if self.is_70b() && (ty == Q3_K || ty == Q4_K) {
            ty = Q5_K;
        }
        if self.model.n_expert == 8 {
            ty = Q8_0;
        }
        ty
    }

    /// ffn_down: the `_M` presets spend more bits on the `use_more_bits` layers, Q3_K_M and
    /// Q4_K_S on the first ones, Q2_K uses Q3_K throughout.
    fn ffn_down_type(&mut self, default: GgmlType, name: &str) -> Result<GgmlType, MixError> {
        use GgmlType::*;
        use Preset as P;
        let (i, n) = self.layer_info(self.i_ffn_down, name)?;
        self.i_ffn_down += 1;
        let more = use_more_bits(i, n);
        let falcon = self.is_falcon();
        Ok(match self.preset {
            P::Q2_K => Q3_K,
            P::Q3_K_M if i < n / 16 => Q5_K,
            P::Q3_K_M if !falcon || more => Q4_K,
            P::Q3_K_M => Q3_K,
            P::Q4_K_M if falcon && i < n / 16 => Q6_K,
            P::Q4_K_M if falcon && more => Q5_K,
            P::Q4_K_M if falcon => Q4_K,
            P::Q4_K_M | P::Q5_K_M if more => Q6_K,
            P::Q4_K_S if !falcon && i < n / 8 => Q5_K,
            _ => default,
        })
    }
}
