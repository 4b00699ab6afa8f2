//! [`Scheduler::schedule`] and [`Scheduler::update`]: the two halves of a step.

use super::{FinishReason, RequestId, ScheduledSeq, Scheduler, StepPlan};

impl Scheduler {
    /// Plans the next step: running requests first (arrival order), then waiting ones in FIFO
    /// order while the token budget and `max_seqs` allow. Reserves KV blocks for every token
    /// it schedules, preempting the most recently admitted running requests when the pool
    /// runs short.
    ///
    /// Call [`Scheduler::update`] with the plan once it has run. Planning again without an
    /// update plans the same tokens again (nothing is reserved twice).
    pub fn schedule(&mut self) -> StepPlan {
        let mut plan = StepPlan::default();
        let mut budget = self.config.max_batch_tokens;
        let mut i = 0;
        while i < self.running.len() && budget > 0 && plan.seqs.len() < self.config.max_seqs {
            let id = self.running[i];
            let n = self.requests[&id].n_uncomputed().min(budget);
            if self.reserve_or_preempt(i, n, &mut plan.preempted) {
                plan.seqs.push(self.scheduled_seq(id, n));
                budget -= n;
                i += 1;
            }
            // NOTE: on failure running[i] preempted itself, so `running.len() == i` now.
        }
        // NOTE: after a preemption the pool is full; admitting new work now would only
        // preempt it again next step (as vLLM does, wait for the running set to shrink).
        if plan.preempted.is_empty() {
            self.admit_waiting(&mut budget, &mut plan);
        }
        plan
    }

    /// Records a finished step: advances computed counts, registers newly full blocks for
    /// prefix reuse, appends the sampled tokens and ends requests that are done.
    ///
    /// `sampled` holds, for each plan sequence with `sample == true`, the token drawn and
    /// whether it ends the request (EOS or a stop string). A sampling sequence with no entry
    /// ends as [`FinishReason::Aborted`]. Sequences of requests aborted or preempted since the
    /// plan was made are skipped. Finished requests' blocks go back to the pool.
    pub fn update(
        &mut self,
        plan: &StepPlan,
        sampled: &[(RequestId, u32, bool)],
    ) -> Vec<(RequestId, FinishReason)> {
        let mut finished = Vec::new();
        for seq in &plan.seqs {
            let Some(req) = self.requests.get_mut(&seq.id) else {
                continue; // aborted since the plan was made
            };
            let end = seq.first_pos + seq.tokens.len();
            // NOTE: a preempted request holds no slots, and a re-planned one has moved on;
            // either way this sequence's KV is not (or no longer) the request's.
            if req.n_computed != seq.first_pos || end > req.table.n_tokens() {
                continue;
            }
            req.n_computed = end;
            req.table
                .cache_full_blocks(&mut self.pool, &req.tokens[..end]);
            if !seq.sample || end != req.tokens.len() {
                continue;
            }
            let reason = match sampled.iter().find(|s| s.0 == seq.id) {
                None => Some(FinishReason::Aborted),
                Some(&(_, token, stop)) => {
                    req.tokens.push(token);
                    if stop {
                        Some(FinishReason::Stop)
                    } else if req.n_generated() >= req.max_new_tokens {
                        Some(FinishReason::Length)
                    } else {
                        None
                    }
                }
            };
            if let Some(reason) = reason {
                finished.push((seq.id, reason));
            }
        }
        for &(id, _) in &finished {
            self.abort(id);
        }
        finished
    }

    /// Reserves slots so `running[i]` can run `n` more tokens, preempting running requests
    /// from the back until it fits. Returns false when `running[i]` itself was preempted.
    fn reserve_or_preempt(&mut self, i: usize, n: usize, preempted: &mut Vec<RequestId>) -> bool {
        let id = self.running[i];
        loop {
            // Internal invariant: every id in `running` has a request.
            let req = self.requests.get_mut(&id).expect("running request exists");
            let extra = (req.n_computed + n).saturating_sub(req.table.n_tokens());
            if req.table.reserve(&mut self.pool, extra).is_ok() {
                return true;
            }
            // Internal invariant: `running[i]` exists, so `running` is not empty.
            let victim = self.running.pop().expect("running is not empty");
            self.preempt(victim);
            preempted.push(victim);
            if victim == id {
                return false;
            }
        }
    }

    /// Moves running request `id` to the front of the waiting line, releasing its blocks.
    /// Its generated tokens stay; everything is recomputed (mostly from the prefix cache).
    fn preempt(&mut self, id: RequestId) {
        let req = self
            .requests
            .get_mut(&id)
            .expect("preempted request exists");
        req.table.release_all(&mut self.pool);
        req.n_computed = 0;
        self.waiting.push_front(id);
    }

    /// Admits waiting requests in FIFO order while budget, `max_seqs` and the pool allow.
    fn admit_waiting(&mut self, budget: &mut usize, plan: &mut StepPlan) {
        let max_seqs = self.config.max_seqs;
        while *budget > 0 && plan.seqs.len() < max_seqs && self.running.len() < max_seqs {
            let Some(&id) = self.waiting.front() else {
                break;
            };
            let req = self.requests.get_mut(&id).expect("waiting request exists");
            let cached = req.table.adopt_cached_prefix(&mut self.pool, &req.tokens);
            let n = (req.tokens.len() - cached).min(*budget);
            if req.table.reserve(&mut self.pool, n).is_err() {
                // NOTE: strict FIFO: the head waits (its adopted blocks go back to the
                // cache) rather than letting later, smaller requests starve it.
                req.table.release_all(&mut self.pool);
                break;
            }
            req.n_computed = cached;
            req.cached_tokens = cached;
            self.waiting.pop_front();
            self.running.push(id);
            plan.seqs.push(self.scheduled_seq(id, n));
            *budget -= n;
        }
    }

    /// The next `n` uncomputed tokens of request `id` as a plan sequence.
    fn scheduled_seq(&self, id: RequestId, n: usize) -> ScheduledSeq {
        let req = &self.requests[&id];
        let first_pos = req.n_computed;
        let end = first_pos + n;
        ScheduledSeq {
            id,
            first_pos,
            tokens: req.tokens[first_pos..end].to_vec(),
            block_table: req.table.blocks().to_vec(),
            sample: end == req.tokens.len(),
        }
    }
}
