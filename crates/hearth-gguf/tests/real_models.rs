//! The two real test models: facts we know, and the full tensor table and metadata compared
//! with gguf-py's reading (fixtures made by `scripts/dump_gguf_tensors.py`).

mod common;

use common::model_path;
use hearth_gguf::{GgmlType, GgufFile, Value};
use serde_json::Value as Json;

const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";
const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn fixture(name: &str) -> Json {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// One scalar as the fixture encodes it: floats as bit patterns, bools as bools.
fn scalar_json(v: &Value) -> Json {
    match v {
        Value::F32(x) => Json::from(x.to_bits()),
        Value::F64(x) => Json::from(x.to_bits()),
        Value::Bool(b) => Json::from(*b),
        Value::String(s) => Json::from(s.as_str()),
        other => match other.as_integer() {
            Some(i) if i < 0 => Json::from(i as i64),
            Some(i) => Json::from(i as u64),
            None => panic!("not a scalar: {other:?}"),
        },
    }
}

fn compare_with_gguf_py(file: &GgufFile, fx: &Json) {
    assert_eq!(fx["file_size"], file.file_size());
    assert_eq!(fx["version"], file.version());
    assert_eq!(fx["alignment"], file.alignment());
    assert_eq!(fx["data_offset"], file.data_offset());

    let keys: Vec<&str> = file.metadata().iter().map(|(k, _)| k).collect();
    let fx_keys: Vec<&str> = fx["metadata_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(keys, fx_keys);
    for (key, value) in file.metadata().iter() {
        compare_value(key, value, &fx["metadata"][key]);
    }

    let fx_tensors = fx["tensors"].as_array().unwrap();
    assert_eq!(file.tensors().len(), fx_tensors.len());
    for (t, e) in file.tensors().iter().zip(fx_tensors) {
        assert_eq!(e["name"], t.name.as_str());
        assert_eq!(e["type"], t.ty.name(), "{}", t.name);
        assert_eq!(e["dims"], Json::from(t.dims.clone()), "{}", t.name);
        assert_eq!(e["offset"], t.offset, "{}", t.name);
        assert_eq!(e["n_bytes"], t.n_bytes, "{}", t.name);
        assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes);
    }
}

fn compare_value(key: &str, value: &Value, fx: &Json) {
    let Value::Array(items) = value else {
        assert_eq!(fx["type"], value.type_name(), "{key}");
        assert_eq!(fx["value"], scalar_json(value), "{key}");
        return;
    };
    assert_eq!(fx["type"], "array", "{key}");
    assert_eq!(fx["len"], items.len(), "{key}");
    if let Some(first) = items.first() {
        assert_eq!(fx["element_type"], first.type_name(), "{key}");
    }
    let head: Vec<Json> = items.iter().take(8).map(scalar_json).collect();
    let tail: Vec<Json> = items[items.len().saturating_sub(8)..]
        .iter()
        .map(scalar_json)
        .collect();
    assert_eq!(fx["head"], Json::from(head), "{key} head");
    assert_eq!(fx["tail"], Json::from(tail), "{key} tail");
    if let Some(total) = fx.get("total_utf8_bytes") {
        let ours: usize = items.iter().map(|v| v.as_str().map_or(0, str::len)).sum();
        assert_eq!(*total, ours, "{key} total string bytes");
    }
}

#[test]
fn gemma3_matches_gguf_py() {
    let file = GgufFile::open(model_path(GEMMA3)).unwrap();
    compare_with_gguf_py(&file, &fixture("gemma-3-270m-q4_k_m.json"));
}

#[test]
fn smollm2_matches_gguf_py() {
    let file = GgufFile::open(model_path(SMOLLM2)).unwrap();
    compare_with_gguf_py(&file, &fixture("smollm2-135m-instruct-q4_1.json"));
}

#[test]
fn gemma3_facts() {
    let file = GgufFile::open(model_path(GEMMA3)).unwrap();
    let md = file.metadata();
    assert_eq!(md.require_str("general.architecture").unwrap(), "gemma3");
    let tokens = md.require_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 262_144);
    assert_eq!(&tokens[..3], ["<pad>", "<eos>", "<bos>"]);
    assert_eq!(
        md.get_f32_array("tokenizer.ggml.scores")
            .unwrap()
            .unwrap()
            .len(),
        262_144
    );
    assert_eq!(
        md.get_i32_array("tokenizer.ggml.token_type")
            .unwrap()
            .unwrap()
            .len(),
        262_144
    );
    assert_eq!(md.require_u32("gemma3.block_count").unwrap(), 18);
    assert_eq!(md.require_u32("gemma3.embedding_length").unwrap(), 640);
    assert_eq!(file.tensors().len(), 236);
    let embd = file.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (embd.ty, embd.dims.as_slice()),
        (GgmlType::Q8_0, &[640, 262_144][..])
    );
    let k = file.tensor("blk.0.attn_k.weight").unwrap();
    assert_eq!((k.ty, k.dims.as_slice()), (GgmlType::Q5_0, &[640, 256][..]));
    let norm = file.tensor("output_norm.weight").unwrap();
    assert_eq!(norm.ty, GgmlType::F32);
    // The data is an aligned slice of the mapping, so it casts to f32 in place.
    let values: &[f32] = bytemuck::try_cast_slice(file.tensor_data(norm)).unwrap();
    assert_eq!(values.len(), 640);
    assert!(values.iter().all(|v| v.is_finite()));
    let shown = md.get("tokenizer.ggml.tokens").unwrap().to_string();
    assert_eq!(
        shown,
        r#"[262144 × string: "<pad>", "<eos>", "<bos>", "<unk>", ...]"#
    );
}

#[test]
fn smollm2_facts() {
    let file = GgufFile::open(model_path(SMOLLM2)).unwrap();
    let md = file.metadata();
    assert_eq!(md.require_str("general.architecture").unwrap(), "llama");
    assert_eq!(md.require_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(md.require_u32("llama.block_count").unwrap(), 30);
    assert_eq!(md.require_u32("llama.attention.head_count").unwrap(), 9);
    assert_eq!(md.require_u32("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(
        md.require_str_array("tokenizer.ggml.tokens").unwrap().len(),
        49_152
    );
    assert!(md
        .require_str("tokenizer.chat_template")
        .unwrap()
        .contains("<|im_start|>"));
    assert_eq!(file.tensors().len(), 272);
    let down = file.tensor("blk.0.ffn_down.weight").unwrap();
    assert_eq!(
        (down.ty, down.dims.as_slice()),
        (GgmlType::Q4_1, &[1536, 576][..])
    );
    assert_eq!(down.n_bytes, 552_960);
}
