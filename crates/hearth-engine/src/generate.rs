use std::time::{Duration, Instant};

use hearth_sampler::{Candidate, Sampler, MAX_DEVICE_TOP_K};
use hearth_tokenizer::StreamDecoder;

use crate::{Engine, EngineError, Sequence};

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// The model produced an end-of-generation token.
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The context is full.
    ContextFull,
    /// The caller asked to stop.
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ContextFull => "context full",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// What one generation did and how long it took.
#[derive(Clone, Debug)]
pub struct GenerationReport {
    pub n_prompt: usize,
    /// Prompt tokens whose keys and values were already cached.
    pub n_cached: usize,
    pub n_generated: usize,
    /// The generated token ids, end-of-generation token included when there was one.
    pub tokens: Vec<u32>,
    pub prompt_time: Duration,
    pub gen_time: Duration,
    pub finish: FinishReason,
}

/// What a step left for picking the next token.
enum Next {
    Logits(Vec<f32>),
    /// Picked on the device already (greedy decoding, whose later steps `decode_greedy` runs).
    Token(u32),
    /// The row's `k` best candidates, selected on the device.
    Best(usize, Vec<Candidate>),
}

/// What each step brings back for `generate`: the least the sampler needs.
#[derive(Clone, Copy)]
enum Path {
    Logits,
    Argmax,
    /// The `k` best candidates.
    Best(usize),
}

impl Path {
    fn of(sampler: &Sampler) -> Path {
        // NOTE: greedy decoding without penalties takes each token's argmax from the device
        // (one word per step instead of the logits); sampling with a small top-k, and greedy
        // decoding with penalties that only lower logits, take the best candidates
        // (`Sampler::best_needed`). The sampler picks the same token either way.
        if sampler.is_argmax() {
            return Path::Argmax;
        }
        match sampler.best_needed() {
            Some(k) if k <= MAX_DEVICE_TOP_K => Path::Best(k),
            _ => Path::Logits,
        }
    }
}

impl Engine {
    /// Run `prompt` on `seq` and sample up to `max_tokens` tokens, passing the text of each to
    /// `on_text` as soon as it is complete UTF-8. `on_text` returns false to stop.
    pub fn generate(
        &mut self,
        seq: &mut Sequence,
        prompt: &[u32],
        sampler: &mut Sampler,
        max_tokens: usize,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<GenerationReport, EngineError> {
        let t0 = Instant::now();
        let n_cached = Engine::reusable_prefix(seq, prompt);
        let path = Path::of(sampler);
        let mut next = match path {
            Path::Argmax => Next::Token(self.feed_argmax(seq, prompt)?),
            Path::Best(k) => Next::Best(k, self.feed_best(seq, prompt, k)?),
            Path::Logits => Next::Logits(self.feed(seq, prompt)?),
        };
        let prompt_time = t0.elapsed();
        let t1 = Instant::now();
        let mut report = GenerationReport {
            n_prompt: prompt.len(),
            n_cached,
            n_generated: 0,
            tokens: Vec::new(),
            prompt_time,
            gen_time: Duration::ZERO,
            finish: FinishReason::Length,
        };
        let tokenizer = self.tokenizer.clone();
        let mut decoder = StreamDecoder::new(&tokenizer);
        // Takes one generated token; false when generation ends with it.
        let mut take = |token: u32, report: &mut GenerationReport| {
            report.n_generated += 1;
            report.tokens.push(token);
            if tokenizer.is_eog(token) {
                report.finish = FinishReason::Stop;
                return false;
            }
            let text = decoder.push(token);
            if !text.is_empty() && !on_text(&text) {
                report.finish = FinishReason::Cancelled;
                return false;
            }
            true
        };
        if let Next::Token(first) = next {
            // Greedy decoding runs its steps in `decode_greedy`, which may queue each one
            // before the token it runs has come back.
            if max_tokens > 0 && take(first, &mut report) {
                let steps = (max_tokens - 1).min(self.n_ctx().saturating_sub(seq.len()));
                let mut ended = false;
                self.decode_greedy(seq, first, steps, |token| {
                    ended = !take(token, &mut report);
                    !ended
                })?;
                if !ended && report.n_generated < max_tokens {
                    report.finish = FinishReason::ContextFull;
                }
            }
        } else {
            while report.n_generated < max_tokens {
                let token = match &next {
                    Next::Best(_, best) => sampler.sample_best(best, seq.tokens()),
                    Next::Logits(logits) => sampler.sample(logits, seq.tokens()),
                    Next::Token(t) => *t,
                };
                if !take(token, &mut report) || report.n_generated == max_tokens {
                    break;
                }
                if seq.len() + 1 > self.n_ctx() {
                    report.finish = FinishReason::ContextFull;
                    break;
                }
                next = match next {
                    Next::Best(k, _) => Next::Best(k, self.step_best(seq, &[token], k)?),
                    Next::Logits(_) => Next::Logits(self.step(seq, &[token])?),
                    Next::Token(_) => Next::Token(self.step_argmax(seq, &[token])?),
                };
            }
        }
        let rest = decoder.finish();
        if !rest.is_empty() {
            on_text(&rest);
        }
        report.gen_time = t1.elapsed();
        Ok(report)
    }
}
