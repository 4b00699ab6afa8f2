//! Randomized test: many sequences sharing prompt prefixes on a small pool, with a
//! simulated KV store that records which token was written into each slot.

use crate::{hash_block, BlockId, BlockPool, BlockTable};

/// xorshift64*: a tiny deterministic generator, enough to drive the simulation.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

struct Seq {
    table: BlockTable,
    /// Tokens whose KV this sequence has written (or adopted).
    tokens: Vec<u32>,
}

struct Sim {
    pool: BlockPool,
    /// [n_blocks * block_size] the token each slot's KV was computed for.
    slots: Vec<Option<u32>>,
    seqs: Vec<Seq>,
    rng: Rng,
    templates: Vec<Vec<u32>>,
}

impl Sim {
    fn new(seed: u64, n_blocks: usize, bs: usize) -> Self {
        let mut rng = Rng(seed | 1);
        let templates = (0..4)
            .map(|_| (0..40).map(|_| rng.below(6) as u32).collect())
            .collect();
        Self {
            pool: BlockPool::new(n_blocks, bs),
            slots: vec![None; n_blocks * bs],
            seqs: Vec::new(),
            rng,
            templates,
        }
    }

    fn write(&mut self, i: usize, new: &[u32]) {
        let bs = self.pool.block_size();
        let seq = &mut self.seqs[i];
        for &t in new {
            let pos = seq.tokens.len();
            self.slots[seq.table.slot_index(pos, bs)] = Some(t);
            seq.tokens.push(t);
        }
        seq.table.cache_full_blocks(&mut self.pool, &seq.tokens);
    }

    fn start(&mut self) {
        let k = self.rng.below(self.templates.len());
        let len = 1 + self.rng.below(40);
        let mut prompt = self.templates[k][..len].to_vec();
        for _ in 0..self.rng.below(6) {
            prompt.push(self.rng.below(6) as u32);
        }
        let mut table = BlockTable::new();
        let expected = self.pool.cached_prefix_len(&prompt);
        let n = table.adopt_cached_prefix(&mut self.pool, &prompt);
        assert_eq!(n, expected);
        assert!(n < prompt.len());
        // The adopted blocks must hold exactly this prompt's KV.
        for (pos, &t) in prompt[..n].iter().enumerate() {
            let slot = table.slot_index(pos, self.pool.block_size());
            assert_eq!(
                self.slots[slot],
                Some(t),
                "adopted slot {slot} has foreign KV"
            );
        }
        if table.reserve(&mut self.pool, prompt.len() - n).is_err() {
            table.release_all(&mut self.pool);
            return;
        }
        self.seqs.push(Seq {
            table,
            tokens: prompt[..n].to_vec(),
        });
        let i = self.seqs.len() - 1;
        self.write_reserved(i, &prompt[n..]);
    }

    /// Writes tokens whose slots were already reserved.
    fn write_reserved(&mut self, i: usize, new: &[u32]) {
        self.write(i, new);
        assert_eq!(self.seqs[i].table.n_tokens(), self.seqs[i].tokens.len());
    }

    fn step(&mut self, i: usize) {
        let n_new = 1 + self.rng.below(5);
        let new: Vec<u32> = (0..n_new).map(|_| self.rng.below(6) as u32).collect();
        let free = self.pool.n_free();
        let needed = self.seqs[i]
            .table
            .blocks_needed(n_new, self.pool.block_size());
        let before = self.seqs[i].table.clone();
        match self.seqs[i].table.reserve(&mut self.pool, n_new) {
            Ok(()) => self.write_reserved(i, &new),
            Err(e) => {
                assert_eq!((e.needed, e.free), (needed, free));
                assert_eq!(
                    self.seqs[i].table, before,
                    "failed reserve changed the table"
                );
                assert_eq!(self.pool.n_free(), free, "failed reserve changed the pool");
            }
        }
    }

    fn truncate(&mut self, i: usize) {
        let bs = self.pool.block_size();
        let seq = &mut self.seqs[i];
        let want = self.rng.below(seq.tokens.len() + 1);
        let kept = seq.table.truncate(&mut self.pool, want);
        assert!(kept <= want && kept + bs > want, "kept {kept} for {want}");
        seq.tokens.truncate(kept);
    }

    fn finish(&mut self, i: usize) {
        let mut seq = self.seqs.swap_remove(i);
        seq.table.release_all(&mut self.pool);
        assert_eq!(seq.table.n_tokens(), 0);
    }

    fn check(&self) {
        self.pool.check_invariants();
        let bs = self.pool.block_size();
        let mut refs = vec![0u32; self.pool.n_blocks()];
        let mut owner_pos: Vec<Option<usize>> = vec![None; self.pool.n_blocks()];
        for seq in &self.seqs {
            let blocks = seq.table.blocks();
            assert_eq!(blocks.len(), seq.table.n_tokens().div_ceil(bs));
            for (i, &id) in blocks.iter().enumerate() {
                refs[id as usize] += 1;
                // A shared block is a hashed full block at the same logical position.
                if let Some(p) = owner_pos[id as usize] {
                    assert_eq!(p, i, "block {id} shared at different positions");
                    assert!(self.pool.block_hash(id).is_some(), "block {id} owned twice");
                }
                owner_pos[id as usize] = Some(i);
            }
            let mut sorted: Vec<BlockId> = blocks.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), blocks.len(), "a table holds a block twice");
            // Every slot still holds this sequence's own token: nobody overwrote it.
            for (pos, &t) in seq.tokens.iter().enumerate() {
                assert_eq!(
                    self.slots[seq.table.slot_index(pos, bs)],
                    Some(t),
                    "pos {pos}"
                );
            }
            // The table's hash chain matches its tokens.
            let mut parent = None;
            for i in 0..seq.table.n_hashed_blocks() {
                parent = Some(hash_block(parent, &seq.tokens[i * bs..(i + 1) * bs]));
            }
            if let Some(last) = seq.table.n_hashed_blocks().checked_sub(1) {
                let id = seq.table.blocks()[last];
                if let Some(h) = self.pool.block_hash(id) {
                    assert_eq!(Some(h), parent);
                }
            }
        }
        for (id, &r) in refs.iter().enumerate() {
            assert_eq!(
                self.pool.ref_count(id as BlockId),
                r,
                "ref count of block {id}"
            );
        }
        let n_free = refs.iter().filter(|&&r| r == 0).count();
        assert_eq!(self.pool.n_free(), n_free);
        let total: u32 = refs.iter().sum();
        let owned: usize = self.seqs.iter().map(|s| s.table.blocks().len()).sum();
        assert_eq!(total as usize, owned);
    }

    fn run(&mut self, n_ops: usize) -> (usize, usize) {
        let (mut adopted, mut shared_max) = (0, 0);
        for _ in 0..n_ops {
            let op = self.rng.below(10);
            if self.seqs.is_empty() || op < 3 {
                let before = self.seqs.len();
                self.start();
                if self.seqs.len() > before {
                    adopted += self.seqs[before].table.n_hashed_blocks();
                }
            } else {
                let i = self.rng.below(self.seqs.len());
                match op {
                    3..=6 => self.step(i),
                    7 => self.truncate(i),
                    _ => self.finish(i),
                }
            }
            self.check();
            let shared = (0..self.pool.n_blocks() as BlockId)
                .filter(|&id| self.pool.ref_count(id) > 1)
                .count();
            shared_max = shared_max.max(shared);
        }
        (adopted, shared_max)
    }
}

#[test]
fn many_sequences_keep_every_invariant() {
    let (mut adopted, mut shared) = (0, 0);
    for seed in 1..=24u64 {
        let mut sim = Sim::new(seed * 0x9e37_79b9, 48, 4);
        let (a, s) = sim.run(1500);
        adopted += a;
        shared = shared.max(s);
        while !sim.seqs.is_empty() {
            sim.finish(0);
            sim.check();
        }
        assert_eq!(sim.pool.n_free(), 48);
    }
    // The workload must actually exercise prefix sharing and reuse.
    assert!(adopted > 1000, "only {adopted} blocks adopted");
    assert!(shared > 3, "at most {shared} blocks shared at once");
}
