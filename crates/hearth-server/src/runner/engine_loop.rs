//! The runner thread's loop: take new requests, plan a step, run it, sample, send.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

use hearth_engine::scheduler::{self, RequestId, Scheduler, StepPlan};
use hearth_engine::{Engine, EngineError, NextToken, PlanOutput};
use hearth_sampler::{sample_best_rows, sample_rows, Sampler};

use super::active::Active;
use super::{Command, Finish};
use crate::metrics::{EngineGauges, Metrics};

pub(super) struct EngineLoop {
    model: String,
    engine: Engine,
    scheduler: Scheduler,
    metrics: Arc<Metrics>,
    active: HashMap<RequestId, Active>,
    next_id: RequestId,
    /// Whether greedy decode steps are chained (`RunnerConfig::chain_greedy`).
    chain: bool,
    /// A chained step queued on the device and not yet taken: the one after the step taken
    /// last, planned by `Scheduler::schedule_ahead` and running the tokens that step picked
    /// (its own tokens are placeholders). It is taken next, whatever became of its requests.
    queued: Option<StepPlan>,
}

impl EngineLoop {
    pub fn new(
        model: String,
        engine: Engine,
        scheduler: Scheduler,
        metrics: Arc<Metrics>,
        chain: bool,
    ) -> Self {
        Self {
            model,
            engine,
            scheduler,
            metrics,
            active: HashMap::new(),
            next_id: 0,
            chain,
            queued: None,
        }
    }

    /// Runs until every command sender is gone and no request is left.
    pub fn run(mut self, commands: Receiver<Command>) {
        self.publish_gauges();
        loop {
            if self.active.is_empty() && self.queued.is_none() {
                // Idle: sleep until a request arrives.
                match commands.recv() {
                    Ok(cmd) => self.handle(cmd),
                    Err(_) => break,
                }
            }
            loop {
                match commands.try_recv() {
                    Ok(cmd) => self.handle(cmd),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => break,
                }
            }
            self.drop_cancelled();
            if (!self.active.is_empty() || self.queued.is_some()) && !self.step() {
                // NOTE: nothing could be scheduled (cannot happen while the scheduler admits
                // only requests that fit the pool); wait for news rather than spin.
                match commands.recv_timeout(std::time::Duration::from_millis(10)) {
                    Ok(cmd) => self.handle(cmd),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {}
                }
            }
            self.publish_gauges();
        }
        self.metrics.remove_engine(&self.model);
        tracing::debug!(model = %self.model, "runner stopped");
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Submit { request, events } => {
                let id = self.next_id;
                self.next_id += 1;
                let sampler = match Sampler::new(request.params.clone()) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = events.send(super::Event::Error(e.to_string()));
                        return;
                    }
                };
                let active = Active::new(&request, sampler, events);
                match self.scheduler.add(id, request.prompt, request.max_tokens) {
                    Ok(()) => {
                        self.active.insert(id, active);
                    }
                    Err(e) => active.fail(e.to_string()),
                }
            }
        }
    }

    /// Draws the next token of every request whose logits or best candidates `next` holds,
    /// all at once on the CPU's threads (`sample_rows`, `sample_best_rows`).
    fn draw(&mut self, next: &PlanOutput) -> HashMap<RequestId, u32> {
        let sources: HashMap<RequestId, NextToken> = next.iter().collect();
        let scheduler = &self.scheduler;
        let (mut logits_ids, mut logits_work) = (Vec::new(), Vec::new());
        let (mut best_ids, mut best_work) = (Vec::new(), Vec::new());
        for (&id, active) in self.active.iter_mut() {
            let (Some(source), Some(history)) = (sources.get(&id), scheduler.tokens(id)) else {
                continue;
            };
            match *source {
                NextToken::Logits(row) => {
                    logits_ids.push(id);
                    logits_work.push((active.sampler_mut(), row, history));
                }
                NextToken::Best(best) => {
                    best_ids.push(id);
                    best_work.push((active.sampler_mut(), best, history));
                }
                NextToken::Picked(_) => {}
            }
        }
        let mut drawn: HashMap<RequestId, u32> = logits_ids
            .into_iter()
            .zip(sample_rows(&mut logits_work))
            .collect();
        drawn.extend(best_ids.into_iter().zip(sample_best_rows(&mut best_work)));
        drawn
    }

    /// Ends requests whose client has gone away, returning their blocks to the pool.
    fn drop_cancelled(&mut self) {
        let gone: Vec<RequestId> = self
            .active
            .iter()
            .filter(|(_, a)| a.is_cancelled())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            self.scheduler.abort(id);
            self.active.remove(&id);
            self.metrics.cancelled.fetch_add(1, Relaxed);
            tracing::info!(model = %self.model, request = id, "client went away; request cancelled");
        }
    }

    /// One engine step: plan, forward, sample, update, send. Returns whether anything ran.
    fn step(&mut self) -> bool {
        let Some((plan, next)) = self.forward_next() else {
            return false;
        };
        let next = match next {
            Ok(out) => out,
            Err(e) => {
                self.fail_plan(&plan, &e.to_string());
                return true;
            }
        };
        let tokenizer = self.engine.tokenizer.clone();
        let drawn = self.draw(&next);
        let mut sampled = Vec::with_capacity(next.len());
        for (id, source) in next.iter() {
            let (Some(active), Some(_)) = (self.active.get_mut(&id), self.scheduler.tokens(id))
            else {
                continue;
            };
            let token = match source {
                NextToken::Picked(t) => t,
                // NOTE: a greedy request in a top-k step gets its best candidate from `draw`.
                NextToken::Best(_) | NextToken::Logits(_) => match drawn.get(&id) {
                    Some(&t) => t,
                    None => continue,
                },
            };
            let s = active.take(&tokenizer, token, source);
            if let Some(d) = s.inter_token {
                self.metrics.inter_token.observe(d);
            } else {
                self.metrics.ttft.observe(active.age());
            }
            sampled.push((id, s.token, s.stop));
        }
        self.engine.recycle(next);
        let finished = self.scheduler.update(&plan, &sampled);
        for &(id, _, _) in &sampled {
            let still_running = !finished.iter().any(|f| f.0 == id);
            if still_running {
                if let Some(active) = self.active.get_mut(&id) {
                    // A failed send means the client is gone; dropped before the next step.
                    active.flush();
                }
            }
        }
        for (id, reason) in finished {
            let Some(active) = self.active.remove(&id) else {
                continue;
            };
            let by_string = sampled
                .iter()
                .any(|&(s, token, stop)| s == id && stop && !tokenizer.is_eog(token));
            let finish = match reason {
                scheduler::FinishReason::Length => Finish::Length,
                _ => Finish::Stop,
            };
            let summary = active.finish(finish, by_string);
            self.metrics
                .prompt_tokens
                .fetch_add(summary.n_prompt as u64, Relaxed);
            self.metrics
                .generated_tokens
                .fetch_add(summary.n_generated as u64, Relaxed);
        }
        true
    }

    /// The next step's plan and what its forward pass brought back: the step queued ahead if
    /// there is one, else a new plan; `None` when nothing could be scheduled.
    ///
    /// With chaining, a step where every request decodes greedily is queued without waiting
    /// for its tokens, and so is the step after it, which runs those tokens on the device,
    /// before the first one's tokens are taken: the device runs the second while the host
    /// sends the first's tokens and queues the third.
    fn forward_next(&mut self) -> Option<(StepPlan, Result<PlanOutput, EngineError>)> {
        let (plan, chained) = match self.queued.take() {
            Some(plan) => (plan, true),
            None => {
                let plan = self.scheduler.schedule();
                self.metrics
                    .preemptions
                    .fetch_add(plan.preempted.len() as u64, Relaxed);
                if plan.seqs.is_empty() {
                    return None;
                }
                self.note_first_scheduled(&plan);
                let chained = self.chainable(&plan);
                if chained {
                    if let Err(e) = self.engine.queue_plan_chained(&plan, false) {
                        return Some((plan, Err(e)));
                    }
                }
                (plan, chained)
            }
        };
        if !chained {
            let out = self.forward(&plan);
            return Some((plan, out));
        }
        let queued_ahead = match self.scheduler.schedule_ahead(&plan) {
            Some(ahead) => self.engine.queue_plan_chained(&ahead, true).map(|()| {
                self.metrics.chained_steps.fetch_add(1, Relaxed);
                self.queued = Some(ahead);
            }),
            None => Ok(()),
        };
        let out = match (self.engine.take_plan_chained(&plan), queued_ahead) {
            (Ok(out), Err(e)) => {
                self.engine.recycle(out);
                Err(e)
            }
            (out, _) => out,
        };
        Some((plan, out))
    }

    /// Whether `plan` runs as a chained step: chaining is on and every request in it decodes
    /// one token greedily, its pick left to the device (`Active::takes_argmax`).
    fn chainable(&self, plan: &StepPlan) -> bool {
        self.chain
            && plan.seqs.iter().all(|s| {
                s.tokens.len() == 1
                    && s.sample
                    && self.active.get(&s.id).is_some_and(Active::takes_argmax)
            })
    }

    /// Runs `plan`'s forward pass, bringing back the least its sampling requests need: greedy
    /// requests without penalties or logprobs only need each row's argmax, which the device
    /// finds; requests that draw with a small top-k (and greedy ones), with penalties that only
    /// lower logits or none, only need each row's best candidates, which the device selects
    /// (`Sampler::best_needed`). One request that needs more makes the whole step
    /// bring back logits.
    fn forward(&mut self, plan: &StepPlan) -> Result<PlanOutput, EngineError> {
        let sampling: Vec<&Active> = plan
            .seqs
            .iter()
            .filter(|s| s.sample)
            .filter_map(|s| self.active.get(&s.id))
            .collect();
        if sampling.iter().all(|a| a.takes_argmax()) {
            return self.engine.run_plan_argmax(plan);
        }
        let best: Option<Vec<usize>> = sampling.iter().map(|a| a.best_needed()).collect();
        match best.and_then(|ks| ks.into_iter().max()) {
            Some(k) => self.engine.run_plan_best(plan, k),
            None => self.engine.run_plan(plan),
        }
    }

    /// Records, for requests running for the first time, when they started and what the
    /// prefix cache gave them.
    fn note_first_scheduled(&mut self, plan: &StepPlan) {
        let now = Instant::now();
        for seq in &plan.seqs {
            let Some(active) = self.active.get_mut(&seq.id) else {
                continue;
            };
            if active.first_scheduled.is_none() {
                active.first_scheduled = Some(now);
                let cached = self.scheduler.cached_tokens(seq.id).unwrap_or(0);
                active.n_cached = cached;
                if cached > 0 {
                    self.metrics.prefix_cache_hits.fetch_add(1, Relaxed);
                    self.metrics
                        .prefix_cache_hit_tokens
                        .fetch_add(cached as u64, Relaxed);
                }
            }
        }
    }

    /// A forward pass failed: the requests in it end with the error; others go on.
    fn fail_plan(&mut self, plan: &StepPlan, message: &str) {
        tracing::error!(model = %self.model, error = message, "engine step failed");
        for seq in &plan.seqs {
            self.scheduler.abort(seq.id);
            if let Some(active) = self.active.remove(&seq.id) {
                active.fail(format!("the engine failed: {message}"));
            }
        }
    }

    fn publish_gauges(&self) {
        let pool = self.scheduler.pool();
        self.metrics.set_engine(
            &self.model,
            EngineGauges {
                waiting: self.scheduler.n_waiting(),
                running: self.scheduler.n_running(),
                kv_blocks_used: pool.n_blocks() - pool.n_free(),
                kv_blocks_free: pool.n_free(),
            },
        );
    }
}
