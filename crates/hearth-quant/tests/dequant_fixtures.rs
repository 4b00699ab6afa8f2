//! Dequantization compared bit for bit with values computed by gguf-py
//! (`tests/make_fixtures.py` writes `tests/data/dequant.bin`).

use hearth_quant::{dequantize_row, GgmlType};

struct Record {
    ty: GgmlType,
    raw: Vec<u8>,
    values: Vec<f32>,
}

fn u32_at(b: &[u8], pos: &mut usize) -> u32 {
    let v = u32::from_le_bytes(b[*pos..*pos + 4].try_into().unwrap());
    *pos += 4;
    v
}

fn load() -> Vec<Record> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/dequant.bin");
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    assert_eq!(&b[..4], b"HQFX", "bad fixture magic in {path}");
    let mut pos = 4;
    let count = u32_at(&b, &mut pos);
    (0..count)
        .map(|_| {
            let id = u32_at(&b, &mut pos);
            let ty = GgmlType::from_id(id).unwrap_or_else(|| panic!("unknown type id {id}"));
            let n = u32_at(&b, &mut pos) as usize;
            let n_bytes = u32_at(&b, &mut pos) as usize;
            let raw = b[pos..pos + n_bytes].to_vec();
            pos += n_bytes;
            let values = b[pos..pos + 4 * n]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            pos += 4 * n;
            Record { ty, raw, values }
        })
        .collect()
}

#[test]
fn dequantize_matches_gguf_py_exactly() {
    let records = load();
    let mut seen = Vec::new();
    for r in &records {
        let mut out = vec![0f32; r.values.len()];
        dequantize_row(r.ty, &r.raw, &mut out).unwrap();
        for (i, (a, b)) in out.iter().zip(&r.values).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (*a == 0.0 && *b == 0.0),
                "{}: element {i}: got {a}, gguf-py {b}",
                r.ty
            );
        }
        seen.push(r.ty);
    }
    use GgmlType::*;
    for ty in [
        F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K,
    ] {
        assert!(seen.contains(&ty), "fixture has no {ty} record");
    }
}

#[test]
fn dequantize_reads_rows_at_odd_offsets() {
    // A Q4_0 row inside a tensor may start at any multiple of 18 bytes, and a slice of a
    // buffer at any byte; the result must not depend on alignment.
    let records = load();
    let r = records.iter().find(|r| r.ty == GgmlType::Q4_0).unwrap();
    let mut shifted = vec![0u8; r.raw.len() + 1];
    shifted[1..].copy_from_slice(&r.raw);
    let mut out = vec![0f32; r.values.len()];
    dequantize_row(GgmlType::Q4_0, &shifted[1..], &mut out).unwrap();
    assert_eq!(out, r.values);
}
