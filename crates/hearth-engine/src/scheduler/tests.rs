//! Scheduler tests over plain data: a fake runner "samples" a token that is a pure function of
//! the sequence so far, so any schedule (chunked, preempted, cached) must yield the same tokens.

use std::collections::{HashMap, HashSet};

use hearth_kv::BlockPool;

use super::*;

fn scheduler(
    n_blocks: usize,
    block_size: usize,
    max_batch_tokens: usize,
    max_seqs: usize,
) -> Scheduler {
    let config = SchedulerConfig {
        max_batch_tokens,
        max_seqs,
    };
    Scheduler::new(config, BlockPool::new(n_blocks, block_size))
}

/// The fake model: the next token after `tokens` (an FNV-style hash of the whole sequence).
fn next_token(tokens: &[u32]) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &t in tokens {
        h = (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3);
    }
    (h % 1000) as u32
}

/// What a request must generate regardless of scheduling: `max_new` tokens, or fewer when
/// `stop` says a token ends it.
fn reference(prompt: &[u32], max_new: usize, stop: impl Fn(u32) -> bool) -> Vec<u32> {
    let mut tokens = prompt.to_vec();
    for _ in 0..max_new {
        let t = next_token(&tokens);
        tokens.push(t);
        if stop(t) {
            break;
        }
    }
    tokens
}

/// Fake KV storage: which (position, token) each slot holds. Checks that every sequence reads
/// back exactly its own earlier tokens, then writes the new ones.
struct FakeKv {
    slots: Vec<Option<(usize, u32)>>,
    block_size: usize,
}

impl FakeKv {
    fn new(s: &Scheduler) -> Self {
        let bs = s.pool().block_size();
        Self {
            slots: vec![None; s.pool().n_blocks() * bs],
            block_size: bs,
        }
    }

    fn slot(&self, seq: &ScheduledSeq, pos: usize) -> usize {
        seq.block_table[pos / self.block_size] as usize * self.block_size + pos % self.block_size
    }

    /// Runs `seq`: checks its prefix in the cache against `history` (the request's tokens).
    fn run(&mut self, seq: &ScheduledSeq, history: &[u32]) {
        assert_eq!(
            &history[seq.first_pos..seq.first_pos + seq.tokens.len()],
            &seq.tokens[..]
        );
        for (pos, &tok) in history.iter().enumerate().take(seq.first_pos) {
            let got = self.slots[self.slot(seq, pos)];
            assert_eq!(got, Some((pos, tok)), "request {} pos {pos} KV", seq.id);
        }
        for (k, &tok) in seq.tokens.iter().enumerate() {
            let pos = seq.first_pos + k;
            let slot = self.slot(seq, pos);
            self.slots[slot] = Some((pos, tok));
        }
    }
}

/// One step with the fake model; `stop` decides which sampled tokens end a request.
fn step(
    s: &mut Scheduler,
    kv: &mut FakeKv,
    stop: &dyn Fn(u32) -> bool,
) -> (StepPlan, Vec<(RequestId, FinishReason)>) {
    let plan = s.schedule();
    let (finished, _) = run_step(s, kv, stop, &plan);
    (plan, finished)
}

/// A sampled token: its request, the token, whether it ends the request.
type Sampled = (RequestId, u32, bool);

/// Runs `plan` with the fake model and updates the scheduler; returns what ended and what
/// was sampled. A row whose request is gone (ended or aborted after a step planned ahead was
/// queued) still writes its slot, as a queued step on a device does: garbage the slot's next
/// owner must overwrite before reading it.
fn run_step(
    s: &mut Scheduler,
    kv: &mut FakeKv,
    stop: &dyn Fn(u32) -> bool,
    plan: &StepPlan,
) -> (Vec<(RequestId, FinishReason)>, Vec<Sampled>) {
    let mut sampled = Vec::new();
    for seq in &plan.seqs {
        let Some(history) = s.tokens(seq.id).map(<[u32]>::to_vec) else {
            let slot = kv.slot(seq, seq.first_pos);
            kv.slots[slot] = Some((usize::MAX, u32::MAX));
            continue;
        };
        kv.run(seq, &history);
        if seq.sample {
            let t = next_token(&history);
            sampled.push((seq.id, t, stop(t)));
        }
    }
    (s.update(plan, &sampled), sampled)
}

/// [`step`] as the server runs greedy decoding with chained steps: the step after this one
/// is planned before this one runs (`Scheduler::schedule_ahead`), left in `ahead` with the
/// tokens this one picked, and runs next instead of a fresh plan.
fn chained_step(
    s: &mut Scheduler,
    kv: &mut FakeKv,
    stop: &dyn Fn(u32) -> bool,
    ahead: &mut Option<StepPlan>,
) -> (StepPlan, Vec<(RequestId, FinishReason)>) {
    let plan = ahead.take().unwrap_or_else(|| s.schedule());
    let mut next = s.schedule_ahead(&plan);
    let (finished, sampled) = run_step(s, kv, stop, &plan);
    if let Some(next) = &mut next {
        for seq in &mut next.seqs {
            assert_eq!(seq.tokens, [NOT_YET_KNOWN]);
            if let Some(&(_, t, _)) = sampled.iter().find(|x| x.0 == seq.id) {
                seq.tokens = vec![t];
            }
        }
    }
    *ahead = next;
    (plan, finished)
}

fn never(_: u32) -> bool {
    false
}

fn tokens_of(plan: &StepPlan, id: RequestId) -> Option<usize> {
    plan.seqs
        .iter()
        .find(|q| q.id == id)
        .map(|q| q.tokens.len())
}

/// Steps until every request ends; returns each request's final tokens.
fn drain(s: &mut Scheduler, kv: &mut FakeKv, max_steps: usize) -> HashMap<RequestId, Vec<u32>> {
    let mut done = HashMap::new();
    for _ in 0..max_steps {
        if s.n_running() + s.n_waiting() == 0 {
            return done;
        }
        let live: Vec<_> = s
            .requests
            .iter()
            .map(|(&id, r)| (id, r.tokens.clone()))
            .collect();
        let (_, finished) = step(s, kv, &never);
        for (id, _) in finished {
            let mut t = live.iter().find(|l| l.0 == id).unwrap().1.clone();
            t.push(next_token(&t));
            done.insert(id, t);
        }
    }
    panic!("requests did not finish in {max_steps} steps");
}

#[test]
fn long_prompt_is_chunked_while_decode_gets_one_token_per_step() {
    let mut s = scheduler(64, 4, 8, 4);
    let mut kv = FakeKv::new(&s);
    s.add(1, vec![1, 2, 3], 50).unwrap();
    let (plan, _) = step(&mut s, &mut kv, &never);
    assert_eq!(tokens_of(&plan, 1), Some(3));
    assert!(plan.seqs[0].sample);

    s.add(2, (0..30).collect(), 5).unwrap();
    let mut chunks = Vec::new();
    loop {
        let (plan, _) = step(&mut s, &mut kv, &never);
        assert!(plan.n_tokens() <= 8);
        assert_eq!(
            tokens_of(&plan, 1),
            Some(1),
            "decode gets 1 token every step"
        );
        let seq2 = plan.seqs.iter().find(|q| q.id == 2).unwrap();
        chunks.push((seq2.first_pos, seq2.tokens.len(), seq2.sample));
        if seq2.sample {
            break;
        }
    }
    assert_eq!(
        chunks,
        vec![
            (0, 7, false),
            (7, 7, false),
            (14, 7, false),
            (21, 7, false),
            (28, 2, true)
        ]
    );
    assert_eq!(s.tokens(2).unwrap().len(), 31);
}

#[test]
fn requests_join_and_leave_at_step_boundaries() {
    let mut s = scheduler(64, 4, 32, 4);
    let mut kv = FakeKv::new(&s);
    s.add(1, vec![5; 6], 2).unwrap();
    let (plan, fin) = step(&mut s, &mut kv, &never);
    assert_eq!((plan.seqs.len(), fin.len()), (1, 0));
    s.add(2, vec![6; 3], 3).unwrap();
    // 1 decodes its 2nd token and finishes; 2 joins the same step.
    let (plan, fin) = step(&mut s, &mut kv, &never);
    assert_eq!(plan.seqs.len(), 2);
    assert_eq!(fin, vec![(1, FinishReason::Length)]);
    assert_eq!(s.n_running(), 1);
    assert_eq!(s.cached_tokens(1), None);
    let (plan, _) = step(&mut s, &mut kv, &never);
    assert_eq!(plan.seqs.iter().map(|q| q.id).collect::<Vec<_>>(), vec![2]);
    let (_, fin) = step(&mut s, &mut kv, &never);
    assert_eq!(fin, vec![(2, FinishReason::Length)]);
    assert_eq!(s.tokens(2), None);
    assert_eq!(s.pool().n_free(), 64);
}

#[test]
fn stop_token_finishes_and_frees() {
    let mut s = scheduler(16, 4, 32, 4);
    let mut kv = FakeKv::new(&s);
    s.add(7, vec![1, 2, 3, 4, 5], 50).unwrap();
    let (_, fin) = step(&mut s, &mut kv, &|_| true);
    assert_eq!(fin, vec![(7, FinishReason::Stop)]);
    assert_eq!((s.n_running(), s.pool().n_free()), (0, 16));
}

#[test]
fn missing_sample_aborts_the_request() {
    let mut s = scheduler(16, 4, 32, 4);
    s.add(7, vec![1, 2], 4).unwrap();
    let plan = s.schedule();
    assert_eq!(s.update(&plan, &[]), vec![(7, FinishReason::Aborted)]);
    assert_eq!(s.pool().n_free(), 16);
}

#[test]
fn max_seqs_is_respected() {
    let mut s = scheduler(64, 4, 100, 2);
    let mut kv = FakeKv::new(&s);
    for id in 0..5 {
        s.add(id, vec![id as u32 + 1; 3], 3).unwrap();
    }
    let mut seen = HashSet::new();
    for _ in 0..20 {
        let (plan, _) = step(&mut s, &mut kv, &never);
        assert!(plan.seqs.len() <= 2 && s.n_running() <= 2);
        seen.extend(plan.seqs.iter().map(|q| q.id));
    }
    assert_eq!(seen.len(), 5);
    assert_eq!(s.n_running() + s.n_waiting(), 0);
}

#[test]
fn preempted_request_recomputes_and_generates_the_same_tokens() {
    // 6 blocks of 2 = 12 slots; each request grows to 4 + 6 - 1 = 9 slots (5 blocks).
    let mut s = scheduler(6, 2, 16, 4);
    let mut kv = FakeKv::new(&s);
    s.add(1, vec![1, 2, 3, 4], 6).unwrap();
    s.add(2, vec![9, 8, 7, 6], 6).unwrap();
    let mut preempted = Vec::new();
    let mut done = HashMap::new();
    for step_no in 0..40 {
        if step_no == 1 {
            // Arrives while 1 and 2 hold the pool: it must not jump ahead of a preempted one.
            s.add(3, vec![4, 4], 1).unwrap();
        }
        let running_before = s.running.clone();
        let before: HashMap<_, _> = s
            .requests
            .iter()
            .map(|(&i, r)| (i, r.tokens.clone()))
            .collect();
        let (plan, fin) = step(&mut s, &mut kv, &never);
        if !plan.preempted.is_empty() {
            assert!(plan.seqs.iter().all(|q| !plan.preempted.contains(&q.id)));
            assert_eq!(s.waiting.front(), plan.preempted.last());
            assert!(plan.seqs.iter().all(|q| running_before.contains(&q.id)));
        }
        preempted.extend(plan.preempted);
        for (id, _) in fin {
            let mut t = before[&id].clone();
            t.push(next_token(&t));
            done.insert(id, t);
        }
    }
    assert_eq!(
        preempted.first(),
        Some(&2),
        "the most recently admitted goes first"
    );
    assert_eq!(done[&1], reference(&[1, 2, 3, 4], 6, never));
    assert_eq!(done[&2], reference(&[9, 8, 7, 6], 6, never));
    assert_eq!(done[&3], reference(&[4, 4], 1, never));
    assert_eq!(s.pool().n_free(), 6);
}

#[test]
fn lone_request_that_cannot_fit_is_refused_and_nothing_panics() {
    let mut s = scheduler(2, 4, 16, 4);
    let err = s.add(1, vec![1; 9], 1).unwrap_err();
    assert_eq!(
        err,
        SchedulerError::TooLong {
            id: 1,
            n_tokens: 9,
            capacity: 8
        }
    );
    assert!(matches!(
        s.add(1, vec![1; 4], 6),
        Err(SchedulerError::TooLong { .. })
    ));
    assert_eq!(
        s.add(2, vec![], 1),
        Err(SchedulerError::EmptyPrompt { id: 2 })
    );
    assert_eq!(
        s.add(2, vec![1], 0),
        Err(SchedulerError::NoNewTokens { id: 2 })
    );
    s.add(3, vec![1; 8], 1).unwrap();
    assert_eq!(
        s.add(3, vec![1], 1),
        Err(SchedulerError::DuplicateId { id: 3 })
    );
    let mut kv = FakeKv::new(&s);
    assert_eq!(drain(&mut s, &mut kv, 10).len(), 1);
}

#[test]
fn second_request_with_same_prompt_reuses_cached_blocks() {
    let mut s = scheduler(32, 4, 64, 4);
    let mut kv = FakeKv::new(&s);
    let prompt: Vec<u32> = (100..110).collect();
    s.add(1, prompt.clone(), 10).unwrap();
    let (p1, _) = step(&mut s, &mut kv, &never);
    assert_eq!(s.cached_tokens(1), Some(0));
    s.add(2, prompt.clone(), 10).unwrap();
    let (p2, _) = step(&mut s, &mut kv, &never);
    // 10 tokens: two full blocks (8 tokens) are shared; the rest is recomputed.
    assert_eq!(s.cached_tokens(2), Some(8));
    let seq2 = p2.seqs.iter().find(|q| q.id == 2).unwrap();
    assert_eq!((seq2.first_pos, seq2.tokens.len()), (8, 2));
    assert_eq!(seq2.block_table[..2], p1.seqs[0].block_table[..2]);
    for &b in &seq2.block_table[..2] {
        assert_eq!(s.pool().ref_count(b), 2);
    }
    assert_ne!(seq2.block_table[2], p1.seqs[0].block_table[2]);
    let done = drain(&mut s, &mut kv, 50);
    assert_eq!(done[&1], done[&2]);
    assert_eq!(done[&1], reference(&prompt, 10, never));
}

#[test]
fn abort_frees_blocks() {
    let mut s = scheduler(16, 4, 64, 4);
    s.add(1, vec![1; 10], 4).unwrap();
    s.add(2, vec![2; 5], 4).unwrap();
    let _plan = s.schedule();
    assert!(s.pool().n_free() < 16);
    assert!(s.abort(1));
    assert!(!s.abort(1));
    assert_eq!(s.n_running(), 1);
    s.add(3, vec![3; 3], 4).unwrap();
    assert!(s.abort(3), "waiting requests can be aborted too");
    assert!(s.abort(2));
    assert_eq!(
        (s.pool().n_free(), s.n_running(), s.n_waiting()),
        (16, 0, 0)
    );
    assert!(!s.abort(99));
}

#[test]
fn update_skips_sequences_of_aborted_requests() {
    let mut s = scheduler(16, 4, 64, 4);
    s.add(1, vec![1; 3], 4).unwrap();
    s.add(2, vec![2; 3], 4).unwrap();
    let plan = s.schedule();
    s.abort(1);
    let fin = s.update(&plan, &[(1, 5, false), (2, 6, false)]);
    assert!(fin.is_empty());
    assert_eq!(s.tokens(2), Some(&[2, 2, 2, 6][..]));
}

/// xorshift64*: a tiny deterministic generator for the randomized test.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

/// Every block's ref count equals the number of running tables that hold it.
fn check_pool(s: &Scheduler) {
    let mut owners = vec![0u32; s.pool().n_blocks()];
    for id in &s.running {
        for &b in s.requests[id].table.blocks() {
            owners[b as usize] += 1;
        }
    }
    for id in &s.waiting {
        assert!(
            s.requests[id].table.blocks().is_empty(),
            "waiting {id} holds blocks"
        );
    }
    for (b, &n) in owners.iter().enumerate() {
        assert_eq!(s.pool().ref_count(b as u32), n, "block {b}");
    }
}

#[test]
fn random_workloads_keep_invariants_and_finish() {
    let (n_preempted, n_cached, _) = random_workloads(false);
    // NOTE: the workload must really exercise preemption and the prefix cache.
    assert!(n_preempted > 100, "only {n_preempted} preemptions");
    assert!(n_cached > 100, "only {n_cached} cached tokens");
}

#[test]
fn random_workloads_with_steps_planned_ahead_generate_the_same_tokens() {
    let (n_preempted, n_cached, n_ahead) = random_workloads(true);
    assert!(n_preempted > 100, "only {n_preempted} preemptions");
    assert!(n_cached > 100, "only {n_cached} cached tokens");
    assert!(n_ahead > 1000, "only {n_ahead} steps planned ahead");
}

/// 200 random workloads (requests arriving, aborted, stopping early, a pool small enough to
/// preempt), each request's tokens checked against the fake model's; `chained`: run as
/// [`chained_step`] does. Returns the preemptions, the cached tokens and the steps planned
/// ahead.
fn random_workloads(chained: bool) -> (usize, usize, usize) {
    let (mut n_preempted, mut n_cached, mut n_ahead) = (0, 0, 0);
    for seed in 1..=200u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let (bs, n_blocks) = (1 + rng.below(4), 4 + rng.below(12));
        let (budget, max_seqs) = (1 + rng.below(16), 1 + rng.below(4));
        let mut s = scheduler(n_blocks, bs, budget, max_seqs);
        let mut kv = FakeKv::new(&s);
        let capacity = n_blocks * bs;
        // Stop on a token value class chosen per seed, so some requests end early.
        let stop_mod = 3 + rng.below(40) as u32;
        let stop = move |t: u32| t.is_multiple_of(stop_mod);
        let mut expected = HashMap::new();
        let mut finished = HashMap::new();
        let (n_requests, mut next_id) = (12, 0u64);
        let prompts = [vec![1, 2, 3, 4, 5, 6, 7, 8], vec![9, 9, 9, 9, 9]];
        let mut ahead = None;
        for step_no in 0..5000 {
            if next_id < n_requests && rng.below(3) == 0 {
                let len = 1 + rng.below(capacity.min(12));
                // Shared prefixes half the time, to exercise the prefix cache.
                let mut prompt: Vec<u32> = prompts[rng.below(2)]
                    .iter()
                    .copied()
                    .cycle()
                    .take(len)
                    .collect();
                if rng.below(2) == 0 {
                    prompt = (0..len).map(|_| rng.below(50) as u32).collect();
                }
                let max_new = 1 + rng.below(capacity + 1 - len);
                s.add(next_id, prompt.clone(), max_new).unwrap();
                expected.insert(next_id, reference(&prompt, max_new, stop));
                next_id += 1;
            }
            if next_id > 0 && rng.below(50) == 0 {
                let victim = rng.below(next_id as usize) as u64;
                if s.abort(victim) {
                    expected.remove(&victim);
                }
            }
            let running_before = s.running.clone();
            let live: HashMap<_, _> = s
                .requests
                .iter()
                .map(|(&i, r)| (i, r.tokens.clone()))
                .collect();
            let (plan, fin) = if chained {
                chained_step(&mut s, &mut kv, &stop, &mut ahead)
            } else {
                step(&mut s, &mut kv, &stop)
            };
            n_ahead += usize::from(ahead.is_some());
            assert!(
                plan.n_tokens() <= budget,
                "seed {seed} step {step_no}: budget"
            );
            assert!(plan.seqs.len() <= max_seqs && s.n_running() <= max_seqs);
            let ids: HashSet<_> = plan.seqs.iter().map(|q| q.id).collect();
            assert_eq!(
                ids.len(),
                plan.seqs.len(),
                "seed {seed}: a request scheduled twice"
            );
            assert!(plan.seqs.iter().all(|q| !q.tokens.is_empty()));
            if s.n_running() + s.n_waiting() > 0 {
                assert!(
                    !plan.seqs.is_empty() || !plan.preempted.is_empty(),
                    "seed {seed}: stalled"
                );
            }
            check_pool(&s);
            if !plan.preempted.is_empty() {
                // No admissions in a step that had to preempt.
                assert!(plan
                    .seqs
                    .iter()
                    .all(|q| running_before.contains(&q.id) && !plan.preempted.contains(&q.id)));
            }
            n_preempted += plan.preempted.len();
            n_cached += plan
                .seqs
                .iter()
                .filter_map(|q| s.cached_tokens(q.id))
                .sum::<usize>();
            for (id, reason) in fin {
                let mut t = live[&id].clone();
                t.push(next_token(&t));
                assert_ne!(reason, FinishReason::Aborted);
                finished.insert(id, t);
            }
            if next_id == n_requests && s.n_running() + s.n_waiting() == 0 {
                break;
            }
        }
        assert_eq!(
            s.n_running() + s.n_waiting(),
            0,
            "seed {seed}: requests left unfinished"
        );
        assert_eq!(s.pool().n_free(), n_blocks, "seed {seed}: blocks leaked");
        for (id, want) in &expected {
            assert_eq!(finished.get(id), Some(want), "seed {seed} request {id}");
        }
    }
    (n_preempted, n_cached, n_ahead)
}

#[test]
fn planning_twice_without_update_reserves_nothing_twice() {
    let mut s = scheduler(16, 4, 6, 4);
    let mut kv = FakeKv::new(&s);
    s.add(1, (0..9).collect(), 3).unwrap();
    s.add(2, vec![7; 3], 3).unwrap();
    let first = s.schedule();
    let free = s.pool().n_free();
    let second = s.schedule();
    assert_eq!(first, second);
    assert_eq!(s.pool().n_free(), free);
    // Only one of the two identical plans may advance the requests.
    for seq in &second.seqs {
        assert!(!seq.sample);
        kv.run(seq, s.tokens(seq.id).unwrap());
    }
    assert_eq!(s.update(&second, &[]), vec![]);
    assert_eq!(s.update(&first, &[]), vec![]);
    let done = drain(&mut s, &mut kv, 20);
    assert_eq!(done[&1], reference(&(0..9).collect::<Vec<_>>(), 3, never));
    assert_eq!(done[&2], reference(&[7; 3], 3, never));
}

#[test]
fn steps_are_planned_ahead_only_for_decodes_that_go_on() {
    let mut s = scheduler(4, 4, 16, 4);
    let mut kv = FakeKv::new(&s);
    s.add(1, vec![5; 3], 3).unwrap();
    // The prompt's step has three rows of one request: nothing to plan ahead of it.
    let (prompt, _) = step(&mut s, &mut kv, &never);
    assert_eq!(s.schedule_ahead(&prompt), None);
    let plan = s.schedule();
    assert_eq!((plan.seqs[0].first_pos, plan.seqs[0].tokens.len()), (3, 1));
    let free = s.pool().n_free();
    // A request arrives: it goes first.
    s.add(2, vec![6; 2], 2).unwrap();
    assert_eq!(s.schedule_ahead(&plan), None);
    assert!(s.abort(2));
    // Position 4 needs a second block; asking twice reserves it once.
    let ahead = s.schedule_ahead(&plan).expect("one decode going on");
    assert_eq!(s.schedule_ahead(&plan), Some(ahead.clone()));
    assert_eq!(s.pool().n_free(), free - 1);
    assert_eq!(ahead.seqs.len(), 1);
    let seq = &ahead.seqs[0];
    assert_eq!((seq.id, seq.first_pos, seq.sample), (1, 4, true));
    assert_eq!(
        (seq.tokens.as_slice(), seq.block_table.len()),
        (&[NOT_YET_KNOWN][..], 2)
    );
    // After this step the request has two tokens of three: the one after it ends it, so
    // nothing is planned ahead of the planned step.
    let (_, sampled) = run_step(&mut s, &mut kv, &never, &plan);
    assert_eq!(s.schedule_ahead(&ahead), None);
    // Once the planned step has run with the picked token, the request ends by length.
    let mut ahead = ahead;
    ahead.seqs[0].tokens = vec![sampled[0].1];
    let (finished, _) = run_step(&mut s, &mut kv, &never, &ahead);
    assert_eq!(finished, vec![(1, FinishReason::Length)]);
    assert_eq!(s.pool().n_free(), 4);
}

#[test]
fn no_step_is_planned_ahead_when_the_pool_would_have_to_preempt() {
    let mut s = scheduler(2, 2, 16, 4);
    let mut kv = FakeKv::new(&s);
    s.add(1, vec![5], 3).unwrap();
    s.add(2, vec![6], 3).unwrap();
    step(&mut s, &mut kv, &never);
    let plan = s.schedule();
    assert_eq!(plan.seqs.len(), 2);
    // Position 2 needs a second block for each, and the pool has none left.
    assert_eq!(s.pool().n_free(), 0);
    assert_eq!(s.schedule_ahead(&plan), None);
    assert_eq!(s.update(&plan, &[(1, 7, false), (2, 8, false)]), vec![]);
}
