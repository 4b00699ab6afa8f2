//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use hearth_engine::{Device, Engine, EngineOptions, KvType};

pub mod hf;

/// The repository root: where this crate was built from, or the working directory when the
/// test binary runs from a copy of the repository elsewhere (a GPU machine without Rust).
pub fn repo_root() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if built.join("tests/fixtures").is_dir() {
        built
    } else {
        std::env::current_dir().unwrap_or(built)
    }
}

pub fn golden_dir(name: &str) -> PathBuf {
    repo_root().join("tests/goldens").join(name)
}

/// Where the test models are: `$HEARTH_TEST_MODELS`, else `~/.cache/hearth-test-models`.
pub fn models_dir() -> PathBuf {
    match std::env::var_os("HEARTH_TEST_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/hearth-test-models"),
    }
}

/// A model file: a fixture in the repository, or a downloaded test model.
pub fn model_path(file: &str) -> PathBuf {
    let fixture = repo_root().join("tests/fixtures").join(file);
    if fixture.exists() {
        return fixture;
    }
    let p = models_dir().join(file);
    assert!(
        p.exists(),
        "test model {} is missing: run scripts/fetch-models.sh",
        p.display()
    );
    p
}

pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> T {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/make_goldens.py)", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The device the tests run on: `$HEARTH_TEST_DEVICE` (cpu, cuda, cuda:N), else the CPU,
/// where the goldens were made.
pub fn test_device() -> Device {
    match std::env::var("HEARTH_TEST_DEVICE") {
        Ok(d) => d
            .parse()
            .unwrap_or_else(|e| panic!("HEARTH_TEST_DEVICE: {e}")),
        Err(_) => Device::Cpu,
    }
}

/// The engine as the tests use it: 2 threads (as the goldens were made), 1024-token context.
pub fn open_engine(path: &Path) -> Engine {
    open_engine_with(path, 1024, KvType::F16)
}

/// [`open_engine`] with an `n_ctx`-token context and a KV cache of type `kv_type`.
pub fn open_engine_with(path: &Path, n_ctx: usize, kv_type: KvType) -> Engine {
    let opts = EngineOptions {
        n_ctx,
        n_threads: 2,
        device: test_device(),
        kv_type,
        ..EngineOptions::default()
    };
    Engine::load(path, &opts).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Index of the largest value; ties go to the lower index.
pub fn argmax(xs: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best as u32
}
