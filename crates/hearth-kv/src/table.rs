//! One sequence's block table.

use crate::hash::{hash_block, BlockHash};
use crate::pool::{BlockId, BlockPool};

/// Not enough free blocks for a [`BlockTable::reserve`]; nothing was allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("out of KV blocks: needed {needed}, {free} free")]
pub struct OutOfBlocks {
    /// Blocks the reservation needed.
    pub needed: usize,
    /// Blocks free in the pool at the time.
    pub free: usize,
}

/// One sequence's block table: logical block `i` of the sequence lives in physical block
/// `blocks[i]`, and token `pos` in slot `pos % block_size` of logical block `pos / block_size`.
///
/// Invariants: `blocks.len() == n_tokens.div_ceil(block_size)`; every block but the last
/// is full; the last block, when partial, is owned by this table alone and unhashed, so
/// writing into it never changes a block another sequence or the prefix cache can see.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockTable {
    blocks: Vec<BlockId>,
    n_tokens: usize,
    /// Chained hashes of the first `hashes.len()` full blocks (adopted or registered).
    hashes: Vec<BlockHash>,
}

impl BlockTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Physical block of each logical block.
    pub fn blocks(&self) -> &[BlockId] {
        &self.blocks
    }

    /// Tokens with a reserved slot (computed, or about to be written this step).
    pub fn n_tokens(&self) -> usize {
        self.n_tokens
    }

    /// Leading full blocks whose prefix hash is known (adopted from, or registered in,
    /// the prefix cache).
    pub fn n_hashed_blocks(&self) -> usize {
        self.hashes.len()
    }

    /// Blocks [`BlockTable::reserve`] would allocate for `n_new` more tokens.
    pub fn blocks_needed(&self, n_new: usize, block_size: usize) -> usize {
        self.n_tokens
            .saturating_add(n_new)
            .div_ceil(block_size)
            .saturating_sub(self.blocks.len())
    }

    /// Makes room for `n_new` more tokens, allocating blocks from the pool; all-or-nothing
    /// (on failure nothing changes and `Err(OutOfBlocks { needed, free })` is returned).
    pub fn reserve(&mut self, pool: &mut BlockPool, n_new: usize) -> Result<(), OutOfBlocks> {
        let needed = self.blocks_needed(n_new, pool.block_size());
        if needed > pool.n_free() {
            return Err(OutOfBlocks {
                needed,
                free: pool.n_free(),
            });
        }
        for _ in 0..needed {
            // n_free >= needed was checked above, so allocate cannot fail.
            let id = pool.allocate().expect("free block counted by n_free");
            self.blocks.push(id);
        }
        self.n_tokens += n_new;
        Ok(())
    }

    /// Physical block and offset in it of token `pos`.
    ///
    /// # Panics
    /// If `pos >= n_tokens()` rounded up to whole blocks (an engine bug).
    pub fn slot(&self, pos: usize, block_size: usize) -> (BlockId, usize) {
        (self.blocks[pos / block_size], pos % block_size)
    }

    /// Slot index of token `pos` in a flat `[n_blocks * block_size]` layout:
    /// `blocks[pos / block_size] * block_size + pos % block_size`.
    pub fn slot_index(&self, pos: usize, block_size: usize) -> usize {
        let (block, offset) = self.slot(pos, block_size);
        block as usize * block_size + offset
    }

    /// Drops the tokens past `n_tokens`, releasing blocks no longer needed. Returns the
    /// number of tokens kept: `n_tokens` (or the current count if that is smaller), except
    /// when the cut lands inside a block shared with another sequence. This sequence may
    /// not write into such a block, so it is released too and the tokens of the cut
    /// block before `n_tokens` must be recomputed.
    pub fn truncate(&mut self, pool: &mut BlockPool, n_tokens: usize) -> usize {
        if n_tokens >= self.n_tokens {
            return self.n_tokens;
        }
        let bs = pool.block_size();
        self.release_from(pool, n_tokens.div_ceil(bs));
        self.hashes.truncate(n_tokens / bs);
        self.n_tokens = n_tokens;
        if !n_tokens.is_multiple_of(bs) {
            // The new last block is partial and will be written again.
            let last = *self.blocks.last().expect("n_tokens > 0 keeps a block");
            if pool.ref_count(last) > 1 {
                pool.release(last);
                self.blocks.pop();
                self.n_tokens = self.blocks.len() * bs;
            } else {
                pool.unregister(last);
            }
        }
        self.n_tokens
    }

    /// Releases every block and empties the table.
    pub fn release_all(&mut self, pool: &mut BlockPool) {
        self.release_from(pool, 0);
        self.hashes.clear();
        self.n_tokens = 0;
    }

    /// Reuses cached blocks for a prompt prefix; returns how many tokens are already
    /// computed (a multiple of the block size). Only an empty table adopts anything: a
    /// table that already holds tokens is left as is and 0 is returned.
    ///
    /// NOTE: at most `tokens.len() - 1` tokens are adopted. The model must still run the
    /// last prompt token to produce logits, and that token's slot would otherwise be in a
    /// full, possibly shared block that this sequence may not write.
    pub fn adopt_cached_prefix(&mut self, pool: &mut BlockPool, tokens: &[u32]) -> usize {
        if self.n_tokens != 0 {
            return 0;
        }
        let bs = pool.block_size();
        let max_blocks = tokens.len().saturating_sub(1) / bs;
        let mut parent = None;
        for chunk in tokens.chunks_exact(bs).take(max_blocks) {
            let h = hash_block(parent, chunk);
            let Some(id) = pool.lookup(h) else { break };
            pool.retain(id);
            self.blocks.push(id);
            self.hashes.push(h);
            parent = Some(h);
        }
        self.n_tokens = self.blocks.len() * bs;
        self.n_tokens
    }

    /// Registers this sequence's newly full blocks in the prefix cache. `tokens` are the
    /// sequence's tokens whose KV has been written (prompt and generated); only whole
    /// blocks within both `tokens` and `n_tokens()` are hashed. Call after each step.
    pub fn cache_full_blocks(&mut self, pool: &mut BlockPool, tokens: &[u32]) {
        let bs = pool.block_size();
        let n_full = tokens.len().min(self.n_tokens) / bs;
        for i in self.hashes.len()..n_full {
            let h = hash_block(self.hashes.last().copied(), &tokens[i * bs..(i + 1) * bs]);
            // NOTE: a false return (another block already caches this prefix) is fine:
            // this block stays private, and the chain continues from `h` either way.
            pool.register_full_block(self.blocks[i], h);
            self.hashes.push(h);
        }
    }

    /// Releases `blocks[keep..]`, last block first, so a sequence's tail is evicted
    /// before its (more widely shared) prefix.
    fn release_from(&mut self, pool: &mut BlockPool, keep: usize) {
        while self.blocks.len() > keep {
            let id = self.blocks.pop().expect("len > keep >= 0");
            pool.release(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(n: u32) -> Vec<u32> {
        (0..n).map(|i| 1000 + i * 7).collect()
    }

    #[test]
    fn reserve_grows_by_whole_blocks_and_maps_slots() {
        let mut pool = BlockPool::new(8, 4);
        let mut t = BlockTable::new();
        t.reserve(&mut pool, 3).unwrap(); // 8 free blocks
        assert_eq!((t.blocks(), t.n_tokens()), (&[0][..], 3));
        t.reserve(&mut pool, 1).unwrap(); // fits the partial block
        assert_eq!(t.blocks().len(), 1);
        t.reserve(&mut pool, 6).unwrap(); // 10 tokens -> 3 blocks
        assert_eq!((t.blocks(), t.n_tokens()), (&[0, 1, 2][..], 10));
        assert_eq!(t.slot(9, 4), (2, 1));
        assert_eq!(t.slot_index(9, 4), 9);
        // A table built on a shuffled pool maps through the block ids.
        let mut other = BlockTable::new();
        pool.release(1);
        other.reserve(&mut pool, 6).unwrap(); // takes block 1, then 3
        assert_eq!(other.blocks(), &[1, 3]);
        assert_eq!(other.slot_index(0, 4), 4);
        assert_eq!(other.slot_index(5, 4), 13);
        pool.check_invariants();
    }

    #[test]
    fn reserve_is_all_or_nothing() {
        let mut pool = BlockPool::new(3, 4);
        let mut t = BlockTable::new();
        t.reserve(&mut pool, 5).unwrap(); // 3 free blocks, needs 2
        let before = t.clone();
        let err = t.reserve(&mut pool, 8).unwrap_err();
        assert_eq!(err, OutOfBlocks { needed: 2, free: 1 });
        assert_eq!(err.to_string(), "out of KV blocks: needed 2, 1 free");
        assert_eq!(t, before);
        assert_eq!(pool.n_free(), 1);
        t.reserve(&mut pool, 7).unwrap(); // exactly fills the pool
        assert_eq!((pool.n_free(), t.n_tokens()), (0, 12));
        pool.check_invariants();
    }

    #[test]
    fn two_sequences_share_a_cached_prompt_prefix() {
        let bs = 4;
        let mut pool = BlockPool::new(16, bs);
        let p = prompt(10); // 2 full blocks + 2 tokens
        let mut a = BlockTable::new();
        assert_eq!(a.adopt_cached_prefix(&mut pool, &p), 0, "cold cache");
        a.reserve(&mut pool, p.len()).unwrap(); // 16 free blocks
        a.cache_full_blocks(&mut pool, &p);
        assert_eq!((a.n_hashed_blocks(), pool.n_cached()), (2, 2));

        // B shares the first 9 tokens, then diverges.
        let mut q = p[..9].to_vec();
        q.extend([1, 2, 3]);
        let mut b = BlockTable::new();
        assert_eq!(pool.cached_prefix_len(&q), 8);
        assert_eq!(b.adopt_cached_prefix(&mut pool, &q), 8);
        assert_eq!(b.blocks(), &a.blocks()[..2]);
        for &id in &a.blocks()[..2] {
            assert_eq!(pool.ref_count(id), 2);
        }
        b.reserve(&mut pool, q.len() - 8).unwrap(); // 13 free blocks
        assert_ne!(b.blocks()[2], a.blocks()[2], "partial blocks are private");
        b.cache_full_blocks(&mut pool, &q);
        assert_eq!(b.n_hashed_blocks(), 3);
        assert_eq!(pool.n_cached(), 3);

        // A finishes: shared blocks stay in use by B; A's private block is freed.
        let free_before = pool.n_free();
        a.release_all(&mut pool);
        assert_eq!(pool.n_free(), free_before + 1);
        assert_eq!(pool.ref_count(b.blocks()[0]), 1);
        // B finishes: everything free, yet the prefix is still cached for a third sequence.
        b.release_all(&mut pool);
        assert_eq!(pool.n_free(), 16);
        let mut c = BlockTable::new();
        assert_eq!(
            c.adopt_cached_prefix(&mut pool, &q),
            12 - 4,
            "last block spared"
        );
        assert_eq!(c.blocks(), &b_blocks_prefix(&pool, &q)[..]);
        pool.check_invariants();
    }

    fn b_blocks_prefix(pool: &BlockPool, tokens: &[u32]) -> Vec<BlockId> {
        let mut parent = None;
        let mut out = Vec::new();
        for chunk in tokens.chunks_exact(pool.block_size()).take(2) {
            let h = hash_block(parent, chunk);
            out.push(pool.lookup(h).unwrap()); // registered above
            parent = Some(h);
        }
        out
    }

    #[test]
    fn whole_prompt_cached_still_leaves_last_token_to_compute() {
        let mut pool = BlockPool::new(8, 4);
        let p = prompt(8);
        let mut a = BlockTable::new();
        a.reserve(&mut pool, 8).unwrap(); // 8 free blocks
        a.cache_full_blocks(&mut pool, &p);
        let mut b = BlockTable::new();
        assert_eq!(b.adopt_cached_prefix(&mut pool, &p), 4);
        b.reserve(&mut pool, 4).unwrap(); // 6 free blocks
        assert_ne!(b.blocks()[1], a.blocks()[1]);
        // A table with tokens adopts nothing.
        assert_eq!(b.adopt_cached_prefix(&mut pool, &p), 0);
        assert_eq!(b.n_tokens(), 8);
    }

    #[test]
    fn truncate_releases_whole_blocks_and_unhashes_the_cut_block() {
        let mut pool = BlockPool::new(8, 4);
        let p = prompt(11);
        let mut t = BlockTable::new();
        t.reserve(&mut pool, 11).unwrap(); // 8 free blocks
        t.cache_full_blocks(&mut pool, &p);
        let blocks = t.blocks().to_vec();
        assert_eq!(t.truncate(&mut pool, 20), 11, "growing is not truncation");
        assert_eq!(t.truncate(&mut pool, 8), 8);
        assert_eq!(t.blocks(), &blocks[..2]);
        assert_eq!((pool.ref_count(blocks[2]), pool.n_free()), (0, 6));
        assert_eq!(t.n_hashed_blocks(), 2);
        // Cutting inside a private, hashed block: kept, but its hash is dropped.
        assert_eq!(t.truncate(&mut pool, 6), 6);
        assert_eq!(t.blocks(), &blocks[..2]);
        assert_eq!(pool.block_hash(blocks[1]), None);
        assert_eq!((t.n_hashed_blocks(), pool.n_cached()), (1, 1));
        t.reserve(&mut pool, 1).unwrap(); // slot 6 is in the same block
        assert_eq!(t.slot(6, 4), (blocks[1], 2));
        assert_eq!(t.truncate(&mut pool, 0), 0);
        assert_eq!((t.blocks().len(), pool.n_free()), (0, 8));
        pool.check_invariants();
    }

    #[test]
    fn truncate_inside_a_shared_block_gives_the_block_up() {
        let mut pool = BlockPool::new(8, 4);
        let p = prompt(9);
        let mut a = BlockTable::new();
        a.reserve(&mut pool, 9).unwrap(); // 8 free blocks
        a.cache_full_blocks(&mut pool, &p);
        let mut b = BlockTable::new();
        assert_eq!(b.adopt_cached_prefix(&mut pool, &p), 8);
        b.reserve(&mut pool, 1).unwrap(); // 5 free blocks
                                          // B rolls back to 6 tokens: block 1 is shared with A, so B drops it.
        assert_eq!(b.truncate(&mut pool, 6), 4);
        assert_eq!(b.blocks(), &a.blocks()[..1]);
        assert_eq!(pool.ref_count(a.blocks()[1]), 1);
        assert!(
            pool.block_hash(a.blocks()[1]).is_some(),
            "A's cached block untouched"
        );
        b.reserve(&mut pool, 2).unwrap();
        assert_ne!(b.blocks()[1], a.blocks()[1]);
        pool.check_invariants();
    }

    #[test]
    fn release_all_frees_tail_before_prefix() {
        let mut pool = BlockPool::new(4, 2);
        let p = prompt(5);
        let mut t = BlockTable::new();
        t.reserve(&mut pool, 5).unwrap(); // 4 free blocks
        t.cache_full_blocks(&mut pool, &p);
        t.release_all(&mut pool);
        // Uncached partial block first, then the prefix tail before its head.
        assert_eq!(pool.free_list(), vec![2, 3, 1, 0]);
        assert_eq!(t, BlockTable::new());
        pool.check_invariants();
    }
}
