//! `hearth embed`: one JSON array per text, one per line, equal to sentence-transformers'
//! vectors (goldens from scripts/make_embedding_goldens.py), and one-line errors.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn models_dir() -> PathBuf {
    match std::env::var_os("HEARTH_TEST_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/hearth-test-models"),
    }
}

/// The MiniLM folder, or `None` (with a visible message) when it has not been fetched.
fn minilm() -> Option<PathBuf> {
    let dir = models_dir().join("all-MiniLM-L6-v2");
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    eprintln!(
        "SKIPPED: {} is missing (run scripts/fetch-models.sh minilm)",
        dir.display()
    );
    None
}

fn golden() -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/embeddings/minilm.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn hearth(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hearth");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn embed_prints_one_json_array_per_text() {
    let Some(dir) = minilm() else { return };
    let g = golden();
    let sentences = g["sentences"].as_array().unwrap();
    let (a, b, c) = (
        sentences[0].as_str().unwrap(),
        sentences[5].as_str().unwrap(),
        sentences[8].as_str().unwrap(),
    );
    // Arguments and standard-input lines (`-`), in order.
    let out = hearth(
        &["embed", dir.to_str().unwrap(), a, "-", c],
        &format!("{b}\n"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for (line, want) in lines.iter().zip([0, 5, 8]) {
        assert!(line.starts_with('[') && line.ends_with(']'), "{line}");
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let v = floats(&v);
        assert_eq!(v.len(), 384);
        let c = cosine(&v, &floats(&g["embeddings"][want]));
        assert!(c > 0.9999, "sentence {want}: cosine {c}");
    }
}

#[test]
fn embed_cuts_long_texts_with_a_note_or_refuses_them() {
    let Some(dir) = minilm() else { return };
    let g = golden();
    let long = g["sentences"][19].as_str().unwrap();
    let out = hearth(&["embed", dir.to_str().unwrap(), long], "");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("text 1 cut to the model's 256 tokens"),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(cosine(&floats(&v), &floats(&g["embeddings"][19])) > 0.9999);

    let out = hearth(&["embed", "--no-truncate", dir.to_str().unwrap(), long], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("text 1") && stderr.contains("at most 256"),
        "{stderr}"
    );
}

#[test]
fn embed_refuses_a_model_that_is_not_an_embedding_model() {
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf-tiny-qwen3");
    let out = hearth(&["embed", fixture.to_str().unwrap(), "x"], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("hf-tiny-qwen3: not an embedding model"),
        "{stderr}"
    );
}
