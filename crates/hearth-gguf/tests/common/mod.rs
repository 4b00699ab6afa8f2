//! Shared helpers for the integration tests: a sample file covering every value type, a raw
//! byte builder for hand-crafted (hostile) files, and the test-model lookup.
#![allow(dead_code)]

use std::path::PathBuf;

use hearth_gguf::{GgmlType, GgufWriter, Value};

/// Every scalar type once, plus arrays of several element types, nested and empty arrays.
pub fn sample_values() -> Vec<(&'static str, Value)> {
    let s = |x: &str| Value::String(x.to_string());
    vec![
        ("general.architecture", s("llama")),
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60_000)),
        ("t.i16", Value::I16(-30_000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.u64", Value::U64(u64::MAX - 1)),
        ("t.i64", Value::I64(i64::MIN + 1)),
        ("t.f32", Value::F32(-1.5e-7)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("t.bool", Value::Bool(true)),
        ("t.string", s("héllo\n\"wörld\" ✓")),
        ("t.empty_string", s("")),
        (
            "t.strs",
            Value::Array(vec![s("<pad>"), s("<eos>"), s(""), s("▁the")]),
        ),
        (
            "t.f32s",
            Value::Array(vec![
                Value::F32(0.0),
                Value::F32(-0.0),
                Value::F32(f32::INFINITY),
                Value::F32(1e-40),
            ]),
        ),
        ("t.i32s", Value::Array(vec![Value::I32(1), Value::I32(-1)])),
        (
            "t.bools",
            Value::Array(vec![Value::Bool(false), Value::Bool(true)]),
        ),
        (
            "t.u64s",
            Value::Array(vec![Value::U64(0), Value::U64(u64::MAX)]),
        ),
        (
            "t.nested",
            Value::Array(vec![
                Value::Array(vec![Value::U8(1), Value::U8(2)]),
                Value::Array(vec![s("x")]),
                Value::Array(vec![]),
            ]),
        ),
        ("t.empty", Value::Array(vec![])),
    ]
}

/// F32 rows, a Q8_0 matrix and a Q4_K matrix with recognisable bytes.
pub fn sample_tensors() -> Vec<(&'static str, Vec<u64>, GgmlType, Vec<u8>)> {
    let pattern = |n: usize, seed: u8| -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    };
    vec![
        ("output_norm.weight", vec![5], GgmlType::F32, pattern(20, 1)),
        (
            "blk.0.attn_q.weight",
            vec![64, 3],
            GgmlType::Q8_0,
            pattern(6 * 34, 2),
        ),
        (
            "token_embd.weight",
            vec![256, 2, 1],
            GgmlType::Q4_K,
            pattern(2 * 144, 3),
        ),
        (
            "blk.0.attn_k.weight",
            vec![32, 2],
            GgmlType::F16,
            pattern(128, 4),
        ),
    ]
}

pub fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    for (k, v) in sample_values() {
        w.add_kv(k, v).unwrap();
    }
    for (name, dims, ty, data) in sample_tensors() {
        w.add_tensor(name, &dims, ty, &data).unwrap();
    }
    w
}

/// A little-endian byte builder for hand-made GGUF files.
#[derive(Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    /// Magic, version, tensor count, metadata count.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn str(&mut self, s: &[u8]) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s);
        self
    }
    /// A key with a u32 value.
    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key.as_bytes()).u32(4).u32(v)
    }
    /// A tensor info entry.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name.as_bytes()).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    /// Zero padding to `alignment`, then `n` data bytes.
    pub fn data(&mut self, alignment: usize, n: usize) -> &mut Self {
        let len = self.0.len().next_multiple_of(alignment) + n;
        self.0.resize(len, 0);
        self
    }
    pub fn bytes(&self) -> Vec<u8> {
        self.0.clone()
    }
}

/// The directory of the downloaded test models.
pub fn models_dir() -> PathBuf {
    match std::env::var_os("HEARTH_TEST_MODELS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/hearth-test-models"),
    }
}

/// The path of a test model; panics (failing the test) with instructions when it is missing.
pub fn model_path(file: &str) -> PathBuf {
    let path = models_dir().join(file);
    assert!(
        path.is_file(),
        "test model {} not found: run scripts/fetch-models.sh (or set HEARTH_TEST_MODELS)",
        path.display()
    );
    path
}
