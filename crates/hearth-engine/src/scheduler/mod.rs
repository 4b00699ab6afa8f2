//! The request scheduler: which requests run in the next step, and how many of their tokens.
//!
//! Pure logic over plain data (token ids, counts, block ids): no model, no device. One engine
//! step is three calls:
//!
//! ```text
//!   plan = scheduler.schedule()      pick tokens under the budget, reserve their KV blocks
//!   out  = runner.execute(&plan)     one batched forward; sample where `seq.sample`
//!   scheduler.update(&plan, &out)    advance computed counts, append tokens, finish requests
//! ```
//!
//! Every request has `computed` (tokens whose KV is written) and `target` (prompt plus
//! generated tokens) counts; a step hands each request `target - computed` tokens or what is
//! left of the token budget. That one rule is chunked prefill, decode and continuous batching:
//!
//! ```text
//!   max_batch_tokens = 8, max_seqs = 3, block_size = 4
//!
//!   running (arrival order)        computed/target   this step         sample?
//!     A  decoding                  20 / 21           1 token  @20      yes
//!     B  long prompt, chunk 2      4 / 30            7 tokens @4..11   no  (budget spent)
//!   waiting (FIFO)
//!     C  prompt of 6               -                 not admitted (budget 0)
//!
//!   next step: A 1 token, B 7 more (11..18); C waits until the budget allows.
//!
//!   blocks short for B?  preempt the most recently admitted running request:
//!     release its blocks, computed = 0, keep its generated tokens, push it to the FRONT of
//!     waiting, list it in plan.preempted, and retry B's reservation.
//! ```
//!
//! On admission a request adopts the cached blocks of its prompt prefix (its own earlier
//! tokens, after a preemption), so only the rest is computed; [`Scheduler::update`] registers
//! newly full blocks so later requests can share them.

mod ahead;
mod request;
mod step;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};

use hearth_kv::BlockPool;

pub use ahead::NOT_YET_KNOWN;
use request::Request;

/// Caller-chosen identifier of a request, unique among the live ones.
pub type RequestId = u64;

/// Limits of one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Most tokens (over all sequences) in one step. Values below 1 count as 1.
    pub max_batch_tokens: usize,
    /// Most sequences in one step, and most requests running at once. Values below 1 count as 1.
    pub max_seqs: usize,
}

/// One sequence's share of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledSeq {
    /// The request these tokens belong to.
    pub id: RequestId,
    /// Position of `tokens[0]` in the sequence (= tokens already computed).
    pub first_pos: usize,
    /// The tokens to run, at positions `first_pos..first_pos + tokens.len()`.
    pub tokens: Vec<u32>,
    /// The request's physical KV blocks, covering at least `first_pos + tokens.len()` slots.
    pub block_table: Vec<u32>,
    /// This chunk reaches the end of the sequence: sample the next token from its last row.
    pub sample: bool,
}

/// What one step runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// Sequences to run, each request at most once.
    pub seqs: Vec<ScheduledSeq>,
    /// Requests that lost their KV blocks this step; they wait and recompute later.
    pub preempted: Vec<RequestId>,
}

impl StepPlan {
    /// Tokens in the plan, over all sequences.
    pub fn n_tokens(&self) -> usize {
        self.seqs.iter().map(|s| s.tokens.len()).sum()
    }
}

/// Why a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// It generated `max_new_tokens` tokens.
    Length,
    /// The caller said its last token ends it (EOS or a stop string).
    Stop,
    /// It was cut off: the step it was sampled in returned no token for it.
    Aborted,
}

/// Why [`Scheduler::add`] refused a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError {
    #[error("request {id}: the prompt is empty")]
    EmptyPrompt { id: RequestId },
    #[error("request {id}: max_new_tokens is 0")]
    NoNewTokens { id: RequestId },
    #[error("request {id}: an active request already has this id")]
    DuplicateId { id: RequestId },
    #[error(
        "request {id}: prompt plus max_new_tokens need {n_tokens} KV slots but the pool holds {capacity}"
    )]
    TooLong {
        id: RequestId,
        n_tokens: usize,
        capacity: usize,
    },
}

/// Decides every step's batch and owns the KV block pool's bookkeeping.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    pool: BlockPool,
    /// Requests not holding blocks, admitted front first.
    waiting: VecDeque<RequestId>,
    /// Requests holding blocks, in admission order (the last is preempted first).
    running: Vec<RequestId>,
    requests: HashMap<RequestId, Request>,
}

impl Scheduler {
    /// A scheduler with no requests over `pool` (all of whose blocks it may hand out).
    pub fn new(config: SchedulerConfig, pool: BlockPool) -> Self {
        // NOTE: a zero limit would make every step empty and no request could ever finish.
        let config = SchedulerConfig {
            max_batch_tokens: config.max_batch_tokens.max(1),
            max_seqs: config.max_seqs.max(1),
        };
        Self {
            config,
            pool,
            waiting: VecDeque::new(),
            running: Vec::new(),
            requests: HashMap::new(),
        }
    }

    /// Queues a request at the back of the waiting line.
    ///
    /// Refused: an empty prompt, `max_new_tokens == 0`, an id already in use, or a request
    /// whose longest possible sequence does not fit the whole pool (it could never finish).
    pub fn add(
        &mut self,
        id: RequestId,
        prompt: Vec<u32>,
        max_new_tokens: usize,
    ) -> Result<(), SchedulerError> {
        if prompt.is_empty() {
            return Err(SchedulerError::EmptyPrompt { id });
        }
        if max_new_tokens == 0 {
            return Err(SchedulerError::NoNewTokens { id });
        }
        if self.requests.contains_key(&id) {
            return Err(SchedulerError::DuplicateId { id });
        }
        // NOTE: the last sampled token is never run, so its KV slot is never needed.
        let n_tokens = prompt.len().saturating_add(max_new_tokens - 1);
        let capacity = self.pool.n_blocks() * self.pool.block_size();
        if n_tokens > capacity {
            return Err(SchedulerError::TooLong {
                id,
                n_tokens,
                capacity,
            });
        }
        self.requests
            .insert(id, Request::new(prompt, max_new_tokens));
        self.waiting.push_back(id);
        Ok(())
    }

    /// Ends request `id` now and frees its blocks. Returns whether it was active.
    pub fn abort(&mut self, id: RequestId) -> bool {
        let Some(mut req) = self.requests.remove(&id) else {
            return false;
        };
        req.table.release_all(&mut self.pool);
        self.waiting.retain(|&w| w != id);
        self.running.retain(|&r| r != id);
        true
    }

    /// Requests waiting for admission (new or preempted).
    pub fn n_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Requests holding KV blocks.
    pub fn n_running(&self) -> usize {
        self.running.len()
    }

    /// Tokens request `id` took from the prefix cache at its latest admission (0 before it is
    /// admitted); `None` for an unknown or finished request.
    pub fn cached_tokens(&self, id: RequestId) -> Option<usize> {
        self.requests.get(&id).map(|r| r.cached_tokens)
    }

    /// Tokens of request `id` so far, prompt then generated; `None` when unknown or finished.
    pub fn tokens(&self, id: RequestId) -> Option<&[u32]> {
        self.requests.get(&id).map(|r| r.tokens.as_slice())
    }

    /// The KV block pool.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// The step limits in force.
    pub fn config(&self) -> SchedulerConfig {
        self.config
    }
}
