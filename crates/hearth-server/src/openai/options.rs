//! The request fields chat completions and completions share: the model, streaming, how
//! many tokens and choices, sampling, stop strings; and the features this server refuses.

use hearth_sampler::{SamplerError, SamplingParams};
use serde_json::Value;

use super::fields::{kind, wrong_type, Body};
use crate::error::ApiError;

/// OpenAI's limit on stop strings per request.
const MAX_STOPS: usize = 4;
/// Most choices one request may ask for.
pub const MAX_N: i128 = 16;

/// What both endpoints read from a request.
#[derive(Clone, Debug)]
pub struct Options {
    pub model: String,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the usage.
    pub include_usage: bool,
    /// `max_completion_tokens` or `max_tokens`; `None` = until the context is full.
    pub max_tokens: Option<usize>,
    pub params: SamplingParams,
    pub stop: Vec<String>,
    /// Choices per prompt.
    pub n: usize,
}

/// Reads the shared fields, after refusing what this server does not support.
pub fn read_options(body: &Body) -> Result<Options, ApiError> {
    reject_unsupported(body)?;
    let model = body
        .string("model")?
        .ok_or_else(|| ApiError::bad_field("model", "`model` is required"))?
        .to_string();
    let stream = body.bool("stream")?.unwrap_or(false);
    let include_usage = match body.get("stream_options") {
        None => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(wrong_type(
                    "stream_options.include_usage",
                    "true or false",
                    v,
                ))
            }
        },
        Some(v) => return Err(wrong_type("stream_options", "an object", v)),
    };
    let max_tokens = match body.get("max_completion_tokens") {
        Some(_) => body.integer_in("max_completion_tokens", 1, i128::MAX)?,
        None => body.integer_in("max_tokens", 1, i128::MAX)?,
    }
    .map(saturate);
    let n = body.integer_in("n", 1, MAX_N)?.map_or(1, saturate);
    Ok(Options {
        model,
        stream,
        include_usage,
        max_tokens,
        params: read_sampling(body)?,
        stop: read_stop(body)?,
        n,
    })
}

fn saturate(n: i128) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Sampling fields; absent ones take llama.cpp's defaults, as llama-server does.
fn read_sampling(body: &Body) -> Result<SamplingParams, ApiError> {
    let mut p = SamplingParams::default();
    if let Some(t) = body.number("temperature")? {
        p.temperature = t;
    }
    if let Some(t) = body.number("top_p")? {
        p.top_p = t;
    }
    if let Some(k) = body.integer_in("top_k", 0, i128::MAX)? {
        p.top_k = saturate(k);
    }
    if let Some(m) = body.number("min_p")? {
        p.min_p = m;
    }
    if let Some(f) = body.number("frequency_penalty")? {
        p.frequency_penalty = f;
    }
    if let Some(f) = body.number("presence_penalty")? {
        p.presence_penalty = f;
    }
    if let Some(r) = body.number("repetition_penalty")? {
        p.repeat_penalty = r;
    }
    if let Some(seed) = body.integer("seed")? {
        // NOTE: negative seeds are accepted as their two's-complement bits.
        p.seed = Some(seed as u64);
    }
    p.validate().map_err(
        |SamplerError::InvalidParam {
             field,
             value,
             expected,
         }| {
            let field = match field {
                "repeat_penalty" => "repetition_penalty",
                f => f,
            };
            ApiError::bad_field(
                field,
                format!("`{field}` = {value} is invalid: expected {expected}"),
            )
        },
    )?;
    Ok(p)
}

/// `stop`: a string or a list of up to four non-empty strings.
fn read_stop(body: &Body) -> Result<Vec<String>, ApiError> {
    let stops = match body.get("stop") {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(wrong_type("stop", "a string or a list of strings", other)),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(wrong_type("stop", "a string or a list of strings", v)),
    };
    if stops.len() > MAX_STOPS {
        return Err(ApiError::bad_field(
            "stop",
            format!(
                "`stop` holds {} strings; at most {MAX_STOPS} are allowed",
                stops.len()
            ),
        ));
    }
    if stops.iter().any(String::is_empty) {
        return Err(ApiError::bad_field(
            "stop",
            "`stop` strings must not be empty",
        ));
    }
    Ok(stops)
}

/// 400 for a feature this server does not implement: tools, structured output, logit bias.
fn reject_unsupported(body: &Body) -> Result<(), ApiError> {
    for list in ["tools", "functions"] {
        if body.get(list).is_some_and(|v| !is_empty(v)) {
            return Err(not_supported(list, &format!("`{list}` (tool calling)")));
        }
    }
    match body.get("tool_choice") {
        None => {}
        Some(Value::String(s)) if s == "none" => {}
        Some(v) => {
            return Err(not_supported(
                "tool_choice",
                &format!("`tool_choice` {} (only \"none\")", kind(v)),
            ))
        }
    }
    if body
        .get("function_call")
        .is_some_and(|v| v.as_str() != Some("none"))
    {
        return Err(not_supported("function_call", "`function_call`"));
    }
    match body.get("response_format") {
        None => {}
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("text") => {}
        Some(v) => {
            let what = v.get("type").map_or_else(|| kind(v), kind);
            return Err(not_supported(
                "response_format",
                &format!("`response_format` {what} (only {{\"type\": \"text\"}})"),
            ));
        }
    }
    if body.get("logit_bias").is_some_and(|v| !is_empty(v)) {
        return Err(not_supported("logit_bias", "`logit_bias`"));
    }
    Ok(())
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// 400 saying `what` is not supported.
pub fn not_supported(param: &str, what: &str) -> ApiError {
    ApiError::bad_field(param, format!("{what} is not supported by this server"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<Options, ApiError> {
        read_options(&Body::parse(json.as_bytes()).unwrap())
    }

    #[test]
    fn absent_fields_take_llama_cpp_defaults() {
        let o = read(r#"{"model": "m"}"#).unwrap();
        assert_eq!(o.params, SamplingParams::default());
        assert_eq!((o.n, o.max_tokens, o.stream), (1, None, false));
        assert!(o.stop.is_empty());
    }

    #[test]
    fn fields_map_onto_the_sampler() {
        let o = read(
            r#"{"model": "m", "temperature": 0, "top_k": 5, "repetition_penalty": 1.1,
                "seed": 7, "stop": "x", "max_completion_tokens": 3, "max_tokens": 9,
                "n": 2, "stream": true, "stream_options": {"include_usage": true}}"#,
        )
        .unwrap();
        assert_eq!((o.params.temperature, o.params.top_k), (0.0, 5));
        assert_eq!((o.params.repeat_penalty, o.params.seed), (1.1, Some(7)));
        assert_eq!(
            (o.max_tokens, o.n, o.stop),
            (Some(3), 2, vec!["x".to_string()])
        );
        assert!(o.stream && o.include_usage);
        let huge = read(r#"{"model": "m", "max_tokens": 1e30}"#).unwrap();
        assert_eq!(huge.max_tokens, Some(usize::MAX));
    }

    #[test]
    fn bad_values_name_their_field() {
        for (json, param) in [
            (r#"{"model": "m", "max_tokens": 0}"#, "max_tokens"),
            (r#"{"model": "m", "max_tokens": -3}"#, "max_tokens"),
            (r#"{"model": "m", "max_tokens": 2.5}"#, "max_tokens"),
            (r#"{"model": "m", "n": 17}"#, "n"),
            (r#"{"model": "m", "temperature": -1}"#, "temperature"),
            (
                r#"{"model": "m", "repetition_penalty": 0}"#,
                "repetition_penalty",
            ),
            (
                r#"{"model": "m", "stop": ["a", "b", "c", "d", "e"]}"#,
                "stop",
            ),
            (r#"{"model": "m", "stop": [""]}"#, "stop"),
            (r#"{"model": "m", "stop": 3}"#, "stop"),
            (r#"{"model": 3}"#, "model"),
            (r#"{}"#, "model"),
        ] {
            let e = read(json).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{json}: {}", e.message);
            assert_eq!(e.status, 400);
        }
    }

    #[test]
    fn unsupported_features_say_so() {
        for (json, param) in [
            (
                r#"{"model": "m", "tools": [{"type": "function"}]}"#,
                "tools",
            ),
            (r#"{"model": "m", "tool_choice": "auto"}"#, "tool_choice"),
            (
                r#"{"model": "m", "response_format": {"type": "json_object"}}"#,
                "response_format",
            ),
            (
                r#"{"model": "m", "logit_bias": {"50256": -100}}"#,
                "logit_bias",
            ),
        ] {
            let e = read(json).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param));
            assert!(e.message.contains("not supported"), "{}", e.message);
        }
        let ok = r#"{"model": "m", "tools": [], "tool_choice": "none",
                     "response_format": {"type": "text"}, "logit_bias": {}, "user": "u"}"#;
        assert!(read(ok).is_ok());
    }
}
