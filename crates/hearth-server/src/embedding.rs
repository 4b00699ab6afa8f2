//! Embedding models in the server: one thread per model runs the forward passes (as a
//! generative model has its runner thread), request handlers tokenize and wait for replies.
//! The request parts both APIs share live here too: the inputs and the optional `dimensions`.

use std::sync::Arc;

use hearth_engine::embed::{l2_normalize, EmbeddingInfo, EmbeddingModel};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::error::ApiError;

/// Texts or token ids to embed.
struct Job {
    inputs: Vec<Vec<u32>>,
    reply: oneshot::Sender<Result<Vec<Vec<f32>>, String>>,
}

/// An embedding model's runner, as request handlers see it. Dropping every handle stops the
/// thread once the job it has is done.
pub struct EmbeddingHandle {
    model: Arc<EmbeddingModel>,
    jobs: std::sync::mpsc::Sender<Job>,
}

impl EmbeddingHandle {
    /// Starts the thread that runs `model`; `name` labels it.
    pub fn spawn(name: &str, model: EmbeddingModel) -> std::io::Result<Self> {
        let model = Arc::new(model);
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let runner = model.clone();
        std::thread::Builder::new()
            .name(format!("embed-{name}"))
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    let out = runner.embed_tokens(&job.inputs).map_err(|e| e.to_string());
                    let _ = job.reply.send(out);
                }
            })?;
        Ok(Self { model, jobs: tx })
    }

    pub fn info(&self) -> &EmbeddingInfo {
        self.model.info()
    }

    /// Token ids of each input: texts through the model's tokenizer (cut to its limit when
    /// `truncate`, else refused when too long), ids checked against the vocabulary.
    pub fn tokenize(
        &self,
        inputs: &[EmbedInput],
        truncate: bool,
        field: &str,
    ) -> Result<Vec<Vec<u32>>, ApiError> {
        let info = self.info();
        let mut out = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            let ids = match input {
                EmbedInput::Text(t) => self
                    .model
                    .tokenize(t, truncate)
                    .map_err(|e| ApiError::bad_field(field, format!("{field}[{i}]: {e}")))?,
                EmbedInput::Tokens(ids) => ids.clone(),
            };
            if let Some(&t) = ids.iter().find(|&&t| t as usize >= info.n_vocab) {
                return Err(ApiError::bad_field(
                    field,
                    format!(
                        "{field}[{i}]: token id {t} is outside the vocabulary of {}",
                        info.n_vocab
                    ),
                ));
            }
            if ids.len() > info.max_tokens {
                return Err(ApiError::bad_field(
                    field,
                    format!(
                        "{field}[{i}] is {} tokens; the model takes at most {}",
                        ids.len(),
                        info.max_tokens
                    ),
                ));
            }
            out.push(ids);
        }
        Ok(out)
    }

    /// One vector per token sequence, computed on the model's thread.
    pub async fn embed(&self, inputs: Vec<Vec<u32>>) -> Result<Vec<Vec<f32>>, ApiError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let (tx, rx) = oneshot::channel();
        let gone = || ApiError::internal("the embedding model's runner has stopped");
        self.jobs
            .send(Job { inputs, reply: tx })
            .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?.map_err(ApiError::internal)
    }
}

/// One input as a request gave it.
#[derive(Clone, Debug, PartialEq)]
pub enum EmbedInput {
    Text(String),
    Tokens(Vec<u32>),
}

fn token_ids(v: &[Value], field: &str) -> Option<Result<Vec<u32>, ApiError>> {
    let ids: Option<Vec<u32>> = v
        .iter()
        .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect();
    if v.iter().all(|x| x.is_number()) {
        return Some(ids.ok_or_else(|| {
            ApiError::bad_field(
                field,
                format!("{field}: token ids must be non-negative integers"),
            )
        }));
    }
    None
}

/// Reads `field`: a string, a list of strings, a list of token ids or a list of such lists
/// (`allow_tokens` false: strings only, as Ollama takes). An empty text or list is refused.
pub fn read_inputs(
    v: Option<&Value>,
    field: &str,
    allow_tokens: bool,
) -> Result<Vec<EmbedInput>, ApiError> {
    let expected = if allow_tokens {
        "a string, a list of strings, a list of token ids or a list of such lists"
    } else {
        "a string or a list of strings"
    };
    let wrong = || ApiError::bad_field(field, format!("{field} must be {expected}"));
    let empty = || ApiError::bad_field(field, format!("{field} must not be empty"));
    match v {
        None => Err(ApiError::bad_field(field, format!("{field} is required"))),
        Some(Value::String(s)) if s.is_empty() => Err(empty()),
        Some(Value::String(s)) => Ok(vec![EmbedInput::Text(s.clone())]),
        Some(Value::Array(items)) if items.is_empty() => Err(empty()),
        Some(Value::Array(items)) => {
            if allow_tokens {
                if let Some(ids) = token_ids(items, field) {
                    return Ok(vec![EmbedInput::Tokens(ids?)]);
                }
            }
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(match item {
                    Value::String(s) if s.is_empty() => return Err(empty()),
                    Value::String(s) => EmbedInput::Text(s.clone()),
                    Value::Array(ids) if allow_tokens && ids.is_empty() => return Err(empty()),
                    Value::Array(ids) if allow_tokens => {
                        EmbedInput::Tokens(token_ids(ids, field).ok_or_else(wrong)??)
                    }
                    _ => return Err(wrong()),
                });
            }
            Ok(out)
        }
        Some(_) => Err(wrong()),
    }
}

/// `dimensions`: keep the first `n` values of each vector and L2-normalize them again (what
/// OpenAI and Ollama do); `None` keeps the vectors whole.
pub fn read_dimensions(v: Option<&Value>, n_embd: usize) -> Result<Option<usize>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_u64() {
            Some(n) if n >= 1 && n as usize <= n_embd => Ok(Some(n as usize)),
            _ => Err(ApiError::bad_field(
                "dimensions",
                format!("dimensions must be an integer from 1 to {n_embd} (the model's size)"),
            )),
        },
    }
}

/// Applies [`read_dimensions`]' result to `vectors`.
pub fn shorten(vectors: &mut [Vec<f32>], dims: Option<usize>) {
    if let Some(n) = dims {
        for v in vectors {
            v.truncate(n);
            l2_normalize(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inputs_take_every_openai_shape() {
        let read = |v: Value| read_inputs(Some(&v), "input", true);
        let text = |s: &str| EmbedInput::Text(s.into());
        assert_eq!(read(json!("a")).unwrap(), vec![text("a")]);
        assert_eq!(read(json!(["a", "b"])).unwrap(), vec![text("a"), text("b")]);
        assert_eq!(
            read(json!([1, 2])).unwrap(),
            vec![EmbedInput::Tokens(vec![1, 2])]
        );
        assert_eq!(
            read(json!([[1], [2, 3]])).unwrap(),
            vec![EmbedInput::Tokens(vec![1]), EmbedInput::Tokens(vec![2, 3])]
        );
        for bad in [
            json!(""),
            json!([]),
            json!([1, "a"]),
            json!([-1]),
            json!(3),
            json!([[]]),
        ] {
            let e = read(bad.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("input"), "{bad}: {e}");
        }
        let e = read_inputs(Some(&json!([1, 2])), "input", false).unwrap_err();
        assert!(e.message.contains("a string or a list of strings"), "{e}");
    }

    #[test]
    fn dimensions_shorten_and_renormalize() {
        assert_eq!(read_dimensions(Some(&json!(2)), 4).unwrap(), Some(2));
        for bad in [json!(0), json!(5), json!("2"), json!(1.5)] {
            assert!(read_dimensions(Some(&bad), 4).is_err(), "{bad}");
        }
        let mut v = vec![vec![3.0, 4.0, 100.0]];
        shorten(&mut v, Some(2));
        assert_eq!(v, vec![vec![0.6, 0.8]]);
    }
}
