//! Parses arbitrary bytes as a GGUF file. On success, touches every tensor's bytes and every
//! metadata value (including the typed getters and `Display`), so a layout that passed
//! validation but points outside the buffer, or a value that cannot be rendered, is caught.

#![no_main]

use hearth_gguf::{GgufFile, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let mut checksum = 0u64;
    for t in file.tensors() {
        let bytes = file.tensor_data(t);
        assert_eq!(bytes.len() as u64, t.n_bytes);
        assert_eq!(t.offset % file.alignment(), 0);
        assert!(file.data_offset() + t.offset + t.n_bytes <= file.file_size());
        assert_eq!(file.tensor(&t.name).map(|x| x.offset), Some(t.offset));
        checksum = bytes
            .iter()
            .fold(checksum, |acc, &b| acc.wrapping_add(b as u64));
    }
    let md = file.metadata();
    for (key, value) in md.iter() {
        checksum = checksum.wrapping_add(touch(value));
        checksum = checksum.wrapping_add(value.to_string().len() as u64);
        // NOTE: identity, not equality: a NaN value is not equal to itself.
        assert!(md.get(key).is_some_and(|v| std::ptr::eq(v, value)));
        // Typed getters must answer (Ok or a WrongType error), never panic.
        let _ = md.get_str(key);
        let _ = md.get_u32(key);
        let _ = md.get_u64(key);
        let _ = md.get_i32(key);
        let _ = md.get_f32(key);
        let _ = md.get_bool(key);
        let _ = md.get_str_array(key);
        let _ = md.get_f32_array(key);
        let _ = md.get_i32_array(key);
        let _ = md.get_u32_array(key);
    }
    std::hint::black_box(checksum);
});

/// Visits a value and everything inside it.
fn touch(value: &Value) -> u64 {
    match value {
        Value::String(s) => s.len() as u64,
        Value::Array(items) => items.iter().map(touch).fold(1, u64::wrapping_add),
        other => other.as_integer().map_or(1, |i| i as u64),
    }
}
