//! Helpers shared by the integration tests: locating test models and opening their tokenizers.

#![allow(dead_code)]

use hearth_gguf::GgufFile;
use hearth_tokenizer::Tokenizer;
use std::path::PathBuf;

/// `$HEARTH_TEST_MODELS`, else `$HOME/.cache/hearth-test-models`.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HEARTH_TEST_MODELS") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache").join("hearth-test-models")
}

/// Opens a test model; panics with instructions when it is missing.
pub fn open_model(file_name: &str) -> GgufFile {
    let path = models_dir().join(file_name);
    assert!(
        path.exists(),
        "test model {} is missing: run scripts/fetch-models.sh (or set HEARTH_TEST_MODELS)",
        path.display()
    );
    GgufFile::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()))
}

/// The tokenizer of a test model.
pub fn tokenizer(file_name: &str) -> Tokenizer {
    let file = open_model(file_name);
    Tokenizer::from_gguf(file.metadata())
        .unwrap_or_else(|e| panic!("tokenizer of {file_name}: {e}"))
}

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";
