//! Errors a request can get, rendered in the shape each API's clients parse:
//! OpenAI `{"error": {"message", "type", "param", "code"}}`, Ollama `{"error": "..."}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::json;

/// A failed request: the HTTP status and a message that names the problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
        }
    }

    /// 400: the request is malformed or asks for something impossible.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 400 about one field.
    pub fn bad_field(param: &str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.to_string()),
            ..Self::bad_request(message)
        }
    }

    /// 404: no model by that name.
    pub fn model_not_found(name: &str) -> Self {
        Self {
            param: Some("model".into()),
            ..Self::new(
                StatusCode::NOT_FOUND,
                format!("model '{name}' not found; GET /v1/models or /api/tags lists the models this server has"),
            )
        }
    }

    /// 500: the server failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// The OpenAI `error.type` for this status.
    fn openai_type(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The body OpenAI clients expect.
    pub fn openai_body(&self) -> serde_json::Value {
        let code = match self.status {
            StatusCode::NOT_FOUND => json!("model_not_found"),
            _ => serde_json::Value::Null,
        };
        json!({"error": {
            "message": self.message,
            "type": self.openai_type(),
            "param": self.param,
            "code": code,
        }})
    }

    /// The body Ollama clients expect.
    pub fn ollama_body(&self) -> serde_json::Value {
        json!({"error": self.message})
    }

    pub fn into_openai(self) -> Response {
        (self.status, Json(self.openai_body())).into_response()
    }

    pub fn into_ollama(self) -> Response {
        (self.status, Json(self.ollama_body())).into_response()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

/// An [`ApiError`] answered in OpenAI's shape.
pub struct OpenAiError(pub ApiError);

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        self.0.into_openai()
    }
}

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

/// An [`ApiError`] answered in Ollama's shape.
pub struct OllamaError(pub ApiError);

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        self.0.into_ollama()
    }
}

impl From<ApiError> for OllamaError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

/// Parses a request body, whatever its Content-Type (curl and some clients send none).
/// The error says what was wrong and where, in serde's words.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the request body is empty; expected a JSON object",
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => "invalid request",
            _ => "malformed JSON in the request body",
        };
        ApiError::bad_request(format!("{what}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Req {
        model: String,
        max_tokens: Option<u32>,
    }

    #[test]
    fn parse_errors_name_the_problem() {
        let e = parse_json::<Req>(b"{\"model\": ").unwrap_err();
        assert!(e.message.starts_with("malformed JSON"), "{}", e.message);
        let e = parse_json::<Req>(b"{\"model\": \"m\", \"max_tokens\": \"ten\"}").unwrap_err();
        assert!(
            e.message.contains("invalid type: string \"ten\""),
            "{}",
            e.message
        );
        let e = parse_json::<Req>(b"{}").unwrap_err();
        assert!(e.message.contains("missing field `model`"), "{}", e.message);
        let e = parse_json::<Req>(b"  ").unwrap_err();
        assert!(e.message.contains("empty"), "{}", e.message);
    }

    #[test]
    fn shapes_match_each_api() {
        let e = ApiError::model_not_found("nope");
        let o = e.openai_body();
        assert_eq!(o["error"]["type"], "not_found_error");
        assert_eq!(o["error"]["param"], "model");
        assert_eq!(o["error"]["code"], "model_not_found");
        assert!(e.ollama_body()["error"]
            .as_str()
            .unwrap()
            .contains("'nope' not found"));
    }
}
