//! Reading request fields one by one, so every error names the field at fault and what it
//! accepts. OpenAI clients send fields this server does not know; those are ignored.

use serde_json::{Map, Value};

use crate::error::{parse_json, ApiError};

/// A request body: a JSON object.
pub struct Body(Map<String, Value>);

impl Body {
    /// Parses `bytes` as a JSON object.
    pub fn parse(bytes: &[u8]) -> Result<Self, ApiError> {
        match parse_json::<Value>(bytes)? {
            Value::Object(map) => Ok(Self(map)),
            other => Err(ApiError::bad_request(format!(
                "the request body must be a JSON object, got {}",
                kind(&other)
            ))),
        }
    }

    /// The field's value; `null` counts as absent.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    /// A string field.
    pub fn string(&self, name: &str) -> Result<Option<&str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(wrong_type(name, "a string", v)),
        }
    }

    /// A boolean field.
    pub fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(wrong_type(name, "true or false", v)),
        }
    }

    /// A number field, as `f32`.
    pub fn number(&self, name: &str) -> Result<Option<f32>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64().map(|x| x as f32)),
            Some(v) => Err(wrong_type(name, "a number", v)),
        }
    }

    /// An integer field (a number without a fractional part); huge values saturate.
    pub fn integer(&self, name: &str) -> Result<Option<i128>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => as_integer(v)
                .map(Some)
                .ok_or_else(|| wrong_type(name, "an integer", v)),
        }
    }

    /// An integer field that must lie in `min..=max`.
    pub fn integer_in(&self, name: &str, min: i128, max: i128) -> Result<Option<i128>, ApiError> {
        let Some(n) = self.integer(name)? else {
            return Ok(None);
        };
        if n < min || n > max {
            return Err(ApiError::bad_field(
                name,
                format!("`{name}` must be an integer from {min} to {max}, got {n}"),
            ));
        }
        Ok(Some(n))
    }
}

/// The value as an integer, when it is one (a float without a fractional part counts).
pub fn as_integer(v: &Value) -> Option<i128> {
    let n = v.as_number()?;
    if let Some(i) = n.as_i64() {
        return Some(i.into());
    }
    if let Some(u) = n.as_u64() {
        return Some(u.into());
    }
    let f = n.as_f64()?;
    // NOTE: `as` saturates, so an absurdly large count becomes i128::MAX and is capped later.
    (f.is_finite() && f.fract() == 0.0).then_some(f as i128)
}

/// 400: `name` holds a value of the wrong type.
pub fn wrong_type(name: &str, expected: &str, got: &Value) -> ApiError {
    ApiError::bad_field(
        name,
        format!("`{name}` must be {expected}, got {}", kind(got)),
    )
}

/// A short description of a JSON value for error messages.
pub fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.chars().count() > 40 => "a string".into(),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: &str) -> Body {
        Body::parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn integers_accept_whole_numbers_only() {
        let b = body(r#"{"a": 3, "b": 4.0, "c": 1.5, "d": "7", "e": 1e300, "f": null}"#);
        assert_eq!(b.integer("a").unwrap(), Some(3));
        assert_eq!(b.integer("b").unwrap(), Some(4));
        let e = b.integer("c").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("c"));
        assert!(
            e.message.contains("must be an integer, got 1.5"),
            "{}",
            e.message
        );
        assert!(b
            .integer("d")
            .unwrap_err()
            .message
            .contains("the string \"7\""));
        assert_eq!(b.integer("e").unwrap(), Some(i128::MAX));
        assert_eq!(b.integer("f").unwrap(), None);
        assert_eq!(b.integer("missing").unwrap(), None);
    }

    #[test]
    fn ranges_name_the_field_and_bounds() {
        let b = body(r#"{"n": 0}"#);
        let e = b.integer_in("n", 1, 16).unwrap_err();
        assert_eq!(e.message, "`n` must be an integer from 1 to 16, got 0");
    }

    #[test]
    fn a_body_must_be_an_object() {
        let e = Body::parse(b"[1]").err().unwrap();
        assert!(e.message.contains("must be a JSON object, got an array"));
    }
}
