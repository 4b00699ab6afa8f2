//! `tokenizer.ggml.*` keys from a folder's `tokenizer.json`, `tokenizer_config.json` and chat
//! template, as llama.cpp's converter writes them: byte-level BPE tokenizers become its
//! `"gpt2"` model (tokens and merges), SentencePiece-style ones (a `BPE` model with
//! `byte_fallback`, spaces as `▁`) its `"llama"` model (tokens and scores, see [`spm_vocab`]).

use std::path::Path;

use hearth_gguf::{GgufWriter, Value};
use serde_json::{Map, Value as Json};

use super::config::HfConfig;
use super::{spm_vocab, HfCheckpoint};
use crate::ModelError;

/// llama.cpp's token types.
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

fn read_object(path: &Path) -> Result<Map<String, Json>, ModelError> {
    let bad = |reason: String| ModelError::BadFile {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    match serde_json::from_str(&text).map_err(|e| bad(e.to_string()))? {
        Json::Object(o) => Ok(o),
        _ => Err(bad("is not a JSON object".into())),
    }
}

/// Adds the tokenizer of folder `dir` to `w`, with pre-tokenizer name `pre`.
pub fn add_tokenizer(
    w: &mut GgufWriter,
    dir: &Path,
    ck: &HfCheckpoint,
    pre: &str,
) -> Result<(), ModelError> {
    let path = dir.join("tokenizer.json");
    let tj = HfConfig::from_json(&path, read_object(&path)?);
    let model = tj
        .get("model")
        .and_then(Json::as_object)
        .ok_or_else(|| tj.error("model", "is missing or not an object"))?;
    let kind = vocab_kind(&tj, model)?;
    let (tokens, types) = vocab(&tj, model, ck.config.n_vocab)?;
    let merges = merges(&tj, model)?;
    let id_of = |s: &str| tokens.iter().position(|t| t == s).map(|i| i as u32);
    let config_path = dir.join("tokenizer_config.json");
    let tc = if config_path.is_file() {
        read_object(&config_path)?
    } else {
        Map::new()
    };
    // A special token named in tokenizer_config.json (a string or {"content": ...}).
    let named = |key: &str| {
        let v = tc.get(key)?;
        let s = v
            .as_str()
            .or_else(|| v.get("content").and_then(Json::as_str))?;
        id_of(s)
    };
    let ids = [
        (
            "tokenizer.ggml.bos_token_id",
            named("bos_token").or(ck.bos_id),
        ),
        (
            "tokenizer.ggml.eos_token_id",
            named("eos_token").or(ck.eos_ids.first().copied()),
        ),
        ("tokenizer.ggml.padding_token_id", named("pad_token")),
    ];
    let unk = unk_id(model, &tokens);
    let mut kv = vocab_keys(kind, pre, tokens, types, merges, unk);
    for (key, id) in ids {
        if let Some(id) = id {
            kv.push((key, Value::U32(id)));
        }
    }
    if let Some(add_bos) = add_bos(&tc, &tj) {
        kv.push(("tokenizer.ggml.add_bos_token", Value::Bool(add_bos)));
    }
    if let VocabKind::SentencePiece { add_space_prefix } = kind {
        // NOTE: hearth and llama.cpp default a "llama" vocabulary's unknown token to 0, its
        // EOS appending to false and its space prefix to true: written out, none is assumed.
        if let Some(unk) = unk {
            kv.push(("tokenizer.ggml.unknown_token_id", Value::U32(unk)));
        }
        let add_eos = tc.get("add_eos_token").and_then(Json::as_bool);
        kv.push((
            "tokenizer.ggml.add_eos_token",
            Value::Bool(add_eos.unwrap_or(false)),
        ));
        kv.push((
            "tokenizer.ggml.add_space_prefix",
            Value::Bool(add_space_prefix),
        ));
    }
    if let Some(t) = chat_template(dir, &tc)? {
        kv.push(("tokenizer.chat_template", Value::String(t)));
    }
    for (k, v) in kv {
        w.add_kv(k, v)?;
    }
    Ok(())
}

/// The vocabulary's keys: the tokenizer model and its pre-tokenizer name, tokens, types, and
/// merges (byte-level BPE) or scores (SentencePiece).
fn vocab_keys(
    kind: VocabKind,
    pre: &str,
    mut tokens: Vec<String>,
    mut types: Vec<i32>,
    merges: Vec<String>,
    unk: Option<u32>,
) -> Vec<(&'static str, Value)> {
    let strings = |list: Vec<String>| Value::Array(list.into_iter().map(Value::String).collect());
    let mut kv = Vec::new();
    let mut scores = None;
    match kind {
        VocabKind::ByteLevel => {
            kv.push(("tokenizer.ggml.model", Value::String("gpt2".into())));
            kv.push(("tokenizer.ggml.pre", Value::String(pre.into())));
        }
        VocabKind::SentencePiece { .. } => {
            kv.push(("tokenizer.ggml.model", Value::String("llama".into())));
            kv.push(("tokenizer.ggml.pre", Value::String("default".into())));
            spm_types(&mut tokens, &mut types, unk);
            scores = Some(spm_vocab::scores(&tokens, &merges));
        }
    }
    kv.push(("tokenizer.ggml.tokens", strings(tokens)));
    if let Some(scores) = scores {
        let scores = scores.into_iter().map(Value::F32).collect();
        kv.push(("tokenizer.ggml.scores", Value::Array(scores)));
    }
    let types = types.into_iter().map(Value::I32).collect();
    kv.push(("tokenizer.ggml.token_type", Value::Array(types)));
    if let VocabKind::ByteLevel = kind {
        kv.push(("tokenizer.ggml.merges", strings(merges)));
    }
    kv
}

/// The two tokenizer families convert writes.
#[derive(Debug, Clone, Copy)]
enum VocabKind {
    /// GPT-2-style byte-level BPE: llama.cpp's "gpt2" model.
    ByteLevel,
    /// SentencePiece-style BPE with byte fallback: llama.cpp's "llama" model.
    SentencePiece { add_space_prefix: bool },
}

/// Which family `tokenizer.json` is; any other is an error naming the field that says so.
fn vocab_kind(tj: &HfConfig, model: &Map<String, Json>) -> Result<VocabKind, ModelError> {
    match model.get("type").and_then(Json::as_str) {
        Some("BPE") => {}
        Some(other) => {
            return Err(tj.error(
                "model.type",
                format!(
                    "is {other:?}: convert writes BPE tokenizers only (byte-level, or \
                     SentencePiece-style with byte_fallback)"
                ),
            ))
        }
        None => return Err(tj.error("model.type", "is missing")),
    }
    if byte_level(tj.get("pre_tokenizer")) {
        return Ok(VocabKind::ByteLevel);
    }
    if model.get("byte_fallback").and_then(Json::as_bool) != Some(true) {
        return Err(tj.error(
            "pre_tokenizer",
            "has no ByteLevel step and model.byte_fallback is not true: neither byte-level \
             BPE nor SentencePiece-style BPE, the two kinds convert writes",
        ));
    }
    for key in ["dropout", "continuing_subword_prefix", "end_of_word_suffix"] {
        if model.get(key).is_some_and(|v| !v.is_null()) {
            return Err(tj.error(
                &format!("model.{key}"),
                "is set: llama.cpp's SentencePiece tokenizer has no such setting",
            ));
        }
    }
    if model.get("ignore_merges").and_then(Json::as_bool) == Some(true) {
        return Err(tj.error(
            "model.ignore_merges",
            "is true: llama.cpp's SentencePiece tokenizer always merges",
        ));
    }
    Ok(VocabKind::SentencePiece {
        add_space_prefix: spm_vocab::space_prefix(tj)?,
    })
}

/// The id of `model.unk_token`, when it names a token.
fn unk_id(model: &Map<String, Json>, tokens: &[String]) -> Option<u32> {
    let unk = model.get("unk_token").and_then(Json::as_str)?;
    tokens.iter().position(|t| t == unk).map(|i| i as u32)
}

/// SentencePiece token types as llama.cpp's converter gives them: `<0xXX>` pieces are BYTE,
/// the unknown token UNKNOWN unless an added special token (then CONTROL, as
/// tokenizer_config.json's `added_tokens_decoder` makes it there), and user-defined tokens
/// spell `▁` as the space it stands for, so that they match raw text.
fn spm_types(tokens: &mut [String], types: &mut [i32], unk: Option<u32>) {
    for (i, (text, ty)) in tokens.iter_mut().zip(types.iter_mut()).enumerate() {
        match *ty {
            NORMAL if spm_vocab::is_byte_token(text) => *ty = spm_vocab::BYTE,
            NORMAL if unk == Some(i as u32) => *ty = UNKNOWN,
            USER_DEFINED => *text = text.replace('\u{2581}', " "),
            _ => {}
        }
    }
}

/// Whether a `pre_tokenizer` is (or has, in a `Sequence`) a `ByteLevel` step: GPT-2-style
/// byte-level BPE, the kind llama.cpp's "gpt2" tokenizer model runs. SentencePiece-style
/// tokenizer.json files (Gemma, Mistral v0.1, Phi 3 mini) have none.
fn byte_level(pre: Option<&Json>) -> bool {
    let Some(pre) = pre else {
        return false;
    };
    match pre.get("type").and_then(Json::as_str) {
        Some("ByteLevel") => true,
        Some("Sequence") => pre
            .get("pretokenizers")
            .and_then(Json::as_array)
            .is_some_and(|steps| steps.iter().any(|s| byte_level(Some(s)))),
        _ => false,
    }
}

/// Token strings and types by id, `n_vocab` of them (holes become unused `[PADi]` tokens).
fn vocab(
    tj: &HfConfig,
    model: &Map<String, Json>,
    n_vocab: usize,
) -> Result<(Vec<String>, Vec<i32>), ModelError> {
    let mut tokens: Vec<Option<(String, i32)>> = vec![None; n_vocab];
    let mut put = |id: Option<u64>, text: &str, ty: i32, key: &str| -> Result<(), ModelError> {
        match id.map(|i| i as usize).filter(|&i| i < n_vocab) {
            Some(i) => {
                tokens[i] = Some((text.to_string(), ty));
                Ok(())
            }
            None => Err(tj.error(
                key,
                format!("token {text:?} has id {id:?}, outside vocab_size {n_vocab}"),
            )),
        }
    };
    let vocab = model
        .get("vocab")
        .and_then(Json::as_object)
        .ok_or_else(|| tj.error("model.vocab", "is missing or not an object"))?;
    for (text, id) in vocab {
        put(id.as_u64(), text, NORMAL, "model.vocab")?;
    }
    for t in tj
        .get("added_tokens")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        let text = t.get("content").and_then(Json::as_str).unwrap_or_default();
        let special = t.get("special").and_then(Json::as_bool).unwrap_or(false);
        let ty = if special { CONTROL } else { USER_DEFINED };
        put(t.get("id").and_then(Json::as_u64), text, ty, "added_tokens")?;
    }
    Ok(tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.unwrap_or_else(|| (format!("[PAD{i}]"), UNUSED)))
        .unzip())
}

/// Merges as `"left right"` strings (tokenizer.json stores either form).
fn merges(tj: &HfConfig, model: &Map<String, Json>) -> Result<Vec<String>, ModelError> {
    let list = model
        .get("merges")
        .and_then(Json::as_array)
        .ok_or_else(|| tj.error("model.merges", "is missing or not a list"))?;
    list.iter()
        .enumerate()
        .map(|(i, m)| match m {
            Json::String(s) => Ok(s.clone()),
            Json::Array(pair) => match (pair.first(), pair.get(1), pair.len()) {
                (Some(Json::String(a)), Some(Json::String(b)), 2) => Ok(format!("{a} {b}")),
                _ => Err(tj.error(&format!("model.merges[{i}]"), "is not a pair of strings")),
            },
            _ => Err(tj.error(&format!("model.merges[{i}]"), "is not a merge")),
        })
        .collect()
}

/// `add_bos_token` from tokenizer_config.json, else whether the post-processor's
/// single-sequence template starts with a special token; `None` when neither says.
fn add_bos(tc: &Map<String, Json>, tj: &HfConfig) -> Option<bool> {
    if let Some(b) = tc.get("add_bos_token").and_then(Json::as_bool) {
        return Some(b);
    }
    let post = tj.get("post_processor")?;
    if post.get("type").and_then(Json::as_str) != Some("TemplateProcessing") {
        return None;
    }
    let first = post.get("single")?.as_array()?.first()?;
    Some(first.get("SpecialToken").is_some())
}

/// `chat_template.jinja`, else tokenizer_config.json's `chat_template` string.
fn chat_template(dir: &Path, tc: &Map<String, Json>) -> Result<Option<String>, ModelError> {
    let path = dir.join("chat_template.jinja");
    if path.is_file() {
        return std::fs::read_to_string(&path)
            .map(Some)
            .map_err(|e| ModelError::BadFile {
                path,
                reason: e.to_string(),
            });
    }
    Ok(tc
        .get("chat_template")
        .and_then(Json::as_str)
        .map(str::to_string))
}
