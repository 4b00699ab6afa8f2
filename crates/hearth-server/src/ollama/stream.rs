//! Running a chat or generate request and answering it: NDJSON lines while it streams, or
//! one object at the end, both closed by Ollama's counts and nanosecond timings.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;

pub use super::lines::Api;
use super::lines::{Counts, Line};
use super::options::RequestOptions;
use crate::error::ApiError;
use crate::generation::{collect, log_generation, max_new_tokens, request_id, submit, Generation};
use crate::runner::{Event, RunnerHandle, Summary};

/// A validated request, ready to run.
pub struct Job {
    pub api: Api,
    /// The `model` the client sent, echoed back as is.
    pub model: String,
    pub runner: Arc<RunnerHandle>,
    pub prompt: Vec<u32>,
    pub options: RequestOptions,
    pub stream: bool,
    /// When the request arrived (before any model load).
    pub started: Instant,
    /// Time spent getting the model ready.
    pub load_duration: Duration,
}

/// What every line of one reply shares.
#[derive(Clone)]
struct Reply {
    api: Api,
    model: String,
    started: Instant,
    load_duration: Duration,
}

impl Reply {
    /// A line with (part of) the text, `done: false`.
    fn line(&self, text: &str) -> Bytes {
        Bytes::from(Line::text(self.api, &self.model, text).ndjson())
    }

    /// The last line (or the whole reply): `done: true`, why it ended, counts and timings;
    /// generate's adds `context` (prompt and generated token ids) for a follow-up request.
    fn last_line<'a>(
        &'a self,
        text: &'a str,
        s: &'a Summary,
        context: Option<&'a [u32]>,
    ) -> Line<'a> {
        Line {
            done: true,
            done_reason: Some(s.finish.as_str()),
            context,
            counts: Some(Counts::new(s, self.started.elapsed(), self.load_duration)),
            ..Line::text(self.api, &self.model, text)
        }
    }
}

/// How many tokens the job may generate, honouring a per-request `num_ctx`.
fn max_tokens(job: &Job) -> Result<Option<usize>, ApiError> {
    let n_ctx = job.runner.info().n_ctx;
    match job.options.num_ctx {
        Some(limit) if limit > n_ctx => Err(ApiError::bad_field(
            "num_ctx",
            format!(
                "num_ctx {limit} is larger than this server's context of {n_ctx} tokens; \
                 start the server with a larger --ctx-size"
            ),
        )),
        Some(limit) if job.prompt.len() >= limit => Err(ApiError::bad_field(
            "num_ctx",
            format!(
                "the prompt is {} tokens, but num_ctx {limit} limits prompt and generated tokens \
                 together; raise num_ctx (this server's context holds {n_ctx})",
                job.prompt.len()
            ),
        )),
        Some(limit) => max_new_tokens(job.prompt.len(), limit, job.options.num_predict).map(Some),
        None => Ok(job.options.num_predict),
    }
}

/// Runs `job` and answers it, streaming or not.
pub async fn run(job: Job) -> Result<Response, ApiError> {
    let max_tokens = max_tokens(&job)?;
    let generation = Generation {
        prompt: job.prompt.clone(),
        max_tokens,
        params: job.options.params.clone(),
        stop: job.options.stop.clone(),
        logprobs: None,
    };
    let events = submit(&job.runner, generation, Instant::now())?;
    let reply = Reply {
        api: job.api,
        model: job.model.clone(),
        started: job.started,
        load_duration: job.load_duration,
    };
    let id = request_id("ollama-");
    let context = (job.api == Api::Generate).then(|| job.prompt.clone());
    if !job.stream {
        let (out, summary) = collect(events).await?;
        log_generation(&id, job.api.endpoint(), &job.model, &summary);
        let context = context.map(|mut c| {
            c.extend_from_slice(&out.tokens);
            c
        });
        return Ok(Json(reply.last_line(&out.text, &summary, context.as_deref())).into_response());
    }
    let live = Live {
        events,
        _in_use: job.runner,
        reply,
        context,
        id,
        done: false,
    };
    let body = Body::from_stream(futures_util::stream::unfold(live, next_line));
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

/// A streaming reply in progress. Dropping it (the client went away) drops the receiver,
/// which cancels the generation.
struct Live {
    events: UnboundedReceiver<Event>,
    /// Keeps the model counted as in use while the reply streams (its runner handle).
    _in_use: Arc<dyn std::any::Any + Send + Sync>,
    reply: Reply,
    /// Generate only: the prompt, then every generated token.
    context: Option<Vec<u32>>,
    id: String,
    done: bool,
}

/// The next NDJSON line of a streaming reply; `None` after the last.
async fn next_line(mut live: Live) -> Option<(Result<Bytes, Infallible>, Live)> {
    if live.done {
        return None;
    }
    let line: Bytes = loop {
        match live.events.recv().await {
            Some(Event::Chunk(c)) => {
                if let Some(context) = live.context.as_mut() {
                    context.extend_from_slice(&c.tokens);
                }
                // NOTE: a chunk is empty while text is held back for a possible stop string.
                if !c.text.is_empty() {
                    break live.reply.line(&c.text);
                }
            }
            Some(Event::Done(summary)) => {
                live.done = true;
                let r = &live.reply;
                log_generation(&live.id, r.api.endpoint(), &r.model, &summary);
                break Bytes::from(r.last_line("", &summary, live.context.as_deref()).ndjson());
            }
            Some(Event::Error(message)) => {
                live.done = true;
                break error_line(&message);
            }
            None => {
                live.done = true;
                break error_line("the model's runner stopped before the generation finished");
            }
        }
    };
    Some((Ok(line), live))
}

/// An error after the reply began: Ollama's clients read a line `{"error": "..."}`.
fn error_line(message: &str) -> Bytes {
    let mut bytes = serde_json::to_vec(&json!({ "error": message })).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{Chunk, Finish};
    use futures_util::StreamExt;
    use serde_json::Value;
    use tokio::sync::mpsc;

    fn live(api: Api, events: UnboundedReceiver<Event>) -> Live {
        Live {
            events,
            _in_use: Arc::new(()),
            reply: Reply {
                api,
                model: "m:latest".into(),
                started: Instant::now(),
                load_duration: Duration::from_nanos(5),
            },
            context: (api == Api::Generate).then(|| vec![7, 8]),
            id: "test".into(),
            done: false,
        }
    }

    fn chunk(text: &str, tokens: &[u32]) -> Event {
        Event::Chunk(Chunk {
            text: text.into(),
            tokens: tokens.to_vec(),
            ..Chunk::default()
        })
    }

    async fn lines(live: Live) -> Vec<Value> {
        futures_util::stream::unfold(live, next_line)
            .map(|b| {
                let b = b.unwrap_or_default();
                assert_eq!(b.last(), Some(&b'\n'));
                serde_json::from_slice(&b).unwrap()
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_stream_ends_with_the_counts_and_context() {
        let (tx, rx) = mpsc::unbounded_channel();
        for e in [chunk("Hel", &[1]), chunk("", &[2]), chunk("lo", &[3])] {
            tx.send(e).unwrap();
        }
        tx.send(Event::Done(Summary {
            finish: Finish::Stop,
            n_prompt: 2,
            n_cached: 0,
            n_generated: 4,
            queue_time: Duration::ZERO,
            prompt_time: Duration::from_nanos(10),
            gen_time: Duration::from_nanos(20),
            total_time: Duration::from_nanos(30),
        }))
        .unwrap();
        let got = lines(live(Api::Generate, rx)).await;
        // The held-back chunk sends no line, but its token joins the context.
        let texts: Vec<&Value> = got.iter().map(|l| &l["response"]).collect();
        assert_eq!(texts, [&json!("Hel"), &json!("lo"), &json!("")]);
        let last = &got[2];
        assert_eq!(last["context"], json!([7, 8, 1, 2, 3]));
        assert_eq!(last["done_reason"], "stop");
        assert_eq!(last["model"], "m:latest");
        let counts = [
            "prompt_eval_count",
            "eval_count",
            "prompt_eval_duration",
            "eval_duration",
            "load_duration",
        ];
        let counts: Vec<&Value> = counts.iter().map(|k| &last[*k]).collect();
        assert_eq!(
            counts,
            [&json!(2), &json!(4), &json!(10), &json!(20), &json!(5)]
        );
        assert!(got[..2].iter().all(|l| l["done"] == false));
    }

    #[tokio::test]
    async fn errors_after_the_stream_began_are_a_line() {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(chunk("Hi", &[1])).unwrap();
        tx.send(Event::Error("the engine failed".into())).unwrap();
        let got = lines(live(Api::Chat, rx)).await;
        assert_eq!(
            got[0]["message"],
            json!({"role": "assistant", "content": "Hi"})
        );
        assert_eq!(got[1], json!({"error": "the engine failed"}));
        assert_eq!(got.len(), 2);

        let (tx, rx) = mpsc::unbounded_channel();
        drop(tx);
        let got = lines(live(Api::Chat, rx)).await;
        assert_eq!(
            got,
            [json!({"error": "the model's runner stopped before the generation finished"})]
        );
    }
}
