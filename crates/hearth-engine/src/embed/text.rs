//! Texts to token ids for embedding models, as sentence-transformers tokenizes them: HF
//! `tokenizers` on `tokenizer.json` with special tokens added, the text stripped of surrounding
//! whitespace (lowercased when `sentence_bert_config.json` says `do_lower_case`), cut to
//! `max_seq_length`.

use std::path::Path;

use serde_json::Value;
use tokenizers::{Tokenizer, TruncationParams};

use crate::EngineError;

/// A `tokenizer.json` tokenizer with the model's length limit.
pub(crate) struct TextTokenizer {
    /// No truncation, no padding: long texts are seen whole (to refuse them).
    whole: Tokenizer,
    /// Truncates to `max_tokens`, special tokens kept.
    truncating: Tokenizer,
    max_tokens: usize,
    lowercase: bool,
}

fn bad(path: &Path, reason: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(format!("{}: {reason}", path.display()))
}

impl TextTokenizer {
    /// Read `dir/tokenizer.json` and `dir/sentence_bert_config.json` (if any); `n_positions`
    /// bounds the length when the latter does not.
    pub fn open(dir: &Path, n_positions: usize) -> Result<Self, EngineError> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(bad(
                &path,
                "is missing: an embedding model needs tokenizer.json",
            ));
        }
        let mut whole = Tokenizer::from_file(&path).map_err(|e| bad(&path, e))?;
        // NOTE: tokenizer.json may carry the padding and truncation of training (MiniLM's pads
        // to 128): they are not the model's limits and must not apply here.
        whole
            .with_truncation(None)
            .map_err(|e| bad(&path, e))?
            .with_padding(None);
        let (max_seq, lowercase) = read_sbert_config(dir)?;
        let max_tokens = max_seq.unwrap_or(n_positions).min(n_positions);
        let mut truncating = whole.clone();
        truncating
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..Default::default()
            }))
            .map_err(|e| bad(&path, e))?;
        Ok(Self {
            whole,
            truncating,
            max_tokens,
            lowercase,
        })
    }

    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Token ids of `text`; see the module docs. Without `truncate`, a text longer than the
    /// limit is an error that says how long it is.
    pub fn encode(&self, text: &str, truncate: bool) -> Result<Vec<u32>, EngineError> {
        let text = text.trim();
        let lowered;
        let text = if self.lowercase {
            lowered = text.to_lowercase();
            lowered.as_str()
        } else {
            text
        };
        let tok = if truncate {
            &self.truncating
        } else {
            &self.whole
        };
        let enc = tok
            .encode(text, true)
            .map_err(|e| EngineError::Invalid(format!("tokenizing: {e}")))?;
        let ids = enc.get_ids().to_vec();
        if ids.len() > self.max_tokens {
            return Err(EngineError::Invalid(format!(
                "the input is {} tokens; the model takes at most {}",
                ids.len(),
                self.max_tokens
            )));
        }
        Ok(ids)
    }
}

/// `max_seq_length` and `do_lower_case` of `dir/sentence_bert_config.json`, if present.
fn read_sbert_config(dir: &Path) -> Result<(Option<usize>, bool), EngineError> {
    let path = dir.join("sentence_bert_config.json");
    if !path.is_file() {
        return Ok((None, false));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| bad(&path, e))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| bad(&path, e))?;
    let max = match json.get("max_seq_length") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Some(n as usize),
            _ => return Err(bad(&path, "'max_seq_length' is not a positive integer")),
        },
    };
    let lower = match json.get("do_lower_case") {
        None | Some(Value::Null) => false,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| bad(&path, "'do_lower_case' is not a boolean"))?,
    };
    Ok((max, lower))
}
