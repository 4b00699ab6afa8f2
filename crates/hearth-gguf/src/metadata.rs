//! The key/value metadata of a GGUF file, with typed getters.

use std::collections::HashMap;

use crate::{GgufError, Value};

/// An ordered map from metadata key to value, in file order, with O(1) lookup.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `key`; a key that is already present is an error (GGUF keys are unique).
    pub fn insert(&mut self, key: impl Into<String>, value: Value) -> Result<(), GgufError> {
        let key = key.into();
        if self.index.contains_key(&key) {
            return Err(GgufError::Invalid(format!(
                "duplicate metadata key '{key}'"
            )));
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(())
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// All entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.typed(key, "string", |v| v.as_str())
    }

    /// An integer value that fits in u32 (any integer type).
    pub fn get_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.typed(key, "integer fitting u32", int_as)
    }

    /// An integer value that fits in u64 (any integer type).
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.typed(key, "integer fitting u64", int_as)
    }

    /// An integer value that fits in i32 (any integer type).
    pub fn get_i32(&self, key: &str) -> Result<Option<i32>, GgufError> {
        self.typed(key, "integer fitting i32", int_as)
    }

    /// A number as f32: F32, F64 (rounded) or any integer.
    pub fn get_f32(&self, key: &str) -> Result<Option<f32>, GgufError> {
        self.typed(key, "number", number_as_f32)
    }

    /// A boolean value.
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.typed(key, "bool", |v| match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        })
    }

    /// An array of strings (borrowed from the metadata).
    pub fn get_str_array(&self, key: &str) -> Result<Option<Vec<&str>>, GgufError> {
        self.typed_array(key, "array of string", |v| v.as_str())
    }

    /// An array of numbers as f32 (each element as in [`Metadata::get_f32`]).
    pub fn get_f32_array(&self, key: &str) -> Result<Option<Vec<f32>>, GgufError> {
        self.typed_array(key, "array of number", number_as_f32)
    }

    /// An array of integers that each fit in i32.
    pub fn get_i32_array(&self, key: &str) -> Result<Option<Vec<i32>>, GgufError> {
        self.typed_array(key, "array of integer fitting i32", int_as)
    }

    /// An array of integers that each fit in u32.
    pub fn get_u32_array(&self, key: &str) -> Result<Option<Vec<u32>>, GgufError> {
        self.typed_array(key, "array of integer fitting u32", int_as)
    }

    /// Like [`Metadata::get_str`], but an absent key is [`GgufError::MissingKey`].
    pub fn require_str(&self, key: &str) -> Result<&str, GgufError> {
        required(key, self.get_str(key))
    }

    /// Like [`Metadata::get_u32`], but an absent key is [`GgufError::MissingKey`].
    pub fn require_u32(&self, key: &str) -> Result<u32, GgufError> {
        required(key, self.get_u32(key))
    }

    /// Like [`Metadata::get_u64`], but an absent key is [`GgufError::MissingKey`].
    pub fn require_u64(&self, key: &str) -> Result<u64, GgufError> {
        required(key, self.get_u64(key))
    }

    /// Like [`Metadata::get_i32`], but an absent key is [`GgufError::MissingKey`].
    pub fn require_i32(&self, key: &str) -> Result<i32, GgufError> {
        required(key, self.get_i32(key))
    }

    /// Like [`Metadata::get_f32`], but an absent key is [`GgufError::MissingKey`].
    pub fn require_f32(&self, key: &str) -> Result<f32, GgufError> {
        required(key, self.get_f32(key))
    }

    /// Like [`Metadata::get_bool`], but an absent key is [`GgufError::MissingKey`].
    pub fn require_bool(&self, key: &str) -> Result<bool, GgufError> {
        required(key, self.get_bool(key))
    }

    /// Like [`Metadata::get_str_array`], but an absent key is [`GgufError::MissingKey`].
    pub fn require_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        required(key, self.get_str_array(key))
    }

    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        convert: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Option<T>, GgufError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        match convert(value) {
            Some(v) => Ok(Some(v)),
            None => Err(wrong_type(key, expected, value)),
        }
    }

    fn typed_array<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        convert: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>, GgufError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let Value::Array(items) = value else {
            return Err(wrong_type(key, expected, value));
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match convert(item) {
                Some(v) => out.push(v),
                None => {
                    return Err(GgufError::WrongType {
                        key: key.to_string(),
                        expected,
                        found: format!("{} at element {i}", describe(item)),
                    })
                }
            }
        }
        Ok(Some(out))
    }
}

fn int_as<T: TryFrom<i128>>(v: &Value) -> Option<T> {
    v.as_integer().and_then(|i| T::try_from(i).ok())
}

fn number_as_f32(v: &Value) -> Option<f32> {
    match *v {
        Value::F32(x) => Some(x),
        Value::F64(x) => Some(x as f32),
        _ => v.as_integer().map(|i| i as f32),
    }
}

/// The found type, with the value itself for integers (so "out of range" is visible).
fn describe(v: &Value) -> String {
    match v.as_integer() {
        Some(i) => format!("{} {i}", v.type_name()),
        None => v.type_description(),
    }
}

fn wrong_type(key: &str, expected: &'static str, found: &Value) -> GgufError {
    GgufError::WrongType {
        key: key.to_string(),
        expected,
        found: describe(found),
    }
}

fn required<T>(key: &str, got: Result<Option<T>, GgufError>) -> Result<T, GgufError> {
    got?.ok_or_else(|| GgufError::MissingKey(key.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Metadata {
        let mut m = Metadata::new();
        m.insert("u8", Value::U8(7)).unwrap();
        m.insert("neg", Value::I32(-1)).unwrap();
        m.insert("big", Value::U64(1 << 40)).unwrap();
        m.insert("f64", Value::F64(0.5)).unwrap();
        m.insert("s", Value::String("hi".into())).unwrap();
        m.insert("b", Value::Bool(true)).unwrap();
        m.insert(
            "strs",
            Value::Array(vec![Value::String("a".into()), Value::String("b".into())]),
        )
        .unwrap();
        m.insert("ints", Value::Array(vec![Value::I32(-2), Value::U8(3)]))
            .unwrap();
        m
    }

    #[test]
    fn order_and_lookup() {
        let m = sample();
        let keys: Vec<&str> = m.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["u8", "neg", "big", "f64", "s", "b", "strs", "ints"]);
        assert_eq!(m.len(), 8);
        assert_eq!(m.get("s"), Some(&Value::String("hi".into())));
        assert!(m.get("nope").is_none());
    }

    #[test]
    fn duplicate_insert_is_an_error() {
        let mut m = sample();
        let err = m.insert("s", Value::U8(1)).unwrap_err();
        assert!(
            err.to_string().contains("duplicate metadata key 's'"),
            "{err}"
        );
    }

    #[test]
    fn integer_getters_convert_when_in_range() {
        let m = sample();
        assert_eq!(m.get_u32("u8").unwrap(), Some(7));
        assert_eq!(m.get_i32("neg").unwrap(), Some(-1));
        assert_eq!(m.get_u64("big").unwrap(), Some(1 << 40));
        assert_eq!(m.get_u32("absent").unwrap(), None);
        let err = m.get_u32("neg").unwrap_err();
        assert!(
            matches!(&err, GgufError::WrongType { key, found, .. } if key == "neg" && found == "i32 -1"),
            "{err:?}"
        );
        assert!(matches!(m.get_u32("big"), Err(GgufError::WrongType { .. })));
        assert!(matches!(m.get_u32("s"), Err(GgufError::WrongType { .. })));
    }

    #[test]
    fn float_string_bool_getters() {
        let m = sample();
        assert_eq!(m.get_f32("f64").unwrap(), Some(0.5));
        assert_eq!(m.get_f32("u8").unwrap(), Some(7.0));
        assert_eq!(m.get_str("s").unwrap(), Some("hi"));
        assert_eq!(m.get_bool("b").unwrap(), Some(true));
        let err = m.get_str("u8").unwrap_err();
        assert_eq!(
            err.to_string(),
            "metadata key 'u8': expected string, found u8 7"
        );
        assert!(matches!(m.get_bool("u8"), Err(GgufError::WrongType { .. })));
        assert!(matches!(m.get_f32("s"), Err(GgufError::WrongType { .. })));
    }

    #[test]
    fn array_getters() {
        let m = sample();
        assert_eq!(m.get_str_array("strs").unwrap(), Some(vec!["a", "b"]));
        assert_eq!(m.get_i32_array("ints").unwrap(), Some(vec![-2, 3]));
        assert_eq!(m.get_f32_array("ints").unwrap(), Some(vec![-2.0, 3.0]));
        let err = m.get_u32_array("ints").unwrap_err();
        assert_eq!(
            err.to_string(),
            "metadata key 'ints': expected array of integer fitting u32, found i32 -2 at element 0"
        );
        let err = m.get_str_array("s").unwrap_err();
        assert!(matches!(err, GgufError::WrongType { .. }));
        assert!(matches!(
            m.get_str_array("ints"),
            Err(GgufError::WrongType { .. })
        ));
    }

    #[test]
    fn required_getters() {
        let m = sample();
        assert_eq!(m.require_str("s").unwrap(), "hi");
        assert_eq!(m.require_u32("u8").unwrap(), 7);
        assert_eq!(m.require_f32("f64").unwrap(), 0.5);
        let err = m.require_u32("llama.block_count").unwrap_err();
        assert!(matches!(&err, GgufError::MissingKey(k) if k == "llama.block_count"));
        assert_eq!(err.to_string(), "missing metadata key 'llama.block_count'");
        assert!(matches!(
            m.require_str("u8"),
            Err(GgufError::WrongType { .. })
        ));
    }
}
