//! A file written by gguf-py's GGUFWriter (`tests/fixtures/make_gguf_py_fixture.py`): we read
//! what it wrote, and GgufWriter produces byte-identical output for the same content.

use hearth_gguf::{GgmlType, GgufFile, GgufWriter, Value};

fn reference_bytes() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/gguf_py_written.gguf"
    );
    std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn strings(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.to_string())).collect())
}

/// The metadata the fixture script writes, in its order.
fn expected_metadata() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", Value::String("llama".into())),
        ("llama.block_count", Value::U32(2)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(true)),
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens",
            strings(&["<s>", "</s>", "▁the", "é"]),
        ),
        (
            "tokenizer.ggml.scores",
            Value::Array([0.0, -1.5, -2.25, 3.0].map(Value::F32).to_vec()),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array([3, 3, 1, 1].map(Value::I32).to_vec()),
        ),
        ("test.u64", Value::U64(1 << 40)),
        ("test.i16", Value::I16(-7)),
        ("test.f64", Value::F64(0.125)),
    ]
}

/// (name, dims, type, data) as the fixture script writes them.
fn expected_tensors() -> Vec<(&'static str, Vec<u64>, GgmlType, Vec<u8>)> {
    let norm: Vec<u8> = (0..5).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let q8: Vec<u8> = (0..68).collect();
    let half = 0x3800u16.to_le_bytes(); // 0.5 in f16
    let up: Vec<u8> = std::iter::repeat_n(half, 12).flatten().collect();
    vec![
        ("output_norm.weight", vec![5], GgmlType::F32, norm),
        ("blk.0.attn_q.weight", vec![32, 2], GgmlType::Q8_0, q8),
        ("blk.0.ffn_up.weight", vec![4, 3], GgmlType::F16, up),
    ]
}

#[test]
fn reads_what_gguf_py_wrote() {
    let file = GgufFile::from_bytes(reference_bytes()).unwrap();
    assert_eq!(file.version(), 3);
    let got: Vec<(&str, &Value)> = file.metadata().iter().collect();
    let expected = expected_metadata();
    assert_eq!(got.len(), expected.len());
    for ((gk, gv), (ek, ev)) in got.iter().zip(&expected) {
        assert_eq!((*gk, *gv), (*ek, ev));
    }
    let tensors = expected_tensors();
    assert_eq!(file.tensors().len(), tensors.len());
    for (t, (name, dims, ty, data)) in file.tensors().iter().zip(&tensors) {
        assert_eq!((t.name.as_str(), &t.dims, t.ty), (*name, dims, *ty));
        assert_eq!(file.tensor_data(t), &data[..], "{name}");
    }
}

#[test]
fn writer_matches_gguf_py_byte_for_byte() {
    let mut w = GgufWriter::new();
    for (k, v) in expected_metadata() {
        w.add_kv(k, v).unwrap();
    }
    for (name, dims, ty, data) in expected_tensors() {
        w.add_tensor(name, &dims, ty, &data).unwrap();
    }
    let ours = w.to_bytes();
    let reference = reference_bytes();
    let first_diff = ours.iter().zip(&reference).position(|(a, b)| a != b);
    assert_eq!(first_diff, None, "first differing byte");
    assert_eq!(ours.len(), reference.len());
}
