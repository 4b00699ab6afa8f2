//! MLX-quantized checkpoint folders (mlx-community layout) against HF transformers run on the
//! same weights dequantized: fixtures made by scripts/make_mlx_fixtures.py.
//!
//! The reference runs in f32 on exactly the values scale * q + bias that hearth computes group
//! by group (as scale * Σq·x + bias * Σx). On the CPU only summation order differs, so the f32
//! folders' checks and bound hold. A wrong bit order, group size or scale row moves logits by
//! tenths.
//!
//! NOTE: on CUDA, prompt steps of more than a few tokens multiply on tensor cores: weights
//! dequantized to f16 and activations rounded to f16 (relative 2^-11 each), as for every
//! quantized type there. That is the f16 folder's error, so the f16 folder's bound (1e-2)
//! applies; decode steps stay exact (the GEMV over packed words). The wgpu backend's MLX
//! matmul gives the CPU's bits at every batch size, so the f32 bound of its cache holds there.

mod common;

use std::path::Path;

use common::hf::{check_model_with, f32_check_cache, fixture, load_error, scratch_copy};
use common::{read_json, test_device};
use hearth_engine::Device;

/// The fixture `name` against its reference, bounded as the module note says.
fn check_mlx_folder(name: &str) {
    let dir = fixture(name);
    let (kv_type, f32_bound) = f32_check_cache();
    let bound = match test_device() {
        Device::Cpu | Device::Wgpu => f32_bound,
        _ => 1e-2,
    };
    check_model_with(&dir, &dir.join("reference.json"), 1024, kv_type, bound);
}

/// 4-bit groups of 64, one layer overridden to 8-bit groups of 32, quantized embedding table
/// and untied lm_head, f16 scales.
#[test]
fn llama_mlx_4bit_matches_transformers_on_dequantized_weights() {
    check_mlx_folder("mlx-tiny-llama-q4");
}

/// 8-bit groups of 32, one layer left unquantized (`false`), quantized embedding table used
/// as the tied output head, bf16 scales, QK-norm.
#[test]
fn qwen3_mlx_8bit_matches_transformers_on_dequantized_weights() {
    check_mlx_folder("mlx-tiny-qwen3-q8");
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
