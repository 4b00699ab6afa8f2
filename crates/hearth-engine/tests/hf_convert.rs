//! `hearth convert`'s library: the tiny HF fixtures converted to GGUF F16 / BF16 / Q8_0, loaded
//! back through the GGUF path (llama.cpp names, Q/K row permutation, normal rope) and checked
//! against the fixtures' HF transformers references.

mod common;

use std::path::{Path, PathBuf};

use common::{argmax, open_engine, read_json, repo_root};
use hearth_engine::Sequence;
use hearth_gguf::GgufFile;
use hearth_models::hf::convert::convert_folder;
use hearth_quant::GgmlType;
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

/// Converts fixture `name` to a scratch GGUF of `ty` (`tag` keeps parallel tests apart);
/// returns its path.
fn convert(name: &str, ty: GgmlType, tag: &str) -> PathBuf {
    let dir = repo_root().join("tests/fixtures").join(name);
    let out = std::env::temp_dir().join(format!(
        "hearth-convert-{}-{name}-{ty}-{tag}.gguf",
        std::process::id()
    ));
    convert_folder(&dir, &out, ty).unwrap_or_else(|e| panic!("{name} to {ty}: {e}"));
    out
}

/// Per prompt: whether all greedy tokens equal transformers', and whether the first one must
/// (the reference's top-2 margin is wider than twice `bound`, so no error within the bound
/// can flip it) and does.
struct Greedy {
    all_same: bool,
    first_ok: bool,
}

/// Largest |hearth − transformers| over the last logits, and the greedy comparison.
fn compare(name: &str, gguf: &Path, bound: f32) -> (f32, Vec<Greedy>) {
    let r: Reference = read_json(
        &repo_root()
            .join("tests/fixtures")
            .join(name)
            .join("reference.json"),
    );
    let mut engine = open_engine(gguf);
    let mut max_diff = 0f32;
    let mut same = Vec::new();
    for p in &r.prompts {
        let mut seq = Sequence::new();
        let mut logits = engine.feed(&mut seq, &p.ids).expect("prompt runs");
        assert_eq!(logits.len(), p.last_logits.len(), "vocabulary size");
        for (a, b) in logits.iter().zip(&p.last_logits) {
            max_diff = max_diff.max((a - b).abs());
        }
        let mut sorted = p.last_logits.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let decided = sorted[0] - sorted[1] > 2.0 * bound;
        let first_ok = !decided || argmax(&logits) == p.greedy[0];
        let mut tokens = Vec::new();
        for _ in 0..p.greedy.len() {
            let t = argmax(&logits);
            tokens.push(t);
            logits = engine.step(&mut seq, &[t]).expect("step runs");
        }
        engine.release(&mut seq);
        same.push(Greedy {
            all_same: tokens == p.greedy,
            first_ok,
        });
    }
    eprintln!("{name} {}: max |logit diff| = {max_diff:e}", gguf.display());
    (max_diff, same)
}

fn check(name: &str, ty: GgmlType, bound: f32, all_greedy: bool) {
    let gguf = convert(name, ty, "logits");
    let (max_diff, same) = compare(name, &gguf, bound);
    let _ = std::fs::remove_file(&gguf);
    assert!(max_diff < bound, "{name} {ty}: max |logit diff| {max_diff}");
    let n_same = same.iter().filter(|g| g.all_same).count();
    eprintln!(
        "{name} {ty}: {n_same} of {} prompts give transformers' 8 greedy tokens",
        same.len()
    );
    assert!(
        same.iter().all(|g| g.first_ok),
        "{name} {ty}: a decided first token differs"
    );
    if all_greedy {
        assert_eq!(n_same, same.len(), "{name} {ty}: greedy tokens");
    }
}

// NOTE on the bounds: F16 rounds weights (and the activations of the dot products) to 11
// significant bits: relative errors of a few 2^-11, logits within ~1e-2 (as the F16 folder test).
// BF16 keeps 8 bits: ~3e-2. Q8_0 stores 8-bit values per block of 32 (relative error up to
// 2^-8 per weight) and quantizes activations to 8 bits as well: logits move by a few 1e-2.
// On these random-weight models hidden states are large, so Q8_0 reaches ~0.11 (llama) and
// BF16 ~0.014 (qwen3); later greedy tokens of near-tied random logits may then differ, so
// lossy types check every first token the reference decides by more than twice the bound.
// A missing Q/K permutation or a wrong tensor moves logits by tenths to whole units.

#[test]
fn llama_converts_to_f16_within_f16_error() {
    check("hf-tiny-llama", GgmlType::F16, 1e-2, true);
}

#[test]
fn llama_converts_to_q8_0_within_q8_0_error() {
    check("hf-tiny-llama", GgmlType::Q8_0, 0.15, false);
}

#[test]
fn qwen3_sharded_converts_to_bf16_within_bf16_error() {
    check("hf-tiny-qwen3", GgmlType::BF16, 3e-2, false);
}

#[test]
fn qwen2_converts_to_q8_0_within_q8_0_error() {
    check("hf-tiny-qwen2", GgmlType::Q8_0, 0.15, false);
}

/// The keys llama.cpp reads are there, with the folder's values.
#[test]
fn metadata_and_names_are_llama_cpp_s() {
    let gguf = convert("hf-tiny-llama", GgmlType::Q8_0, "metadata");
    let file = GgufFile::open(&gguf).expect("converted file opens");
    let _ = std::fs::remove_file(&gguf);
    let m = file.metadata();
    assert_eq!(m.get_str("general.architecture").unwrap(), Some("llama"));
    assert_eq!(m.get_u32("general.file_type").unwrap(), Some(7));
    assert_eq!(m.get_u32("llama.block_count").unwrap(), Some(2));
    assert_eq!(m.get_u32("llama.attention.head_count_kv").unwrap(), Some(2));
    assert_eq!(m.get_str("tokenizer.ggml.model").unwrap(), Some("gpt2"));
    assert_eq!(m.get_str("tokenizer.ggml.pre").unwrap(), Some("llama-bpe"));
    let tokens = m
        .get_str_array("tokenizer.ggml.tokens")
        .unwrap()
        .expect("tokens");
    assert_eq!(tokens.len(), 305);
    assert_eq!(tokens[300], "<|begin_of_text|>");
    // tokenizer_config.json names <|begin_of_text|> and <|eot_id|>.
    assert_eq!(m.get_u32("tokenizer.ggml.bos_token_id").unwrap(), Some(300));
    assert_eq!(m.get_u32("tokenizer.ggml.eos_token_id").unwrap(), Some(304));
    let template = m
        .get_str("tokenizer.chat_template")
        .unwrap()
        .expect("template");
    assert!(template.contains("start_header_id"));
    let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
    for n in [
        "token_embd.weight",
        "rope_freqs.weight",
        "blk.1.ffn_down.weight",
        "output.weight",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    let ty = |n: &str| file.tensor(n).expect(n).ty;
    assert_eq!(ty("blk.0.attn_q.weight"), GgmlType::Q8_0);
    assert_eq!(ty("blk.0.attn_norm.weight"), GgmlType::F32);
}

#[test]
fn mlx_folders_and_bad_types_are_refused_by_name() {
    let dir = repo_root().join("tests/fixtures/mlx-tiny-llama-q4");
    let out = std::env::temp_dir().join(format!("hearth-convert-{}-mlx.gguf", std::process::id()));
    let e = convert_folder(&dir, &out, GgmlType::F16)
        .unwrap_err()
        .to_string();
    assert!(e.contains("config.json") && e.contains("MLX"), "{e}");
    let dir = repo_root().join("tests/fixtures/hf-tiny-llama");
    let e = convert_folder(&dir, &out, GgmlType::Q4_K)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--type") && e.contains("q8_0"), "{e}");
    assert!(!out.exists());
}
