//! Running a scheduler's plan: the server's engine step.

use hearth_backend::AttnSeq;
use hearth_kv::BlockPool;
use hearth_models::Batch;

use crate::engine::BLOCK_SIZE;
use crate::scheduler::{RequestId, Scheduler, SchedulerConfig, StepPlan};
use crate::{Engine, EngineError};

impl Engine {
    /// A scheduler that owns this engine's KV block pool. From then on the cache belongs to
    /// the scheduler's plans: [`Sequence`](crate::Sequence)-based calls find no free blocks.
    pub fn scheduler(&mut self, config: SchedulerConfig) -> Scheduler {
        let pool = std::mem::replace(&mut self.pool, BlockPool::new(0, BLOCK_SIZE));
        Scheduler::new(config, pool)
    }

    /// One batched forward over every sequence of `plan`, each at its own positions and
    /// through its own block table. Returns the next-token logits (`[n_vocab]`) of each
    /// sequence that samples, in plan order.
    pub fn run_plan(&mut self, plan: &StepPlan) -> Result<Vec<(RequestId, Vec<f32>)>, EngineError> {
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
            return Ok(Vec::new());
        }
        let batch = Batch {
            tokens: &tokens,
            positions: &positions,
            seqs: &seqs,
            logits_rows: &logits_rows,
        };
        let logits = self
            .model
            .forward(&self.backend, &batch, &mut self.cache, BLOCK_SIZE)?;
        let n_vocab = self.n_vocab();
        Ok(plan
            .seqs
            .iter()
            .filter(|s| s.sample)
            .zip(logits.chunks_exact(n_vocab))
            .map(|(s, row)| (s.id, row.to_vec()))
            .collect())
    }
}
