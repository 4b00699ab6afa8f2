//! [`Scheduler::schedule_ahead`]: the plan of the step after one still running, for greedy
//! decoding whose next tokens stay on the device (`Engine::queue_plan_chained`).

use super::{ScheduledSeq, Scheduler, StepPlan};

/// What a step planned ahead holds for each token until the step before it has picked it.
pub const NOT_YET_KNOWN: u32 = 0;

impl Scheduler {
    /// Plans the step after `running`, a step not yet [`Scheduler::update`]d, as if each of its
    /// rows took one more token and went on: the same requests in the same order, each
    /// running, at the next position, the token `running` picks for it (held as
    /// [`NOT_YET_KNOWN`] in the plan). Reserves one more KV slot for each.
    ///
    /// `None`, reserving nothing, unless every row of `running` is one sampled token of a
    /// request whose newest token it runs, no request could end by length with that step's
    /// token, every running request is in it, nobody waits (a new request should not wait
    /// behind steps planned ahead) and the pool has the slots without preempting anyone.
    ///
    /// Update with `running` first, then with this plan once it has run; a request that
    /// `running` ended, or that was aborted, is skipped then, as [`Scheduler::update`] skips
    /// any request no longer live.
    pub fn schedule_ahead(&mut self, running: &StepPlan) -> Option<StepPlan> {
        if running.seqs.is_empty()
            || running.seqs.len() != self.running.len()
            || !self.waiting.is_empty()
        {
            return None;
        }
        let goes_on = running.seqs.iter().all(|s| {
            self.requests.get(&s.id).is_some_and(|r| {
                s.tokens.len() == 1
                    && s.sample
                    && r.n_computed == s.first_pos
                    && r.tokens.len() == s.first_pos + 1
                    && r.n_generated() + 1 < r.max_new_tokens
            })
        });
        if !goes_on {
            return None;
        }
        let blocks: usize = running
            .seqs
            .iter()
            .map(|s| {
                let table = &self.requests[&s.id].table;
                table.blocks_needed(
                    (s.first_pos + 2).saturating_sub(table.n_tokens()),
                    self.pool.block_size(),
                )
            })
            .sum();
        if blocks > self.pool.n_free() {
            return None;
        }
        let mut plan = StepPlan::default();
        for s in &running.seqs {
            let req = self.requests.get_mut(&s.id).expect("checked above");
            let extra = (s.first_pos + 2).saturating_sub(req.table.n_tokens());
            // NOTE: the pool was checked to hold every row's blocks.
            req.table.reserve(&mut self.pool, extra).ok()?;
            plan.seqs.push(ScheduledSeq {
                id: s.id,
                first_pos: s.first_pos + 1,
                tokens: vec![NOT_YET_KNOWN],
                block_table: req.table.blocks().to_vec(),
                sample: true,
            });
        }
        Some(plan)
    }
}
