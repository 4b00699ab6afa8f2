//! Running a scheduler's plan: the server's engine step.

use hearth_backend::AttnSeq;
use hearth_kv::BlockPool;
use hearth_models::Batch;

use crate::engine::BLOCK_SIZE;
use crate::runner::Want;
use crate::scheduler::{RequestId, Scheduler, SchedulerConfig, StepPlan};
use crate::{Engine, EngineError};

/// What a plan's step left for each sequence that samples, in plan order: its next-token
/// logits, one `[n_vocab]` row each, kept in the forward pass's own buffer (no copy per
/// sequence); or, from [`Engine::run_plan_argmax`], the token the device picked.
#[derive(Debug, Default)]
pub struct PlanOutput {
    ids: Vec<RequestId>,
    /// `[ids.len(), n_vocab]` row-major; empty after a greedy step.
    rows: Vec<f32>,
    /// One per id after a greedy step; empty otherwise.
    tokens: Vec<u32>,
    n_vocab: usize,
}

/// One sampling sequence's share of a [`PlanOutput`].
#[derive(Clone, Copy, Debug)]
pub enum NextToken<'a> {
    /// Its logits, to sample from.
    Logits(&'a [f32]),
    /// The largest logit's id, found on the device.
    Picked(u32),
}

impl PlanOutput {
    /// (request, what it samples from), in plan order.
    pub fn iter(&self) -> impl Iterator<Item = (RequestId, NextToken<'_>)> {
        // NOTE: `run_plan_with` checks that rows or tokens match the ids in number.
        let n = self.n_vocab.max(1);
        self.ids.iter().enumerate().map(move |(i, &id)| {
            let next = match self.tokens.get(i) {
                Some(&t) => NextToken::Picked(t),
                None => NextToken::Logits(&self.rows[i * n..(i + 1) * n]),
            };
            (id, next)
        })
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

impl Engine {
    /// Give a step's output back once it is used, so the next step reuses its buffers.
    pub fn recycle(&mut self, out: PlanOutput) {
        if out.rows.capacity() > self.logits.capacity() {
            self.logits = out.rows;
        }
        if out.tokens.capacity() > self.argmax.capacity() {
            self.argmax = out.tokens;
        }
    }

    /// A scheduler that owns this engine's KV block pool. From then on the cache belongs to
    /// the scheduler's plans: [`Sequence`](crate::Sequence)-based calls find no free blocks.
    pub fn scheduler(&mut self, config: SchedulerConfig) -> Scheduler {
        let pool = std::mem::replace(&mut self.pool, BlockPool::new(0, BLOCK_SIZE));
        Scheduler::new(config, pool)
    }

    /// One batched forward over every sequence of `plan`, each at its own positions and
    /// through its own block table. Returns the next-token logits of each sequence that
    /// samples, in plan order.
    pub fn run_plan(&mut self, plan: &StepPlan) -> Result<PlanOutput, EngineError> {
        self.run_plan_with(plan, Want::Logits)
    }

    /// [`Engine::run_plan`] where every sampling sequence decodes greedily without
    /// penalties: returns the id of each one's largest logit (ties to the lower id, as
    /// `hearth_sampler::argmax`), found on the device, instead of its logits.
    pub fn run_plan_argmax(&mut self, plan: &StepPlan) -> Result<PlanOutput, EngineError> {
        self.run_plan_with(plan, Want::Argmax)
    }

    fn run_plan_with(&mut self, plan: &StepPlan, want: Want) -> Result<PlanOutput, EngineError> {
        let mut tokens = Vec::with_capacity(plan.n_tokens());
        let mut positions = Vec::with_capacity(plan.n_tokens());
        let mut logits_rows = Vec::new();
        let mut seqs = Vec::with_capacity(plan.seqs.len());
        for s in &plan.seqs {
            let end = s.first_pos + s.tokens.len();
            if s.tokens.is_empty() {
                return Err(EngineError::EmptyPrompt);
            }
            if end > self.n_ctx() {
                return Err(EngineError::PromptTooLong {
                    n_prompt: end,
                    n_ctx: self.n_ctx(),
                });
            }
            if s.block_table.len() * BLOCK_SIZE < end {
                return Err(EngineError::Invalid(format!(
                    "request {}: {} blocks cannot hold {end} tokens",
                    s.id,
                    s.block_table.len()
                )));
            }
            seqs.push(AttnSeq {
                token_start: tokens.len(),
                n_tokens: s.tokens.len(),
                first_pos: s.first_pos,
                block_table: &s.block_table,
            });
            tokens.extend_from_slice(&s.tokens);
            positions.extend((s.first_pos..end).map(|p| p as u32));
            if s.sample {
                logits_rows.push(tokens.len() - 1);
            }
        }
        if tokens.is_empty() {
            return Ok(PlanOutput::default());
        }
        let batch = Batch {
            tokens: &tokens,
            positions: &positions,
            seqs: &seqs,
            logits_rows: &logits_rows,
        };
        let mut rows = std::mem::take(&mut self.logits);
        let mut picked = std::mem::take(&mut self.argmax);
        let result = self
            .runner
            .forward_wanting(want, &batch, BLOCK_SIZE, &mut rows, &mut picked);
        let n_vocab = self.n_vocab();
        let complete = match want {
            Want::Logits => rows.len() == logits_rows.len() * n_vocab,
            Want::Argmax => picked.len() == logits_rows.len(),
        };
        if result.is_err() || !complete {
            self.logits = rows;
            self.argmax = picked;
            result?;
            return Err(EngineError::Invalid(format!(
                "the forward pass returned a result of the wrong size for {} rows",
                logits_rows.len()
            )));
        }
        // The buffer this step did not use stays with the engine. NOTE: an empty `tokens` is
        // what makes `PlanOutput::iter` read the rows.
        let (rows, picked) = match want {
            Want::Logits => (rows, std::mem::replace(&mut self.argmax, picked)),
            Want::Argmax => (std::mem::replace(&mut self.logits, rows), picked),
        };
        Ok(PlanOutput {
            ids: plan
                .seqs
                .iter()
                .filter(|s| s.sample)
                .map(|s| s.id)
                .collect(),
            rows,
            tokens: picked,
            n_vocab,
        })
    }
}
