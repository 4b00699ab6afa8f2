//! Embedding models against references nobody here wrote: all-MiniLM-L6-v2 against
//! sentence-transformers, and a decoder-only folder with last-token pooling against
//! transformers (goldens from scripts/make_embedding_goldens.py).

mod common;

use std::path::{Path, PathBuf};

use hearth_engine::embed::{is_embedding_model, EmbeddingModel, PoolingMode};
use serde::Deserialize;

#[derive(Deserialize)]
struct MiniLmGolden {
    max_seq_length: usize,
    sentences: Vec<String>,
    token_ids: Vec<Vec<u32>>,
    embeddings: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct DecoderGolden {
    texts: Vec<String>,
    token_ids: Vec<Vec<u32>>,
    embeddings: Vec<Vec<f32>>,
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// The MiniLM folder, or `None` (with a visible message) when it has not been fetched.
fn minilm_dir() -> Option<PathBuf> {
    let dir = common::models_dir().join("all-MiniLM-L6-v2");
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    eprintln!(
        "SKIPPED: {} is missing (run scripts/fetch-models.sh minilm)",
        dir.display()
    );
    None
}

fn minilm_golden() -> MiniLmGolden {
    common::read_json(&common::repo_root().join("tests/fixtures/embeddings/minilm.json"))
}

#[test]
fn minilm_token_ids_match_hf_tokenizers() {
    let Some(dir) = minilm_dir() else { return };
    let model = EmbeddingModel::load(&dir, 2).unwrap();
    let golden = minilm_golden();
    assert_eq!(model.info().max_tokens, golden.max_seq_length);
    for (text, want) in golden.sentences.iter().zip(&golden.token_ids) {
        assert_eq!(&model.tokenize(text, true).unwrap(), want, "{text:?}");
    }
    // The long sentence is refused, with its length, when truncation is not asked for.
    let long = golden.sentences.last().unwrap();
    let err = model.tokenize(long, false).unwrap_err().to_string();
    assert!(err.contains("at most 256"), "{err}");
}

#[test]
fn minilm_vectors_match_sentence_transformers() {
    let Some(dir) = minilm_dir() else { return };
    assert!(is_embedding_model(&dir));
    let model = EmbeddingModel::load(&dir, 2).unwrap();
    let info = model.info();
    assert_eq!((info.arch.as_str(), info.n_embd), ("bert", 384));
    assert_eq!(info.pooling.mode, PoolingMode::Mean);
    assert!(info.pooling.normalize);
    let golden = minilm_golden();
    let ids: Vec<Vec<u32>> = golden
        .sentences
        .iter()
        .map(|s| model.tokenize(s, true).unwrap())
        .collect();
    let got = model.embed_tokens(&ids).unwrap();
    assert_eq!(got.len(), 20);
    let mut worst = f64::INFINITY;
    for ((text, g), want) in golden.sentences.iter().zip(&got).zip(&golden.embeddings) {
        let c = cosine(g, want);
        worst = worst.min(c);
        assert!(c > 0.9999, "{text:?}: cosine {c}");
        let norm: f32 = g.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{text:?}: norm {norm}");
    }
    eprintln!("worst cosine over 20 sentences: 1 - {:.2e}", 1.0 - worst);
    // One at a time gives the same vectors as all together: attention stays in each text.
    let single = model.embed_tokens(&ids[2..3]).unwrap();
    assert!(cosine(&single[0], &got[2]) > 0.999999);
}

/// The tiny Qwen3 checkpoint plus the sentence-transformers modules of the fixture.
fn decoder_folder(tmp: &Path) -> PathBuf {
    let root = common::repo_root().join("tests/fixtures");
    for entry in std::fs::read_dir(root.join("hf-tiny-qwen3")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), tmp.join(entry.file_name())).unwrap();
    }
    let modules = root.join("embed-tiny-qwen3");
    std::fs::copy(modules.join("modules.json"), tmp.join("modules.json")).unwrap();
    std::fs::create_dir_all(tmp.join("1_Pooling")).unwrap();
    std::fs::copy(
        modules.join("1_Pooling/config.json"),
        tmp.join("1_Pooling/config.json"),
    )
    .unwrap();
    tmp.to_path_buf()
}

#[test]
fn decoder_last_token_pooling_matches_transformers() {
    let tmp = std::env::temp_dir().join(format!("hearth-embed-qwen3-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let dir = decoder_folder(&tmp);
    assert!(is_embedding_model(&dir));
    let model = EmbeddingModel::load(&dir, 2).unwrap();
    assert_eq!(model.info().pooling.mode, PoolingMode::LastToken);
    let golden: DecoderGolden = common::read_json(
        &common::repo_root().join("tests/fixtures/embed-tiny-qwen3/reference.json"),
    );
    for ((text, ids), want) in golden
        .texts
        .iter()
        .zip(&golden.token_ids)
        .zip(&golden.embeddings)
    {
        assert_eq!(&model.tokenize(text, true).unwrap(), ids, "{text:?}");
        let got = model.embed_tokens(std::slice::from_ref(ids)).unwrap();
        let c = cosine(&got[0], want);
        assert!(c > 0.9999, "{text:?}: cosine {c}");
    }
    // A plain generative folder is not an embedding model.
    assert!(!is_embedding_model(
        &common::repo_root().join("tests/fixtures/hf-tiny-qwen3")
    ));
    std::fs::remove_dir_all(&tmp).ok();
}

/// A copy of the MiniLM folder's small files (the weights linked) in a fresh directory,
/// for breaking one file at a time.
fn minilm_copy(src: &Path, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hearth-embed-{name}-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    for f in [
        "config.json",
        "tokenizer.json",
        "modules.json",
        "sentence_bert_config.json",
        "1_Pooling/config.json",
    ] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let weights = dir.join("model.safetensors");
    if !weights.exists() {
        std::os::unix::fs::symlink(src.join("model.safetensors"), weights).unwrap();
    }
    dir
}

#[test]
fn broken_embedding_folders_are_errors_naming_file_and_key() {
    let Some(src) = minilm_dir() else { return };
    type Edit = fn(&Path);
    let cases: [(&str, Edit, &str); 6] = [
        (
            "act",
            |d| edit_json(&d.join("config.json"), "hidden_act", "\"relu\""),
            "config.json: 'hidden_act' is 'relu'",
        ),
        (
            "hidden",
            |d| edit_json(&d.join("config.json"), "hidden_size", "\"big\""),
            "config.json: 'hidden_size'",
        ),
        (
            "module",
            |d| {
                std::fs::write(
                    d.join("modules.json"),
                    r#"[{"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#,
                )
                .unwrap()
            },
            "modules.json: module 0: type 'sentence_transformers.models.Dense' is not supported yet",
        ),
        (
            "maxpool",
            |d| {
                std::fs::write(
                    d.join("1_Pooling/config.json"),
                    r#"{"pooling_mode_max_tokens": true}"#,
                )
                .unwrap()
            },
            "config.json: 'pooling_mode_max_tokens' is not supported yet",
        ),
        (
            "seq",
            |d| edit_json(&d.join("sentence_bert_config.json"), "max_seq_length", "-3"),
            "sentence_bert_config.json: 'max_seq_length' is not a positive integer",
        ),
        (
            "tok",
            |d| std::fs::remove_file(d.join("tokenizer.json")).unwrap(),
            "tokenizer.json: is missing",
        ),
    ];
    for (name, edit, says) in cases {
        let dir = minilm_copy(&src, name);
        edit(&dir);
        let err = match EmbeddingModel::load(&dir, 1) {
            Ok(_) => panic!("{name}: loaded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(says), "{name}: {err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// Replace the value of `key` in a JSON object file with `value` (JSON text).
fn edit_json(path: &Path, key: &str, value: &str) {
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    json[key] = serde_json::from_str(value).unwrap();
    std::fs::write(path, json.to_string()).unwrap();
}
