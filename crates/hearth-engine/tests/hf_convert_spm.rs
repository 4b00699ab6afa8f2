//! `hearth convert` with SentencePiece-style tokenizers (a `BPE` model with byte fallback,
//! spaces as `▁`: Llama 2, Mistral v0.1, Phi 3 mini, Gemma): the tokenizers of
//! tests/fixtures/spm-tokenizers (scripts/make_spm_tokenizer_fixtures.py) put into a copy of
//! the tiny Mistral checkpoint, converted, and the GGUF's tokenizer (llama.cpp's "llama"
//! model: tokens, scores, types) held to HF `tokenizers`' ids on every reference text, as is
//! the folder loaded directly.

mod common;

use std::path::{Path, PathBuf};

use common::hf::{edit, fixture, scratch_copy};
use common::{open_engine_with, read_json};
use hearth_engine::KvType;
use hearth_gguf::GgufFile;
use hearth_models::hf::convert::convert_folder;
use hearth_quant::GgmlType;
use hearth_tokenizer::Tokenizer;
use serde::Deserialize;

/// HF `tokenizers`' ids for one text: `encode(text, add_special_tokens=False / True)`.
#[derive(Deserialize)]
struct TextRef {
    text: String,
    ids: Vec<u32>,
    ids_with_special: Vec<u32>,
}

#[derive(Deserialize)]
struct TokenizerRef {
    texts: Vec<TextRef>,
}

/// The fixture tokenizer `variant` ("llama": Prepend + Replace normalizer; "gemma": Replace,
/// no space prefix; "mistral": Metaspace pre-tokenizer).
fn spm_fixture(variant: &str) -> PathBuf {
    fixture("spm-tokenizers").join(variant)
}

/// A scratch copy of the tiny Mistral checkpoint (305 tokens, as the fixture tokenizers)
/// with tokenizer `variant` in place of its byte-level one.
fn folder_with(variant: &str, tag: &str) -> PathBuf {
    let dir = scratch_copy("hf-tiny-mistral", &format!("spm-{variant}-{tag}"));
    // The chat template comes from the new tokenizer_config.json.
    std::fs::remove_file(dir.join("chat_template.jinja")).expect("remove template");
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(spm_fixture(variant).join(file), dir.join(file)).expect("copy tokenizer");
    }
    dir
}

/// Converts `dir` to a scratch F16 GGUF; returns its path.
fn convert(dir: &Path, tag: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!(
        "hearth-convert-spm-{}-{tag}.gguf",
        std::process::id()
    ));
    convert_folder(dir, &out, GgmlType::F16).unwrap_or_else(|e| panic!("{tag}: {e}"));
    out
}

/// `tokenizer` gives HF's ids for every reference text of `variant`: added tokens split out
/// (HF always does: `parse_special`), and with BOS as HF's post-processor adds it.
fn assert_matches_hf(tokenizer: &Tokenizer, variant: &str, what: &str) {
    let r: TokenizerRef = read_json(&spm_fixture(variant).join("reference.json"));
    for t in &r.texts {
        let ids = tokenizer.encode(&t.text, true).expect("encodes");
        assert_eq!(ids, t.ids, "{variant} {what}: {:?}", t.text);
        let prompt = tokenizer.encode_prompt(&t.text, true).expect("encodes");
        assert_eq!(prompt, t.ids_with_special, "{variant} {what}: {:?}", t.text);
    }
    eprintln!("{variant} {what}: {} texts give HF's ids", r.texts.len());
}

fn converted_tokenizer_matches_hf(variant: &str) {
    let dir = folder_with(variant, "ids");
    let gguf = convert(&dir, variant);
    let engine = open_engine_with(&gguf, 64, KvType::F16);
    let _ = std::fs::remove_file(&gguf);
    assert_matches_hf(&engine.tokenizer, variant, "converted GGUF");
    drop(engine);
    let engine = open_engine_with(&dir, 64, KvType::F16);
    let _ = std::fs::remove_dir_all(&dir);
    assert_matches_hf(&engine.tokenizer, variant, "HF folder");
}

#[test]
fn llama_style_tokenizer_converts_to_hf_s_ids() {
    converted_tokenizer_matches_hf("llama");
}

#[test]
fn gemma_style_tokenizer_converts_to_hf_s_ids() {
    converted_tokenizer_matches_hf("gemma");
}

/// A `Metaspace` tokenizer (Mistral v0.3) converts to the same vocabulary as the `Prepend`
/// one, `add_space_prefix` and all, as llama.cpp writes such a model from its
/// tokenizer.model: the converted file gives the `llama` variant's ids on every text. HF's
/// `Metaspace` adds no `▁` before text that starts with a space or (`prepend_scheme: "first"`)
/// follows an added token, so HF's own ids differ from those on exactly such texts.
#[test]
fn metaspace_tokenizer_converts_as_sentencepiece_tokenizes() {
    let dir = folder_with("mistral", "ids");
    let gguf = convert(&dir, "mistral");
    // The folder itself goes through HF's own Metaspace rules: HF's ids exactly.
    let folder = open_engine_with(&dir, 64, KvType::F16);
    let _ = std::fs::remove_dir_all(&dir);
    assert_matches_hf(&folder.tokenizer, "mistral", "HF folder");
    drop(folder);
    let engine = open_engine_with(&gguf, 64, KvType::F16);
    let _ = std::fs::remove_file(&gguf);
    assert_matches_hf(
        &engine.tokenizer,
        "llama",
        "ids from the converted Metaspace GGUF",
    );
    let hf: TokenizerRef = read_json(&spm_fixture("mistral").join("reference.json"));
    let added = ["[INST]", "[/INST]", "<tool>"];
    for t in &hf.texts {
        let ids = engine.tokenizer.encode(&t.text, true).expect("encodes");
        let differs = t.text.starts_with(' ') || added.iter().any(|a| t.text.contains(a));
        // "call <tool>..." differs only after <tool>, "x[INST]..." only after [INST].
        assert_eq!(
            ids != t.ids,
            differs,
            "{:?}: {ids:?} vs HF {:?}",
            t.text,
            t.ids
        );
    }
}

/// Metadata key `key` of `file` as text, "absent" when missing.
fn key(file: &GgufFile, key: &str) -> String {
    file.metadata()
        .get(key)
        .map_or_else(|| "absent".into(), |v| v.to_string())
}

/// The keys llama.cpp's converter writes for a SentencePiece vocabulary.
#[test]
fn spm_metadata_is_llama_cpp_s() {
    for (variant, prefix) in [("llama", "true"), ("gemma", "false"), ("mistral", "true")] {
        let dir = folder_with(variant, "keys");
        let gguf = convert(&dir, &format!("keys-{variant}"));
        let _ = std::fs::remove_dir_all(&dir);
        let file = GgufFile::open(&gguf).expect("converted file opens");
        let _ = std::fs::remove_file(&gguf);
        assert_eq!(key(&file, "tokenizer.ggml.model"), "\"llama\"");
        assert_eq!(key(&file, "tokenizer.ggml.pre"), "\"default\"");
        assert_eq!(key(&file, "tokenizer.ggml.merges"), "absent");
        assert_eq!(key(&file, "tokenizer.ggml.add_space_prefix"), prefix);
        assert_eq!(key(&file, "tokenizer.ggml.add_bos_token"), "true");
        assert_eq!(key(&file, "tokenizer.ggml.add_eos_token"), "false");
        for (k, id) in [("unknown", "0"), ("bos", "1"), ("eos", "2")] {
            assert_eq!(key(&file, &format!("tokenizer.ggml.{k}_token_id")), id);
        }
        let m = file.metadata();
        let tokens = m.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap();
        let types = m
            .get_i32_array("tokenizer.ggml.token_type")
            .unwrap()
            .unwrap();
        let scores = m.get_f32_array("tokenizer.ggml.scores").unwrap().unwrap();
        assert_eq!((tokens.len(), types.len(), scores.len()), (305, 305, 305));
        // <unk>, <s>, </s>, [INST], [/INST] are added special tokens: CONTROL; <tool> is
        // added but not special: USER_DEFINED; <0x00>..<0xFF> are BYTE.
        for (id, text, ty) in [
            (0, "<unk>", 3),
            (1, "<s>", 3),
            (3, "<0x00>", 6),
            (258, "<0xFF>", 6),
            (302, "[INST]", 3),
            (304, "<tool>", 4),
        ] {
            assert_eq!((tokens[id], types[id]), (text, ty), "token {id}");
        }
        assert!(types[259..302].iter().all(|&t| t == 1), "normal pieces");
        // The first merge ("h e") scores highest; a piece no merge makes scores lowest.
        let he = tokens.iter().position(|&t| t == "he").expect("he");
        assert_eq!(scores[he], -1.0);
        let lowest = scores.iter().copied().fold(f32::INFINITY, f32::min);
        let h = tokens.iter().position(|&t| t == "h").expect("h");
        assert_eq!(scores[h], lowest);
        let template = m.get_str("tokenizer.chat_template").unwrap().unwrap();
        assert!(template.contains("[INST]"), "{template}");
    }
}

/// Tokenizers that are neither kind, or SentencePiece-style ones with a step llama.cpp's
/// tokenizer lacks, are refused naming tokenizer.json and the field.
#[test]
fn other_tokenizers_are_refused_by_name() {
    let refused = |dir: PathBuf, tag: &str| {
        let out = std::env::temp_dir().join(format!(
            "hearth-convert-spm-{}-refused-{tag}.gguf",
            std::process::id()
        ));
        let e = convert_folder(&dir, &out, GgmlType::F16)
            .unwrap_err()
            .to_string();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!out.exists(), "{e}");
        eprintln!("{e}");
        e
    };
    let dir = folder_with("llama", "unigram");
    edit(
        &dir.join("tokenizer.json"),
        "\"type\": \"BPE\"",
        "\"type\": \"Unigram\"",
    );
    let e = refused(dir, "unigram");
    assert!(
        e.contains("tokenizer.json") && e.contains("'model.type'") && e.contains("Unigram"),
        "{e}"
    );

    let dir = folder_with("gemma", "nfkc");
    edit(
        &dir.join("tokenizer.json"),
        "\"normalizer\": {",
        "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}]}, \
         \"unused\": {",
    );
    let e = refused(dir, "nfkc");
    assert!(
        e.contains("tokenizer.json") && e.contains("'normalizer.normalizers[0]'"),
        "{e}"
    );

    let dir = folder_with("llama", "fallback");
    edit(
        &dir.join("tokenizer.json"),
        "\"byte_fallback\": true",
        "\"byte_fallback\": false",
    );
    let e = refused(dir, "fallback");
    assert!(
        e.contains("tokenizer.json") && e.contains("byte_fallback"),
        "{e}"
    );
}
