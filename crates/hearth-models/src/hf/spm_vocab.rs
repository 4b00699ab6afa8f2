//! What a SentencePiece-style `tokenizer.json` (a `BPE` model with `byte_fallback`, spaces
//! written as U+2581) needs to become llama.cpp's `"llama"` tokenizer model: per-token scores
//! that reproduce HF's merge order, byte token types, and whether text gets a leading `▁`.
//!
//! ```text
//! tokenizer.json                         GGUF ("llama")
//! model.merges (ranked pairs)     ──►    tokenizer.ggml.scores: -(rank + 1) of the merge making each token
//! "<0xXX>" pieces                 ──►    token_type BYTE
//! normalizer / pre_tokenizer      ──►    tokenizer.ggml.add_space_prefix
//! ```
//!
//! NOTE: llama.cpp's own converter gives every token score -1000 when a folder has only a
//! tokenizer.json (`LlamaHfVocab`); its tokenizer then merges leftmost-first, which is not HF's
//! BPE. llama.cpp merges the adjacent pair whose concatenation is the highest-scoring token;
//! HF merges the pair of lowest merge rank. transformers writes a SentencePiece model's merges
//! as every split of every piece, ranked by the merged piece's score, so scoring each token by
//! the rank of the first merge that makes it gives both the same order, token for token.

use std::collections::HashMap;

use serde_json::{Map, Value as Json};

use super::config::HfConfig;
use crate::ModelError;

/// U+2581, SentencePiece's visible space.
const SPM_SPACE: &str = "\u{2581}";

/// llama.cpp's byte token type.
pub const BYTE: i32 = 6;

/// Per-token scores for llama.cpp's score-ordered merging: `-(rank + 1)` for a token some merge
/// makes (its lowest rank), one below the last merge for every other token.
pub fn scores(tokens: &[String], merges: &[String]) -> Vec<f32> {
    let mut first_rank: HashMap<String, usize> = HashMap::with_capacity(merges.len());
    for (rank, merge) in merges.iter().enumerate() {
        // "left right", split at the first space after the first character (as GGUF readers do).
        let split = merge.char_indices().skip(1).find(|&(_, c)| c == ' ');
        if let Some((at, _)) = split {
            let joined = format!("{}{}", &merge[..at], &merge[at + 1..]);
            first_rank.entry(joined).or_insert(rank);
        }
    }
    let unmerged = -(merges.len() as f32) - 1.0;
    tokens
        .iter()
        .map(|t| first_rank.get(t).map_or(unmerged, |&r| -(r as f32) - 1.0))
        .collect()
}

/// `<0xAB>`: a byte-fallback piece.
pub fn is_byte_token(text: &str) -> bool {
    text.len() == 6
        && text.starts_with("<0x")
        && text.ends_with('>')
        && u8::from_str_radix(&text[3..5], 16).is_ok()
}

/// Whether the tokenizer puts a `▁` before the text: `add_space_prefix`. The steps that turn
/// spaces into `▁` may be in the normalizer (`Prepend("▁")`, `Replace(" ", "▁")`: Llama 2,
/// TinyLlama, Mistral v0.1, Phi 3 mini; `Replace` alone: Gemma) or a `Metaspace` pre-tokenizer
/// (Mistral v0.3); anything else is an error naming the step, since llama.cpp's tokenizer has
/// no other normalization.
///
/// NOTE: `Metaspace` adds no `▁` to text that already starts with a space and, with
/// `prepend_scheme: "first"`, none after a special token; llama.cpp always adds one (as
/// SentencePiece does, and as llama.cpp's converter writes these models from
/// tokenizer.model). Such files convert as llama.cpp's do, and tokenize those texts like it.
pub fn space_prefix(tj: &HfConfig) -> Result<bool, ModelError> {
    let mut prefix = false;
    let mut replaces_space = false;
    if let Some(normalizer) = tj.get("normalizer") {
        for (key, step) in steps(normalizer, "normalizer", "normalizers") {
            let step = step
                .as_object()
                .ok_or_else(|| tj.error(&key, "is not an object"))?;
            match step_type(step) {
                "Prepend" if step.get("prepend").and_then(Json::as_str) == Some(SPM_SPACE) => {
                    prefix = true
                }
                "Replace" if is_space_to_spm(step) => replaces_space = true,
                other => return Err(unsupported(tj, &key, other)),
            }
        }
    }
    if let Some(pre) = tj.get("pre_tokenizer") {
        for (key, step) in steps(pre, "pre_tokenizer", "pretokenizers") {
            let step = step
                .as_object()
                .ok_or_else(|| tj.error(&key, "is not an object"))?;
            match step_type(step) {
                "Metaspace" => {
                    prefix |= metaspace_prefix(tj, &key, step)?;
                    replaces_space = true;
                }
                // NOTE: transformers writes Gemma tokenizers with a split at " " after the
                // normalizer's Replace(" ", "▁"): no space is left to split at.
                "Split" if replaces_space && splits_at_space(step) => {}
                other => return Err(unsupported(tj, &key, other)),
            }
        }
    }
    if !replaces_space {
        return Err(tj.error(
            "normalizer",
            "has no Replace(\" \", \"▁\") step and there is no Metaspace pre_tokenizer: \
             spaces never become ▁, as a SentencePiece-style tokenizer needs",
        ));
    }
    Ok(prefix)
}

/// The steps of a normalizer or pre-tokenizer (one, or a `Sequence` of them under `list`),
/// each with the key that names it in errors.
fn steps<'a>(value: &'a Json, key: &str, list: &str) -> Vec<(String, &'a Json)> {
    match value.get(list).and_then(Json::as_array) {
        Some(items) if value.get("type").and_then(Json::as_str) == Some("Sequence") => items
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("{key}.{list}[{i}]"), s))
            .collect(),
        _ => vec![(key.to_string(), value)],
    }
}

fn step_type(step: &Map<String, Json>) -> &str {
    step.get("type").and_then(Json::as_str).unwrap_or("(none)")
}

/// `Replace` of the string " " by "▁".
fn is_space_to_spm(step: &Map<String, Json>) -> bool {
    let pattern = step
        .get("pattern")
        .and_then(|p| p.get("String"))
        .and_then(Json::as_str);
    pattern == Some(" ") && step.get("content").and_then(Json::as_str) == Some(SPM_SPACE)
}

/// `Split` at the string " ".
fn splits_at_space(step: &Map<String, Json>) -> bool {
    let pattern = step
        .get("pattern")
        .and_then(|p| p.get("String"))
        .and_then(Json::as_str);
    pattern == Some(" ")
}

/// Whether a `Metaspace` step adds a `▁`: `prepend_scheme` ("always", "first", "never"), or
/// `add_prefix_space` in files written before it existed. Only `▁` as the replacement and no
/// split at spaces are what llama.cpp's tokenizer does.
fn metaspace_prefix(
    tj: &HfConfig,
    key: &str,
    step: &Map<String, Json>,
) -> Result<bool, ModelError> {
    if step.get("replacement").and_then(Json::as_str) != Some(SPM_SPACE) {
        return Err(tj.error(
            &format!("{key}.replacement"),
            "is not \"▁\", the only space replacement llama.cpp's tokenizer knows",
        ));
    }
    if step.get("split").and_then(Json::as_bool) == Some(true) {
        return Err(tj.error(
            &format!("{key}.split"),
            "is true: llama.cpp's tokenizer merges across ▁, so a tokenizer that splits \
             words there cannot be written as a \"llama\" vocabulary",
        ));
    }
    match step.get("prepend_scheme").and_then(Json::as_str) {
        Some("always" | "first") => Ok(true),
        Some("never") => Ok(false),
        Some(other) => Err(tj.error(
            &format!("{key}.prepend_scheme"),
            format!("is {other:?}, not \"always\", \"first\" or \"never\""),
        )),
        None => Ok(step
            .get("add_prefix_space")
            .and_then(Json::as_bool)
            .unwrap_or(true)),
    }
}

fn unsupported(tj: &HfConfig, key: &str, step_type: &str) -> ModelError {
    tj.error(
        key,
        format!(
            "has a {step_type} step: a SentencePiece-style tokenizer converts only with \
             Prepend(\"▁\") / Replace(\" \", \"▁\") normalizers or a Metaspace pre_tokenizer \
             (llama.cpp's tokenizer does no other normalization)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer_json(json: Json) -> HfConfig {
        let Json::Object(map) = json else {
            unreachable!("test input is an object")
        };
        HfConfig::from_json(std::path::Path::new("tokenizer.json"), map)
    }

    #[test]
    fn scores_follow_the_first_merge_that_makes_each_token() {
        let tokens: Vec<String> = ["a", "b", "ab", "abb", "<0x41>", "zz"]
            .map(String::from)
            .to_vec();
        let merges: Vec<String> = ["a b", "ab b", "a b"].map(String::from).to_vec();
        assert_eq!(
            scores(&tokens, &merges),
            [-4.0, -4.0, -1.0, -2.0, -4.0, -4.0]
        );
    }

    #[test]
    fn byte_tokens_are_recognized() {
        assert!(is_byte_token("<0x0A>"));
        assert!(is_byte_token("<0xff>"));
        assert!(!is_byte_token("<0xG0>"));
        assert!(!is_byte_token("<0x0A"));
    }

    #[test]
    fn space_handling_of_each_family() {
        let llama = tokenizer_json(serde_json::json!({
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "pre_tokenizer": null
        }));
        assert!(space_prefix(&llama).unwrap());
        let gemma = tokenizer_json(serde_json::json!({
            "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
        }));
        assert!(!space_prefix(&gemma).unwrap());
        let gemma_split = tokenizer_json(serde_json::json!({
            "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
            "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
                              "behavior": "MergedWithPrevious", "invert": false}
        }));
        assert!(!space_prefix(&gemma_split).unwrap());
        let mistral = tokenizer_json(serde_json::json!({
            "normalizer": null,
            "pre_tokenizer": {"type": "Metaspace", "replacement": "▁",
                              "prepend_scheme": "first", "split": false}
        }));
        assert!(space_prefix(&mistral).unwrap());
    }

    #[test]
    fn other_steps_are_refused_by_name() {
        let nfkc = tokenizer_json(serde_json::json!({
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFKC"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        }));
        let e = space_prefix(&nfkc).unwrap_err().to_string();
        assert!(
            e.contains("'normalizer.normalizers[0]'") && e.contains("NFKC"),
            "{e}"
        );
        let split = tokenizer_json(serde_json::json!({
            "pre_tokenizer": {"type": "Metaspace", "replacement": "▁",
                              "prepend_scheme": "always", "split": true}
        }));
        let e = space_prefix(&split).unwrap_err().to_string();
        assert!(e.contains("'pre_tokenizer.split'"), "{e}");
        // A split at spaces that are still there is a real split.
        let split = tokenizer_json(serde_json::json!({
            "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
                              "behavior": "MergedWithPrevious", "invert": false}
        }));
        let e = space_prefix(&split).unwrap_err().to_string();
        assert!(e.contains("'pre_tokenizer'") && e.contains("Split"), "{e}");
        let none = tokenizer_json(serde_json::json!({"normalizer": null}));
        let e = space_prefix(&none).unwrap_err().to_string();
        assert!(
            e.contains("tokenizer.json") && e.contains("'normalizer'"),
            "{e}"
        );
    }
}
