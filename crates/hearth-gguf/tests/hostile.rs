//! Truncated and corrupted files: every one is an error naming what is wrong, never a panic,
//! never an out-of-bounds read and never an allocation sized by an untrusted count.

mod common;

use common::{sample_writer, Raw};
use hearth_gguf::{GgufError, GgufFile, MAX_ARRAY_DEPTH, MAX_METADATA_ELEMENTS};

fn parse(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
    GgufFile::from_bytes(bytes)
}

/// Parses `bytes`, expecting an error whose message contains every one of `needles`.
fn expect_err(bytes: Vec<u8>, needles: &[&str]) -> GgufError {
    let err = match parse(bytes) {
        Ok(_) => panic!("expected an error mentioning {needles:?}"),
        Err(e) => e,
    };
    let msg = err.to_string();
    for n in needles {
        assert!(msg.contains(n), "error {msg:?} does not mention {n:?}");
    }
    err
}

#[test]
fn every_truncation_point_is_a_truncated_error() {
    let bytes = sample_writer().to_bytes();
    assert!(parse(bytes.clone()).is_ok());
    for len in 0..bytes.len() {
        match parse(bytes[..len].to_vec()) {
            Err(GgufError::Truncated { .. }) => {}
            other => panic!("prefix of {len} bytes: expected Truncated, got {other:?}"),
        }
    }
}

#[test]
fn single_byte_corruptions_never_panic() {
    // A small deterministic sweep (the fuzz target covers far more): every byte position set
    // to a few interesting values.
    let bytes = sample_writer().to_bytes();
    let mut n_ok = 0;
    for pos in 0..bytes.len() {
        for v in [0x00, 0x01, 0x07, 0x0d, 0x7f, 0x80, 0xfe, 0xff] {
            let mut b = bytes.clone();
            b[pos] = v;
            if let Ok(file) = parse(b) {
                n_ok += 1;
                for t in file.tensors() {
                    assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes);
                }
            }
        }
    }
    // Data and padding bytes can change freely, so many variants stay valid.
    assert!(n_ok > 0);
}

#[test]
fn header_errors() {
    let err = expect_err(b"GGML\x03\0\0\0".to_vec(), &["not a GGUF file", "GGML"]);
    assert!(matches!(err, GgufError::NotGguf { magic } if &magic == b"GGML"));
    let err = expect_err(Raw::header(1, 0, 0).bytes(), &["version 1"]);
    assert!(matches!(err, GgufError::UnsupportedVersion(1)));
    let err = expect_err(Raw::header(4, 0, 0).bytes(), &["version 4"]);
    assert!(matches!(err, GgufError::UnsupportedVersion(4)));
    let big_endian = Raw::header(3u32.swap_bytes(), 0, 0).bytes();
    let err = expect_err(big_endian, &["big-endian"]);
    assert!(matches!(err, GgufError::Invalid(_)));
    expect_err(b"GG".to_vec(), &["magic", "offset 0"]);
}

#[test]
fn huge_counts_fail_before_allocating() {
    expect_err(
        Raw::header(3, 0, 1 << 60).bytes(),
        &["metadata", "entries claimed"],
    );
    expect_err(
        Raw::header(3, 1 << 60, 0).bytes(),
        &["tensor infos", "claimed"],
    );
    // A key claiming 2^40 bytes.
    let mut r = Raw::header(3, 0, 1);
    r.u64(1 << 40).u32(0).u8(0);
    expect_err(r.bytes(), &["metadata key #0", "1099511627776"]);
    // A string value claiming 2^40 bytes.
    let mut r = Raw::header(3, 0, 1);
    r.str(b"general.name").u32(8).u64(1 << 40).u64(0);
    let err = expect_err(
        r.bytes(),
        &["'general.name' value", "needs 1099511627776 bytes"],
    );
    // The offset is where the string bytes would start: 24 header + 20 key + 4 type + 8 length.
    assert!(
        matches!(err, GgufError::Truncated { offset: 56, .. }),
        "{err:?}"
    );
    // An array claiming 2^60 strings.
    let mut r = Raw::header(3, 0, 1);
    r.str(b"tokenizer.ggml.tokens")
        .u32(9)
        .u32(8)
        .u64(1 << 60)
        .str(b"a");
    expect_err(
        r.bytes(),
        &[
            "'tokenizer.ggml.tokens'",
            "array of 1152921504606846976 × string",
        ],
    );
    // An array count whose byte size overflows u64.
    let mut r = Raw::header(3, 0, 1);
    r.str(b"k").u32(9).u32(10).u64(u64::MAX).u64(0);
    expect_err(r.bytes(), &["'k'", "array of 18446744073709551615 × u64"]);
}

#[test]
fn metadata_element_limit() {
    // NOTE: the bytes really are present, so only the global element limit stops this.
    let n = MAX_METADATA_ELEMENTS + 1;
    let mut r = Raw::header(3, 0, 1);
    r.str(b"big").u32(9).u32(0).u64(n);
    r.0.resize(r.0.len() + n as usize, 7);
    let err = expect_err(r.bytes(), &["'big'", "exceeds the limit"]);
    assert!(matches!(err, GgufError::Invalid(_)));
}

#[test]
fn value_type_errors() {
    let mut r = Raw::header(3, 0, 1);
    r.str(b"odd.key").u32(13).u32(0);
    let err = expect_err(
        r.bytes(),
        &["'odd.key'", "unknown value type 13", "offset 39"],
    );
    assert!(matches!(
        err,
        GgufError::UnknownValueType {
            id: 13,
            offset: 39,
            ..
        }
    ));
    let mut r = Raw::header(3, 0, 1);
    r.str(b"arr").u32(9).u32(99).u64(0);
    let err = expect_err(r.bytes(), &["'arr'", "unknown value type 99"]);
    assert!(matches!(err, GgufError::UnknownValueType { id: 99, .. }));
    let mut r = Raw::header(3, 0, 1);
    r.str(b"flag").u32(7).u8(2);
    expect_err(r.bytes(), &["'flag'", "bool byte 2"]);
}

#[test]
fn utf8_errors_name_the_key_or_tensor() {
    let mut r = Raw::header(3, 0, 1);
    r.str(b"bad\xffkey").u32(4).u32(0);
    expect_err(r.bytes(), &["metadata key #0", "not valid UTF-8"]);
    let mut r = Raw::header(3, 0, 1);
    r.str(b"tokenizer.ggml.tokens")
        .u32(9)
        .u32(8)
        .u64(2)
        .str(b"ok")
        .str(b"\xc3(");
    expect_err(
        r.bytes(),
        &["'tokenizer.ggml.tokens' value[1]", "not valid UTF-8"],
    );
    let mut r = Raw::header(3, 1, 0);
    r.tensor("w\u{0}", &[4], 0, 0);
    let idx = r.0.len() - 8 - 4 - 8 - 4 - 2;
    r.0[idx + 1] = 0xff;
    r.data(32, 16);
    expect_err(r.bytes(), &["tensor info #0", "name", "not valid UTF-8"]);
}

#[test]
fn duplicate_keys_and_tensors() {
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("a.b", 1).kv_u32("a.b", 2);
    expect_err(r.bytes(), &["duplicate metadata key 'a.b'", "entry #1"]);
    let mut r = Raw::header(3, 2, 0);
    r.tensor("w", &[4], 0, 0)
        .tensor("w", &[4], 0, 32)
        .data(32, 48);
    expect_err(r.bytes(), &["duplicate tensor name 'w'", "tensor info #1"]);
}

#[test]
fn nesting_depth_is_bounded() {
    let nested = |depth: usize| {
        let mut r = Raw::header(3, 0, 1);
        r.str(b"deep").u32(9);
        for _ in 1..depth {
            r.u32(9).u64(1);
        }
        r.u32(0).u64(1).u8(42);
        r.bytes()
    };
    assert!(parse(nested(MAX_ARRAY_DEPTH)).is_ok());
    expect_err(
        nested(MAX_ARRAY_DEPTH + 1),
        &["'deep'", "nested deeper than 8"],
    );
    // Extremely deep claims stop at the limit instead of recursing.
    expect_err(nested(100_000), &["'deep'", "nested deeper"]);
}

#[test]
fn alignment_errors() {
    for bad in [0u32, 3, 48] {
        let mut r = Raw::header(3, 0, 1);
        r.kv_u32("general.alignment", bad);
        expect_err(r.bytes(), &["general.alignment", "power of two"]);
    }
    let mut r = Raw::header(3, 0, 1);
    r.str(b"general.alignment").u32(8).str(b"32");
    let err = expect_err(
        r.bytes(),
        &["general.alignment", "expected integer fitting u32"],
    );
    assert!(matches!(err, GgufError::WrongType { .. }));
}

/// A file with one tensor `w` of the given dims, type id and offset, and `n_data` data bytes.
fn one_tensor(dims: &[u64], ty: u32, offset: u64, n_data: usize) -> Vec<u8> {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("w", dims, ty, offset).data(32, n_data);
    r.bytes()
}

#[test]
fn tensor_shape_errors() {
    assert!(parse(one_tensor(&[4], 0, 0, 16)).is_ok());
    expect_err(one_tensor(&[], 0, 0, 16), &["tensor 'w'", "n_dims 0"]);
    expect_err(one_tensor(&[1; 5], 0, 0, 16), &["tensor 'w'", "n_dims 5"]);
    expect_err(
        one_tensor(&[4, 0], 0, 0, 16),
        &["tensor 'w'", "dims[1]", "is zero"],
    );
    expect_err(
        one_tensor(&[1 << 32, 1 << 32, 2], 0, 0, 16),
        &["tensor 'w'", "overflows"],
    );
    expect_err(
        one_tensor(&[1 << 62, 4], 0, 0, 16),
        &["tensor 'w'", "overflows"],
    );
    // Q4_0 (id 2) rows are whole blocks of 32.
    expect_err(
        one_tensor(&[33], 2, 0, 64),
        &["tensor 'w'", "row length 33", "block size 32"],
    );
    // A huge count of a 1-element type whose byte size overflows.
    expect_err(
        one_tensor(&[1 << 62, 1], 27, 0, 16),
        &["tensor 'w'", "overflows"],
    );
}

#[test]
fn tensor_type_and_offset_errors() {
    let err = expect_err(one_tensor(&[4], 4, 0, 16), &["tensor 'w'", "type id 4"]);
    assert!(matches!(err, GgufError::UnknownTensorType { ref tensor, id: 4 } if tensor == "w"));
    expect_err(
        one_tensor(&[4], 0, 16, 64),
        &["tensor 'w'", "offset 16", "alignment 32"],
    );
    let err = expect_err(
        one_tensor(&[4], 0, 32, 40),
        &["tensor 'w' data", "16 bytes of F32"],
    );
    assert!(matches!(err, GgufError::Truncated { .. }));
    expect_err(one_tensor(&[4], 0, u64::MAX - 31, 16), &["tensor 'w' data"]);
    expect_err(one_tensor(&[4], 0, 0, 15), &["tensor 'w' data"]);
}

#[test]
fn corrupted_counts_in_a_real_layout() {
    // Claiming more or fewer entries than there are makes the reader interpret the following
    // bytes as something else: an error, or (for fewer tensors) a file that is still
    // consistent; never a panic or a slice outside the file.
    let base = sample_writer().to_bytes();
    let n_tensors = u64::from_le_bytes(base[8..16].try_into().unwrap());
    let n_kv = u64::from_le_bytes(base[16..24].try_into().unwrap());
    let mut n_err = 0;
    for (field, value) in [
        (8..16, n_tensors + 1),
        (8..16, n_tensors - 1),
        (8..16, 0),
        (16..24, n_kv + 1),
        (16..24, n_kv - 1),
        (16..24, 0),
    ] {
        let mut bytes = base.clone();
        bytes[field].copy_from_slice(&value.to_le_bytes());
        match parse(bytes) {
            Ok(file) => {
                for t in file.tensors() {
                    assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes);
                }
            }
            Err(_) => n_err += 1,
        }
    }
    // At least the "one more" claims and the metadata ones cannot be consistent.
    assert!(n_err >= 4, "{n_err}");
}
