//! `Tokenizer::from_gguf` on in-memory metadata: defaults and errors that name the key.

use hearth_gguf::{Metadata, Value};
use hearth_tokenizer::Tokenizer;

fn strings(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.to_string())).collect())
}

/// A byte-level BPE vocabulary over "a", "b" and their merge, plus a control token.
fn bpe_metadata(pre: Option<&str>) -> Metadata {
    let mut meta = Metadata::new();
    meta.insert("tokenizer.ggml.model", Value::String("gpt2".into()))
        .unwrap();
    if let Some(pre) = pre {
        meta.insert("tokenizer.ggml.pre", Value::String(pre.into()))
            .unwrap();
    }
    meta.insert(
        "tokenizer.ggml.tokens",
        strings(&["a", "b", "ab", "<|eot_id|>"]),
    )
    .unwrap();
    meta.insert("tokenizer.ggml.merges", strings(&["a b"]))
        .unwrap();
    meta.insert(
        "tokenizer.ggml.token_type",
        Value::Array([1, 1, 1, 3].map(Value::I32).to_vec()),
    )
    .unwrap();
    meta.insert("tokenizer.ggml.eos_token_id", Value::U32(3))
        .unwrap();
    meta
}

#[test]
fn bpe_from_metadata_with_llama_cpp_defaults() {
    let tokenizer = Tokenizer::from_gguf(&bpe_metadata(Some("llama-bpe"))).unwrap();
    assert_eq!(tokenizer.encode("abba", false).unwrap(), [2, 1, 0]);
    assert_eq!(tokenizer.encode("ab<|eot_id|>", true).unwrap(), [2, 3]);
    // llama-bpe implies add_bos; the default BOS id (11) is outside this vocabulary, so none.
    assert!(tokenizer.add_bos());
    assert_eq!(tokenizer.bos_id(), None);
    assert_eq!(tokenizer.eos_id(), Some(3));
    assert!(tokenizer.is_eog(3));
    // A missing pre-tokenizer falls back to "default", as in llama.cpp.
    assert!(Tokenizer::from_gguf(&bpe_metadata(None)).is_ok());
}

#[test]
fn errors_name_the_key_or_value() {
    let err = Tokenizer::from_gguf(&bpe_metadata(Some("brand-new-pre"))).unwrap_err();
    assert!(err.to_string().contains("brand-new-pre"), "{err}");

    let err = Tokenizer::from_gguf(&Metadata::new()).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.model"), "{err}");

    let mut meta = Metadata::new();
    meta.insert("tokenizer.ggml.model", Value::String("t5".into()))
        .unwrap();
    let err = Tokenizer::from_gguf(&meta).unwrap_err();
    assert!(err.to_string().contains("t5"), "{err}");

    let mut meta = Metadata::new();
    meta.insert("tokenizer.ggml.model", Value::String("gpt2".into()))
        .unwrap();
    meta.insert("tokenizer.ggml.tokens", strings(&["a"]))
        .unwrap();
    let err = Tokenizer::from_gguf(&meta).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.merges"), "{err}");

    let mut meta = bpe_metadata(Some("gpt-2"));
    meta.insert("tokenizer.ggml.scores", Value::Array(vec![Value::F32(0.0)]))
        .unwrap();
    let err = Tokenizer::from_gguf(&meta).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.scores"), "{err}");

    let mut meta = Metadata::new();
    meta.insert("tokenizer.ggml.model", Value::String("gpt2".into()))
        .unwrap();
    meta.insert("tokenizer.ggml.merges", strings(&["a b"]))
        .unwrap();
    meta.insert("tokenizer.ggml.tokens", Value::U32(7)).unwrap();
    let err = Tokenizer::from_gguf(&meta).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.tokens"), "{err}");
}
