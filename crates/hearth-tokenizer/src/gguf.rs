//! Filling a [`VocabSpec`] from GGUF metadata (`tokenizer.ggml.*`), with llama.cpp's defaults.

use crate::pretokenize::PreTokenizer;
use crate::spec::{TokenType, VocabModel, VocabSpec};
use crate::{Tokenizer, TokenizerError};
use hearth_gguf::Metadata;

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";

/// Defaults llama.cpp assumes for special ids a file does not name.
struct Defaults {
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_space_prefix: bool,
}

impl VocabSpec {
    /// Reads the vocabulary and special-token configuration from GGUF metadata.
    pub fn from_gguf(meta: &Metadata) -> Result<VocabSpec, TokenizerError> {
        let model_kind = meta
            .get_str(KEY_MODEL)?
            .ok_or(TokenizerError::MissingKey(KEY_MODEL))?;
        let (model, defaults) = match model_kind {
            "gpt2" => {
                let pre = meta.get_str(KEY_PRE)?.unwrap_or("").to_string();
                let pre_defaults = PreTokenizer::for_name(&pre)?.defaults();
                let merges = read_merges(meta)?;
                let defaults = Defaults {
                    // NOTE: llama.cpp's (odd) defaults for GPT-2 style vocabularies.
                    bos: if pre_defaults.no_default_bos {
                        None
                    } else {
                        Some(11)
                    },
                    eos: Some(11),
                    unk: None,
                    add_bos: pre_defaults.add_bos,
                    add_space_prefix: false,
                };
                (VocabModel::BytePairGpt2 { merges, pre }, defaults)
            }
            "llama" => {
                let defaults = Defaults {
                    bos: Some(1),
                    eos: Some(2),
                    unk: Some(0),
                    add_bos: true,
                    add_space_prefix: true,
                };
                (VocabModel::SentencePiece, defaults)
            }
            other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
        };
        let tokens: Vec<String> = meta
            .get_str_array(KEY_TOKENS)?
            .ok_or(TokenizerError::MissingKey(KEY_TOKENS))?
            .iter()
            .map(|s| s.to_string())
            .collect();
        let n = tokens.len();
        let scores = meta.get_f32_array(KEY_SCORES)?.unwrap_or_default();
        if !scores.is_empty() && scores.len() != n {
            return Err(TokenizerError::InvalidVocab(format!(
                "{KEY_SCORES} has {} entries for {n} tokens",
                scores.len()
            )));
        }
        let token_types: Vec<TokenType> = meta
            .get_i32_array(KEY_TYPES)?
            .unwrap_or_default()
            .iter()
            .map(|&t| TokenType::from_i32(t))
            .collect();
        if !token_types.is_empty() && token_types.len() != n {
            return Err(TokenizerError::InvalidVocab(format!(
                "{KEY_TYPES} has {} entries for {n} tokens",
                token_types.len()
            )));
        }
        // NOTE: like llama.cpp, an id outside the vocabulary keeps the default.
        let id = |key: &str, default: Option<u32>| -> Result<Option<u32>, TokenizerError> {
            Ok(match meta.get_u32(key)? {
                Some(id) if (id as usize) < n => Some(id),
                _ => default.filter(|&d| (d as usize) < n),
            })
        };
        let flag = |key: &str, default: bool| -> Result<bool, TokenizerError> {
            Ok(meta.get_bool(key)?.unwrap_or(default))
        };
        Ok(VocabSpec {
            bos_id: id("tokenizer.ggml.bos_token_id", defaults.bos)?,
            eos_id: id("tokenizer.ggml.eos_token_id", defaults.eos)?,
            eot_id: id("tokenizer.ggml.eot_token_id", None)?,
            eom_id: id("tokenizer.ggml.eom_token_id", None)?,
            unk_id: id("tokenizer.ggml.unknown_token_id", defaults.unk)?,
            pad_id: id("tokenizer.ggml.padding_token_id", None)?,
            add_bos: flag("tokenizer.ggml.add_bos_token", defaults.add_bos)?,
            add_eos: flag("tokenizer.ggml.add_eos_token", false)?,
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix", defaults.add_space_prefix)?,
            model_name: meta.get_str("general.name")?.unwrap_or("").to_lowercase(),
            model,
            tokens,
            scores,
            token_types,
        })
    }
}

/// Merges are stored as "left right"; the separator is the first space after the first byte.
fn read_merges(meta: &Metadata) -> Result<Vec<(String, String)>, TokenizerError> {
    let merges = meta
        .get_str_array(KEY_MERGES)?
        .ok_or(TokenizerError::MissingKey(KEY_MERGES))?;
    merges
        .iter()
        .enumerate()
        .map(|(i, merge)| {
            let split = merge
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(at, _)| at)
                .ok_or_else(|| {
                    TokenizerError::InvalidVocab(format!(
                        "{KEY_MERGES}[{i}] = {merge:?} has no space"
                    ))
                })?;
            Ok((merge[..split].to_string(), merge[split + 1..].to_string()))
        })
        .collect()
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes (`tokenizer.ggml.*` keys).
    pub fn from_gguf(meta: &Metadata) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_spec(VocabSpec::from_gguf(meta)?)
    }
}
