//! Ollama's `options` object: sampling settings with Ollama's defaults, output length,
//! a per-request context limit and stop strings.

use hearth_sampler::SamplingParams;
use serde_json::Value;

use super::body::{kind, wrong_type};
use crate::error::ApiError;

/// Options Ollama applies when it loads a model; this server sets those at start-up, so a
/// request's values are accepted and logged, not applied.
const LOAD_TIME: &[&str] = &[
    "num_batch",
    "num_gpu",
    "main_gpu",
    "use_mmap",
    "use_mlock",
    "num_thread",
    "num_keep",
    "low_vram",
    "numa",
    "f16_kv",
    "logits_all",
    "vocab_only",
    "embedding_only",
];

/// What a request's `options` ask for.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestOptions {
    pub params: SamplingParams,
    /// Most tokens to generate; `None` = until the context is full (`-1` and `-2`).
    pub num_predict: Option<usize>,
    /// A per-request context limit (prompt and output), at most the server's.
    pub num_ctx: Option<usize>,
    pub stop: Vec<String>,
    /// Keys accepted but not applied (load-time or unknown), for one warning line.
    pub ignored: Vec<String>,
}

/// Ollama's defaults for what a request leaves out.
pub fn ollama_defaults() -> SamplingParams {
    SamplingParams {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.0,
        repeat_penalty: 1.1,
        repeat_last_n: 64,
        frequency_penalty: 0.0,
        presence_penalty: 0.0,
        seed: None,
    }
}

impl RequestOptions {
    /// Reads `options` (absent or null = every default). Sampling ranges are checked later
    /// by [`SamplingParams::validate`], which names the field as well.
    pub fn parse(options: Option<&Value>) -> Result<Self, ApiError> {
        let mut out = RequestOptions {
            params: ollama_defaults(),
            num_predict: None,
            num_ctx: None,
            stop: Vec::new(),
            ignored: Vec::new(),
        };
        let map = match options {
            None | Some(Value::Null) => return Ok(out),
            Some(Value::Object(map)) => map,
            Some(other) => return Err(wrong_type("options", "a JSON object", other)),
        };
        for (key, value) in map {
            if !value.is_null() {
                out.set(key, value)?;
            }
        }
        if !out.ignored.is_empty() {
            let (load_time, unknown): (Vec<&str>, Vec<&str>) = out
                .ignored
                .iter()
                .map(String::as_str)
                .partition(|k| is_load_time(k));
            tracing::warn!(
                load_time = %load_time.join(", "),
                unknown = %unknown.join(", "),
                "invalid or load-time options ignored (load-time settings are the server's flags)"
            );
        }
        Ok(out)
    }

    fn set(&mut self, key: &str, v: &Value) -> Result<(), ApiError> {
        let p = &mut self.params;
        match key {
            "temperature" => p.temperature = number(key, v)? as f32,
            "top_p" => p.top_p = number(key, v)? as f32,
            "min_p" => p.min_p = number(key, v)? as f32,
            "repeat_penalty" => p.repeat_penalty = number(key, v)? as f32,
            "presence_penalty" => p.presence_penalty = number(key, v)? as f32,
            "frequency_penalty" => p.frequency_penalty = number(key, v)? as f32,
            "top_k" => p.top_k = non_negative(key, integer(key, v)?)?,
            "repeat_last_n" => {
                p.repeat_last_n = match integer(key, v)? {
                    // NOTE: Ollama's -1 is "the whole context".
                    -1 => usize::MAX,
                    n => non_negative(key, n)?,
                }
            }
            // NOTE: Ollama's seed -1 (its default) is a fresh random seed.
            "seed" => p.seed = u64::try_from(integer(key, v)?).ok(),
            "num_predict" => self.num_predict = num_predict(integer(key, v)?)?,
            "num_ctx" => match integer(key, v)? {
                n if n >= 1 => self.num_ctx = Some(n as usize),
                n => return Err(bad(key, format!("num_ctx must be at least 1, not {n}"))),
            },
            "stop" => self.stop = strings(key, v)?,
            "typical_p" => {
                let t = number(key, v)?;
                if t != 1.0 {
                    return Err(bad(
                        key,
                        format!("typical_p = {t} is not supported (only 1, which is off)"),
                    ));
                }
            }
            other => self.ignored.push(other.to_string()),
        }
        Ok(())
    }
}

/// Whether `key` is one of Ollama's load-time options (accepted and ignored).
fn is_load_time(key: &str) -> bool {
    LOAD_TIME.contains(&key)
}

fn num_predict(n: i64) -> Result<Option<usize>, ApiError> {
    match n {
        -2 | -1 => Ok(None),
        n if n >= 1 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
        n => Err(bad(
            "num_predict",
            format!(
                "num_predict must be a number of tokens >= 1, -1 (until the context ends) or -2 (fill the context), not {n}"
            ),
        )),
    }
}

fn bad(key: &str, message: String) -> ApiError {
    ApiError::bad_field(key, message)
}

fn number(key: &str, v: &Value) -> Result<f64, ApiError> {
    v.as_f64().ok_or_else(|| {
        bad(
            key,
            format!("option {key} must be a number, not {}", kind(v)),
        )
    })
}

/// An integer; a JSON number with no fraction (`32.0`) counts, as Go's JSON numbers do.
fn integer(key: &str, v: &Value) -> Result<i64, ApiError> {
    if let Some(i) = v.as_i64() {
        return Ok(i);
    }
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
        Some(f) => Err(bad(
            key,
            format!("option {key} must be an integer, not {f}"),
        )),
        None => Err(bad(
            key,
            format!("option {key} must be an integer, not {}", kind(v)),
        )),
    }
}

fn non_negative(key: &str, n: i64) -> Result<usize, ApiError> {
    usize::try_from(n).map_err(|_| bad(key, format!("option {key} must be >= 0, not {n}")))
}

/// A list of strings; a single string is taken as a list of one.
fn strings(key: &str, v: &Value) -> Result<Vec<String>, ApiError> {
    let not_strings = || bad(key, format!("option {key} must be a list of strings"));
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_string).ok_or_else(not_strings))
            .collect(),
        _ => Err(not_strings()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<RequestOptions, ApiError> {
        RequestOptions::parse(Some(&v))
    }

    #[test]
    fn absent_fields_take_ollamas_defaults() {
        let o = RequestOptions::parse(None).unwrap();
        assert_eq!(o.params, ollama_defaults());
        assert_eq!((o.num_predict, o.num_ctx), (None, None));
        let o = parse(json!({"temperature": null})).unwrap();
        assert_eq!(o.params.temperature, 0.8);
    }

    #[test]
    fn every_field_lands() {
        let o = parse(json!({
            "temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "seed": 42,
            "repeat_penalty": 1.2, "repeat_last_n": -1, "presence_penalty": 0.3,
            "frequency_penalty": 0.4, "num_predict": 16.0, "num_ctx": 512,
            "stop": ["\n", "END"], "typical_p": 1.0
        }))
        .unwrap();
        let p = &o.params;
        assert_eq!(
            (p.temperature, p.top_k, p.top_p, p.min_p),
            (0.0, 5, 0.5, 0.1)
        );
        assert_eq!(
            (p.seed, p.repeat_penalty, p.repeat_last_n),
            (Some(42), 1.2, usize::MAX)
        );
        assert_eq!((p.presence_penalty, p.frequency_penalty), (0.3, 0.4));
        assert_eq!((o.num_predict, o.num_ctx), (Some(16), Some(512)));
        assert_eq!(o.stop, ["\n", "END"]);
        assert!(o.ignored.is_empty());
        assert_eq!(parse(json!({"seed": -1})).unwrap().params.seed, None);
        assert_eq!(parse(json!({"num_predict": -2})).unwrap().num_predict, None);
    }

    #[test]
    fn load_time_and_unknown_keys_are_ignored() {
        let mut o = parse(json!({"num_thread": 8, "use_mmap": false, "mirostat": 1})).unwrap();
        o.ignored.sort();
        assert_eq!(o.ignored, ["mirostat", "num_thread", "use_mmap"]);
        assert!(is_load_time("num_thread") && !is_load_time("mirostat"));
    }

    #[test]
    fn bad_values_name_the_option() {
        for (v, field, text) in [
            (
                json!({"temperature": "hot"}),
                "temperature",
                "must be a number, not a string",
            ),
            (
                json!({"top_k": 2.5}),
                "top_k",
                "must be an integer, not 2.5",
            ),
            (json!({"top_k": -1}), "top_k", "must be >= 0"),
            (json!({"num_predict": 0}), "num_predict", "not 0"),
            (json!({"num_predict": -3}), "num_predict", "not -3"),
            (json!({"num_ctx": 0}), "num_ctx", "at least 1"),
            (json!({"stop": [1]}), "stop", "list of strings"),
            (json!({"typical_p": 0.5}), "typical_p", "not supported"),
            (json!({"repeat_last_n": -2}), "repeat_last_n", ">= 0"),
        ] {
            let e = parse(v.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{v}");
            assert!(e.message.contains(text), "{v}: {}", e.message);
        }
        let e = RequestOptions::parse(Some(&json!([1]))).unwrap_err();
        assert_eq!(e.message, "options must be a JSON object, not an array");
    }
}
