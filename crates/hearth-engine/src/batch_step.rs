//! One forward step over several sequences at once.

use hearth_backend::AttnSeq;
use hearth_models::{Batch, ModelError};
use hearth_sampler::Candidate;

use crate::engine::BLOCK_SIZE;
use crate::runner::{ModelRunner, StepBuffers, Want};
use crate::{Engine, EngineError, Sequence};

/// One sequence's share of a step: the tokens it runs next and which of them need logits.
pub struct SeqStep<'a> {
    pub seq: &'a mut Sequence,
    pub tokens: &'a [u32],
    /// Indices into `tokens`.
    pub logits_rows: Vec<usize>,
}

impl Engine {
    /// Run every sequence's next tokens in one batched forward pass. Returns, per sequence, the
    /// logits of its `logits_rows`, `[rows, n_vocab]` row-major. All or nothing: if KV blocks run
    /// out or the forward fails, no sequence advances.
    pub fn step_batch(&mut self, work: &mut [SeqStep]) -> Result<Vec<Vec<f32>>, EngineError> {
        let n_vocab = self.n_vocab();
        let sizes: Vec<usize> = work.iter().map(|w| w.logits_rows.len() * n_vocab).collect();
        let logits = self.step_batch_logits(work)?;
        let mut offset = 0;
        Ok(sizes
            .iter()
            .map(|&n| {
                offset += n;
                logits[offset - n..offset].to_vec()
            })
            .collect())
    }

    /// [`Engine::step_batch`] without splitting the logits: every sequence's rows one after
    /// the other, `[Σ logits_rows, n_vocab]`, in the engine's buffer (valid until the next
    /// step). What a caller that only samples needs, without copying tens of MB a step.
    pub fn step_batch_logits(&mut self, work: &mut [SeqStep]) -> Result<&[f32], EngineError> {
        self.run_step(work, Want::Logits)?;
        Ok(&self.out.logits[..])
    }

    /// [`Engine::step_batch_logits`] for greedy decoding: the id of the largest logit of each
    /// wanted row (ties to the lower id, as `hearth_sampler::argmax`), every sequence's rows
    /// one after the other. A GPU finds them on the device and copies back one word per row
    /// instead of the logits.
    pub fn step_batch_argmax(&mut self, work: &mut [SeqStep]) -> Result<&[u32], EngineError> {
        self.run_step(work, Want::Argmax)?;
        Ok(&self.out.argmax)
    }

    /// [`Engine::step_batch_logits`] for sampling with a top-k stage: the `k` best candidates
    /// of each wanted row, best first (`hearth_sampler::best_of_rows`'s order), `k` per row
    /// (every token when the vocabulary has fewer), every sequence's rows one after the other.
    /// A GPU selects them on the device and copies back `k` candidates per row instead of the
    /// logits; `Sampler::sample_best` draws from them what it would from the row.
    pub fn step_batch_best(
        &mut self,
        work: &mut [SeqStep],
        k: usize,
    ) -> Result<&[Candidate], EngineError> {
        let k = self.best_per_row(k)?;
        let n_rows: usize = work.iter().map(|w| w.logits_rows.len()).sum();
        self.run_step(work, Want::Best(k))?;
        if !self.out.holds(Want::Best(k), n_rows, self.n_vocab()) {
            return Err(EngineError::Invalid(format!(
                "the forward pass returned {} candidates for {n_rows} rows of {k}",
                self.out.best.len()
            )));
        }
        Ok(&self.out.best)
    }

    fn run_step(&mut self, work: &mut [SeqStep], want: Want) -> Result<(), EngineError> {
        self.run_step_with(work, |runner, batch, out| {
            runner.forward(want, batch, BLOCK_SIZE, out)
        })
    }

    /// Checks `work`, reserves its KV slots, and runs `forward` on its batch; on success every
    /// sequence takes its tokens, on failure each gives back what it reserved.
    pub(crate) fn run_step_with(
        &mut self,
        work: &mut [SeqStep],
        forward: impl FnOnce(&mut dyn ModelRunner, &Batch, &mut StepBuffers) -> Result<(), ModelError>,
    ) -> Result<(), EngineError> {
        for w in work.iter() {
            let end = w.seq.tokens.len() + w.tokens.len();
            if w.tokens.is_empty() {
                return Err(EngineError::EmptyPrompt);
            }
            if end > self.n_ctx() {
                return Err(EngineError::PromptTooLong {
                    n_prompt: end,
                    n_ctx: self.n_ctx(),
                });
            }
            if let Some(&r) = w.logits_rows.iter().find(|&&r| r >= w.tokens.len()) {
                return Err(EngineError::Invalid(format!(
                    "logits wanted for token {r} of {}",
                    w.tokens.len()
                )));
            }
        }
        let before: Vec<usize> = work.iter().map(|w| w.seq.tokens.len()).collect();
        if let Err(e) = self.reserve_all(work) {
            self.roll_back(work, &before);
            return Err(e);
        }
        let mut tokens = Vec::new();
        let mut positions = Vec::new();
        let mut logits_rows = Vec::new();
        for (w, &first) in work.iter().zip(&before) {
            let start = tokens.len();
            tokens.extend_from_slice(w.tokens);
            positions.extend((first..first + w.tokens.len()).map(|p| p as u32));
            logits_rows.extend(w.logits_rows.iter().map(|r| start + r));
        }
        let mut start = 0;
        let seqs: Vec<AttnSeq> = work
            .iter()
            .zip(&before)
            .map(|(w, &first_pos)| {
                let s = AttnSeq {
                    token_start: start,
                    n_tokens: w.tokens.len(),
                    first_pos,
                    block_table: w.seq.table.blocks(),
                };
                start += w.tokens.len();
                s
            })
            .collect();
        let batch = Batch {
            tokens: &tokens,
            positions: &positions,
            seqs: &seqs,
            logits_rows: &logits_rows,
        };
        let result = forward(self.runner.as_mut(), &batch, &mut self.out);
        drop(seqs);
        if let Err(e) = result {
            self.roll_back(work, &before);
            return Err(e.into());
        }
        for w in work.iter_mut() {
            w.seq.tokens.extend_from_slice(w.tokens);
        }
        Ok(())
    }

    fn reserve_all(&mut self, work: &mut [SeqStep]) -> Result<(), EngineError> {
        for w in work.iter_mut() {
            w.seq
                .table
                .reserve(&mut self.pool, w.tokens.len())
                .map_err(|e| EngineError::OutOfBlocks(e.to_string()))?;
        }
        Ok(())
    }

    /// Give back what a failed step reserved, so each table again covers exactly its tokens.
    fn roll_back(&mut self, work: &mut [SeqStep], before: &[usize]) {
        for (w, &n) in work.iter_mut().zip(before) {
            if w.seq.table.n_tokens() > n {
                w.seq.table.truncate(&mut self.pool, n);
            }
        }
    }
}
