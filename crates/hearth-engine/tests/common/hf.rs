//! Checks of tiny HF checkpoints (scripts/make_hf_fixtures.py) against the transformers
//! outputs stored beside them in reference.json.

use std::path::{Path, PathBuf};

use hearth_engine::{Device, Engine, EngineOptions, KvType, Sequence};
use serde::Deserialize;

use super::{argmax, open_engine_with, read_json, repo_root, test_device};

/// transformers' outputs: `reference.json` has all fields, `reference_long.json` (prompts
/// longer than a rope scaling's original context) only `prompts`, which for dynamic NTK also
/// hold `step_logits`.
#[derive(Deserialize)]
pub struct Reference {
    pub prompts: Vec<PromptRef>,
    #[serde(default)]
    pub strings: Vec<StringRef>,
    #[serde(default)]
    pub chat: ChatRef,
}

#[derive(Deserialize)]
pub struct PromptRef {
    pub ids: Vec<u32>,
    pub hidden_norms: Vec<f32>,
    pub last_logits: Vec<f32>,
    pub greedy: Vec<u32>,
    /// The logits after each greedy token, decoded with the KV cache one token per forward
    /// pass (scripts/make_long_context_refs.py); empty where the reference has none.
    #[serde(default)]
    pub step_logits: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
pub struct StringRef {
    pub text: String,
    pub ids: Vec<u32>,
}

#[derive(Deserialize, Default)]
pub struct ChatRef {
    pub messages: Vec<MessageRef>,
    pub ids: Vec<u32>,
}

#[derive(Deserialize)]
pub struct MessageRef {
    pub role: String,
    pub content: String,
}

pub fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(name)
}

pub fn reference(dir: &Path) -> Reference {
    read_json(&dir.join("reference.json"))
}

/// Largest |hearth − transformers| over the last-position logits of every prompt (and of
/// every decode step where the reference has `step_logits`), and hearth's greedy tokens per
/// prompt.
pub fn run_prompts(engine: &mut Engine, r: &Reference) -> (f32, Vec<Vec<u32>>) {
    let mut max_diff = 0f32;
    let mut greedy = Vec::new();
    for p in &r.prompts {
        let mut seq = Sequence::new();
        let mut logits = engine.feed(&mut seq, &p.ids).expect("prompt runs");
        assert_eq!(logits.len(), p.last_logits.len(), "vocabulary size");
        let diff = max_abs_diff(&logits, &p.last_logits);
        eprintln!(
            "prompt of {} tokens: max |logit diff| = {diff:e}",
            p.ids.len()
        );
        max_diff = max_diff.max(diff);
        let mut tokens = Vec::new();
        let mut step_diff = 0f32;
        for i in 0..p.greedy.len() {
            let t = argmax(&logits);
            tokens.push(t);
            logits = engine.step(&mut seq, &[t]).expect("step runs");
            if let Some(want) = p.step_logits.get(i) {
                step_diff = step_diff.max(max_abs_diff(&logits, want));
            }
        }
        if !p.step_logits.is_empty() {
            eprintln!(
                "  {} decode steps to position {}: max |logit diff| = {step_diff:e}",
                p.step_logits.len(),
                p.ids.len() + p.step_logits.len() - 1
            );
            max_diff = max_diff.max(step_diff);
        }
        engine.release(&mut seq);
        greedy.push(tokens);
    }
    (max_diff, greedy)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "vocabulary size");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// Check the f32 fixture folder `name` against its transformers reference.
pub fn check_f32_folder(name: &str) {
    let dir = fixture(name);
    check_f32_model(&dir, &dir);
}

/// The KV cache the f32 checks run with, and their bound on |hearth − transformers| over the
/// logits.
///
/// NOTE: on the CPU the cache holds f32, as transformers computes, and nothing in the forward
/// pass is rounded below f32: what is left is the order of f32 sums (~1e-6 relative), far
/// inside 1e-3. The GPU backends' caches hold f16, so every key and value is rounded to 11
/// significant bits (relative 2^-11 ≈ 4.9e-4); with logits up to ~3 that alone moves them by
/// up to ~1.5e-3, even for a one-token prompt whose attention output is its own value row:
/// there the bound is 2e-3. A wrong rope, norm or tensor mapping moves logits by tenths or more.
pub fn f32_check_cache() -> (KvType, f32) {
    match test_device() {
        Device::Cpu => (KvType::F32, 1e-3),
        _ => (KvType::F16, 2e-3),
    }
}

/// Check the f32 model at `model` (a folder or a GGUF file) against the transformers
/// reference in `ref_dir`: the hidden-state norm after every layer (so a failure names the
/// first layer that diverges), the last-position logits and the greedy tokens.
pub fn check_f32_model(model: &Path, ref_dir: &Path) {
    let (kv_type, bound) = f32_check_cache();
    check_model_with(model, &ref_dir.join("reference.json"), 1024, kv_type, bound);
}

/// [`check_f32_model`] against the reference file `ref_file`, with an `n_ctx`-token context,
/// a KV cache of type `kv_type` and a bound on the logits.
pub fn check_model_with(model: &Path, ref_file: &Path, n_ctx: usize, kv_type: KvType, bound: f32) {
    let name = model
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("model");
    let r: Reference = read_json(ref_file);
    let mut engine = open_engine_with(model, n_ctx, kv_type);
    for p in &r.prompts {
        let norms = engine.hidden_norms(&p.ids).expect("traced run");
        assert_eq!(norms.len(), p.hidden_norms.len(), "{name}: hidden states");
        for (layer, (a, b)) in norms.iter().zip(&p.hidden_norms).enumerate() {
            // Row `layer` is the input of layer `layer` (the last row: after the final norm).
            let rel = (a - b).abs() / b.abs().max(1e-6);
            assert!(
                rel < 1e-3,
                "{name}: hidden state {layer} norm {a}, transformers {b}"
            );
        }
    }
    let (max_diff, greedy) = run_prompts(&mut engine, &r);
    eprintln!("{name}: max |logit diff| = {max_diff:e}");
    for (got, p) in greedy.iter().zip(&r.prompts) {
        assert_eq!(got, &p.greedy, "{name}: greedy tokens after {:?}", p.ids);
    }
    eprintln!("{name}: {kv_type} KV cache, bound {bound:e}");
    assert!(
        max_diff < bound,
        "{name}: max |logit diff| {max_diff} ({kv_type} KV cache)"
    );
}

/// A scratch copy of a fixture folder.
pub fn scratch_copy(name: &str, tag: &str) -> PathBuf {
    let dst = std::env::temp_dir().join(format!("hearth-hf-{}-{tag}", std::process::id()));
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
pub fn load_error(dir: &Path) -> String {
    let opts = EngineOptions {
        n_ctx: 64,
        n_threads: 1,
        device: super::test_device(),
        ..EngineOptions::default()
    };
    let result = Engine::load(dir, &opts);
    let _ = std::fs::remove_dir_all(dir);
    match result {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

pub fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).expect("read");
    assert!(text.contains(from), "{} lacks {from}", path.display());
    std::fs::write(path, text.replace(from, to)).expect("write");
}
