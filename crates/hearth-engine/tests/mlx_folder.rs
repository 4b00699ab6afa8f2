//! MLX-quantized checkpoint folders (mlx-community layout) against HF transformers run on the
//! same weights dequantized: fixtures made by scripts/make_mlx_fixtures.py.

mod common;

use std::path::{Path, PathBuf};

use common::{argmax, open_engine, read_json, repo_root};
use hearth_engine::{Engine, EngineOptions, Sequence};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    prompts: Vec<PromptRef>,
}

#[derive(Deserialize)]
struct PromptRef {
    ids: Vec<u32>,
    hidden_norms: Vec<f32>,
    last_logits: Vec<f32>,
    greedy: Vec<u32>,
}

fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(name)
}

/// Runs every prompt of the fixture's reference and checks hidden-state norms, last logits and
/// greedy tokens.
fn check_folder(name: &str) {
    let dir = fixture(name);
    let r: Reference = read_json(&dir.join("reference.json"));
    let mut engine = open_engine(&dir);
    let mut max_diff = 0f32;
    for p in &r.prompts {
        let norms = engine.hidden_norms(&p.ids).expect("traced run");
        assert_eq!(norms.len(), p.hidden_norms.len(), "{name}: hidden states");
        for (layer, (a, b)) in norms.iter().zip(&p.hidden_norms).enumerate() {
            let rel = (a - b).abs() / b.abs().max(1e-6);
            assert!(
                rel < 1e-3,
                "{name}: hidden state {layer} norm {a}, transformers {b}"
            );
        }
        let mut seq = Sequence::new();
        let mut logits = engine.feed(&mut seq, &p.ids).expect("prompt runs");
        assert_eq!(logits.len(), p.last_logits.len(), "vocabulary size");
        for (a, b) in logits.iter().zip(&p.last_logits) {
            max_diff = max_diff.max((a - b).abs());
        }
        let mut tokens = Vec::new();
        for _ in 0..p.greedy.len() {
            let t = argmax(&logits);
            tokens.push(t);
            logits = engine.step(&mut seq, &[t]).expect("step runs");
        }
        engine.release(&mut seq);
        assert_eq!(tokens, p.greedy, "{name}: greedy tokens after {:?}", p.ids);
    }
    eprintln!("{name}: max |logit diff| = {max_diff:e}");
    // NOTE: the reference runs in f32 on exactly the values scale * q + bias that hearth
    // computes group by group (as scale * Σq·x + bias * Σx), so only summation order and the
    // f16 KV cache differ: the same ~1.5e-3 bound as the f32 folders. A wrong bit order,
    // group size or scale row moves logits by tenths.
    assert!(max_diff < 2e-3, "{name}: max |logit diff| {max_diff}");
}

/// 4-bit groups of 64, one layer overridden to 8-bit groups of 32, quantized embedding table
/// and untied lm_head, f16 scales.
#[test]
fn llama_mlx_4bit_matches_transformers_on_dequantized_weights() {
    check_folder("mlx-tiny-llama-q4");
}

/// 8-bit groups of 32, one layer left unquantized (`false`), quantized embedding table used
/// as the tied output head, bf16 scales, QK-norm.
#[test]
fn qwen3_mlx_8bit_matches_transformers_on_dequantized_weights() {
    check_folder("mlx-tiny-qwen3-q8");
}

/// A scratch copy of a fixture folder.
fn scratch_copy(name: &str, tag: &str) -> PathBuf {
    let dst = std::env::temp_dir().join(format!("hearth-mlx-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).expect("scratch dir");
    for entry in std::fs::read_dir(fixture(name)).expect("fixture dir") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("file name");
        std::fs::copy(&path, dst.join(name)).expect("copy");
    }
    dst
}

/// The error loading `dir` gives; removes `dir`.
fn load_error(dir: &Path) -> String {
    let opts = EngineOptions {
        n_ctx: 64,
        n_threads: 1,
        device: common::test_device(),
        ..EngineOptions::default()
    };
    let result = Engine::load(dir, &opts);
    let _ = std::fs::remove_dir_all(dir);
    match result {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

/// Rewrites `config.json` of `dir` with `f` applied to its JSON.
fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut json: serde_json::Value = read_json(&path);
    f(&mut json);
    std::fs::write(&path, json.to_string()).expect("write config");
}

#[test]
fn unknown_bits_and_mismatched_config_give_one_clear_error() {
    let dir = scratch_copy("mlx-tiny-llama-q4", "bits3");
    edit_config(&dir, |j| {
        j["quantization"]["bits"] = 3.into();
        j["quantization_config"]["bits"] = 3.into();
    });
    let e = load_error(&dir);
    assert!(
        e.contains("config.json") && e.contains("quantization.bits") && e.contains("3 bits"),
        "{e}"
    );

    let dir = scratch_copy("mlx-tiny-llama-q4", "override");
    edit_config(&dir, |j| {
        j["quantization"]["model.layers.0.mlp.down_proj"]["bits"] = 6.into();
    });
    let e = load_error(&dir);
    assert!(
        e.contains("config.json") && e.contains("quantization.model.layers.0.mlp.down_proj.bits"),
        "{e}"
    );

    // The config says 8 bits but the tensors were packed with 4: the shapes disagree.
    let dir = scratch_copy("mlx-tiny-llama-q4", "shape");
    edit_config(&dir, |j| {
        j["quantization"]["bits"] = 8.into();
    });
    let e = load_error(&dir);
    assert!(e.contains("U32") && e.contains("8-bit groups of 64"), "{e}");

    let dir = scratch_copy("mlx-tiny-llama-q4", "noblock");
    edit_config(&dir, |j| {
        let o = j.as_object_mut().expect("object");
        o.remove("quantization");
        o.remove("quantization_config");
    });
    let e = load_error(&dir);
    assert!(
        e.contains(".scales") && e.contains("no 'quantization' block"),
        "{e}"
    );
}
