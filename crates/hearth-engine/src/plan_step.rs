//! Running a scheduler's plan: the server's engine step.

use hearth_backend::AttnSeq;
use hearth_kv::BlockPool;
use hearth_models::Batch;
use hearth_sampler::Candidate;

use crate::engine::BLOCK_SIZE;
use crate::runner::{StepBuffers, Want};
use crate::scheduler::{RequestId, Scheduler, SchedulerConfig, StepPlan};
use crate::{Engine, EngineError};

/// What a plan's step left for each sequence that samples, in plan order: its next-token
/// logits, one `[n_vocab]` row each, kept in the forward pass's own buffer (no copy per
/// sequence); or, from [`Engine::run_plan_argmax`], the token the device picked; or, from
/// [`Engine::run_plan_best`], its `k` best candidates.
#[derive(Debug, Default)]
pub struct PlanOutput {
    ids: Vec<RequestId>,
    /// What the step brought back: that buffer of `out` holds one result per id.
    want: Want,
    out: StepBuffers,
    n_vocab: usize,
}

/// One sampling sequence's share of a [`PlanOutput`].
#[derive(Clone, Copy, Debug)]
pub enum NextToken<'a> {
    /// Its logits, to sample from.
    Logits(&'a [f32]),
    /// The largest logit's id, found on the device.
    Picked(u32),
    /// Its `k` best candidates, best first, selected on the device: what
    /// `Sampler::sample_best` draws from.
    Best(&'a [Candidate]),
}

impl PlanOutput {
    /// (request, what it samples from), in plan order.
    pub fn iter(&self) -> impl Iterator<Item = (RequestId, NextToken<'_>)> {
        // NOTE: `run_plan_with` checks that the filled buffer matches the ids in number.
        let n = self.n_vocab.max(1);
        self.ids.iter().enumerate().map(move |(i, &id)| {
            let next = match self.want {
                Want::Logits => NextToken::Logits(&self.out.logits[i * n..(i + 1) * n]),
                Want::Argmax => NextToken::Picked(self.out.argmax[i]),
                Want::Best(k) => NextToken::Best(&self.out.best[i * k..(i + 1) * k]),
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
        self.out = out.out;
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

    /// [`Engine::run_plan`] where every sampling sequence's sampler needs at most `k` of a
    /// row's best candidates (`Sampler::best_needed`: a top-k stage or greedy, with room for
    /// penalties that only lower logits): returns each one's `k` best candidates, best first
    /// (`hearth_sampler::best_of_rows`'s order; every token when the vocabulary has fewer),
    /// selected on the device, instead of its logits. `Sampler::sample_best` draws from them
    /// what `Sampler::sample` would from the logits.
    pub fn run_plan_best(&mut self, plan: &StepPlan, k: usize) -> Result<PlanOutput, EngineError> {
        let k = self.best_per_row(k)?;
        self.run_plan_with(plan, Want::Best(k))
    }

    fn run_plan_with(&mut self, plan: &StepPlan, want: Want) -> Result<PlanOutput, EngineError> {
        let rows = PlanRows::of(plan, self.n_ctx())?;
        if rows.tokens.is_empty() {
            return Ok(PlanOutput::default());
        }
        let mut out = std::mem::take(&mut self.out);
        let result = self
            .runner
            .forward(want, &rows.batch(), BLOCK_SIZE, &mut out);
        self.plan_output(plan, want, out, result.map_err(EngineError::from))
    }

    /// Whether [`Engine::queue_plan_chained`] runs here: the model and backend chain greedy
    /// steps (`DecoderModel::chains_argmax`).
    pub fn chains_plans(&self) -> bool {
        self.runner.chains_argmax()
    }

    /// Whether chaining plans gains anything here: the steps run in the background (a GPU),
    /// so the host's work between two steps overlaps the device's
    /// (`Backend::chains_in_background`).
    pub fn chained_plans_overlap(&self) -> bool {
        self.chains_plans() && self.runner.chains_in_background()
    }

    /// Queues `plan`'s forward pass, where every sequence is one token that samples greedily
    /// without penalties, without waiting for it: each row's argmax stays on the device and
    /// [`Engine::take_plan_chained`] brings it back. With `tokens_on_device` each row runs the
    /// token the chained step before it picked for the same row (the plan's tokens are not
    /// read): the step `Scheduler::schedule_ahead` plans while that one runs. Every queued
    /// step must be taken, in order, whatever happens to its requests.
    pub fn queue_plan_chained(
        &mut self,
        plan: &StepPlan,
        tokens_on_device: bool,
    ) -> Result<(), EngineError> {
        if let Some(s) = plan.seqs.iter().find(|s| s.tokens.len() != 1 || !s.sample) {
            return Err(EngineError::Invalid(format!(
                "request {}: a chained step runs one token a sequence and samples it, not {} \
                 token(s){}",
                s.id,
                s.tokens.len(),
                if s.sample { "" } else { " without sampling" }
            )));
        }
        let rows = PlanRows::of(plan, self.n_ctx())?;
        if rows.tokens.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        Ok(self
            .runner
            .forward_chained(&rows.batch(), BLOCK_SIZE, tokens_on_device)?)
    }

    /// Waits for the oldest step [`Engine::queue_plan_chained`] queued, `plan`, and returns
    /// each sequence's pick, as [`Engine::run_plan_argmax`] would.
    pub fn take_plan_chained(&mut self, plan: &StepPlan) -> Result<PlanOutput, EngineError> {
        let mut out = std::mem::take(&mut self.out);
        let result = self.runner.take_chained(&mut out.argmax);
        self.plan_output(plan, Want::Argmax, out, result.map_err(EngineError::from))
    }

    /// The output of a step of `plan` that filled `out` as `want` says, or gave `result`'s
    /// error; the buffers go back to the engine on failure.
    fn plan_output(
        &mut self,
        plan: &StepPlan,
        want: Want,
        out: StepBuffers,
        result: Result<(), EngineError>,
    ) -> Result<PlanOutput, EngineError> {
        let ids: Vec<RequestId> = plan
            .seqs
            .iter()
            .filter(|s| s.sample)
            .map(|s| s.id)
            .collect();
        let n_vocab = self.n_vocab();
        if result.is_err() || !out.holds(want, ids.len(), n_vocab) {
            self.out = out;
            result?;
            return Err(EngineError::Invalid(format!(
                "the forward pass returned a result of the wrong size for {} rows",
                ids.len()
            )));
        }
        Ok(PlanOutput {
            ids,
            want,
            out,
            n_vocab,
        })
    }
}

/// A plan's rows as a forward pass takes them.
struct PlanRows<'p> {
    tokens: Vec<u32>,
    positions: Vec<u32>,
    logits_rows: Vec<usize>,
    seqs: Vec<AttnSeq<'p>>,
}

impl<'p> PlanRows<'p> {
    /// Checks each sequence of `plan` (tokens, context, blocks) and lays out its rows.
    fn of(plan: &'p StepPlan, n_ctx: usize) -> Result<Self, EngineError> {
        let n = plan.n_tokens();
        let mut rows = PlanRows {
            tokens: Vec::with_capacity(n),
            positions: Vec::with_capacity(n),
            logits_rows: Vec::new(),
            seqs: Vec::with_capacity(plan.seqs.len()),
        };
        for s in &plan.seqs {
            let end = s.first_pos + s.tokens.len();
            if s.tokens.is_empty() {
                return Err(EngineError::EmptyPrompt);
            }
            if end > n_ctx {
                return Err(EngineError::PromptTooLong {
                    n_prompt: end,
                    n_ctx,
                });
            }
            if s.block_table.len() * BLOCK_SIZE < end {
                return Err(EngineError::Invalid(format!(
                    "request {}: {} blocks cannot hold {end} tokens",
                    s.id,
                    s.block_table.len()
                )));
            }
            rows.seqs.push(AttnSeq {
                token_start: rows.tokens.len(),
                n_tokens: s.tokens.len(),
                first_pos: s.first_pos,
                block_table: &s.block_table,
            });
            rows.tokens.extend_from_slice(&s.tokens);
            rows.positions.extend((s.first_pos..end).map(|p| p as u32));
            if s.sample {
                rows.logits_rows.push(rows.tokens.len() - 1);
            }
        }
        Ok(rows)
    }

    fn batch(&self) -> Batch<'_> {
        Batch {
            tokens: &self.tokens,
            positions: &self.positions,
            seqs: &self.seqs,
            logits_rows: &self.logits_rows,
        }
    }
}
