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
    pub runner: Arc<RunnerHandle>,
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
    let body = stream::unfold(state, |mut st| async move {
        let data = st.next_data().await?;
        Some((Ok::<_, Infallible>(SseEvent::default().data(data)), st))
    });
    Sse::new(body)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("ping"))
        .into_response()
}

impl<W: ChoiceWriter> State<W> {
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
