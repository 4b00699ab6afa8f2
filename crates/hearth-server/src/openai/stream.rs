//! Server-sent events for streamed responses: one `data: {json}` event per chunk, choices
//! interleaved as their tokens arrive, then the usage (when asked for) and `data: [DONE]`.
//!
//! The stream owns the generations' receivers and nothing else holds them, so a client that
//! disconnects drops the stream and with it the receivers, which cancels the generations.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, select_all, BoxStream, SelectAll, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::jobs::{Head, Usage};
use crate::error::ApiError;
use crate::generation::log_generation;
use crate::runner::{Chunk, Event, RunnerHandle};

/// How often a comment is sent while nothing else is (long prompts, slow first tokens).
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// How an endpoint writes its streamed choices (each returns one element of `choices`).
pub trait ChoiceWriter: Send + 'static {
    /// The chunks' `object`.
    const OBJECT: &'static str;
    /// What opens choice `index` before any token (chat: the assistant role).
    fn start(&mut self, index: usize) -> Option<Value>;
    /// New text and logprobs of choice `index`; `None` when there is nothing to send.
    fn chunk(&mut self, index: usize, chunk: Chunk) -> Option<Value>;
    /// Choice `index` ended for `reason`.
    fn finish(&mut self, index: usize, reason: &str) -> Value;
}

/// The request a stream answers.
pub struct StreamRequest {
    pub head: Head,
    /// The route, for the log line of each generation.
    pub endpoint: &'static str,
    pub include_usage: bool,
    pub n_prompts: usize,
    /// Choices per prompt.
    pub n: usize,
    /// Held, never read: the model is not unloaded while one of its streams runs.
    #[allow(dead_code)]
    pub runner: Option<Arc<RunnerHandle>>,
}

struct State<W> {
    events: SelectAll<BoxStream<'static, (usize, Event)>>,
    /// `data:` payloads ready to send.
    queue: VecDeque<String>,
    writer: W,
    request: StreamRequest,
    usage: Usage,
    running: usize,
    done: bool,
}

/// The streamed response over `receivers` (choice `i` is `receivers[i]`).
pub fn sse<W: ChoiceWriter>(
    receivers: Vec<UnboundedReceiver<Event>>,
    writer: W,
    request: StreamRequest,
) -> Response {
    let state = State::new(receivers, writer, request);
    let body = stream::unfold(state, |mut st| async move {
        let data = st.next_data().await?;
        Some((Ok::<_, Infallible>(SseEvent::default().data(data)), st))
    });
    Sse::new(body)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("ping"))
        .into_response()
}

impl<W: ChoiceWriter> State<W> {
    /// The opening chunks queued; the rest follows the receivers.
    fn new(receivers: Vec<UnboundedReceiver<Event>>, writer: W, request: StreamRequest) -> Self {
        let running = receivers.len();
        let events = select_all(receivers.into_iter().enumerate().map(|(i, rx)| {
            UnboundedReceiverStream::new(rx)
                .map(move |e| (i, e))
                .boxed()
        }));
        let mut state = State {
            events,
            queue: VecDeque::new(),
            usage: Usage::new(request.n_prompts, request.n),
            writer,
            request,
            running,
            done: false,
        };
        for i in 0..running {
            if let Some(choice) = state.writer.start(i) {
                state.push_choice(choice);
            }
        }
        state
    }

    /// The next event's payload; `None` once `[DONE]` or an error was sent.
    async fn next_data(&mut self) -> Option<String> {
        loop {
            if let Some(d) = self.queue.pop_front() {
                return Some(d);
            }
            if self.done {
                return None;
            }
            match self.events.next().await {
                Some((i, Event::Chunk(c))) => {
                    if let Some(choice) = self.writer.chunk(i, c) {
                        self.push_choice(choice);
                    }
                }
                Some((i, Event::Done(summary))) => {
                    let r = &self.request;
                    log_generation(&r.head.id, r.endpoint, &r.head.model, &summary);
                    self.usage.add(i, &summary);
                    let choice = self.writer.finish(i, summary.finish.as_str());
                    self.push_choice(choice);
                    self.running -= 1;
                    if self.running == 0 {
                        self.end();
                    }
                }
                Some((_, Event::Error(message))) => self.fail(message),
                None => {
                    self.fail("the model's runner stopped before the generation finished".into())
                }
            }
        }
    }

    /// A chunk with one choice (and `usage: null` when usage was asked for).
    fn push_choice(&mut self, choice: Value) {
        let mut chunk = self.request.head.object(W::OBJECT);
        chunk.insert("choices".into(), Value::Array(vec![choice]));
        if self.request.include_usage {
            chunk.insert("usage".into(), Value::Null);
        }
        self.queue.push_back(Value::Object(chunk).to_string());
    }

    /// Every choice finished: the usage chunk (when asked for), then `[DONE]`.
    fn end(&mut self) {
        if self.request.include_usage {
            let mut chunk = self.request.head.object(W::OBJECT);
            chunk.insert("choices".into(), Value::Array(Vec::new()));
            chunk.insert("usage".into(), self.usage.to_json());
            self.queue.push_back(Value::Object(chunk).to_string());
        }
        self.queue.push_back("[DONE]".into());
        self.done = true;
    }

    /// A generation failed after the stream began: one error event, and the other
    /// generations are cancelled.
    fn fail(&mut self, message: String) {
        tracing::error!(request = %self.request.head.id, error = %message, "generation failed");
        self.events = SelectAll::new();
        self.queue
            .push_back(ApiError::internal(message).openai_body().to_string());
        self.done = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{Finish, Summary};
    use serde_json::json;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

    /// Choices as `{"i", "start" | "text" | "end"}`, to see the order of events.
    struct Plain;

    impl ChoiceWriter for Plain {
        const OBJECT: &'static str = "test.chunk";
        fn start(&mut self, index: usize) -> Option<Value> {
            Some(json!({"i": index, "start": true}))
        }
        fn chunk(&mut self, index: usize, chunk: Chunk) -> Option<Value> {
            (!chunk.text.is_empty()).then(|| json!({"i": index, "text": chunk.text}))
        }
        fn finish(&mut self, index: usize, reason: &str) -> Value {
            json!({"i": index, "end": reason})
        }
    }

    fn summary(n_generated: usize) -> Summary {
        Summary {
            finish: Finish::Length,
            n_prompt: 5,
            n_cached: 0,
            n_generated,
            queue_time: Duration::ZERO,
            prompt_time: Duration::ZERO,
            gen_time: Duration::ZERO,
            total_time: Duration::ZERO,
        }
    }

    fn text(t: &str) -> Event {
        Event::Chunk(Chunk {
            text: t.into(),
            ..Chunk::default()
        })
    }

    fn state(n: usize, include_usage: bool) -> (State<Plain>, Vec<UnboundedSender<Event>>) {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| unbounded_channel()).unzip();
        let request = StreamRequest {
            head: Head::new("t-", "m"),
            endpoint: "/test",
            include_usage,
            n_prompts: 1,
            n,
            runner: None,
        };
        (State::new(rxs, Plain, request), txs)
    }

    /// Every payload until the stream ends: choices (or usage) as JSON, `[DONE]` as a string.
    async fn drain(st: &mut State<Plain>) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(d) = st.next_data().await {
            let v: Value = serde_json::from_str(&d).unwrap_or(Value::String(d));
            out.push(match v.get("choices") {
                Some(Value::Array(c)) if c.len() == 1 => c[0].clone(),
                _ if v.get("usage").is_some_and(|u| !u.is_null()) => v["usage"].clone(),
                _ => v,
            });
        }
        out
    }

    #[tokio::test]
    async fn choices_open_interleave_finish_then_usage_and_done() {
        let (mut st, txs) = state(2, true);
        txs[1].send(text("b")).unwrap();
        txs[1].send(Event::Done(summary(3))).unwrap();
        txs[0].send(text("a")).unwrap();
        txs[0].send(Event::Done(summary(4))).unwrap();
        let out = drain(&mut st).await;
        assert_eq!(
            &out[..2],
            &[
                json!({"i": 0, "start": true}),
                json!({"i": 1, "start": true})
            ]
        );
        let pos = |v: Value| out.iter().position(|o| *o == v).unwrap();
        assert!(pos(json!({"i": 0, "text": "a"})) < pos(json!({"i": 0, "end": "length"})));
        assert!(pos(json!({"i": 1, "text": "b"})) < pos(json!({"i": 1, "end": "length"})));
        let n = out.len();
        assert_eq!(out[n - 2]["completion_tokens"], 7);
        assert_eq!(out[n - 2]["prompt_tokens"], 5);
        assert_eq!(out[n - 1], "[DONE]");
    }

    #[tokio::test]
    async fn an_error_ends_the_stream_and_cancels_the_other_choices() {
        let (mut st, txs) = state(2, false);
        txs[0].send(Event::Error("out of memory".into())).unwrap();
        let out = drain(&mut st).await;
        let last = out.last().unwrap();
        assert_eq!(last["error"]["message"], "out of memory");
        assert_eq!(last["error"]["type"], "server_error");
        assert!(!out.contains(&json!("[DONE]")));
        assert!(
            txs[1].is_closed(),
            "the other choice's receiver was dropped"
        );
    }

    #[tokio::test]
    async fn a_dropped_response_cancels_its_generations() {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..2).map(|_| unbounded_channel::<Event>()).unzip();
        let request = StreamRequest {
            head: Head::new("t-", "m"),
            endpoint: "/test",
            include_usage: false,
            n_prompts: 1,
            n: 2,
            runner: None,
        };
        let response = sse(rxs, Plain, request);
        assert!(!txs[0].is_closed());
        drop(response);
        assert!(txs.iter().all(UnboundedSender::is_closed));
    }

    #[tokio::test]
    async fn a_runner_that_vanishes_is_an_error_event() {
        let (mut st, txs) = state(1, false);
        drop(txs);
        let out = drain(&mut st).await;
        let msg = out.last().unwrap()["error"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(msg.contains("runner stopped"), "{msg}");
    }
}
