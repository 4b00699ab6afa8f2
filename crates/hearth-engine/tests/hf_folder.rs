//! Hugging Face safetensors folders against HF transformers: tiny random-weight checkpoints
//! made by scripts/make_hf_fixtures.py, with transformers' logits, greedy tokens and token ids.

mod common;

use std::path::Path;

use common::hf::{
    check_f32_folder, check_model_with, edit, fixture, load_error, reference, run_prompts,
    scratch_copy,
};
use common::{open_engine, read_json, repo_root};
use hearth_engine::{Engine, EngineOptions, KvType};
use hearth_tokenizer::{ChatMessage, StreamDecoder};

#[test]
fn llama_f32_matches_transformers() {
    check_f32_folder("hf-tiny-llama");
}

/// With the default f16 KV cache (what `hearth run` uses, and llama.cpp): every key and value
/// rounded to 11 significant bits moves logits up to ~3 by up to ~1.5e-3 (see
/// `common::hf::f32_check_cache`); the f32 cache above is held to 1e-3.
#[test]
fn llama_f32_with_f16_cache_matches_transformers_within_f16_error() {
    let dir = fixture("hf-tiny-llama");
    check_model_with(&dir, &dir.join("reference.json"), 1024, KvType::F16, 2e-3);
}

#[test]
fn qwen3_sharded_f32_matches_transformers() {
    check_f32_folder("hf-tiny-qwen3");
}

/// Qwen 2: q/k/v projection biases (non-zero in the fixture), untied output head.
#[test]
fn qwen2_f32_with_qkv_bias_matches_transformers() {
    check_f32_folder("hf-tiny-qwen2");
}

/// Mixtral: 4 experts per layer, top-2 routing with renormalised weights.
#[test]
fn mixtral_f32_matches_transformers() {
    check_f32_folder("hf-tiny-mixtral");
}

/// Qwen 3 MoE: QK-norm attention, 4 experts per layer, top-2, `norm_topk_prob`.
#[test]
fn qwen3_moe_f32_matches_transformers() {
    check_f32_folder("hf-tiny-qwen3-moe");
}

/// Sparse-block layouts hearth does not run are refused naming the key, missing experts naming
/// the tensor.
#[test]
fn bad_moe_folders_name_the_key_or_tensor() {
    let dir = scratch_copy("hf-tiny-qwen3-moe", "mlponly");
    edit(
        &dir.join("config.json"),
        "\"mlp_only_layers\": []",
        "\"mlp_only_layers\": [1]",
    );
    let e = load_error(&dir);
    assert!(e.contains("'mlp_only_layers'"), "{e}");

    let dir = scratch_copy("hf-tiny-qwen3-moe", "sparsestep");
    edit(
        &dir.join("config.json"),
        "\"decoder_sparse_step\": 1",
        "\"decoder_sparse_step\": 2",
    );
    let e = load_error(&dir);
    assert!(e.contains("'decoder_sparse_step'"), "{e}");

    let dir = scratch_copy("hf-tiny-mixtral", "topk");
    edit(
        &dir.join("config.json"),
        "\"num_experts_per_tok\": 2",
        "\"num_experts_per_tok\": 5",
    );
    let e = load_error(&dir);
    assert!(
        e.contains("'num_experts_per_tok'") && e.contains("5 experts per token of 4"),
        "{e}"
    );

    let dir = scratch_copy("hf-tiny-mixtral", "window");
    edit(
        &dir.join("config.json"),
        "\"sliding_window\": null",
        "\"sliding_window\": 4096",
    );
    let e = load_error(&dir);
    assert!(e.contains("'sliding_window'"), "{e}");

    // An expert's tensor under a name hearth does not know: the error names what it looked for.
    let dir = scratch_copy("hf-tiny-mixtral", "expert");
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    let (from, to) = (
        b"layers.1.block_sparse_moe.experts.3.w3.weight",
        b"layers.1.block_sparse_moe.experts.3.w9.weight",
    );
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("header entry");
    let mut bytes = bytes;
    bytes[at..at + to.len()].copy_from_slice(to);
    std::fs::write(&path, bytes).expect("write");
    let e = load_error(&dir);
    assert!(
        e.contains("model.layers.1.mlp.experts.3.up_proj.weight")
            && e.contains("model.layers.1.block_sparse_moe.experts.3.w3.weight"),
        "{e}"
    );
}

#[test]
fn llama_bf16_matches_transformers_within_bf16_error() {
    let dir = fixture("hf-tiny-llama-bf16");
    let r = reference(&dir);
    let mut engine = open_engine(&dir);
    let (max_diff, greedy) = run_prompts(&mut engine, &r);
    eprintln!("bf16: max |logit diff| = {max_diff:e}");
    // NOTE: the reference widens the bf16 weights to f32 and runs in f32; hearth rounds the
    // activations to bf16 for the dot products, which explains differences of this size.
    assert!(max_diff < 3e-2, "bf16: max |logit diff| {max_diff}");
    assert_eq!(greedy[0], r.prompts[0].greedy, "bf16 greedy tokens");
}

#[test]
fn tokenizer_json_matches_hf_tokenizers() {
    for name in ["hf-tiny-llama", "hf-tiny-qwen3"] {
        let dir = fixture(name);
        let r = reference(&dir);
        let engine = open_engine(&dir);
        for s in &r.strings {
            let ids = engine.tokenizer.encode(&s.text, false).expect("encodes");
            assert_eq!(ids, s.ids, "{name}: {:?}", s.text);
            assert_eq!(engine.tokenizer.decode(&ids), s.text, "{name}: decode");
            let mut stream = StreamDecoder::new(&engine.tokenizer);
            let mut text: String = ids.iter().map(|&id| stream.push(id)).collect();
            text.push_str(&stream.finish());
            assert_eq!(text, s.text, "{name}: streamed decode");
        }
        let messages: Vec<ChatMessage> = r
            .chat
            .messages
            .iter()
            .map(|m| ChatMessage::new(m.role.clone(), m.content.clone()))
            .collect();
        let ids = engine.chat_prompt(&messages).expect("chat renders");
        assert_eq!(ids, r.chat.ids, "{name}: chat prompt");
    }
}

#[test]
fn special_tokens_come_from_the_folder() {
    let llama = open_engine(&fixture("hf-tiny-llama"));
    let t = &llama.tokenizer;
    assert_eq!(t.token_text(300), Some("<|begin_of_text|>"));
    assert_eq!(t.bos_id(), Some(300));
    assert!(t.is_eog(304), "generation_config.json's eos <|eot_id|>");
    // Control tokens in user text stay text unless special tokens are parsed.
    assert_eq!(t.encode("<|eot_id|>", true).expect("encodes"), vec![304]);
    assert!(t.encode("<|eot_id|>", false).expect("encodes").len() > 1);
    let info = llama.info();
    assert_eq!(info.arch, "llama");
    assert_eq!(info.n_ctx_train, 256);
    assert!(llama.gguf().is_none());

    let qwen = open_engine(&fixture("hf-tiny-qwen3"));
    assert_eq!(qwen.tokenizer.bos_id(), None);
    assert!(qwen.tokenizer.is_eog(302), "<|im_end|>");
    assert_eq!(qwen.info().arch, "qwen3");
    // model.safetensors.index.json: total_parameters 118144.
    assert_eq!(qwen.info().n_params, 118_144);
}

#[test]
fn bad_folders_give_one_clear_error() {
    let dir = scratch_copy("hf-tiny-llama", "noconfig");
    std::fs::remove_file(dir.join("config.json")).expect("rm");
    let e = load_error(&dir);
    assert!(e.contains("config.json") && e.contains("missing"), "{e}");

    let dir = scratch_copy("hf-tiny-llama", "arch");
    edit(
        &dir.join("config.json"),
        "LlamaForCausalLM",
        "FooForCausalLM",
    );
    let e = load_error(&dir);
    assert!(e.contains("unknown architecture 'FooForCausalLM'"), "{e}");
    assert!(
        e.contains("LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM"),
        "{e}"
    );

    let dir = scratch_copy("hf-tiny-llama", "rope");
    edit(&dir.join("config.json"), "\"llama3\"", "\"ntk\"");
    let e = load_error(&dir);
    assert!(
        e.contains("'rope_parameters.rope_type'") && e.contains("ntk"),
        "{e}"
    );

    let dir = scratch_copy("hf-tiny-qwen3", "shard");
    std::fs::remove_file(dir.join("model-00002-of-00002.safetensors")).expect("rm");
    let e = load_error(&dir);
    assert!(e.contains("model-00002-of-00002.safetensors"), "{e}");

    let dir = scratch_copy("hf-tiny-qwen3", "total");
    edit(
        &dir.join("model.safetensors.index.json"),
        "\"total_size\": 472576",
        "\"total_size\": 472580",
    );
    let e = load_error(&dir);
    assert!(
        e.contains("model.safetensors.index.json") && e.contains("total_size"),
        "{e}"
    );

    let dir = scratch_copy("hf-tiny-qwen3", "truncated");
    let shard = dir.join("model-00001-of-00002.safetensors");
    let bytes = std::fs::read(&shard).expect("read");
    std::fs::write(&shard, &bytes[..bytes.len() - 4]).expect("write");
    let e = load_error(&dir);
    assert!(e.contains("model-00001-of-00002.safetensors"), "{e}");

    // Same byte size, a dtype hearth does not run: only the header changes.
    let dir = scratch_copy("hf-tiny-llama", "dtype");
    let path = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&path).expect("read");
    let key = br#""model.layers.0.input_layernorm.weight":{"dtype":"F32""#;
    let at = bytes
        .windows(key.len())
        .position(|w| w == key)
        .expect("header entry");
    let dtype_at = at + key.len() - 4;
    bytes[dtype_at..dtype_at + 3].copy_from_slice(b"I32");
    std::fs::write(&path, bytes).expect("write");
    let e = load_error(&dir);
    assert!(
        e.contains("model.layers.0.input_layernorm.weight") && e.contains("dtype I32"),
        "{e}"
    );
}

/// Rewrite a folder's single f32 `model.safetensors` as F16 (tensors in the same order).
fn convert_to_f16(dir: &Path) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let data = &bytes[8 + n..];
    let mut entries: Vec<(&String, &serde_json::Value)> = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .collect();
    entries.sort_by_key(|(_, v)| v["data_offsets"][0].as_u64());
    let (mut new_header, mut new_data) = (serde_json::Map::new(), Vec::new());
    for (name, v) in entries {
        assert_eq!(v["dtype"], "F32", "{name}");
        let (s, e) = (
            v["data_offsets"][0].as_u64().expect("start") as usize,
            v["data_offsets"][1].as_u64().expect("end") as usize,
        );
        let src: Vec<f32> = data[s..e]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let mut dst = vec![0u8; src.len() * 2];
        hearth_quant::quantize_row(hearth_quant::GgmlType::F16, &src, &mut dst).expect("f16");
        let start = new_data.len();
        new_data.extend_from_slice(&dst);
        new_header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F16", "shape": v["shape"],
                "data_offsets": [start, new_data.len()]}),
        );
    }
    let mut text = serde_json::to_string(&new_header).expect("json");
    while text.len() % 8 != 0 {
        text.push(' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&new_data);
    std::fs::write(&path, out).expect("write");
}

#[test]
fn llama_f16_matches_transformers_within_f16_error() {
    let dir = scratch_copy("hf-tiny-llama", "f16");
    convert_to_f16(&dir);
    let r = reference(&dir);
    let opened = Engine::load(
        &dir,
        &EngineOptions {
            n_ctx: 1024,
            n_threads: 2,
            device: common::test_device(),
            ..EngineOptions::default()
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
    let mut engine = opened.expect("f16 folder loads");
    let (max_diff, greedy) = run_prompts(&mut engine, &r);
    eprintln!("f16: max |logit diff| = {max_diff:e}");
    // NOTE: weights rounded to f16 (and activations, for the dot products) against the f32
    // reference: relative errors of a few 2^-11.
    assert!(max_diff < 1e-2, "f16: max |logit diff| {max_diff}");
    for (got, p) in greedy.iter().zip(&r.prompts) {
        assert_eq!(got, &p.greedy, "f16 greedy tokens after {:?}", p.ids);
    }
}

/// The fixture's Llama 3 rope scaling is visible in the logits: dropping it moves them far
/// beyond the tolerance above, so the test above checks the scaling too.
#[test]
fn llama3_rope_scaling_is_checked_by_the_fixture() {
    let dir = scratch_copy("hf-tiny-llama", "unscaled");
    edit(&dir.join("config.json"), "\"llama3\"", "\"default\"");
    let r = reference(&dir);
    let opened = Engine::load(
        &dir,
        &EngineOptions {
            n_ctx: 1024,
            n_threads: 2,
            device: common::test_device(),
            ..EngineOptions::default()
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
    let (max_diff, _) = run_prompts(&mut opened.expect("loads"), &r);
    eprintln!("without llama3 scaling: max |logit diff| = {max_diff:e}");
    assert!(max_diff > 2e-2, "unscaled rope gives {max_diff}");
}

/// The Qwen 3 MoE fixture checks the renormalisation of the top-k weights: without it the
/// logits move far beyond the tolerance above.
#[test]
fn qwen3_moe_norm_topk_prob_is_checked_by_the_fixture() {
    let dir = scratch_copy("hf-tiny-qwen3-moe", "unnormalised");
    edit(
        &dir.join("config.json"),
        "\"norm_topk_prob\": true",
        "\"norm_topk_prob\": false",
    );
    let r = reference(&dir);
    let opened = Engine::load(
        &dir,
        &EngineOptions {
            n_ctx: 1024,
            n_threads: 2,
            device: common::test_device(),
            ..EngineOptions::default()
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
    let (max_diff, _) = run_prompts(&mut opened.expect("loads"), &r);
    eprintln!("without norm_topk_prob: max |logit diff| = {max_diff:e}");
    assert!(max_diff > 2e-2, "unnormalised routing gives {max_diff}");
}

/// Every HF architecture hearth claims has a fixture checked against transformers.
#[test]
fn every_hf_architecture_has_a_fixture() {
    let mut covered = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("tests/fixtures")).expect("fixtures") {
        let dir = entry.expect("entry").path();
        let is_hf = dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("hf-tiny-"));
        if is_hf && dir.join("reference.json").is_file() {
            let config: serde_json::Value = read_json(&dir.join("config.json"));
            covered.push(
                config["architectures"][0]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            );
        }
    }
    for (name, _) in hearth_models::registry::HF_ARCHITECTURES {
        assert!(
            covered.iter().any(|c| c == name),
            "{name} has no tests/fixtures/hf-tiny-* folder (scripts/make_hf_fixtures.py)"
        );
    }
}
