//! `hearth convert`'s library: the tiny HF fixtures converted to GGUF F32 / F16 / BF16 / Q8_0,
//! loaded back through the GGUF path (llama.cpp names, keys and tensor transforms: Q/K row
//! permutation, Gemma's 1 + w norms, stacked experts, LongRoPE factor tensors) and checked
//! against the fixtures' HF transformers references.

mod common;

use std::path::PathBuf;

use common::hf::{
    check_model_with, edit, f32_check_cache, fixture, reference, run_prompts, scratch_copy,
};
use common::open_engine_with;
use hearth_engine::KvType;
use hearth_gguf::GgufFile;
use hearth_models::hf::convert::convert_folder;
use hearth_quant::GgmlType;

/// Converts folder `dir` to a scratch GGUF of `ty` (`tag` keeps parallel tests apart);
/// returns its path.
fn convert_dir(dir: &std::path::Path, ty: GgmlType, tag: &str) -> PathBuf {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("model");
    let out = std::env::temp_dir().join(format!(
        "hearth-convert-{}-{name}-{ty}-{tag}.gguf",
        std::process::id()
    ));
    convert_folder(dir, &out, ty).unwrap_or_else(|e| panic!("{name} to {ty}: {e}"));
    out
}

/// Converts fixture `name` to a scratch GGUF of `ty`.
fn convert(name: &str, ty: GgmlType, tag: &str) -> PathBuf {
    convert_dir(&fixture(name), ty, tag)
}

/// The context a fixture's reference.json holds for: the LongRoPE fixture's short prompts
/// were run by transformers with the short factors, which hearth (as llama.cpp) takes in
/// contexts up to the original one (64); longer contexts take the long factors, checked
/// against reference_long.json in `phi3_longrope_converted_long_factors_match_transformers`.
fn n_ctx_for(name: &str) -> usize {
    if name == "hf-tiny-phi3-longrope" {
        64
    } else {
        1024
    }
}

/// Converts fixture `name` to `ty` and checks the file against transformers: max |logit
/// diff| over the last positions below `bound`, and every first greedy token the reference
/// decides by more than twice the bound (so no error within the bound can flip it) equal;
/// with `all_greedy`, all 8 greedy tokens of every prompt equal. Returns the max diff.
fn check(name: &str, ty: GgmlType, bound: f32, all_greedy: bool) -> f32 {
    let gguf = convert(name, ty, "logits");
    let r = reference(&fixture(name));
    let mut engine = open_engine_with(&gguf, n_ctx_for(name), KvType::F16);
    let (max_diff, greedy) = run_prompts(&mut engine, &r);
    drop(engine);
    let _ = std::fs::remove_file(&gguf);
    eprintln!("{name} {ty}: max |logit diff| = {max_diff:e}");
    assert!(max_diff < bound, "{name} {ty}: max |logit diff| {max_diff}");
    let n_same = greedy
        .iter()
        .zip(&r.prompts)
        .filter(|(g, p)| **g == p.greedy)
        .count();
    eprintln!(
        "{name} {ty}: {n_same} of {} prompts give transformers' 8 greedy tokens",
        r.prompts.len()
    );
    for (g, p) in greedy.iter().zip(&r.prompts) {
        let mut sorted = p.last_logits.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let decided = sorted[0] - sorted[1] > 2.0 * bound;
        assert!(
            !decided || g[0] == p.greedy[0],
            "{name} {ty}: a decided first token differs after {:?}",
            p.ids
        );
    }
    if all_greedy {
        assert_eq!(n_same, r.prompts.len(), "{name} {ty}: greedy tokens");
    }
    max_diff
}

/// F32 keeps the checkpoint's values (plus Gemma's exact 1 + w): the converted file must
/// pass the folder's own f32 check (hidden-state norms per layer, logits within the f32
/// bound of `common::hf::f32_check_cache`, every greedy token).
fn check_f32(name: &str) {
    let gguf = convert(name, GgmlType::F32, "f32");
    let (kv_type, bound) = f32_check_cache();
    let reference = fixture(name).join("reference.json");
    check_model_with(&gguf, &reference, n_ctx_for(name), kv_type, bound);
    let _ = std::fs::remove_file(&gguf);
}

/// The converted LongRoPE file carries the long factors too: in a context past the original
/// one, its 80- and 100-token prompts give transformers' outputs with the long factors.
#[test]
fn phi3_longrope_converted_long_factors_match_transformers() {
    let gguf = convert("hf-tiny-phi3-longrope", GgmlType::F32, "long");
    let (kv_type, bound) = f32_check_cache();
    let reference = fixture("hf-tiny-phi3-longrope").join("reference_long.json");
    check_model_with(&gguf, &reference, 256, kv_type, bound);
    let _ = std::fs::remove_file(&gguf);
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
    let dir = fixture("mlx-tiny-llama-q4");
    let out = std::env::temp_dir().join(format!("hearth-convert-{}-mlx.gguf", std::process::id()));
    let e = convert_folder(&dir, &out, GgmlType::F16)
        .unwrap_err()
        .to_string();
    assert!(e.contains("config.json") && e.contains("MLX"), "{e}");
    let dir = fixture("hf-tiny-llama");
    let e = convert_folder(&dir, &out, GgmlType::Q4_K)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--type") && e.contains("q8_0"), "{e}");
    assert!(!out.exists());
}

/// F16's bound (see the note above).
const F16_BOUND: f32 = 1e-2;
/// Q8_0's bound (see the note above).
const Q8_BOUND: f32 = 0.15;

/// Tests `$family::{f32, f16, q8_0}`: fixture `$dir` converted to each type and checked
/// against transformers.
macro_rules! converts {
    ($family:ident, $dir:literal) => {
        mod $family {
            use super::*;

            #[test]
            fn f32() {
                check_f32($dir);
            }

            #[test]
            fn f16() {
                check($dir, GgmlType::F16, F16_BOUND, true);
            }

            #[test]
            fn q8_0() {
                check($dir, GgmlType::Q8_0, Q8_BOUND, false);
            }
        }
    };
}

// Mistral: GGUF "llama" (permuted Q/K) with its 4-token window in every layer.
converts!(mistral, "hf-tiny-mistral");
// Mixtral: GGUF "llama" with 4 experts stacked per projection, 2 used.
converts!(mixtral, "hf-tiny-mixtral");
// Qwen 3 MoE: QK-norm, experts of width 32, tied embeddings.
converts!(qwen3_moe, "hf-tiny-qwen3-moe");
// Gemma: 1 + w norms, head_dim 32 ≠ 64 / 4, tied embeddings.
converts!(gemma, "hf-tiny-gemma");
// Gemma 2: soft caps, post-norms, sliding layer 0 and global layer 1 (llama.cpp's layout).
converts!(gemma2, "hf-tiny-gemma2");
// Gemma 3: QK-norm (1 + w too), linear ×8 rope on the global layer only, and a layout and
// query_pre_attn_scalar llama.cpp's fixed rules do not give (keys written for them).
converts!(gemma3, "hf-tiny-gemma3");
// Phi 3: fused qkv and gate_up, partial rotation, 4-token window.
converts!(phi3, "hf-tiny-phi3");
// Phi 3 LongRoPE: factor tensors and attention factor.
converts!(phi3_longrope, "hf-tiny-phi3-longrope");

// Llama rope scalings: linear (keys), YaRN (keys, as llama.cpp; no factor tensor).
converts!(llama_linear, "hf-tiny-llama-linear");
converts!(llama_yarn, "hf-tiny-llama-yarn");

/// Metadata key `key` of `file` as text, "absent" when missing.
fn key(file: &GgufFile, key: &str) -> String {
    file.metadata()
        .get(key)
        .map_or_else(|| "absent".into(), |v| v.to_string())
}

/// The families' llama.cpp names, keys and types.
#[test]
fn families_get_llama_cpp_s_names_and_keys() {
    let open = |name: &str| {
        let gguf = convert(name, GgmlType::Q8_0, "keys");
        let file = GgufFile::open(&gguf).expect("converted file opens");
        let _ = std::fs::remove_file(&gguf);
        file
    };
    let dims = |f: &GgufFile, n: &str| f.tensor(n).expect(n).dims.clone();
    let ty = |f: &GgufFile, n: &str| f.tensor(n).expect(n).ty;

    let f = open("hf-tiny-mistral");
    assert_eq!(key(&f, "general.architecture"), "\"llama\"");
    assert_eq!(key(&f, "llama.attention.sliding_window"), "4");

    let f = open("hf-tiny-mixtral");
    assert_eq!(key(&f, "general.architecture"), "\"llama\"");
    assert_eq!(key(&f, "llama.expert_count"), "4");
    assert_eq!(key(&f, "llama.expert_used_count"), "2");
    assert_eq!(key(&f, "llama.expert_feed_forward_length"), "absent");
    assert_eq!(dims(&f, "blk.1.ffn_gate_exps.weight"), [64, 64, 4]);
    assert_eq!(ty(&f, "blk.1.ffn_down_exps.weight"), GgmlType::Q8_0);
    // llama.cpp keeps the router in F32.
    assert_eq!(ty(&f, "blk.0.ffn_gate_inp.weight"), GgmlType::F32);
    assert_eq!(dims(&f, "blk.0.ffn_gate_inp.weight"), [64, 4]);

    let f = open("hf-tiny-qwen3-moe");
    assert_eq!(key(&f, "general.architecture"), "\"qwen3moe\"");
    assert_eq!(key(&f, "qwen3moe.expert_feed_forward_length"), "32");
    assert_eq!(dims(&f, "blk.0.ffn_down_exps.weight"), [32, 64, 4]);
    assert_eq!(dims(&f, "blk.0.ffn_up_exps.weight"), [64, 32, 4]);
    assert!(f.tensor("output.weight").is_none(), "tied: no output");

    let f = open("hf-tiny-gemma2");
    assert_eq!(key(&f, "gemma2.attn_logit_softcapping"), "2");
    assert_eq!(key(&f, "gemma2.final_logit_softcapping"), "3");
    assert_eq!(key(&f, "gemma2.attention.sliding_window"), "4");
    // Its layout and scale are what llama.cpp derives: no extra keys.
    assert_eq!(key(&f, "gemma2.attention.sliding_window_pattern"), "absent");
    assert_eq!(key(&f, "gemma2.attention.scale"), "absent");
    for n in ["post_attention_norm", "ffn_norm", "post_ffw_norm"] {
        assert_eq!(ty(&f, &format!("blk.1.{n}.weight")), GgmlType::F32, "{n}");
    }

    let f = open("hf-tiny-gemma3");
    assert_eq!(key(&f, "gemma3.rope.scaling.type"), "\"linear\"");
    assert_eq!(key(&f, "gemma3.rope.scaling.factor"), "8");
    assert_eq!(key(&f, "gemma3.rope.freq_base"), "1000000");
    let pattern = key(&f, "gemma3.attention.sliding_window_pattern");
    assert_eq!(pattern, "[2 × bool: true, false]");
    let scale = f.metadata().get_f32("gemma3.attention.scale").unwrap();
    assert!(
        scale.is_some_and(|s| (s - 1.0 / 24f32.sqrt()).abs() < 1e-7),
        "{scale:?}"
    );
    assert!(f.tensor("blk.0.attn_q_norm.weight").is_some());

    let f = open("hf-tiny-phi3-longrope");
    // q: 4 heads × 16, k and v: 2 heads × 16 each.
    assert_eq!(dims(&f, "blk.0.attn_qkv.weight"), [64, 128]);
    assert_eq!(dims(&f, "blk.0.ffn_up.weight"), [64, 256]);
    assert!(f.tensor("blk.0.ffn_gate.weight").is_none());
    assert_eq!(dims(&f, "rope_factors_long.weight"), [8]);
    assert_eq!(dims(&f, "rope_factors_short.weight"), [8]);
    assert_eq!(key(&f, "phi3.rope.scaling.original_context_length"), "64");
    assert!(f
        .metadata()
        .get_f32("phi3.rope.scaling.attn_factor")
        .unwrap()
        .is_some());
}

/// What convert cannot write is an error naming the file and key, and leaves no file.
#[test]
fn unconvertible_folders_are_refused_by_name() {
    let out = std::env::temp_dir().join(format!(
        "hearth-convert-{}-refused.gguf",
        std::process::id()
    ));
    let refused = |dir: PathBuf| {
        let e = convert_folder(&dir, &out, GgmlType::F16)
            .unwrap_err()
            .to_string();
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("{e}");
        assert!(!out.exists(), "{e}");
        e
    };
    let dir = scratch_copy("hf-tiny-llama", "convert-arch");
    edit(
        &dir.join("config.json"),
        "LlamaForCausalLM",
        "GPT2LMHeadModel",
    );
    let e = refused(dir);
    assert!(
        e.contains("config.json") && e.contains("'architectures'") && e.contains("GPT2LMHeadModel"),
        "{e}"
    );

    let dir = scratch_copy("hf-tiny-mistral", "convert-spm");
    edit(
        &dir.join("tokenizer.json"),
        "\"type\": \"ByteLevel\"",
        "\"type\": \"Metaspace\"",
    );
    let e = refused(dir);
    assert!(
        e.contains("tokenizer.json") && e.contains("'pre_tokenizer'"),
        "{e}"
    );

    // Dynamic NTK scaling has no llama.cpp key: the converted file would run plain rope
    // past the position where transformers changes the base.
    let e = refused(scratch_copy("hf-tiny-llama-dynamic", "convert-dynamic"));
    assert!(
        e.contains("config.json") && e.contains("dynamic_ntk"),
        "{e}"
    );

    // llama.cpp fixes Gemma 3's sliding-layer rope base at 10000.
    let dir = scratch_copy("hf-tiny-gemma3", "convert-rope");
    edit(
        &dir.join("config.json"),
        "\"rope_theta\": 10000.0",
        "\"rope_theta\": 20000.0",
    );
    let e = refused(dir);
    assert!(
        e.contains("config.json") && e.contains("rope_sliding") && e.contains("freq_base"),
        "{e}"
    );
}

/// The fixtures the tests above convert.
const CONVERTED: &[&str] = &[
    "hf-tiny-llama",
    "hf-tiny-llama-linear",
    "hf-tiny-llama-yarn",
    "hf-tiny-qwen2",
    "hf-tiny-qwen3",
    "hf-tiny-mistral",
    "hf-tiny-mixtral",
    "hf-tiny-qwen3-moe",
    "hf-tiny-gemma",
    "hf-tiny-gemma2",
    "hf-tiny-gemma3",
    "hf-tiny-phi3",
    "hf-tiny-phi3-longrope",
];

/// Every HF architecture hearth runs has a convert row, and every row a fixture converted
/// above; adding either without the other fails here.
#[test]
fn every_hf_architecture_converts_and_has_a_fixture() {
    use hearth_models::hf::convert::CONVERT_ARCHS;
    let arch_of = |name: &str| -> String {
        let cfg: serde_json::Value = common::read_json(&fixture(name).join("config.json"));
        cfg["architectures"][0]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let covered: Vec<String> = CONVERTED.iter().map(|n| arch_of(n)).collect();
    for (hf, _) in hearth_models::registry::HF_ARCHITECTURES {
        assert!(
            CONVERT_ARCHS.iter().any(|a| a.hf == *hf),
            "{hf} runs from HF folders but has no convert row"
        );
    }
    for row in CONVERT_ARCHS {
        assert!(
            covered.iter().any(|a| a == row.hf),
            "convert row {} has no fixture in CONVERTED",
            row.hf
        );
    }
}
