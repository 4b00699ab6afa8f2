//! Files written by `GgufWriter` read back identically, and the reader's layout is sound.

mod common;

use common::{sample_tensors, sample_values, sample_writer};
use hearth_gguf::{GgmlType, GgufFile, GgufWriter, Value};

#[test]
fn every_value_type_round_trips_in_order() {
    let file = GgufFile::from_bytes(sample_writer().to_bytes()).unwrap();
    assert_eq!(file.version(), 3);
    let expected = sample_values();
    let got: Vec<(&str, &Value)> = file.metadata().iter().collect();
    assert_eq!(got.len(), expected.len());
    for ((gk, gv), (ek, ev)) in got.iter().zip(&expected) {
        assert_eq!(gk, ek);
        assert_eq!(*gv, ev, "value of {ek}");
    }
    // -0.0 == 0.0 under PartialEq, so check the sign bit explicitly.
    let f32s = file.metadata().get_f32_array("t.f32s").unwrap().unwrap();
    assert_eq!(f32s[1].to_bits(), (-0.0f32).to_bits());
    assert_eq!(f32s[3].to_bits(), 1e-40f32.to_bits());
}

#[test]
fn nan_values_keep_their_bits() {
    // Found by fuzzing (in the harness, which compared values with `==`): NaN payloads must
    // survive a round trip unchanged even though NaN != NaN.
    let nan = f32::from_bits(0x7fc0_1234);
    let mut w = GgufWriter::new();
    w.add_kv(
        "nan",
        Value::Array(vec![Value::F32(nan), Value::F64(f64::NAN)]),
    )
    .unwrap_err(); // mixed element types are rejected by the writer
    w.add_kv("nan", Value::Array(vec![Value::F32(nan), Value::F32(-nan)]))
        .unwrap();
    let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
    let got = file.metadata().get_f32_array("nan").unwrap().unwrap();
    assert_eq!(got[0].to_bits(), 0x7fc0_1234);
    assert_eq!(got[1].to_bits(), 0xffc0_1234);
    assert_eq!(
        file.metadata().get("nan").unwrap().to_string(),
        "[2 × f32: NaN, NaN]"
    );
}

#[test]
fn tensors_round_trip_zero_copy_and_aligned() {
    let bytes = sample_writer().to_bytes();
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(file.alignment(), 32);
    assert_eq!(file.file_size(), bytes.len() as u64);
    assert_eq!(file.data_offset() % 32, 0);
    let expected = sample_tensors();
    assert_eq!(file.tensors().len(), expected.len());
    let mut prev_end = 0;
    for (info, (name, dims, ty, data)) in file.tensors().iter().zip(&expected) {
        assert_eq!(info.name, *name);
        assert_eq!(&info.dims, dims);
        assert_eq!(info.ty, *ty);
        assert_eq!(info.n_bytes, data.len() as u64);
        assert_eq!(info.offset % 32, 0);
        assert!(info.offset >= prev_end, "tensors overlap");
        prev_end = info.offset + info.n_bytes;
        let got = file.tensor_data(info);
        assert_eq!(got, &data[..]);
        // The slice points into the file's buffer, at the data offset, and is aligned.
        let start = (file.data_offset() + info.offset) as usize;
        assert_eq!(&bytes[start..start + data.len()], got);
        assert_eq!(
            got.as_ptr() as usize % 32,
            0,
            "{name} data is not 32-byte aligned"
        );
        assert_eq!(file.tensor(name), Some(info));
        assert_eq!(file.tensor_bytes(name), Some(got));
    }
    assert!(file.tensor("missing").is_none());
    assert_eq!(file.tensor("token_embd.weight").unwrap().n_elements(), 512);
}

#[test]
fn version_2_reads_the_same() {
    let mut bytes = sample_writer().to_bytes();
    bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
    let v2 = GgufFile::from_bytes(bytes).unwrap();
    let v3 = GgufFile::from_bytes(sample_writer().to_bytes()).unwrap();
    assert_eq!(v2.version(), 2);
    assert_eq!(v2.metadata(), v3.metadata());
    assert_eq!(v2.tensors(), v3.tensors());
}

#[test]
fn custom_alignment_is_honoured() {
    let mut w = GgufWriter::new();
    w.add_kv("general.alignment", Value::U32(256)).unwrap();
    w.add_tensor("a", &[3], GgmlType::F32, &[1; 12]).unwrap();
    w.add_tensor("b", &[32], GgmlType::Q8_0, &[2; 34]).unwrap();
    let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(file.alignment(), 256);
    assert_eq!(file.data_offset(), 256);
    assert_eq!(file.tensor("b").unwrap().offset, 256);
    assert_eq!(file.tensor_bytes("b"), Some(&[2u8; 34][..]));
    assert_eq!(file.file_size(), 768);
}

#[test]
fn metadata_only_file() {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", Value::String("x".into()))
        .unwrap();
    let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert!(file.tensors().is_empty());
    assert_eq!(
        file.metadata().require_str("general.architecture").unwrap(),
        "x"
    );
    assert_eq!(file.tensor_data_size(), 0);
}

#[test]
fn open_maps_a_written_file() {
    let dir = std::env::temp_dir().join(format!("hearth-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.gguf");
    sample_writer().write(&path).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.path(), Some(path.as_path()));
    let in_memory = GgufFile::from_bytes(std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(file.metadata(), in_memory.metadata());
    for t in file.tensors() {
        assert_eq!(file.tensor_data(t), in_memory.tensor_data(t));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn open_missing_file_names_the_path() {
    let err = GgufFile::open("/nonexistent/dir/model.gguf").unwrap_err();
    assert!(matches!(err, hearth_gguf::GgufError::Io { .. }));
    assert!(
        err.to_string().contains("/nonexistent/dir/model.gguf"),
        "{err}"
    );
}

#[test]
fn display_of_a_parsed_vocab_array() {
    let file = GgufFile::from_bytes(sample_writer().to_bytes()).unwrap();
    let tokens = file.metadata().get("t.strs").unwrap();
    assert_eq!(
        tokens.to_string(),
        r#"[4 × string: "<pad>", "<eos>", "", "▁the"]"#
    );
    let nested = file.metadata().get("t.nested").unwrap();
    assert_eq!(
        nested.to_string(),
        r#"[3 × array: [2 × u8: 1, 2], [1 × string: "x"], []]"#
    );
}
