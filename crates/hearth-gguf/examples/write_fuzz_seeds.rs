//! Writes a few small valid GGUF files to seed the fuzz corpus.
//!
//! `cargo run -p hearth-gguf --example write_fuzz_seeds -- fuzz/corpus/gguf_parse`

use std::path::PathBuf;

use hearth_gguf::{GgmlType, GgufWriter, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: write_fuzz_seeds DIR")?,
    );
    std::fs::create_dir_all(&dir)?;
    for (name, writer) in seeds()? {
        writer.write(dir.join(format!("{name}.gguf")))?;
    }
    println!("wrote seeds to {}", dir.display());
    Ok(())
}

fn seeds() -> Result<Vec<(&'static str, GgufWriter)>, hearth_gguf::GgufError> {
    let s = |x: &str| Value::String(x.to_string());

    let empty = GgufWriter::new();

    let mut scalars = GgufWriter::new();
    let values = [
        Value::U8(1),
        Value::I8(-1),
        Value::U16(2),
        Value::I16(-2),
        Value::U32(3),
        Value::I32(-3),
        Value::U64(4),
        Value::I64(-4),
        Value::F32(0.5),
        Value::F64(0.25),
        Value::Bool(true),
        s("text"),
    ];
    for (i, v) in values.into_iter().enumerate() {
        scalars.add_kv(format!("k{i}"), v)?;
    }

    let mut arrays = GgufWriter::new();
    arrays.add_kv("general.architecture", s("llama"))?;
    arrays.add_kv(
        "tokenizer.ggml.tokens",
        Value::Array(vec![s("<s>"), s("a"), s("▁b")]),
    )?;
    arrays.add_kv(
        "tokenizer.ggml.scores",
        Value::Array(vec![Value::F32(0.0); 3]),
    )?;
    arrays.add_kv(
        "nested",
        Value::Array(vec![
            Value::Array(vec![Value::I32(1)]),
            Value::Array(vec![]),
        ]),
    )?;

    let mut tensors = GgufWriter::new();
    tensors.add_kv("general.alignment", Value::U32(64))?;
    tensors.add_tensor("a", &[4, 2], GgmlType::F32, &[1; 32])?;
    tensors.add_tensor("b", &[32], GgmlType::Q8_0, &[2; 34])?;
    tensors.add_tensor("c", &[256, 1, 1, 1], GgmlType::Q4_K, &[3; 144])?;
    tensors.add_tensor("d", &[3], GgmlType::F16, &[4; 6])?;

    Ok(vec![
        ("empty", empty),
        ("scalars", scalars),
        ("arrays", arrays),
        ("tensors", tensors),
    ])
}
