//! Sparse mixture-of-experts models from GGUF (llama.cpp's names: `ffn_gate_inp`, stacked
//! `ffn_{gate,up,down}_exps`): the tiny Mixtral and Qwen 3 MoE checkpoints of
//! `tests/fixtures/hf-tiny-*`, written as GGUF by scripts/make_moe_gguf.py.
//!
//! The f32 files are checked against HF transformers (the folders' reference.json), the Q8_0
//! files against llama.cpp on the same files (goldens by scripts/check_moe_gguf_llamacpp.py,
//! llama-cpp-python 0.3.16, which also gives transformers' greedy tokens on the f32 files).

mod common;

use std::path::PathBuf;

use common::hf::{check_f32_model, fixture};
use common::{argmax, model_path, read_json, repo_root};
use hearth_engine::{Device, Engine, EngineOptions, Sequence};
use hearth_gguf::{GgufFile, GgufWriter, Value};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    prompts: Vec<PromptRef>,
}

#[derive(Deserialize)]
struct PromptRef {
    ids: Vec<u32>,
    last_logits: Vec<f32>,
    greedy: Vec<u32>,
}

/// Largest |hearth − reference| over the last-position logits of every prompt; asserts that
/// the greedy tokens are the reference's.
fn max_logit_diff(engine: &mut Engine, r: &Reference, what: &str) -> f32 {
    let mut worst = 0f32;
    for p in &r.prompts {
        let mut seq = Sequence::new();
        let mut logits = engine.feed(&mut seq, &p.ids).expect("prompt runs");
        assert_eq!(logits.len(), p.last_logits.len(), "{what}: vocabulary size");
        for (a, b) in logits.iter().zip(&p.last_logits) {
            worst = worst.max((a - b).abs());
        }
        let mut tokens = Vec::new();
        for _ in 0..p.greedy.len() {
            let t = argmax(&logits);
            tokens.push(t);
            logits = engine.step(&mut seq, &[t]).expect("step runs");
        }
        engine.release(&mut seq);
        assert_eq!(tokens, p.greedy, "{what}: greedy tokens after {:?}", p.ids);
    }
    eprintln!("{what}: max |logit diff| = {worst:e}");
    worst
}

fn check_f32_against_transformers(file: &str, folder: &str) {
    check_f32_model(&model_path(file), &fixture(folder));
}

fn check_q8_0_against_llamacpp(file: &str) {
    let golden = file.replace(".gguf", ".llamacpp.json");
    let r: Reference = read_json(&repo_root().join("tests/fixtures").join(golden));
    // NOTE: agreement to float rounding is a property of the CPU backend, which rounds
    // activations exactly as llama.cpp's CPU path does; whatever HEARTH_TEST_DEVICE says, this
    // runs there. GPU backends are held to the CPU backend on these files by cuda_vs_cpu.rs.
    let opts = EngineOptions {
        n_ctx: 1024,
        n_threads: 2,
        device: Device::Cpu,
        ..EngineOptions::default()
    };
    let path = model_path(file);
    let mut engine =
        Engine::load(&path, &opts).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let diff = max_logit_diff(&mut engine, &r, file);
    // NOTE: both quantize activations to Q8_0 for the dot products and keep f16 KV, so they
    // agree to float rounding (2.4e-7 measured); a wrong expert slice or routing moves the
    // logits by tenths.
    assert!(diff < 1e-4, "{file}: max |logit diff| {diff}");
}

#[test]
fn mixtral_gguf_f32_matches_transformers() {
    check_f32_against_transformers("tiny-mixtral-f32.gguf", "hf-tiny-mixtral");
}

#[test]
fn qwen3_moe_gguf_f32_matches_transformers() {
    check_f32_against_transformers("tiny-qwen3-moe-f32.gguf", "hf-tiny-qwen3-moe");
}

#[test]
fn mixtral_gguf_q8_0_matches_llamacpp() {
    check_q8_0_against_llamacpp("tiny-mixtral-q8_0.gguf");
}

#[test]
fn qwen3_moe_gguf_q8_0_matches_llamacpp() {
    check_q8_0_against_llamacpp("tiny-qwen3-moe-q8_0.gguf");
}

/// A copy of fixture `file` with metadata `key` set to `value` (removed when `None`) and
/// tensor `reshape.0` given dimensions `reshape.1` (same bytes); returns its path.
fn edited_copy(
    file: &str,
    tag: &str,
    key: (&str, Option<Value>),
    reshape: Option<(&str, &[u64])>,
) -> PathBuf {
    let src = GgufFile::open(model_path(file)).expect("fixture opens");
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata().iter() {
        if k != key.0 {
            w.add_kv(k, v.clone()).expect("metadata");
        }
    }
    if let Some(v) = key.1 {
        w.add_kv(key.0, v).expect("metadata");
    }
    for t in src.tensors() {
        let dims = match reshape {
            Some((name, dims)) if name == t.name => dims.to_vec(),
            _ => t.dims.clone(),
        };
        w.add_tensor(&t.name, &dims, t.ty, src.tensor_data(t))
            .expect("tensor");
    }
    let path = std::env::temp_dir().join(format!("hearth-moe-{}-{tag}.gguf", std::process::id()));
    w.write(&path).expect("write");
    path
}

/// The error loading `path`; removes the file.
fn load_error(path: PathBuf) -> String {
    let opts = EngineOptions {
        n_ctx: 64,
        n_threads: 1,
        device: common::test_device(),
        ..EngineOptions::default()
    };
    let result = Engine::load(&path, &opts);
    let _ = std::fs::remove_file(&path);
    match result {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_moe_files_name_the_key_or_tensor() {
    let file = "tiny-qwen3-moe-q8_0.gguf";
    let e = load_error(edited_copy(
        file,
        "nocount",
        ("qwen3moe.expert_count", None),
        None,
    ));
    assert!(e.contains("'qwen3moe.expert_count'"), "{e}");

    let used = ("qwen3moe.expert_used_count", Some(Value::U32(9)));
    let e = load_error(edited_copy(file, "used", used, None));
    assert!(
        e.contains("'qwen3moe.expert_used_count'") && e.contains("9 experts per token of 4"),
        "{e}"
    );

    // The same bytes seen as 2 experts of twice the width.
    let reshape = ("blk.1.ffn_up_exps.weight", &[64u64, 64, 2][..]);
    let e = load_error(edited_copy(file, "shape", ("none", None), Some(reshape)));
    assert!(
        e.contains("'blk.1.ffn_up_exps.weight'") && e.contains("expected [64, 32, 4]"),
        "{e}"
    );
}

/// Files converted before llama.cpp stacked the experts (early Mixtral GGUFs) hold each expert
/// as `blk.N.ffn_gate.E.weight`: the same model, split that way, gives the same logits.
#[test]
fn mixtral_gguf_with_experts_stored_one_by_one() {
    let src = GgufFile::open(model_path("tiny-mixtral-f32.gguf")).expect("fixture opens");
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata().iter() {
        w.add_kv(k, v.clone()).expect("metadata");
    }
    let mut n_split = 0;
    for t in src.tensors() {
        let data = src.tensor_data(t);
        match t.name.strip_suffix("_exps.weight") {
            Some(stem) => {
                // [cols, rows, n_expert]: expert e is the e-th of n_expert equal byte ranges.
                let n_expert = t.dims[2] as usize;
                let size = data.len() / n_expert;
                for e in 0..n_expert {
                    let name = format!("{stem}.{e}.weight");
                    let bytes = &data[e * size..(e + 1) * size];
                    w.add_tensor(name, &t.dims[..2], t.ty, bytes)
                        .expect("expert");
                    n_split += 1;
                }
            }
            None => w.add_tensor(&t.name, &t.dims, t.ty, data).expect("tensor"),
        }
    }
    assert_eq!(n_split, 2 * 3 * 4, "2 layers, 3 projections, 4 experts");
    let path = std::env::temp_dir().join(format!("hearth-moe-{}-split.gguf", std::process::id()));
    w.write(&path).expect("write");
    let r: Reference = read_json(
        &repo_root()
            .join("tests/fixtures/hf-tiny-mixtral")
            .join("reference.json"),
    );
    let opened = Engine::load(
        &path,
        &EngineOptions {
            n_ctx: 1024,
            n_threads: 2,
            device: common::test_device(),
            ..EngineOptions::default()
        },
    );
    let _ = std::fs::remove_file(&path);
    let diff = max_logit_diff(&mut opened.expect("split file loads"), &r, "split experts");
    assert!(diff < 2e-3, "split experts: max |logit diff| {diff}");
}
