//! The GGUF path of `qwen2`: the HF fixture's f32 weights written as a GGUF file under
//! llama.cpp's tensor names and metadata keys (its Qwen 2 converter copies q/k/v rows as they
//! are, for NeoX rope), run on the CPU backend and compared with transformers' reference.

use std::path::PathBuf;
use std::sync::Arc;

use hearth_backend::{cpu::CpuBackend, AttnSeq, Backend, KvSpec, KvType};
use hearth_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use hearth_models::{registry, Batch, DecoderModel};

const BLOCK: usize = 16;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf-tiny-qwen2")
}

/// llama.cpp's name for an HF tensor of the fixture.
fn gguf_name(hf: &str) -> String {
    let top = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = top.iter().find(|(h, _)| *h == hf) {
        return g.to_string();
    }
    let rest = hf.strip_prefix("model.layers.").expect("layer tensor");
    let (layer, rest) = rest.split_once('.').expect("layer index");
    let (module, suffix) = rest.rsplit_once('.').expect("suffix");
    let g = match module {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "post_attention_layernorm" => "ffn_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        other => panic!("unexpected module {other}"),
    };
    format!("blk.{layer}.{g}.{suffix}")
}

fn qwen2_gguf() -> Vec<u8> {
    let dir = fixture();
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).expect("config"))
            .expect("json");
    let mut w = GgufWriter::new();
    let mut kv = |k: &str, v: Value| w.add_kv(k, v).expect("metadata");
    kv("general.architecture", Value::String("qwen2".into()));
    let u = |k: &str| Value::U32(config[k].as_u64().expect("int field") as u32);
    kv("qwen2.embedding_length", u("hidden_size"));
    kv("qwen2.block_count", u("num_hidden_layers"));
    kv("qwen2.feed_forward_length", u("intermediate_size"));
    kv("qwen2.attention.head_count", u("num_attention_heads"));
    kv("qwen2.attention.head_count_kv", u("num_key_value_heads"));
    kv("qwen2.context_length", u("max_position_embeddings"));
    let eps = config["rms_norm_eps"].as_f64().expect("eps") as f32;
    kv("qwen2.attention.layer_norm_rms_epsilon", Value::F32(eps));
    let theta = config["rope_parameters"]["rope_theta"]
        .as_f64()
        .expect("theta") as f32;
    kv("qwen2.rope.freq_base", Value::F32(theta));
    let bytes = std::fs::read(dir.join("model.safetensors")).expect("weights");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let mut names: Vec<String> = st.names().into_iter().map(|n| n.to_string()).collect();
    names.sort();
    for name in names {
        let t = st.tensor(&name).expect("tensor");
        let dims: Vec<u64> = t.shape().iter().rev().map(|&d| d as u64).collect();
        w.add_tensor(gguf_name(&name), &dims, GgmlType::F32, t.data())
            .expect("tensor");
    }
    w.to_bytes()
}

/// Logits after feeding `tokens` at positions `first_pos..`, the cache holding what came before.
fn step(
    model: &DecoderModel<CpuBackend>,
    be: &CpuBackend,
    cache: &mut <CpuBackend as Backend>::KvCache,
    tokens: &[u32],
    first_pos: usize,
) -> Vec<f32> {
    let positions: Vec<u32> = (first_pos..first_pos + tokens.len())
        .map(|p| p as u32)
        .collect();
    let table = [0u32, 1];
    let seqs = [AttnSeq {
        token_start: 0,
        n_tokens: tokens.len(),
        first_pos,
        block_table: &table,
    }];
    let batch = Batch {
        tokens,
        positions: &positions,
        seqs: &seqs,
        logits_rows: &[tokens.len() - 1],
    };
    model.forward(be, &batch, cache, BLOCK).expect("forward")
}

#[test]
fn qwen2_gguf_matches_transformers() {
    let file = Arc::new(GgufFile::from_bytes(qwen2_gguf()).expect("gguf parses"));
    let be = CpuBackend::new(2).expect("cpu backend");
    let model = registry::load(file, &be).expect("qwen2 loads");
    assert!(model.config.attn_qkv_bias);
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture().join("reference.json")).expect("ref"))
            .expect("json");
    for p in reference["prompts"].as_array().expect("prompts") {
        let ids: Vec<u32> = serde_json::from_value(p["ids"].clone()).expect("ids");
        let want: Vec<f32> = serde_json::from_value(p["last_logits"].clone()).expect("logits");
        let greedy: Vec<u32> = serde_json::from_value(p["greedy"].clone()).expect("greedy");
        let spec = KvSpec {
            kv_dims: vec![model.config.kv_dim(); model.config.n_layers],
            n_blocks: 2,
            block_size: BLOCK,
            dtype: KvType::F16,
        };
        let mut cache = be.new_kv_cache(&spec).expect("cache");
        let mut logits = step(&model, &be, &mut cache, &ids, 0);
        let max_diff = logits
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        eprintln!("{ids:?}: max |logit diff| = {max_diff:e}");
        // Same bound and reason as the HF folder tests: the f16 KV cache alone explains ~1.5e-3.
        assert!(max_diff < 2e-3, "{ids:?}: max |logit diff| {max_diff}");
        let mut got = Vec::new();
        for _ in 0..greedy.len() {
            let next = (0..logits.len())
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .expect("logits") as u32;
            got.push(next);
            logits = step(&model, &be, &mut cache, &[next], ids.len() + got.len() - 1);
        }
        assert_eq!(got, greedy, "greedy tokens after {ids:?}");
    }
}
