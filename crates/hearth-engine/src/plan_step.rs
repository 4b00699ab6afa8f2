//! Running a scheduler's plan: the server's engine step.

use hearth_backend::AttnSeq;
use hearth_kv::BlockPool;
use hearth_models::Batch;

use crate::engine::BLOCK_SIZE;
use crate::scheduler::{RequestId, Scheduler, SchedulerConfig, StepPlan};
use crate::{Engine, EngineError};

/// The next-token logits of a plan's sampling sequences, in plan order: one `[n_vocab]` row
/// each, kept in the forward pass's own buffer (no copy per sequence).
#[derive(Debug, Default)]
pub struct PlanLogits {
    ids: Vec<RequestId>,
    /// `[ids.len(), n_vocab]` row-major.
    rows: Vec<f32>,
    n_vocab: usize,
}

impl PlanLogits {
    /// (request, its logits row), in plan order.
    pub fn iter(&self) -> impl Iterator<Item = (RequestId, &[f32])> {
        self.ids
            .iter()
            .copied()
            .zip(self.rows.chunks_exact(self.n_vocab.max(1)))
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

impl Engine {
    /// Give a step's logits back once they are used, so the next step reuses the buffer.
    pub fn recycle(&mut self, logits: PlanLogits) {
        if logits.rows.capacity() > self.logits.capacity() {
            self.logits = logits.rows;
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
    pub fn run_plan(&mut self, plan: &StepPlan) -> Result<PlanLogits, EngineError> {
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
            return Ok(PlanLogits::default());
        }
        let batch = Batch {
            tokens: &tokens,
            positions: &positions,
            seqs: &seqs,
            logits_rows: &logits_rows,
        };
        let mut logits = std::mem::take(&mut self.logits);
        if let Err(e) = self.runner.forward(&batch, BLOCK_SIZE, &mut logits) {
            self.logits = logits;
            return Err(e.into());
        }
        Ok(PlanLogits {
            ids: plan
                .seqs
                .iter()
                .filter(|s| s.sample)
                .map(|s| s.id)
                .collect(),
            rows: logits,
            n_vocab: self.n_vocab(),
        })
    }
}
