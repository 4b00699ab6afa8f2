//! The runner: one thread per loaded model that owns its engine and scheduler and runs
//! steps while there is work. Request handlers talk to it through channels:
//!
//! ```text
//!   handler ── Command::Submit(request, events_tx) ──► runner thread
//!   handler ◄── Event::Chunk … Event::Done ─────────── (one unbounded channel per request)
//! ```
//!
//! A handler that drops its receiver (the client went away) cancels the request: the runner
//! sees the closed channel before the next step and frees the request's KV blocks.

mod active;
mod engine_loop;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_engine::scheduler::SchedulerConfig;
use hearth_engine::{Engine, ModelInfo, PromptBuilder};
use hearth_sampler::SamplingParams;
use tokio::sync::mpsc;

use crate::metrics::Metrics;

/// What a client asked one generation to do, already tokenized and validated.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    /// Most tokens to generate (≥ 1; the handler caps it to the context).
    pub max_tokens: usize,
    pub params: SamplingParams,
    /// Generation ends before the first of these appears; it is not sent.
    pub stop: Vec<String>,
    /// `Some(n)`: report each token's log-probability and the `n` most likely alternatives.
    pub logprobs: Option<usize>,
    /// When the request arrived, for time-to-first-token.
    pub arrived: Instant,
}

/// One generated token's log-probability and its most likely alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    /// (token, logprob), most likely first.
    pub top: Vec<(u32, f32)>,
}

/// Text a request produced since its previous chunk.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chunk {
    /// Complete UTF-8; may be empty when text is held back (a possible stop string).
    pub text: String,
    /// Tokens sampled since the previous chunk (the end-of-generation token excluded).
    pub tokens: Vec<u32>,
    /// One entry per token in `tokens`, when logprobs were asked for.
    pub logprobs: Vec<TokenLogprob>,
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` tokens were generated.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// Counts and timings of a finished generation.
#[derive(Clone, Debug)]
pub struct Summary {
    pub finish: Finish,
    pub n_prompt: usize,
    /// Prompt tokens taken from the prefix cache.
    pub n_cached: usize,
    /// Tokens sampled, the end-of-generation token included.
    pub n_generated: usize,
    /// Arrival to the first step that ran the request.
    pub queue_time: Duration,
    /// First step to the first token (prompt processing).
    pub prompt_time: Duration,
    /// First token to the last.
    pub gen_time: Duration,
    /// Arrival to the end.
    pub total_time: Duration,
}

/// What a request's channel carries, in order: chunks, then exactly one `Done` or `Error`.
#[derive(Clone, Debug)]
pub enum Event {
    Chunk(Chunk),
    Done(Summary),
    Error(String),
}

/// Messages to the runner thread.
enum Command {
    Submit {
        request: GenerateRequest,
        events: mpsc::UnboundedSender<Event>,
    },
}

/// Limits of the runner's scheduler.
#[derive(Clone, Copy, Debug)]
pub struct RunnerConfig {
    pub max_batch_tokens: usize,
    pub max_seqs: usize,
    /// Whether steps where every request decodes greedily are chained: the next one queued
    /// on the device, running the tokens this one picks there, before this one's come back
    /// (`Scheduler::schedule_ahead`). `None`: where that overlaps the host's work with the
    /// device's (`Engine::chained_plans_overlap`).
    pub chain_greedy: Option<bool>,
}

/// A model's runner, as request handlers see it. Dropping every handle stops the thread
/// once the requests it has finish.
pub struct RunnerHandle {
    name: String,
    commands: std::sync::mpsc::Sender<Command>,
    prompt: PromptBuilder,
    info: ModelInfo,
}

impl RunnerHandle {
    /// Starts a runner thread for `engine`; `name` labels its metrics and logs.
    pub fn spawn(
        name: &str,
        mut engine: Engine,
        config: RunnerConfig,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel();
        let prompt = engine.prompt_builder();
        let info = engine.info().clone();
        let scheduler = engine.scheduler(SchedulerConfig {
            max_batch_tokens: config.max_batch_tokens,
            max_seqs: config.max_seqs,
        });
        let chain = engine.chains_plans()
            && config
                .chain_greedy
                .unwrap_or_else(|| engine.chained_plans_overlap());
        let model = name.to_string();
        // NOTE: the thread is not joined: it ends by itself once every handle is dropped
        // and its last request is done.
        std::thread::Builder::new()
            .name(format!("runner-{name}"))
            .spawn(move || {
                engine_loop::EngineLoop::new(model, engine, scheduler, metrics, chain).run(rx)
            })?;
        Ok(Self {
            name: name.to_string(),
            commands: tx,
            prompt,
            info,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn prompt(&self) -> &PromptBuilder {
        &self.prompt
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Queues a generation; its events arrive on the returned channel. Dropping the receiver
    /// cancels the request.
    pub fn submit(
        &self,
        request: GenerateRequest,
    ) -> Result<mpsc::UnboundedReceiver<Event>, RunnerGone> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.commands
            .send(Command::Submit {
                request,
                events: tx,
            })
            .map_err(|_| RunnerGone)?;
        Ok(rx)
    }
}

/// The runner thread has stopped (it panicked or the model was unloaded).
#[derive(Debug, thiserror::Error)]
#[error("the model's runner has stopped")]
pub struct RunnerGone;
