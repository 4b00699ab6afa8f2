//! A request body read field by field, so every type error names its field (serde's own
//! messages give only a line and column). `null` counts as absent, as in Ollama's Go structs.

use serde_json::{Map, Value};

use crate::error::{parse_json, ApiError};
use crate::models::KeepAlive;

/// A request's top-level JSON object.
pub struct Body(Map<String, Value>);

impl Body {
    /// Parses `bytes` as a JSON object.
    pub fn parse(bytes: &[u8]) -> Result<Self, ApiError> {
        match parse_json::<Value>(bytes)? {
            Value::Object(map) => Ok(Self(map)),
            other => Err(ApiError::bad_request(format!(
                "the request body must be a JSON object, not {}",
                kind(&other)
            ))),
        }
    }

    /// The field's value; `None` when absent or null.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    /// `model`, which every request needs.
    pub fn model(&self) -> Result<String, ApiError> {
        match self.str("model")? {
            Some(m) if !m.is_empty() => Ok(m.to_string()),
            _ => Err(ApiError::bad_field("model", "model is required")),
        }
    }

    pub fn str(&self, key: &str) -> Result<Option<&str>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(wrong_type(key, "a string", other)),
        }
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(wrong_type(key, "true or false", other)),
        }
    }

    /// `stream`, true unless the client says otherwise.
    pub fn stream(&self) -> Result<bool, ApiError> {
        Ok(self.bool("stream")?.unwrap_or(true))
    }

    /// `keep_alive`: a duration string (`"5m"`) or a number of seconds.
    pub fn keep_alive(&self) -> Result<Option<KeepAlive>, ApiError> {
        let parsed = match self.get("keep_alive") {
            None => return Ok(None),
            Some(Value::String(s)) => KeepAlive::parse(s),
            Some(Value::Number(n)) => KeepAlive::from_seconds(n.as_f64().unwrap_or(f64::NAN)),
            Some(other) => {
                return Err(wrong_type(
                    "keep_alive",
                    "a duration such as \"5m\" or a number of seconds",
                    other,
                ))
            }
        };
        parsed
            .map(Some)
            .map_err(|e| ApiError::bad_field("keep_alive", e))
    }

    /// Refuses what this server does not do yet, naming the field, instead of ignoring it.
    pub fn refuse_unsupported(&self) -> Result<(), ApiError> {
        if self.str("template")?.is_some_and(|t| !t.is_empty()) {
            return Err(unsupported(
                "template",
                "a per-request template is not supported; the model's own chat template is used (or raw: true)",
            ));
        }
        match self.get("format") {
            None => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(_) => {
                return Err(unsupported(
                    "format",
                    "format (JSON mode and JSON schemas) is not supported yet",
                ))
            }
        }
        if non_empty(self.get("images")) {
            return Err(unsupported("images", "images are not supported"));
        }
        if non_empty(self.get("tools")) {
            return Err(unsupported("tools", "tools are not supported yet"));
        }
        match self.get("think") {
            None | Some(Value::Bool(false)) => {}
            Some(_) => return Err(unsupported("think", "think is not supported")),
        }
        if self.str("suffix")?.is_some_and(|s| !s.is_empty()) {
            return Err(unsupported(
                "suffix",
                "suffix (fill-in-the-middle) is not supported",
            ));
        }
        if self.bool("logprobs")? == Some(true) {
            return Err(unsupported("logprobs", "logprobs are not supported yet"));
        }
        Ok(())
    }
}

/// Whether a value holds something: a non-empty array or string, or any other non-null value.
pub fn non_empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

fn unsupported(field: &str, message: &str) -> ApiError {
    ApiError::bad_field(field, message)
}

/// 400 for `field` holding the wrong kind of JSON value.
pub fn wrong_type(field: &str, expected: &str, got: &Value) -> ApiError {
    ApiError::bad_field(
        field,
        format!("{field} must be {expected}, not {}", kind(got)),
    )
}

/// A JSON value's kind, for error messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> Body {
        Body::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn type_errors_name_the_field() {
        let b = body(r#"{"model": 3, "stream": "yes", "keep_alive": [1]}"#);
        assert_eq!(
            b.model().unwrap_err().message,
            "model must be a string, not a number"
        );
        assert_eq!(
            b.stream().unwrap_err().message,
            "stream must be true or false, not a string"
        );
        assert!(b
            .keep_alive()
            .unwrap_err()
            .message
            .starts_with("keep_alive must be"));
        assert!(Body::parse(b"[1]")
            .err()
            .unwrap()
            .message
            .contains("not an array"));
    }

    #[test]
    fn defaults_and_keep_alive() {
        let b = body(r#"{"model": "m", "stream": null, "keep_alive": "5m"}"#);
        assert!(b.stream().unwrap());
        assert_eq!(
            b.keep_alive().unwrap(),
            Some(KeepAlive::For(std::time::Duration::from_secs(300)))
        );
        assert_eq!(
            body(r#"{"keep_alive": -1}"#).keep_alive().unwrap(),
            Some(KeepAlive::Forever)
        );
        assert!(body(r#"{"keep_alive": "soon"}"#).keep_alive().is_err());
        assert_eq!(body("{}").model().unwrap_err().message, "model is required");
    }

    #[test]
    fn unsupported_fields_are_refused_and_empty_ones_accepted() {
        let ok = r#"{"format": "", "images": [], "tools": [], "think": false, "suffix": "", "template": ""}"#;
        assert!(body(ok).refuse_unsupported().is_ok());
        for (field, bad) in [
            ("format", r#"{"format": "json"}"#),
            ("format", r#"{"format": {"type": "object"}}"#),
            ("images", r#"{"images": ["aGk="]}"#),
            ("tools", r#"{"tools": [{"type": "function"}]}"#),
            ("think", r#"{"think": true}"#),
            ("suffix", r#"{"suffix": "end"}"#),
            ("template", r#"{"template": "{{ .Prompt }}"}"#),
            ("logprobs", r#"{"logprobs": true}"#),
        ] {
            let e = body(bad).refuse_unsupported().unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{bad}");
            assert_eq!(e.status, 400);
        }
    }
}
