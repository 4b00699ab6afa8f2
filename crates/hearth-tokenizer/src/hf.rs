//! Tokenizers and chat templates of Hugging Face model folders: `tokenizer.json` (run by HF's
//! `tokenizers` crate), `tokenizer_config.json` (special tokens, BOS/EOS, chat template) and
//! `chat_template.jinja`.
//!
//! ```text
//! tokenizer.json ──► tokens by id, added tokens (special → Control, else UserDefined)
//!                ──► VocabSpec ──► Tokenizer::from_spec (decoding, special-token matching, EOG)
//!                ──► HfEncoder replaces the encoder: normalizer + pre-tokenizer + model
//! ```
//!
//! NOTE: the special-token split stays hearth's own, so `parse_special = false` keeps control
//! tokens written in user text as plain text; HF's encoder only ever sees the text between them.

use std::path::Path;

use serde_json::Value;
use tokenizers::{
    Model, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
};

use crate::{ChatTemplate, TokenType, Tokenizer, TokenizerError, VocabModel, VocabSpec};

/// HF's normalizer, pre-tokenizer and model, run on text that holds no special tokens.
pub(crate) struct HfEncoder {
    inner: tokenizers::Tokenizer,
    /// For text that does not start the input, when the pre-tokenizer treats the start apart:
    /// a `Metaspace` with `prepend_scheme: "first"` (Mistral v0.3) puts `▁` before the text
    /// at offset 0 only, not after an added token. HF sees where each piece of the input lies;
    /// this encoder sees one piece at a time, so it runs this copy (the scheme set to
    /// "never") on the pieces after the first.
    after_start: Option<tokenizers::Tokenizer>,
}

impl HfEncoder {
    /// Tokenizes plain text that begins at byte `offset` of the input and appends the ids to
    /// `out`.
    pub(crate) fn encode(
        &self,
        text: &str,
        offset: usize,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        let err = |e: tokenizers::Error| TokenizerError::Bpe(e.to_string());
        let hf = match &self.after_start {
            Some(later) if offset > 0 => later,
            _ => &self.inner,
        };
        let mut pre = PreTokenizedString::from(text);
        if let Some(n) = hf.get_normalizer() {
            pre.normalize(|s| n.normalize(s)).map_err(err)?;
        }
        if let Some(p) = hf.get_pre_tokenizer() {
            p.pre_tokenize(&mut pre).map_err(err)?;
        }
        let model = hf.get_model();
        pre.tokenize(|s| model.tokenize(s.get())).map_err(err)?;
        for (_, _, tokens) in pre.get_splits(OffsetReferential::Original, OffsetType::Byte) {
            out.extend(tokens.iter().flatten().map(|t| t.id));
        }
        Ok(())
    }
}

fn file_error(path: &Path, reason: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::InvalidVocab(format!("{}: {reason}", path.display()))
}

fn read_json(path: &Path) -> Result<Option<Value>, TokenizerError> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| file_error(path, e))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| file_error(path, e))
}

/// A special token's text in `tokenizer_config.json`: a string or `{"content": ...}`.
fn token_text<'a>(config: Option<&'a Value>, key: &str) -> Option<&'a str> {
    let v = config?.get(key)?;
    v.as_str()
        .or_else(|| v.get("content").and_then(Value::as_str))
}

impl Tokenizer {
    /// The tokenizer of a Hugging Face folder: `dir/tokenizer.json`, with BOS/EOS from
    /// `dir/tokenizer_config.json` where present. `eos_ids` (from `generation_config.json`)
    /// also end generation; `bos_id` is the model config's BOS when the tokenizer names none.
    pub fn from_hf_dir(
        dir: &Path,
        eos_ids: &[u32],
        bos_id: Option<u32>,
    ) -> Result<Tokenizer, TokenizerError> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(file_error(&path, "is missing"));
        }
        let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| file_error(&path, e))?;
        let json = read_json(&path)?.unwrap_or(Value::Null);
        let config_path = dir.join("tokenizer_config.json");
        let config = read_json(&config_path)?;
        let vocab = inner.get_vocab(true);
        let n = vocab.values().max().map_or(0, |&m| m as usize + 1);
        let mut tokens = vec![String::new(); n];
        for (text, &id) in &vocab {
            tokens[id as usize] = text.clone();
        }
        let mut types = vec![TokenType::Normal; n];
        for (id, added) in inner.get_added_tokens_decoder() {
            if let Some(t) = types.get_mut(id as usize) {
                *t = if added.special {
                    TokenType::Control
                } else {
                    TokenType::UserDefined
                };
            }
        }
        let byte_level = is_byte_level(&json);
        if !byte_level {
            mark_byte_tokens(&tokens, &mut types);
        }
        let id_of =
            |key: &str| token_text(config.as_ref(), key).and_then(|t| vocab.get(t).copied());
        let bos = id_of("bos_token").or(bos_id);
        let eos = id_of("eos_token").or(eos_ids.first().copied());
        let (add_bos, add_eos) = added_specials(&inner, bos, eos, config.as_ref());
        let spec = VocabSpec {
            model: if byte_level {
                VocabModel::BytePairGpt2 {
                    merges: Vec::new(),
                    pre: "default".into(),
                }
            } else {
                VocabModel::SentencePiece
            },
            tokens,
            scores: Vec::new(),
            token_types: types,
            bos_id: bos,
            eos_id: eos,
            eot_id: None,
            eom_id: None,
            unk_id: id_of("unk_token"),
            pad_id: id_of("pad_token"),
            add_bos,
            add_eos,
            add_space_prefix: false,
            model_name: String::new(),
        };
        let tokenizer = Tokenizer::from_spec(spec)?;
        let after_start = prepend_first_only(&path, &json)?;
        Ok(tokenizer.with_hf_encoder(HfEncoder { inner, after_start }, eos_ids))
    }
}

/// When the pre-tokenizer has a `Metaspace` step with `prepend_scheme: "first"`: the same
/// tokenizer with that scheme set to "never", for text after the start of the input.
fn prepend_first_only(
    path: &Path,
    json: &Value,
) -> Result<Option<tokenizers::Tokenizer>, TokenizerError> {
    fn set_never(v: &mut Value) -> bool {
        match v {
            Value::Object(map) => {
                let mut found = false;
                if map.get("prepend_scheme").and_then(Value::as_str) == Some("first") {
                    map.insert("prepend_scheme".into(), Value::from("never"));
                    found = true;
                }
                for child in map.values_mut() {
                    found |= set_never(child);
                }
                found
            }
            Value::Array(items) => items.iter_mut().fold(false, |f, c| set_never(c) | f),
            _ => false,
        }
    }
    let mut json = json.clone();
    let Some(pre) = json.get_mut("pre_tokenizer") else {
        return Ok(None);
    };
    if !set_never(pre) {
        return Ok(None);
    }
    let text = serde_json::to_string(&json).map_err(|e| file_error(path, e))?;
    text.parse::<tokenizers::Tokenizer>()
        .map(Some)
        .map_err(|e| file_error(path, e))
}

/// Whether the tokenizer maps bytes through the GPT-2 alphabet (a `ByteLevel` pre-tokenizer or
/// decoder) rather than SentencePiece's `▁` and `<0xXX>` pieces.
fn is_byte_level(json: &Value) -> bool {
    fn mentions(v: &Value) -> bool {
        match v {
            Value::Object(m) => {
                m.get("type").and_then(Value::as_str) == Some("ByteLevel")
                    || m.values().any(mentions)
            }
            Value::Array(a) => a.iter().any(mentions),
            _ => false,
        }
    }
    mentions(&json["pre_tokenizer"]) || mentions(&json["decoder"])
}

/// SentencePiece-style vocabularies spell raw bytes `<0xXX>`.
fn mark_byte_tokens(tokens: &[String], types: &mut [TokenType]) {
    for (text, ty) in tokens.iter().zip(types.iter_mut()) {
        let is_byte = text.len() == 6
            && text.starts_with("<0x")
            && text.ends_with('>')
            && u8::from_str_radix(&text[3..5], 16).is_ok();
        if is_byte && *ty == TokenType::Normal {
            *ty = TokenType::Byte;
        }
    }
}

/// Whether HF adds BOS / EOS to a prompt: `add_bos_token` / `add_eos_token` when the config
/// says, else what the post-processor does to a one-word encoding.
fn added_specials(
    inner: &tokenizers::Tokenizer,
    bos: Option<u32>,
    eos: Option<u32>,
    config: Option<&Value>,
) -> (bool, bool) {
    let probe = inner
        .encode("a", true)
        .map(|e| e.get_ids().to_vec())
        .unwrap_or_default();
    let flag = |key: &str| config.and_then(|c| c.get(key)).and_then(Value::as_bool);
    let add_bos = flag("add_bos_token")
        .unwrap_or_else(|| bos.is_some() && probe.first().copied() == bos && probe.len() > 1);
    let add_eos = flag("add_eos_token")
        .unwrap_or_else(|| eos.is_some() && probe.last().copied() == eos && probe.len() > 1);
    (add_bos && bos.is_some(), add_eos && eos.is_some())
}

impl ChatTemplate {
    /// The chat template of a Hugging Face folder: `chat_template` in `tokenizer_config.json`
    /// (a string, or a list of `{name, template}` of which `default` is taken), else the file
    /// `chat_template.jinja`.
    pub fn from_hf_dir(dir: &Path) -> Result<Option<ChatTemplate>, TokenizerError> {
        let config_path = dir.join("tokenizer_config.json");
        if let Some(config) = read_json(&config_path)? {
            let source = match config.get("chat_template") {
                Some(Value::String(s)) => Some(s.as_str()),
                Some(Value::Array(list)) => list
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                    .and_then(|t| t.get("template").and_then(Value::as_str)),
                _ => None,
            };
            if let Some(source) = source {
                return ChatTemplate::new("tokenizer_config.json chat_template", source).map(Some);
            }
        }
        let jinja = dir.join("chat_template.jinja");
        if jinja.is_file() {
            let source = std::fs::read_to_string(&jinja).map_err(|e| file_error(&jinja, e))?;
            return ChatTemplate::new("chat_template.jinja", &source).map(Some);
        }
        Ok(None)
    }
}
