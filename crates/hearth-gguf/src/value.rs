//! Metadata values: the 13 GGUF value types and a compact `Display` for them.

use std::fmt;

/// A metadata value as stored in a GGUF file.
///
/// Arrays are homogeneous in the file format (one element type per array); nested arrays may
/// each have their own element type.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

/// The value type ids of the GGUF format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub(crate) fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    pub(crate) fn id(self) -> u32 {
        self as u32
    }

    /// The fewest bytes one value of this type takes in a file: fixed-size scalars take their
    /// size, a string at least its u64 length, an array at least its u32 type and u64 count.
    /// Used to reject element counts that cannot fit in the bytes remaining before allocating.
    pub(crate) fn min_encoded_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 => 8,
            String => 8,
            Array => 12,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            U64 => "u64",
            I64 => "i64",
            F32 => "f32",
            F64 => "f64",
            Bool => "bool",
            String => "string",
            Array => "array",
        }
    }
}

impl Value {
    pub(crate) fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
        }
    }

    /// The GGUF name of this value's type: `u32`, `string`, `array`, ...
    pub fn type_name(&self) -> &'static str {
        self.value_type().name()
    }

    /// A description of the type including an array's element type, for error messages:
    /// `u32`, `array of string`, `empty array`.
    pub fn type_description(&self) -> String {
        match self {
            Value::Array(items) => match items.first() {
                Some(first) => format!("array of {}", first.type_name()),
                None => "empty array".to_string(),
            },
            other => other.type_name().to_string(),
        }
    }

    /// The value as an integer, if it is one of the eight integer types.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The string, if this is a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, if this is an array value.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }
}

/// Strings longer than this many characters are cut in the compact display.
const DISPLAY_MAX_STRING_CHARS: usize = 120;
/// Arrays show at most this many elements in the compact display.
const DISPLAY_MAX_ARRAY_ITEMS: usize = 4;

/// A one-line rendering for listings such as `hearth show`.
///
/// The normal form truncates long strings and long arrays:
/// `[262144 × string: "<pad>", "<eos>", "<bos>", "<unk>", ...]`. The alternate form (`{:#}`)
/// prints everything in full.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = f.alternate();
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write_string(f, s, full),
            Value::Array(items) => write_array(f, items, full),
        }
    }
}

fn write_string(f: &mut fmt::Formatter<'_>, s: &str, full: bool) -> fmt::Result {
    let n_chars = s.chars().count();
    let shown = if full {
        n_chars
    } else {
        n_chars.min(DISPLAY_MAX_STRING_CHARS)
    };
    f.write_str("\"")?;
    for c in s.chars().take(shown) {
        write_escaped(f, c)?;
    }
    f.write_str("\"")?;
    if shown < n_chars {
        write!(f, "... ({n_chars} chars)")?;
    }
    Ok(())
}

/// Escapes quotes, backslashes and control characters; everything else (including `'` and
/// non-ASCII text such as `▁the`) is printed as is.
fn write_escaped(f: &mut fmt::Formatter<'_>, c: char) -> fmt::Result {
    match c {
        '"' => f.write_str("\\\""),
        '\\' => f.write_str("\\\\"),
        '\n' => f.write_str("\\n"),
        '\r' => f.write_str("\\r"),
        '\t' => f.write_str("\\t"),
        c if c.is_control() => write!(f, "\\u{{{:x}}}", c as u32),
        c => write!(f, "{c}"),
    }
}

fn write_array(f: &mut fmt::Formatter<'_>, items: &[Value], full: bool) -> fmt::Result {
    let Some(first) = items.first() else {
        return f.write_str("[]");
    };
    write!(f, "[{} × {}: ", items.len(), first.type_name())?;
    let shown = if full {
        items.len()
    } else {
        items.len().min(DISPLAY_MAX_ARRAY_ITEMS)
    };
    for (i, item) in items[..shown].iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        if full {
            write!(f, "{item:#}")?;
        } else {
            write!(f, "{item}")?;
        }
    }
    if shown < items.len() {
        f.write_str(", ...")?;
    }
    f.write_str("]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for id in 0..13 {
            assert_eq!(ValueType::from_id(id).map(ValueType::id), Some(id));
        }
        assert_eq!(ValueType::from_id(13), None);
    }

    #[test]
    fn display_truncates_long_arrays() {
        let tokens: Vec<Value> = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "a"]
            .iter()
            .map(|s| Value::String(s.to_string()))
            .collect();
        let v = Value::Array(tokens);
        assert_eq!(
            v.to_string(),
            r#"[6 × string: "<pad>", "<eos>", "<bos>", "<unk>", ...]"#
        );
        assert_eq!(
            format!("{v:#}"),
            r#"[6 × string: "<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "a"]"#
        );
    }

    #[test]
    fn display_scalars_and_nested() {
        assert_eq!(Value::F32(1e-6).to_string(), "0.000001");
        assert_eq!(Value::I8(-3).to_string(), "-3");
        assert_eq!(Value::Bool(true).to_string(), "true");
        assert_eq!(Value::String("a\nb\"".into()).to_string(), r#""a\nb\"""#);
        assert_eq!(
            Value::String("'▁x'\\\u{1}\t".into()).to_string(),
            r#""'▁x'\\\u{1}\t""#
        );
        assert_eq!(Value::Array(vec![]).to_string(), "[]");
        let nested = Value::Array(vec![Value::Array(vec![Value::U8(1), Value::U8(2)])]);
        assert_eq!(nested.to_string(), "[1 × array: [2 × u8: 1, 2]]");
    }

    #[test]
    fn display_truncates_long_strings() {
        let s = "x".repeat(500);
        let shown = Value::String(s.clone()).to_string();
        assert!(shown.ends_with("\"... (500 chars)"), "{shown}");
        assert_eq!(shown.len(), 1 + 120 + "\"... (500 chars)".len());
        assert_eq!(format!("{:#}", Value::String(s)).len(), 502);
    }
}
