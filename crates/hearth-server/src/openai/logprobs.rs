//! Log-probabilities in the two shapes OpenAI uses: chat's list of token objects with their
//! bytes, and the legacy completions' parallel arrays.

use hearth_tokenizer::Tokenizer;
use serde_json::{json, Map, Value};

use crate::runner::TokenLogprob;

/// What OpenAI reports for a token the model deems impossible (JSON has no -inf).
const FLOOR: f32 = -9999.0;

fn finite(lp: f32) -> f32 {
    if lp.is_finite() {
        lp
    } else {
        FLOOR
    }
}

/// A token's text; bytes that are not UTF-8 by themselves (part of a character) are shown
/// as U+FFFD, and its `bytes` field carries them exactly.
fn text(tok: &Tokenizer, id: u32) -> String {
    String::from_utf8_lossy(tok.token_bytes(id)).into_owned()
}

fn chat_entry(tok: &Tokenizer, id: u32, logprob: f32) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("token".into(), text(tok, id).into());
    m.insert("logprob".into(), json!(finite(logprob)));
    m.insert("bytes".into(), json!(tok.token_bytes(id)));
    m
}

/// Chat's `logprobs`: `{"content": [{token, logprob, bytes, top_logprobs: [...]}]}`.
pub fn chat(tok: &Tokenizer, lps: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = lps
        .iter()
        .map(|lp| {
            let mut entry = chat_entry(tok, lp.token, lp.logprob);
            let top: Vec<Value> = lp
                .top
                .iter()
                .map(|&(id, l)| Value::Object(chat_entry(tok, id, l)))
                .collect();
            entry.insert("top_logprobs".into(), top.into());
            Value::Object(entry)
        })
        .collect();
    json!({ "content": content, "refusal": null })
}

/// Completions' `logprobs`: `{tokens, token_logprobs, top_logprobs: [{text: lp}],
/// text_offset}`. `offset` is where the first token starts in the choice's text (in
/// characters); it is advanced past these tokens, for the next streamed chunk.
pub fn completion(tok: &Tokenizer, lps: &[TokenLogprob], offset: &mut usize) -> Value {
    let mut tokens = Vec::with_capacity(lps.len());
    let mut token_logprobs = Vec::with_capacity(lps.len());
    let mut top_logprobs = Vec::with_capacity(lps.len());
    let mut text_offset = Vec::with_capacity(lps.len());
    for lp in lps {
        let t = text(tok, lp.token);
        text_offset.push(*offset);
        *offset += t.chars().count();
        tokens.push(t);
        token_logprobs.push(finite(lp.logprob));
        let top: Map<String, Value> = lp
            .top
            .iter()
            .map(|&(id, l)| (text(tok, id), json!(finite(l))))
            .collect();
        top_logprobs.push(Value::Object(top));
    }
    json!({
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": text_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_tokens_get_a_finite_floor() {
        assert_eq!(finite(f32::NEG_INFINITY), FLOOR);
        assert_eq!(finite(f32::NAN), FLOOR);
        assert_eq!(finite(-0.5), -0.5);
    }
}
