//! Parsing the GGUF header, metadata and tensor infos.
//!
//! ```text
//!  "GGUF" | version u32 | n_tensors u64 | n_kv u64
//!  n_kv ×      key (u64 len + bytes) | value type u32 | value
//!  n_tensors × name (u64 len + bytes) | n_dims u32 | dims u64 × n_dims | type u32 | offset u64
//!  padding to `general.alignment` (default 32)
//!  data section: tensor i at data_start + offset_i
//! ```
//!
//! Everything is little-endian. Every count and length is checked against the bytes remaining
//! before anything is allocated for it.

use std::collections::HashMap;

use hearth_quant::GgmlType;

use crate::cursor::{Cursor, What};
use crate::value::ValueType;
use crate::{GgufError, Metadata, TensorInfo, Value};

/// Alignment of the data section and of tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// GGML_MAX_DIMS: the most dimensions a tensor may have.
pub const MAX_DIMS: u32 = 4;
/// Arrays may nest at most this deep (an array of arrays has depth 2).
pub const MAX_ARRAY_DEPTH: usize = 8;
/// The most array elements all metadata values of one file may hold together.
///
/// NOTE: a `Value` takes 32 bytes in memory but a `u8` element one byte in the file, so a file
/// of nothing but a huge u8 array would otherwise cost 32× its size in memory. Real vocabularies
/// hold under a million tokens (three arrays of them), far below this limit.
pub const MAX_METADATA_ELEMENTS: u64 = 1 << 25;

/// Smallest possible encoding of one metadata entry: empty key, type, one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Smallest possible encoding of one tensor info: empty name, n_dims, one dim, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// The parsed layout of a file; offsets refer to the byte buffer that was parsed.
pub(crate) struct Layout {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    pub data_offset: u64,
}

/// Parses and validates a whole GGUF file held in `bytes`.
pub(crate) fn parse(bytes: &[u8]) -> Result<Layout, GgufError> {
    let mut cur = Cursor::new(bytes);
    let version = read_header(&mut cur)?;
    let n_tensors = cur.u64(&|| "header tensor count".into())?;
    let n_kv = cur.u64(&|| "header metadata count".into())?;
    let metadata = read_metadata(&mut cur, n_kv)?;
    let alignment = alignment_of(&metadata)?;
    let (tensors, tensor_index) = read_tensor_infos(&mut cur, n_tensors, alignment)?;
    // NOTE: offset <= file length and alignment <= 2^31, so this cannot overflow.
    let data_offset = cur.offset().next_multiple_of(alignment);
    check_tensor_ranges(&tensors, data_offset, bytes.len() as u64)?;
    Ok(Layout {
        version,
        metadata,
        tensors,
        tensor_index,
        alignment,
        data_offset,
    })
}

fn read_header(cur: &mut Cursor) -> Result<u32, GgufError> {
    let magic: [u8; 4] = cur
        .take(4, &|| "magic".into())?
        .try_into()
        .expect("take(4) returns 4 bytes");
    if &magic != b"GGUF" {
        return Err(GgufError::NotGguf { magic });
    }
    let version = cur.u32(&|| "header version".into())?;
    match version {
        2 | 3 => Ok(version),
        // NOTE: the magic is always written little-endian, the rest in the file's byte order,
        // so a big-endian file shows a version with its low half zero.
        v if v & 0xffff == 0 && (1..=3).contains(&v.swap_bytes()) => {
            Err(GgufError::Invalid(format!(
                "big-endian GGUF (version {}) is not supported",
                v.swap_bytes()
            )))
        }
        v => Err(GgufError::UnsupportedVersion(v)),
    }
}

fn read_metadata(cur: &mut Cursor, n_kv: u64) -> Result<Metadata, GgufError> {
    if n_kv.saturating_mul(MIN_KV_BYTES) > cur.remaining() {
        return Err(cur.truncated(
            &|| format!("metadata: {n_kv} entries claimed"),
            n_kv.saturating_mul(MIN_KV_BYTES),
        ));
    }
    let mut metadata = Metadata::new();
    let mut element_budget = MAX_METADATA_ELEMENTS;
    for i in 0..n_kv {
        let key_offset = cur.offset();
        let key = cur.string_bytes(&|| format!("metadata key #{i}"))?;
        let key = std::str::from_utf8(key).map_err(|_| {
            GgufError::Invalid(format!(
                "metadata key #{i} at offset {key_offset} is not valid UTF-8"
            ))
        })?;
        let type_offset = cur.offset();
        let type_id = cur.u32(&|| format!("metadata key #{i} '{key}' value type"))?;
        let ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.to_string(),
            id: type_id,
            offset: type_offset,
        })?;
        let mut reader = ValueReader {
            cur,
            key_index: i,
            key,
            element_budget: &mut element_budget,
        };
        let value = reader.read(ty, 0, None)?;
        if metadata.contains_key(key) {
            return Err(GgufError::Invalid(format!(
                "duplicate metadata key '{key}' (entry #{i} at offset {key_offset})"
            )));
        }
        metadata.insert(key, value)?;
    }
    Ok(metadata)
}

/// Reads one metadata value, naming its key in every error.
struct ValueReader<'c, 'a> {
    cur: &'c mut Cursor<'a>,
    key_index: u64,
    key: &'c str,
    element_budget: &'c mut u64,
}

fn describe_value(key_index: u64, key: &str, element: Option<u64>) -> String {
    match element {
        Some(e) => format!("metadata key #{key_index} '{key}' value[{e}]"),
        None => format!("metadata key #{key_index} '{key}' value"),
    }
}

impl ValueReader<'_, '_> {
    /// Reads a value of type `ty`; `element` is its index when it is inside an array, `depth`
    /// the number of arrays it is nested in.
    fn read(
        &mut self,
        ty: ValueType,
        depth: usize,
        element: Option<u64>,
    ) -> Result<Value, GgufError> {
        let (key_index, key) = (self.key_index, self.key);
        let what: What = &|| describe_value(key_index, key, element);
        let cur = &mut *self.cur;
        Ok(match ty {
            ValueType::U8 => Value::U8(cur.u8(what)?),
            ValueType::I8 => Value::I8(cur.u8(what)? as i8),
            ValueType::U16 => Value::U16(cur.u16(what)?),
            ValueType::I16 => Value::I16(cur.u16(what)? as i16),
            ValueType::U32 => Value::U32(cur.u32(what)?),
            ValueType::I32 => Value::I32(cur.u32(what)? as i32),
            ValueType::U64 => Value::U64(cur.u64(what)?),
            ValueType::I64 => Value::I64(cur.u64(what)? as i64),
            ValueType::F32 => Value::F32(f32::from_bits(cur.u32(what)?)),
            ValueType::F64 => Value::F64(f64::from_bits(cur.u64(what)?)),
            ValueType::Bool => {
                let offset = cur.offset();
                match cur.u8(what)? {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => {
                        return Err(GgufError::Invalid(format!(
                            "{}: bool byte {b} at offset {offset} is neither 0 nor 1",
                            what()
                        )))
                    }
                }
            }
            ValueType::String => Value::String(self.read_string(element)?),
            ValueType::Array => Value::Array(self.read_array(depth + 1, element)?),
        })
    }

    /// Reads an array header and its elements; `depth` counts this array.
    fn read_array(&mut self, depth: usize, element: Option<u64>) -> Result<Vec<Value>, GgufError> {
        let (key_index, key) = (self.key_index, self.key);
        let what: What = &|| describe_value(key_index, key, element);
        if depth > MAX_ARRAY_DEPTH {
            return Err(GgufError::Invalid(format!(
                "{}: arrays nested deeper than {MAX_ARRAY_DEPTH} at offset {}",
                what(),
                self.cur.offset()
            )));
        }
        let type_offset = self.cur.offset();
        let type_id = self.cur.u32(&|| format!("{} array element type", what()))?;
        let elem_ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.to_string(),
            id: type_id,
            offset: type_offset,
        })?;
        let count = self.cur.u64(&|| format!("{} array length", what()))?;
        let needed = count.saturating_mul(elem_ty.min_encoded_size());
        if needed > self.cur.remaining() {
            let describe = || format!("{}: array of {count} × {}", what(), elem_ty.name());
            return Err(self.cur.truncated(&describe, needed));
        }
        if count > *self.element_budget {
            return Err(GgufError::Invalid(format!(
                "{}: array of {count} elements at offset {type_offset} exceeds the limit of \
                 {MAX_METADATA_ELEMENTS} metadata array elements per file",
                what()
            )));
        }
        *self.element_budget -= count;
        // NOTE: count * min_encoded_size <= bytes remaining, so every allocation below is
        // bounded by (a small multiple of) the file size, never by the claimed count alone.
        if let Some(items) = self.read_fixed_size_array(elem_ty, needed, what)? {
            return Ok(items);
        }
        let mut items = Vec::with_capacity(count as usize);
        if elem_ty == ValueType::String {
            // NOTE: a dedicated loop for vocabularies (262k strings); same checks as `read`.
            for i in 0..count {
                items.push(Value::String(self.read_string(Some(i))?));
            }
            return Ok(items);
        }
        for i in 0..count {
            items.push(self.read(elem_ty, depth, Some(i))?);
        }
        Ok(items)
    }

    fn read_string(&mut self, element: Option<u64>) -> Result<String, GgufError> {
        let (key_index, key) = (self.key_index, self.key);
        let what: What = &|| describe_value(key_index, key, element);
        let offset = self.cur.offset();
        let bytes = self.cur.string_bytes(what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::Invalid(format!(
                "{}: string at offset {offset} is not valid UTF-8",
                what()
            ))),
        }
    }

    /// Fast path for arrays of fixed-size numbers: one bounds check for the whole array, then a
    /// tight decode loop (vocabulary scores and token types have 262k entries). `None` for
    /// other element types.
    fn read_fixed_size_array(
        &mut self,
        elem_ty: ValueType,
        n_bytes: u64,
        what: What,
    ) -> Result<Option<Vec<Value>>, GgufError> {
        fn decode<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> Value) -> Vec<Value> {
            bytes
                .chunks_exact(N)
                // NOTE: chunks_exact yields slices of exactly N bytes.
                .map(|c| f(c.try_into().expect("chunk of N bytes")))
                .collect()
        }
        let items = match elem_ty {
            ValueType::Bool | ValueType::String | ValueType::Array => return Ok(None),
            _ => {
                let bytes = self.cur.take(n_bytes, what)?;
                match elem_ty {
                    ValueType::U8 => bytes.iter().map(|&b| Value::U8(b)).collect(),
                    ValueType::I8 => bytes.iter().map(|&b| Value::I8(b as i8)).collect(),
                    ValueType::U16 => decode(bytes, |b| Value::U16(u16::from_le_bytes(b))),
                    ValueType::I16 => decode(bytes, |b| Value::I16(i16::from_le_bytes(b))),
                    ValueType::U32 => decode(bytes, |b| Value::U32(u32::from_le_bytes(b))),
                    ValueType::I32 => decode(bytes, |b| Value::I32(i32::from_le_bytes(b))),
                    ValueType::F32 => decode(bytes, |b| Value::F32(f32::from_le_bytes(b))),
                    ValueType::U64 => decode(bytes, |b| Value::U64(u64::from_le_bytes(b))),
                    ValueType::I64 => decode(bytes, |b| Value::I64(i64::from_le_bytes(b))),
                    ValueType::F64 => decode(bytes, |b| Value::F64(f64::from_le_bytes(b))),
                    ValueType::Bool | ValueType::String | ValueType::Array => {
                        unreachable!("handled above")
                    }
                }
            }
        };
        Ok(Some(items))
    }
}

fn alignment_of(metadata: &Metadata) -> Result<u64, GgufError> {
    let Some(alignment) = metadata.get_u32(crate::ALIGNMENT_KEY)? else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    if alignment == 0 || !alignment.is_power_of_two() {
        return Err(GgufError::Invalid(format!(
            "metadata key '{}' = {alignment}: must be a nonzero power of two",
            crate::ALIGNMENT_KEY
        )));
    }
    Ok(alignment.into())
}

type TensorTable = (Vec<TensorInfo>, HashMap<String, usize>);

fn read_tensor_infos(
    cur: &mut Cursor,
    n_tensors: u64,
    alignment: u64,
) -> Result<TensorTable, GgufError> {
    let needed = n_tensors.saturating_mul(MIN_TENSOR_INFO_BYTES);
    if needed > cur.remaining() {
        return Err(cur.truncated(&|| format!("tensor infos: {n_tensors} claimed"), needed));
    }
    // NOTE: bounded by the bytes remaining (checked above).
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut index = HashMap::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let info_offset = cur.offset();
        let info = read_tensor_info(cur, i, alignment)?;
        if index.contains_key(&info.name) {
            return Err(GgufError::Invalid(format!(
                "duplicate tensor name '{}' (tensor info #{i} at offset {info_offset})",
                info.name
            )));
        }
        index.insert(info.name.clone(), tensors.len());
        tensors.push(info);
    }
    Ok((tensors, index))
}

fn read_tensor_info(cur: &mut Cursor, i: u64, alignment: u64) -> Result<TensorInfo, GgufError> {
    let name_offset = cur.offset();
    let name = cur.string_bytes(&|| format!("tensor info #{i} name"))?;
    let name = std::str::from_utf8(name).map_err(|_| {
        GgufError::Invalid(format!(
            "tensor info #{i}: name at offset {name_offset} is not valid UTF-8"
        ))
    })?;
    let invalid = |msg: String| GgufError::Invalid(format!("tensor '{name}': {msg}"));
    let dims_offset = cur.offset();
    let n_dims = cur.u32(&|| format!("tensor info #{i} '{name}' n_dims"))?;
    if !(1..=MAX_DIMS).contains(&n_dims) {
        return Err(invalid(format!(
            "n_dims {n_dims} at offset {dims_offset} is not in 1..={MAX_DIMS}"
        )));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for d in 0..n_dims {
        let dim_offset = cur.offset();
        let dim = cur.u64(&|| format!("tensor info #{i} '{name}' dims[{d}]"))?;
        if dim == 0 {
            return Err(invalid(format!("dims[{d}] at offset {dim_offset} is zero")));
        }
        dims.push(dim);
    }
    let type_id = cur.u32(&|| format!("tensor info #{i} '{name}' type"))?;
    let ty = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
        tensor: name.to_string(),
        id: type_id,
    })?;
    let offset = cur.u64(&|| format!("tensor info #{i} '{name}' data offset"))?;
    let n_bytes = tensor_size(&dims, ty).map_err(invalid)?;
    if offset % alignment != 0 {
        return Err(invalid(format!(
            "data offset {offset} is not a multiple of the alignment {alignment}"
        )));
    }
    Ok(TensorInfo {
        name: name.to_string(),
        dims,
        ty,
        offset,
        n_bytes,
    })
}

/// Bytes taken by a tensor of shape `dims` and type `ty`, or why the shape is invalid.
pub(crate) fn tensor_size(dims: &[u64], ty: GgmlType) -> Result<u64, String> {
    // NOTE: ggml counts elements in int64_t, so larger counts cannot come from a real file.
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| format!("element count of dims {dims:?} overflows"))?;
    let block_size = ty.block_size() as u64;
    let row_len = dims.first().copied().unwrap_or(0);
    if row_len % block_size != 0 {
        return Err(format!(
            "row length {row_len} is not a multiple of the {ty} block size {block_size}"
        ));
    }
    ty.bytes_for(n_elements)
        .ok_or_else(|| format!("size of {n_elements} {ty} elements overflows"))
}

fn check_tensor_ranges(
    tensors: &[TensorInfo],
    data_offset: u64,
    file_size: u64,
) -> Result<(), GgufError> {
    for t in tensors {
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        match (start, end) {
            (Some(_), Some(end)) if end <= file_size => {}
            _ => {
                return Err(GgufError::Truncated {
                    what: format!(
                        "tensor '{}' data ({} bytes of {} at data offset {}; the file has {} \
                         bytes, data section starts at {data_offset})",
                        t.name, t.n_bytes, t.ty, t.offset, file_size
                    ),
                    offset: start.unwrap_or(u64::MAX),
                })
            }
        }
    }
    Ok(())
}
