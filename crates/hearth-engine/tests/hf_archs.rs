//! The dense architecture families and rope variants against HF transformers: tiny
//! random-weight checkpoints made by scripts/make_hf_fixtures.py, and GGUF files written from
//! some of them by scripts/make_gguf_from_hf.py (llama.cpp's names and keys), which must give
//! the folder's transformers outputs too.

mod common;

use std::path::Path;

use common::hf::{
    check_f32_folder, check_f32_model, check_model_with, edit, f32_check_cache, fixture,
    load_error, reference, run_prompts, scratch_copy, Reference,
};
use common::{open_engine, open_engine_with, read_json, repo_root};
use hearth_engine::{SeqStep, Sequence};

#[test]
fn mistral_sliding_window_matches_transformers() {
    check_f32_folder("hf-tiny-mistral");
}

/// Gemma: GELU (tanh) gating, (1 + w) norms, √hidden embedding scale, head_dim 32 ≠ 64 / 4.
#[test]
fn gemma_matches_transformers() {
    check_f32_folder("hf-tiny-gemma");
}

/// Gemma 2: soft caps (small in the fixture), sliding layer 0, global layer 1, post-norms.
#[test]
fn gemma2_matches_transformers() {
    check_f32_folder("hf-tiny-gemma2");
}

/// Gemma 3 text: rope per layer type (linear ×8 on the global layer), QK-norm,
/// query_pre_attn_scalar 24 with head_dim 16.
#[test]
fn gemma3_text_matches_transformers() {
    check_f32_folder("hf-tiny-gemma3");
}

/// The dynamic NTK fixture's max_position_embeddings: its base grows past it.
const DYNAMIC_ORIGINAL: usize = 256;

/// Dynamic NTK: plain rope up to max_position_embeddings (reference.json), then a base that
/// grows with each forward pass's sequence length (reference_long.json, made by
/// scripts/make_long_context_refs.py): prompts of 250, 300 and 400 tokens in one step, each
/// followed by 12 greedy decode steps of one token, whose logits are checked too (the first
/// prompt crosses the limit while decoding). Each step raises the base from its own length and
/// the cached keys keep theirs, as in transformers with its KV cache.
#[test]
fn llama_dynamic_rope_matches_transformers() {
    let dir = fixture("hf-tiny-llama-dynamic");
    check_f32_folder("hf-tiny-llama-dynamic");
    let (kv_type, bound) = f32_check_cache();
    let long = dir.join("reference_long.json");
    check_model_with(&dir, &long, 2 * DYNAMIC_ORIGINAL, kv_type, bound);
}

/// The grown base is what the long prompts check: with plain rope in its place the logits
/// move far beyond the tolerance.
#[test]
fn dynamic_rope_growth_is_checked_by_the_fixture() {
    let dir = scratch_copy("hf-tiny-llama-dynamic", "plain");
    edit(&dir.join("config.json"), "\"dynamic\"", "\"default\"");
    let r: Reference = read_json(&fixture("hf-tiny-llama-dynamic").join("reference_long.json"));
    let mut engine = open_engine_with(&dir, 2 * DYNAMIC_ORIGINAL, f32_check_cache().0);
    let (diff, _) = run_prompts(&mut engine, &r);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("long prompts with plain rope: max |logit diff| = {diff:e}");
    assert!(diff > 2e-2, "plain rope gives only {diff}");
}

/// In one batch, each sequence's base follows its own length: a sequence past the original
/// context and one inside it, stepped together, give the logits each gives stepped alone.
#[test]
fn dynamic_rope_base_is_per_sequence_in_a_batch() {
    let dir = fixture("hf-tiny-llama-dynamic");
    let (kv_type, bound) = f32_check_cache();
    let mut engine = open_engine_with(&dir, 2 * DYNAMIC_ORIGINAL, kv_type);
    let prompt = |n: usize| -> Vec<u32> { (0..n as u32).map(|i| (i * 37 + 11) % 300).collect() };
    let (long, short) = (prompt(DYNAMIC_ORIGINAL + 20), prompt(40));
    let (next_long, next_short) = ([5u32, 6, 7], [9u32, 10]);
    let mut alone = Vec::new();
    for (p, next) in [(&long, &next_long[..]), (&short, &next_short[..])] {
        let mut seq = Sequence::new();
        engine.feed(&mut seq, p).expect("prompt runs");
        alone.push(engine.step(&mut seq, next).expect("step runs"));
        engine.release(&mut seq);
    }
    let (mut a, mut b) = (Sequence::new(), Sequence::new());
    engine.feed(&mut a, &long).expect("prompt runs");
    engine.feed(&mut b, &short).expect("prompt runs");
    let mut work = [
        SeqStep {
            seq: &mut a,
            tokens: &next_long,
            logits_rows: vec![next_long.len() - 1],
        },
        SeqStep {
            seq: &mut b,
            tokens: &next_short,
            logits_rows: vec![next_short.len() - 1],
        },
    ];
    let together = engine.step_batch(&mut work).expect("batched step");
    for (name, (x, y)) in ["long", "short"].iter().zip(together.iter().zip(&alone)) {
        let diff = x
            .iter()
            .zip(y)
            .map(|(p, q)| (p - q).abs())
            .fold(0f32, f32::max);
        eprintln!("{name} sequence batched vs alone: max |logit diff| = {diff:e}");
        assert!(diff < bound, "{name}: batched logits differ by {diff}");
    }
}

#[test]
fn llama_linear_rope_matches_transformers() {
    check_f32_folder("hf-tiny-llama-linear");
}

/// YaRN: blended per-frequency factors and the attention factor (0.1 ln 4 + 1).
#[test]
fn llama_yarn_rope_matches_transformers() {
    check_f32_folder("hf-tiny-llama-yarn");
}

/// Phi 3: fused qkv / gate-up (split at load), half of each head rotated, a sliding window.
#[test]
fn phi3_matches_transformers() {
    check_f32_folder("hf-tiny-phi3");
}

/// The LongRoPE fixture's original context: contexts up to it run the short factors.
const LONGROPE_ORIGINAL: usize = 64;

/// LongRoPE short factors and its attention factor (√(1 + ln 4 / ln 64)), in a context no
/// longer than the original one.
#[test]
fn phi3_longrope_matches_transformers() {
    let dir = fixture("hf-tiny-phi3-longrope");
    check_longrope(&dir, &dir);
}

/// The folder or GGUF `model` against transformers both ways: short prompts in the original
/// context (short factors), and prompts longer than it (reference_long.json, made by
/// scripts/make_long_context_refs.py) in the 256-token context the model was scaled to, where
/// transformers and hearth both take the long factors.
fn check_longrope(model: &Path, ref_dir: &Path) {
    let (kv_type, bound) = f32_check_cache();
    let short = ref_dir.join("reference.json");
    check_model_with(model, &short, LONGROPE_ORIGINAL, kv_type, bound);
    let long = ref_dir.join("reference_long.json");
    check_model_with(model, &long, 256, kv_type, bound);
}

/// The long factors are what the long prompts check: with the short ones in their place the
/// logits move far beyond the tolerance.
#[test]
fn longrope_long_factors_are_checked_by_the_fixture() {
    let dir = scratch_copy("hf-tiny-phi3-longrope", "short-only");
    let config = std::fs::read_to_string(dir.join("config.json")).expect("config");
    let mut v: serde_json::Value = serde_json::from_str(&config).expect("json");
    let rope = &mut v["rope_parameters"];
    assert!(rope["long_factor"].is_array(), "{rope}");
    rope["long_factor"] = rope["short_factor"].clone();
    std::fs::write(dir.join("config.json"), v.to_string()).expect("write");
    let r: Reference = read_json(&fixture("hf-tiny-phi3-longrope").join("reference_long.json"));
    let mut engine = open_engine_with(&dir, 256, f32_check_cache().0);
    let (diff, _) = run_prompts(&mut engine, &r);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("long prompts with the short factors: max |logit diff| = {diff:e}");
    assert!(diff > 2e-2, "the short factors give only {diff}");
}

#[test]
fn gemma_gguf_matches_transformers() {
    let gguf = repo_root().join("tests/fixtures/tiny-gemma-f32.gguf");
    check_f32_model(&gguf, &fixture("hf-tiny-gemma"));
}

#[test]
fn gemma2_gguf_matches_transformers() {
    let gguf = repo_root().join("tests/fixtures/tiny-gemma2-f32.gguf");
    check_f32_model(&gguf, &fixture("hf-tiny-gemma2"));
}

#[test]
fn phi3_gguf_matches_transformers() {
    let gguf = repo_root().join("tests/fixtures/tiny-phi3-f32.gguf");
    check_f32_model(&gguf, &fixture("hf-tiny-phi3"));
    let gguf = repo_root().join("tests/fixtures/tiny-phi3-longrope-f32.gguf");
    check_longrope(&gguf, &fixture("hf-tiny-phi3-longrope"));
}

/// `llama.rope.scaling.type` linear and yarn, as llama.cpp's converter writes them.
#[test]
fn llama_rope_scaling_gguf_matches_transformers() {
    for name in ["llama-linear", "llama-yarn"] {
        let gguf = repo_root().join(format!("tests/fixtures/tiny-{name}-f32.gguf"));
        check_f32_model(&gguf, &fixture(&format!("hf-tiny-{name}")));
    }
}

#[test]
fn qwen2_gguf_matches_transformers() {
    let gguf = repo_root().join("tests/fixtures/tiny-qwen2-f32.gguf");
    check_f32_model(&gguf, &fixture("hf-tiny-qwen2"));
}

/// Max |logit diff| against the reference after editing the fixture's config.json.
fn diff_after_edit(name: &str, from: &str, to: &str) -> f32 {
    let dir = scratch_copy(name, &format!("edit-{name}"));
    edit(&dir.join("config.json"), from, to);
    let r = reference(&dir);
    let mut engine = open_engine(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    run_prompts(&mut engine, &r).0
}

/// Each feature the fixtures exercise changes the logits far beyond the 2e-3 tolerance
/// when it is switched off, so the tests above do check it.
#[test]
fn the_fixtures_exercise_their_features() {
    let cases = [
        (
            "hf-tiny-mistral",
            "\"sliding_window\": 4",
            "\"sliding_window\": null",
        ),
        (
            "hf-tiny-gemma2",
            "\"attn_logit_softcapping\": 2.0",
            "\"attn_logit_softcapping\": null",
        ),
        (
            "hf-tiny-gemma2",
            "\"final_logit_softcapping\": 3.0",
            "\"final_logit_softcapping\": null",
        ),
        (
            "hf-tiny-gemma2",
            "\"sliding_window\": 4",
            "\"sliding_window\": 400",
        ),
        (
            "hf-tiny-gemma3",
            "\"query_pre_attn_scalar\": 24",
            "\"query_pre_attn_scalar\": 16",
        ),
        (
            "hf-tiny-gemma3",
            "\"rope_type\": \"linear\"",
            "\"rope_type\": \"default\"",
        ),
        ("hf-tiny-llama-linear", "\"linear\"", "\"default\""),
        ("hf-tiny-llama-yarn", "\"yarn\"", "\"default\""),
        (
            "hf-tiny-phi3",
            "\"sliding_window\": 4",
            "\"sliding_window\": null",
        ),
        (
            "hf-tiny-phi3",
            "\"partial_rotary_factor\": 0.5",
            "\"partial_rotary_factor\": 1.0",
        ),
        ("hf-tiny-phi3-longrope", "\"longrope\"", "\"default\""),
    ];
    for (name, from, to) in cases {
        let diff = diff_after_edit(name, from, to);
        eprintln!("{name}: {from} → {to}: max |logit diff| = {diff:e}");
        assert!(diff > 2e-2, "{name}: {from} → {to} gives only {diff}");
    }
}

#[test]
fn unsupported_rope_types_name_the_key() {
    for kind in ["ntk", "dynamic-yarn"] {
        let dir = scratch_copy("hf-tiny-llama-yarn", &format!("rope-{kind}"));
        edit(&dir.join("config.json"), "\"yarn\"", &format!("\"{kind}\""));
        let e = load_error(&dir);
        assert!(
            e.contains("'rope_parameters.rope_type'") && e.contains(kind),
            "{kind}: {e}"
        );
    }
    let dir = scratch_copy("hf-tiny-gemma3", "layer-types");
    edit(
        &dir.join("config.json"),
        "\"full_attention\"\n",
        "\"chunked_attention\"\n",
    );
    let e = load_error(&dir);
    assert!(
        e.contains("'layer_types'") && e.contains("chunked_attention"),
        "{e}"
    );
}

/// Where each GGUF architecture is checked against a reference: a GGUF fixture written from
/// an HF checkpoint (tests above), or goldens of a downloaded model (golden_models.rs).
const GGUF_COVERAGE: &[(&str, &str)] = &[
    ("llama", "tests/goldens/smollm2"),
    ("qwen2", "tests/fixtures/tiny-qwen2-f32.gguf"),
    ("qwen3", "tests/fixtures/tiny-qwen3-f16.gguf"),
    ("gemma", "tests/fixtures/tiny-gemma-f32.gguf"),
    ("gemma2", "tests/fixtures/tiny-gemma2-f32.gguf"),
    ("gemma3", "tests/goldens/gemma3"),
    ("phi3", "tests/fixtures/tiny-phi3-f32.gguf"),
    ("qwen3moe", "tests/fixtures/tiny-qwen3-moe-f32.gguf"),
];

/// Every GGUF architecture in the registry has a fixture (and a GGUF fixture is of that
/// architecture); adding a registry line without one fails here.
#[test]
fn every_gguf_architecture_has_a_fixture() {
    for (name, _) in hearth_models::registry::ARCHITECTURES {
        let Some((_, path)) = GGUF_COVERAGE.iter().find(|(n, _)| n == name) else {
            panic!("GGUF architecture {name} has no fixture: add one to GGUF_COVERAGE");
        };
        let path = repo_root().join(path);
        assert!(path.exists(), "{name}: {} is missing", path.display());
        if path.extension().is_some_and(|e| e == "gguf") {
            check_arch(&path, name);
        }
    }
}

fn check_arch(path: &Path, name: &str) {
    let engine = open_engine(path);
    let gguf = engine.gguf().expect("a GGUF file");
    let arch = gguf.metadata().get_str("general.architecture");
    assert_eq!(arch.ok().flatten(), Some(name), "{}", path.display());
}
