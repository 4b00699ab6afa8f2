//! One running request's state inside the runner: its sampler, text assembly and stop
//! strings, and its event channel.

use std::time::{Duration, Instant};

use hearth_engine::NextToken;
use hearth_sampler::{log_softmax, top_logprobs, Sampler, MAX_DEVICE_TOP_K};
use hearth_tokenizer::{Tokenizer, Utf8Assembler};
use tokio::sync::mpsc::UnboundedSender;

use super::{Chunk, Event, Finish, GenerateRequest, Summary, TokenLogprob};
use crate::stop::StopMatcher;

pub(super) struct Active {
    events: UnboundedSender<Event>,
    sampler: Sampler,
    text: Utf8Assembler,
    stops: StopMatcher,
    logprobs: Option<usize>,
    /// Tokens and logprobs sampled since the last chunk was sent.
    pending: Chunk,
    pub n_prompt: usize,
    pub n_cached: usize,
    pub n_generated: usize,
    arrived: Instant,
    pub first_scheduled: Option<Instant>,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
}

/// What sampling one token did to a request.
pub(super) struct Sampled {
    pub token: u32,
    /// The request must end: an end-of-generation token or a stop string.
    pub stop: bool,
    /// Time since the request's previous token (`None` for the first).
    pub inter_token: Option<Duration>,
}

impl Active {
    pub fn new(
        request: &GenerateRequest,
        sampler: Sampler,
        events: UnboundedSender<Event>,
    ) -> Self {
        Self {
            events,
            sampler,
            text: Utf8Assembler::default(),
            stops: StopMatcher::new(request.stop.clone()),
            logprobs: request.logprobs,
            pending: Chunk::default(),
            n_prompt: request.prompt.len(),
            n_cached: 0,
            n_generated: 0,
            arrived: request.arrived,
            first_scheduled: None,
            first_token: None,
            last_token: None,
        }
    }

    /// The client went away.
    pub fn is_cancelled(&self) -> bool {
        self.events.is_closed()
    }

    /// Time from arrival to now.
    pub fn age(&self) -> Duration {
        self.arrived.elapsed()
    }

    /// Whether the device may pick this request's next token: greedy decoding without
    /// penalties, and no logprobs to report (they need the logits).
    pub fn takes_argmax(&self) -> bool {
        self.sampler.is_argmax() && self.logprobs.is_none()
    }

    /// How many of each row's best candidates the device may bring back instead of the
    /// logits for this request (`Engine::run_plan_best`): its sampler's
    /// `best_needed`, when small enough to select on the device and no logprobs are asked for
    /// (they need the logits).
    pub fn best_needed(&self) -> Option<usize> {
        if self.logprobs.is_some() {
            return None;
        }
        self.sampler
            .best_needed()
            .filter(|&k| k <= MAX_DEVICE_TOP_K)
    }

    /// The request's sampler, for drawing many requests' tokens at once
    /// (`hearth_sampler::sample_rows`).
    pub fn sampler_mut(&mut self) -> &mut Sampler {
        &mut self.sampler
    }

    /// Takes `token`, this step's next token for the request: drawn by its sampler from
    /// `next`'s logits or best candidates, or picked on the device (`NextToken::Picked`).
    pub fn take(&mut self, tok: &Tokenizer, token: u32, next: NextToken) -> Sampled {
        let logits = match next {
            NextToken::Logits(logits) => Some(logits),
            NextToken::Picked(_) | NextToken::Best(_) => None,
        };
        let now = Instant::now();
        let inter_token = self.last_token.map(|t| now - t);
        self.first_token.get_or_insert(now);
        self.last_token = Some(now);
        self.n_generated += 1;
        // NOTE: a request with logprobs never `takes_argmax` nor has `best_needed`, so its step
        // kept the logits.
        if let (Some(n), Some(logits)) = (self.logprobs, logits) {
            // NOTE: reported from the model's distribution before penalties and temperature,
            // as OpenAI and llama-server report them.
            let lp = log_softmax(logits);
            self.pending.logprobs.push(TokenLogprob {
                token,
                logprob: lp.get(token as usize).copied().unwrap_or(f32::NEG_INFINITY),
                top: top_logprobs(logits, n),
            });
        }
        if tok.is_eog(token) {
            // The end-of-generation token is counted, not shown.
            self.pending.logprobs.pop();
            return Sampled {
                token,
                stop: true,
                inter_token,
            };
        }
        self.pending.tokens.push(token);
        let piece = self.text.push(tok.token_bytes(token));
        let outcome = self.stops.push(&piece);
        self.pending.text.push_str(&outcome.text);
        Sampled {
            token,
            stop: outcome.stopped,
            inter_token,
        }
    }

    /// Sends what was sampled since the last chunk, if anything. Returns false when the
    /// client is gone.
    pub fn flush(&mut self) -> bool {
        if self.pending.text.is_empty() && self.pending.tokens.is_empty() {
            return !self.is_cancelled();
        }
        let chunk = std::mem::take(&mut self.pending);
        self.events.send(Event::Chunk(chunk)).is_ok()
    }

    /// Ends the request: releases held text (unless a stop string ended it), sends it and the
    /// summary.
    pub fn finish(mut self, finish: Finish, stopped_by_string: bool) -> Summary {
        if !stopped_by_string {
            let mut rest = self.text.finish();
            rest = {
                let mut o = self.stops.push(&rest);
                if !o.stopped {
                    o.text.push_str(&self.stops.finish());
                }
                o.text
            };
            self.pending.text.push_str(&rest);
        }
        self.flush();
        let now = Instant::now();
        let first_scheduled = self.first_scheduled.unwrap_or(now);
        let first_token = self.first_token.unwrap_or(now);
        let summary = Summary {
            finish,
            n_prompt: self.n_prompt,
            n_cached: self.n_cached,
            n_generated: self.n_generated,
            queue_time: first_scheduled.saturating_duration_since(self.arrived),
            prompt_time: first_token.saturating_duration_since(first_scheduled),
            gen_time: now.saturating_duration_since(first_token),
            total_time: now.saturating_duration_since(self.arrived),
        };
        let _ = self.events.send(Event::Done(summary.clone()));
        summary
    }

    /// Ends the request with an error.
    pub fn fail(self, message: String) {
        let _ = self.events.send(Event::Error(message));
    }
}
