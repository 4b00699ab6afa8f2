//! Running one request's generations: `n` choices for each prompt, submitted together (they
//! share each prompt's KV blocks through the prefix cache), and the usage they add up to.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use futures_util::future::try_join_all;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::options::Options;
use crate::error::ApiError;
use crate::generation::{collect, submit, Collected, Generation};
use crate::runner::{Event, RunnerHandle, Summary};

/// What every response and chunk of one request carries.
#[derive(Clone, Debug)]
pub struct Head {
    pub id: String,
    /// Unix seconds, the same on every chunk.
    pub created: u64,
    /// The name the server knows the model by.
    pub model: String,
}

impl Head {
    /// A fresh id with `prefix` (`chatcmpl-`, `cmpl-`), created now.
    pub fn new(prefix: &str, model: &str) -> Self {
        Self {
            id: crate::generation::request_id(prefix),
            created: unix_seconds(SystemTime::now()),
            model: model.to_string(),
        }
    }

    /// The response object's common fields, `choices` and the rest added by the caller.
    pub fn object(&self, object: &str) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("id".into(), self.id.clone().into());
        m.insert("object".into(), object.into());
        m.insert("created".into(), self.created.into());
        m.insert("model".into(), self.model.clone().into());
        m.insert("system_fingerprint".into(), fingerprint().into());
        m
    }
}

/// `system_fingerprint`: which server build answered.
pub fn fingerprint() -> String {
    format!("hearth-{}", env!("CARGO_PKG_VERSION"))
}

/// Seconds since the Unix epoch (0 for times before it).
pub fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Submits `n` generations per prompt; choice `p * n + i` is prompt `p`'s `i`-th. With a
/// seed, choice `i` samples with `seed + i`, so the choices differ but replay exactly.
pub fn submit_all(
    runner: &RunnerHandle,
    prompts: &[Vec<u32>],
    opts: &Options,
    logprobs: Option<usize>,
    arrived: Instant,
) -> Result<Vec<UnboundedReceiver<Event>>, ApiError> {
    let mut out = Vec::with_capacity(prompts.len() * opts.n);
    for prompt in prompts {
        for i in 0..opts.n {
            let mut params = opts.params.clone();
            params.seed = params.seed.map(|s| s.wrapping_add(i as u64));
            out.push(submit(
                runner,
                Generation {
                    prompt: prompt.clone(),
                    max_tokens: opts.max_tokens,
                    params,
                    stop: opts.stop.clone(),
                    logprobs,
                },
                arrived,
            )?);
        }
    }
    Ok(out)
}

/// Waits for every generation; the first failure cancels the rest (their receivers drop).
pub async fn collect_all(
    receivers: Vec<UnboundedReceiver<Event>>,
) -> Result<Vec<(Collected, Summary)>, ApiError> {
    try_join_all(receivers.into_iter().map(collect)).await
}

/// Token counts of a request: each prompt counted once however many choices it has.
#[derive(Debug)]
pub struct Usage {
    n: usize,
    /// Per prompt: (prompt tokens, cached tokens seen by every choice so far).
    prompts: Vec<Option<(usize, usize)>>,
    completion: usize,
}

impl Usage {
    pub fn new(n_prompts: usize, n: usize) -> Self {
        Self {
            n,
            prompts: vec![None; n_prompts],
            completion: 0,
        }
    }

    /// Adds choice `index`'s finished generation.
    pub fn add(&mut self, index: usize, s: &Summary) {
        self.completion += s.n_generated;
        if let Some(slot) = self.prompts.get_mut(index / self.n.max(1)) {
            // NOTE: the prompt was processed once; the cached count is what the choice that
            // reused the least had (the others then reused the first one's blocks).
            let cached = slot.map_or(s.n_cached, |(_, c)| c.min(s.n_cached));
            *slot = Some((s.n_prompt, cached));
        }
    }

    /// OpenAI's `usage` object.
    pub fn to_json(&self) -> Value {
        let (prompt, cached) = self
            .prompts
            .iter()
            .flatten()
            .fold((0, 0), |(p, c), (np, nc)| (p + np, c + nc));
        json!({
            "prompt_tokens": prompt,
            "completion_tokens": self.completion,
            "total_tokens": prompt + self.completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::Finish;
    use std::time::Duration;

    fn summary(n_prompt: usize, n_cached: usize, n_generated: usize) -> Summary {
        Summary {
            finish: Finish::Stop,
            n_prompt,
            n_cached,
            n_generated,
            queue_time: Duration::ZERO,
            prompt_time: Duration::ZERO,
            gen_time: Duration::ZERO,
            total_time: Duration::ZERO,
        }
    }

    #[test]
    fn prompts_count_once_and_completions_add_up() {
        let mut u = Usage::new(2, 2);
        u.add(0, &summary(10, 0, 3));
        u.add(1, &summary(10, 8, 4));
        u.add(3, &summary(6, 4, 5));
        u.add(2, &summary(6, 5, 1));
        assert_eq!(
            u.to_json(),
            json!({"prompt_tokens": 16, "completion_tokens": 13, "total_tokens": 29,
                   "prompt_tokens_details": {"cached_tokens": 4}})
        );
    }

    #[test]
    fn fingerprint_names_the_version() {
        assert_eq!(
            fingerprint(),
            format!("hearth-{}", env!("CARGO_PKG_VERSION"))
        );
    }
}
