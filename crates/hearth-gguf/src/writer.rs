//! Building GGUF v3 files in memory.
//!
//! Used by tests (tiny models, hostile-file fixtures), the fuzz seed corpus and tools that
//! write converted models. Tensors are laid out in the order they were added, each at the next
//! multiple of the alignment, with zero padding.

use std::io::Write;
use std::path::Path;

use hearth_quant::GgmlType;

use crate::parse::{tensor_size, DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS};
use crate::value::ValueType;
use crate::{GgufError, Metadata, Value, ALIGNMENT_KEY};

/// The GGUF version this writer produces.
pub const WRITE_VERSION: u32 = 3;

/// Accumulates metadata and tensors, then serializes a GGUF v3 file.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Metadata,
    alignment: u64,
    tensors: Vec<PendingTensor>,
}

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

impl GgufWriter {
    /// An empty file with the default alignment (32).
    pub fn new() -> Self {
        Self {
            metadata: Metadata::new(),
            alignment: DEFAULT_ALIGNMENT,
            tensors: Vec::new(),
        }
    }

    /// Adds a metadata entry. Keys must be unique; arrays must be homogeneous (nested arrays
    /// may each have their own element type) and nested at most [`MAX_ARRAY_DEPTH`] deep.
    /// Setting `general.alignment` (a u32 power of two) changes the layout of the data section.
    ///
    /// An empty array carries no element type in a [`Value`]; it is written as an empty array
    /// of u8.
    pub fn add_kv(&mut self, key: impl Into<String>, value: Value) -> Result<(), GgufError> {
        let key = key.into();
        check_array_shape(&key, &value, 0)?;
        if key == ALIGNMENT_KEY {
            match value {
                Value::U32(a) if a.is_power_of_two() => self.alignment = a.into(),
                ref other => {
                    return Err(GgufError::Invalid(format!(
                        "metadata key '{ALIGNMENT_KEY}' must be a u32 power of two, got {} {other}",
                        other.type_name()
                    )))
                }
            }
        }
        self.metadata.insert(key, value)
    }

    /// Adds a tensor with dimensions in GGML order (`dims[0]` is the row length) and its raw
    /// bytes, which must be exactly the size the type and shape call for.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: &[u8],
    ) -> Result<(), GgufError> {
        let name = name.into();
        let invalid = |msg: String| GgufError::Invalid(format!("tensor '{name}': {msg}"));
        if dims.is_empty() || dims.len() > MAX_DIMS as usize || dims.contains(&0) {
            return Err(invalid(format!(
                "dims {dims:?} must be 1 to {MAX_DIMS} nonzero sizes"
            )));
        }
        let n_bytes = tensor_size(dims, ty).map_err(invalid)?;
        if data.len() as u64 != n_bytes {
            return Err(invalid(format!(
                "{} data bytes given, {ty} {dims:?} takes {n_bytes}",
                data.len()
            )));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::Invalid(format!(
                "duplicate tensor name '{name}'"
            )));
        }
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            ty,
            data: data.to_vec(),
        });
        Ok(())
    }

    /// The header: metadata, then `(name, dims, type, bytes)` of each tensor, padded.
    fn header<'a>(
        &self,
        tensors: impl ExactSizeIterator<Item = (&'a str, &'a [u64], GgmlType, u64)>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        put_u32(&mut out, WRITE_VERSION);
        put_u64(&mut out, tensors.len() as u64);
        put_u64(&mut out, self.metadata.len() as u64);
        for (key, value) in self.metadata.iter() {
            put_str(&mut out, key);
            put_u32(&mut out, value.value_type().id());
            put_value(&mut out, value);
        }
        let mut offset = 0u64;
        for (name, dims, ty, n_bytes) in tensors {
            put_str(&mut out, name);
            put_u32(&mut out, dims.len() as u32);
            for &d in dims {
                put_u64(&mut out, d);
            }
            put_u32(&mut out, ty.id());
            put_u64(&mut out, offset);
            offset = (offset + n_bytes).next_multiple_of(self.alignment);
        }
        pad_to(&mut out, self.alignment);
        out
    }

    /// The serialized file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.header(self.tensors.iter().map(|t| {
            (
                t.name.as_str(),
                t.dims.as_slice(),
                t.ty,
                t.data.len() as u64,
            )
        }));
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            pad_to(&mut out, self.alignment);
        }
        out
    }

    /// Writes the serialized file to `path`.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), GgufError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()).map_err(|source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// A tensor announced in a streamed file's header: its data follows later.
#[derive(Clone, Debug)]
pub struct StreamedTensor {
    pub name: String,
    /// GGML order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
}

impl GgufWriter {
    /// Writes the metadata and the headers of `tensors` (added with [`Self::add_tensor`]
    /// tensors are not allowed here) to `path`; their data then goes in one at a time through
    /// [`GgufStream::write_tensor`], so a converter never holds the whole model.
    pub fn start_stream(
        &self,
        path: impl AsRef<Path>,
        tensors: &[StreamedTensor],
    ) -> Result<GgufStream, GgufError> {
        let path = path.as_ref().to_path_buf();
        if !self.tensors.is_empty() {
            return Err(GgufError::Invalid(
                "a streamed file takes its tensors from start_stream only".into(),
            ));
        }
        let mut sizes = Vec::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            let invalid = |msg: String| GgufError::Invalid(format!("tensor '{}': {msg}", t.name));
            if t.dims.is_empty() || t.dims.len() > MAX_DIMS as usize || t.dims.contains(&0) {
                return Err(invalid(format!(
                    "dims {:?} must be 1 to {MAX_DIMS} nonzero sizes",
                    t.dims
                )));
            }
            sizes.push(tensor_size(&t.dims, t.ty).map_err(invalid)?);
            if tensors[..i].iter().any(|u| u.name == t.name) {
                return Err(GgufError::Invalid(format!(
                    "duplicate tensor name '{}'",
                    t.name
                )));
            }
        }
        let header = self.header(
            tensors
                .iter()
                .zip(&sizes)
                .map(|(t, &n)| (t.name.as_str(), t.dims.as_slice(), t.ty, n)),
        );
        let io = |source| GgufError::Io {
            path: path.clone(),
            source,
        };
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
        file.write_all(&header).map_err(io)?;
        Ok(GgufStream {
            file,
            path,
            alignment: self.alignment,
            names: tensors.iter().map(|t| t.name.clone()).collect(),
            sizes,
            next: 0,
        })
    }
}

/// A GGUF file being written tensor by tensor, in the order its header lists them.
pub struct GgufStream {
    file: std::io::BufWriter<std::fs::File>,
    path: std::path::PathBuf,
    alignment: u64,
    names: Vec<String>,
    sizes: Vec<u64>,
    next: usize,
}

impl GgufStream {
    /// The name of the tensor the next [`Self::write_tensor`] call writes.
    pub fn next_name(&self) -> Option<&str> {
        self.names.get(self.next).map(String::as_str)
    }

    /// Writes the data of the next tensor (exactly the size its header announced) and pads.
    pub fn write_tensor(&mut self, data: &[u8]) -> Result<(), GgufError> {
        let Some(&size) = self.sizes.get(self.next) else {
            return Err(GgufError::Invalid(
                "more tensors written than announced".into(),
            ));
        };
        if data.len() as u64 != size {
            return Err(GgufError::Invalid(format!(
                "tensor '{}': {} data bytes given, its header announced {size}",
                self.names[self.next],
                data.len()
            )));
        }
        let pad = (size.next_multiple_of(self.alignment) - size) as usize;
        let io = |source| GgufError::Io {
            path: self.path.clone(),
            source,
        };
        self.file.write_all(data).map_err(io)?;
        self.file.write_all(&vec![0u8; pad]).map_err(io)?;
        self.next += 1;
        Ok(())
    }

    /// Flushes the file after checking every announced tensor was written.
    pub fn finish(mut self) -> Result<(), GgufError> {
        if self.next != self.sizes.len() {
            return Err(GgufError::Invalid(format!(
                "{} of {} tensors written",
                self.next,
                self.sizes.len()
            )));
        }
        self.file.flush().map_err(|source| GgufError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

fn check_array_shape(key: &str, value: &Value, depth: usize) -> Result<(), GgufError> {
    let Value::Array(items) = value else {
        return Ok(());
    };
    if depth + 1 > MAX_ARRAY_DEPTH {
        return Err(GgufError::Invalid(format!(
            "metadata key '{key}': arrays nested deeper than {MAX_ARRAY_DEPTH}"
        )));
    }
    if let Some(first) = items.first() {
        let ty = first.value_type();
        if let Some((i, odd)) = items.iter().enumerate().find(|(_, v)| v.value_type() != ty) {
            return Err(GgufError::Invalid(format!(
                "metadata key '{key}': array of {} has a {} at element {i}",
                ty.name(),
                odd.type_name()
            )));
        }
    }
    items
        .iter()
        .try_for_each(|item| check_array_shape(key, item, depth + 1))
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn pad_to(out: &mut Vec<u8>, alignment: u64) {
    let len = (out.len() as u64).next_multiple_of(alignment);
    out.resize(len as usize, 0);
}

fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => put_str(out, s),
        Value::Array(items) => {
            let elem_ty = items.first().map_or(ValueType::U8, Value::value_type);
            put_u32(out, elem_ty.id());
            put_u64(out, items.len() as u64);
            for item in items {
                put_value(out, item);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_of_a_tiny_file() {
        let mut w = GgufWriter::new();
        w.add_kv("a", Value::U8(5)).unwrap();
        w.add_tensor("t", &[2], GgmlType::F32, &[0; 8]).unwrap();
        let bytes = w.to_bytes();
        let mut expected = b"GGUF".to_vec();
        expected.extend_from_slice(&3u32.to_le_bytes());
        expected.extend_from_slice(&1u64.to_le_bytes());
        expected.extend_from_slice(&1u64.to_le_bytes());
        expected.extend_from_slice(&1u64.to_le_bytes());
        expected.extend_from_slice(b"a");
        expected.extend_from_slice(&0u32.to_le_bytes());
        expected.push(5);
        expected.extend_from_slice(&1u64.to_le_bytes());
        expected.extend_from_slice(b"t");
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(&2u64.to_le_bytes());
        expected.extend_from_slice(&0u32.to_le_bytes());
        expected.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!(expected.len(), 71);
        expected.resize(96, 0); // padded to the alignment of 32
        expected.extend_from_slice(&[0; 8]);
        expected.resize(128, 0);
        assert_eq!(bytes, expected);
    }

    #[test]
    fn rejects_bad_input() {
        let mut w = GgufWriter::new();
        let mixed = Value::Array(vec![Value::U8(1), Value::I8(1)]);
        assert!(w.add_kv("m", mixed).is_err());
        assert!(w.add_kv(ALIGNMENT_KEY, Value::U32(24)).is_err());
        assert!(w.add_kv(ALIGNMENT_KEY, Value::U64(64)).is_err());
        assert!(w.add_tensor("t", &[3], GgmlType::F32, &[0; 8]).is_err());
        assert!(w.add_tensor("t", &[16], GgmlType::Q8_0, &[0; 34]).is_err());
        assert!(w.add_tensor("t", &[], GgmlType::F32, &[]).is_err());
        assert!(w
            .add_tensor("t", &[1, 1, 1, 1, 1], GgmlType::F32, &[0; 4])
            .is_err());
        w.add_tensor("t", &[1], GgmlType::F32, &[0; 4]).unwrap();
        assert!(w.add_tensor("t", &[1], GgmlType::F32, &[0; 4]).is_err());
        w.add_kv("k", Value::U8(1)).unwrap();
        assert!(w.add_kv("k", Value::U8(1)).is_err());
    }

    #[test]
    fn a_streamed_file_equals_the_one_built_in_memory() {
        let dir = std::env::temp_dir().join(format!("hearth-gguf-stream-{}", std::process::id()));
        let mut mem = GgufWriter::new();
        let mut streamed = GgufWriter::new();
        for w in [&mut mem, &mut streamed] {
            w.add_kv("a", Value::String("x".into())).unwrap();
        }
        let tensors = [
            (
                StreamedTensor {
                    name: "t".into(),
                    dims: vec![3],
                    ty: GgmlType::F32,
                },
                vec![1u8; 12],
            ),
            (
                StreamedTensor {
                    name: "u".into(),
                    dims: vec![32, 2],
                    ty: GgmlType::Q8_0,
                },
                vec![2u8; 68],
            ),
        ];
        for (t, d) in &tensors {
            mem.add_tensor(&t.name, &t.dims, t.ty, d).unwrap();
        }
        let heads: Vec<StreamedTensor> = tensors.iter().map(|(t, _)| t.clone()).collect();
        let mut s = streamed.start_stream(&dir, &heads).unwrap();
        assert!(s.write_tensor(&[0; 11]).is_err());
        for (_, d) in &tensors {
            s.write_tensor(d).unwrap();
        }
        s.finish().unwrap();
        let bytes = std::fs::read(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        assert_eq!(bytes, mem.to_bytes());
    }
}
