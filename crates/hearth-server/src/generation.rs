//! What both APIs do around a generation: size it against the context, submit it, gather
//! its events, log it.

use std::time::Instant;

use hearth_sampler::SamplingParams;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::error::ApiError;
use crate::runner::{Event, GenerateRequest, RunnerHandle, Summary, TokenLogprob};

/// Checks a prompt against the model's context and settles how many tokens it may generate:
/// `requested` (already validated ≥ 1), or `None` for "until the context is full", capped
/// to the room the context leaves.
pub fn max_new_tokens(
    n_prompt: usize,
    n_ctx: usize,
    requested: Option<usize>,
) -> Result<usize, ApiError> {
    if n_prompt == 0 {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    if n_prompt >= n_ctx {
        return Err(ApiError::bad_request(format!(
            "the prompt is {n_prompt} tokens, but this model's context holds {n_ctx} tokens \
             (prompt and generated tokens together); shorten the prompt or start the server with a larger --ctx-size"
        )));
    }
    let room = n_ctx - n_prompt;
    Ok(requested.map_or(room, |n| n.min(room)))
}

/// The pieces of a generation request common to both APIs.
pub struct Generation {
    pub prompt: Vec<u32>,
    pub max_tokens: Option<usize>,
    pub params: SamplingParams,
    pub stop: Vec<String>,
    pub logprobs: Option<usize>,
}

/// Validates `g` against the model and queues it. Returns the events receiver.
pub fn submit(
    runner: &RunnerHandle,
    g: Generation,
    arrived: Instant,
) -> Result<UnboundedReceiver<Event>, ApiError> {
    g.params
        .validate()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let max_tokens = max_new_tokens(g.prompt.len(), runner.info().n_ctx, g.max_tokens)?;
    runner
        .submit(GenerateRequest {
            prompt: g.prompt,
            max_tokens,
            params: g.params,
            stop: g.stop,
            logprobs: g.logprobs,
            arrived,
        })
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// A whole generation's output, for non-streaming responses.
#[derive(Debug, Default)]
pub struct Collected {
    pub text: String,
    pub tokens: Vec<u32>,
    pub logprobs: Vec<TokenLogprob>,
}

/// Waits for a generation to end and gathers its output.
pub async fn collect(
    mut events: UnboundedReceiver<Event>,
) -> Result<(Collected, Summary), ApiError> {
    let mut out = Collected::default();
    while let Some(event) = events.recv().await {
        match event {
            Event::Chunk(c) => {
                out.text.push_str(&c.text);
                out.tokens.extend_from_slice(&c.tokens);
                out.logprobs.extend(c.logprobs);
            }
            Event::Done(summary) => return Ok((out, summary)),
            Event::Error(message) => return Err(ApiError::internal(message)),
        }
    }
    Err(ApiError::internal(
        "the model's runner stopped before the generation finished",
    ))
}

/// A fresh request id: `prefix` and 24 random hex digits.
pub fn request_id(prefix: &str) -> String {
    format!("{prefix}{:024x}", rand::random::<u128>() >> 32)
}

/// The one log line per finished generation.
pub fn log_generation(id: &str, endpoint: &str, model: &str, s: &Summary) {
    tracing::info!(
        request = id,
        endpoint,
        model,
        prompt_tokens = s.n_prompt,
        cached_tokens = s.n_cached,
        generated_tokens = s.n_generated,
        finish = s.finish.as_str(),
        queue_ms = s.queue_time.as_millis() as u64,
        prompt_ms = s.prompt_time.as_millis() as u64,
        gen_ms = s.gen_time.as_millis() as u64,
        total_ms = s.total_time.as_millis() as u64,
        "generation finished"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_tokens_fits_the_context() {
        assert_eq!(max_new_tokens(10, 100, None).unwrap(), 90);
        assert_eq!(max_new_tokens(10, 100, Some(5)).unwrap(), 5);
        assert_eq!(max_new_tokens(10, 100, Some(1_000_000)).unwrap(), 90);
        let e = max_new_tokens(100, 100, Some(5)).unwrap_err();
        assert!(
            e.message.contains("the prompt is 100 tokens") && e.message.contains("holds 100"),
            "{}",
            e.message
        );
        assert!(max_new_tokens(0, 100, None)
            .unwrap_err()
            .message
            .contains("empty"));
    }
}
