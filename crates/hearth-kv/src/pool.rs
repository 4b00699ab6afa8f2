//! The block pool: ref counts, the free list in eviction order, and the prefix cache.

use std::collections::HashMap;

use crate::hash::{hash_block, BlockHash};

/// Index of a physical block in the pool (and in every layer's KV tensor).
pub type BlockId = u32;

/// "No block" in the free-list links.
const NIL: u32 = u32::MAX;

/// A fixed number of KV blocks with ref counts and a prefix cache.
///
/// Every block is either *in use* (ref count > 0, owned by one or more block tables) or
/// *free* (ref count 0, on the free list). A free block may still be *cached*: it keeps
/// the hash of the full block it last held, so a later sequence with the same prefix can
/// take it back with [`BlockPool::retain`] instead of recomputing it.
///
/// The free list is an intrusive doubly linked list over block ids, so taking the head,
/// appending at the tail and unlinking a cached block from the middle are all O(1):
///
/// ```text
///   head (evicted first)                                 tail (evicted last)
///    [uncached] <-> [uncached] <-> [cached, LRU] <-> ... <-> [cached, MRU]
/// ```
#[derive(Clone, Debug)]
pub struct BlockPool {
    block_size: usize,
    /// [n_blocks] owners of each block; 0 means the block is on the free list.
    ref_counts: Vec<u32>,
    /// [n_blocks] hash of the full block's contents, if registered in `cached`.
    hashes: Vec<Option<BlockHash>>,
    /// [n_blocks] free-list links (NIL at the ends and for blocks in use).
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    n_free: usize,
    /// Invariant: `cached[h] == id` exactly when `hashes[id] == Some(h)`.
    cached: HashMap<BlockHash, BlockId>,
}

impl BlockPool {
    /// A pool of `n_blocks` free blocks of `block_size` token slots each.
    ///
    /// # Panics
    /// If `block_size` is 0 or `n_blocks` does not fit a `BlockId` (both are engine
    /// configuration derived from the memory budget, not request input).
    pub fn new(n_blocks: usize, block_size: usize) -> Self {
        assert!(block_size > 0, "block_size must be > 0");
        assert!(
            n_blocks < NIL as usize,
            "n_blocks {n_blocks} does not fit a BlockId"
        );
        let mut pool = Self {
            block_size,
            ref_counts: vec![0; n_blocks],
            hashes: vec![None; n_blocks],
            prev: vec![NIL; n_blocks],
            next: vec![NIL; n_blocks],
            head: NIL,
            tail: NIL,
            n_free: 0,
            cached: HashMap::new(),
        };
        for id in 0..n_blocks as BlockId {
            pool.push_back(id);
        }
        pool
    }

    /// Token slots per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Total number of blocks.
    pub fn n_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks that [`BlockPool::allocate`] can hand out now (cached free blocks included:
    /// they are evictable).
    pub fn n_free(&self) -> usize {
        self.n_free
    }

    /// Blocks that currently carry a prefix hash (in use or free).
    pub fn n_cached(&self) -> usize {
        self.cached.len()
    }

    /// Number of owners of block `id` (0 = free).
    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.ref_counts[id as usize]
    }

    /// The prefix hash block `id` is registered under, if any.
    pub fn block_hash(&self, id: BlockId) -> Option<BlockHash> {
        self.hashes[id as usize]
    }

    /// Takes the block at the head of the free list (uncached blocks first, then the
    /// least recently freed cached block), evicting its cached hash. Ref count becomes 1.
    pub fn allocate(&mut self) -> Option<BlockId> {
        let id = self.head;
        if id == NIL {
            return None;
        }
        self.unlink(id);
        // NOTE: in use before unregistering, so unregister does not touch the free list.
        self.ref_counts[id as usize] = 1;
        self.unregister(id);
        Some(id)
    }

    /// Adds an owner to block `id`. A free (cached) block leaves the free list.
    pub fn retain(&mut self, id: BlockId) {
        if self.ref_counts[id as usize] == 0 {
            self.unlink(id);
        }
        self.ref_counts[id as usize] += 1;
    }

    /// Drops an owner of block `id`. At 0 the block goes on the free list: a cached block
    /// at the tail (evicted last, most recently used), an uncached one at the head.
    ///
    /// NOTE: an uncached free block holds nothing worth keeping, so handing it out first
    /// lets cached prefixes live longer than a plain LRU over all blocks would.
    ///
    /// # Panics
    /// If the block is already free: a double release is a bookkeeping bug that would
    /// otherwise hand one block to two sequences.
    pub fn release(&mut self, id: BlockId) {
        let rc = &mut self.ref_counts[id as usize];
        assert!(*rc > 0, "release of free block {id}");
        *rc -= 1;
        if *rc == 0 {
            if self.hashes[id as usize].is_some() {
                self.push_back(id);
            } else {
                self.push_front(id);
            }
        }
    }

    /// Registers full block `id` in the prefix cache under `hash`. Returns whether the
    /// block is now findable under `hash`: false when another block already holds the
    /// same prefix (two sequences computed it at the same time; the first one wins and
    /// this block stays private) or when `id` already carries a different hash.
    pub fn register_full_block(&mut self, id: BlockId, hash: BlockHash) -> bool {
        match self.hashes[id as usize] {
            Some(h) => return h == hash,
            None if self.cached.contains_key(&hash) => return false,
            None => {}
        }
        self.hashes[id as usize] = Some(hash);
        self.cached.insert(hash, id);
        true
    }

    /// Removes block `id`'s hash from the prefix cache (its contents are about to change).
    /// An uncached free block moves to the head of the free list.
    pub(crate) fn unregister(&mut self, id: BlockId) {
        if let Some(h) = self.hashes[id as usize].take() {
            self.cached.remove(&h);
            if self.ref_counts[id as usize] == 0 {
                self.unlink(id);
                self.push_front(id);
            }
        }
    }

    /// The block holding the prefix ending in the block hashed `hash`, if cached.
    pub fn lookup(&self, hash: BlockHash) -> Option<BlockId> {
        self.cached.get(&hash).copied()
    }

    /// How many leading tokens of `tokens` are in the prefix cache, in whole blocks,
    /// without taking the blocks. At most `tokens.len() - 1`: the last prompt token is
    /// always recomputed so the model produces logits for it (see
    /// [`crate::BlockTable::adopt_cached_prefix`]).
    pub fn cached_prefix_len(&self, tokens: &[u32]) -> usize {
        let max_blocks = tokens.len().saturating_sub(1) / self.block_size;
        let mut parent = None;
        let mut n = 0;
        for chunk in tokens.chunks_exact(self.block_size).take(max_blocks) {
            let h = hash_block(parent, chunk);
            if self.lookup(h).is_none() {
                break;
            }
            parent = Some(h);
            n += 1;
        }
        n * self.block_size
    }

    fn push_back(&mut self, id: BlockId) {
        self.prev[id as usize] = self.tail;
        self.next[id as usize] = NIL;
        if self.tail == NIL {
            self.head = id;
        } else {
            self.next[self.tail as usize] = id;
        }
        self.tail = id;
        self.n_free += 1;
    }

    fn push_front(&mut self, id: BlockId) {
        self.next[id as usize] = self.head;
        self.prev[id as usize] = NIL;
        if self.head == NIL {
            self.tail = id;
        } else {
            self.prev[self.head as usize] = id;
        }
        self.head = id;
        self.n_free += 1;
    }

    fn unlink(&mut self, id: BlockId) {
        let (p, n) = (self.prev[id as usize], self.next[id as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[id as usize] = NIL;
        self.next[id as usize] = NIL;
        self.n_free -= 1;
    }

    /// Free blocks from head (evicted first) to tail.
    #[cfg(test)]
    pub(crate) fn free_list(&self) -> Vec<BlockId> {
        let mut out = Vec::new();
        let mut id = self.head;
        while id != NIL {
            out.push(id);
            id = self.next[id as usize];
        }
        out
    }

    /// Checks every internal invariant; panics with a description of the first broken one.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let free = self.free_list();
        assert_eq!(
            free.len(),
            self.n_free,
            "n_free disagrees with the free list"
        );
        let mut on_list = vec![false; self.n_blocks()];
        for &id in &free {
            assert!(!on_list[id as usize], "block {id} twice on the free list");
            on_list[id as usize] = true;
        }
        for (id, &rc) in self.ref_counts.iter().enumerate() {
            assert_eq!(rc == 0, on_list[id], "block {id}: ref {rc} vs free list");
        }
        // Uncached free blocks precede cached ones.
        let first_cached = free
            .iter()
            .position(|&id| self.hashes[id as usize].is_some());
        if let Some(i) = first_cached {
            assert!(free[i..]
                .iter()
                .all(|&id| self.hashes[id as usize].is_some()));
        }
        let n_hashed = self.hashes.iter().filter(|h| h.is_some()).count();
        assert_eq!(n_hashed, self.cached.len(), "hash map size");
        for (h, &id) in &self.cached {
            assert_eq!(
                self.hashes[id as usize],
                Some(*h),
                "cached map vs block hash"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_until_empty_then_release() {
        let mut pool = BlockPool::new(3, 16);
        assert_eq!(
            (pool.n_blocks(), pool.block_size(), pool.n_free()),
            (3, 16, 3)
        );
        let ids: Vec<_> = (0..3).map(|_| pool.allocate()).collect();
        assert_eq!(ids, vec![Some(0), Some(1), Some(2)]);
        assert_eq!(pool.allocate(), None);
        assert_eq!(pool.n_free(), 0);
        pool.release(1);
        assert_eq!(pool.n_free(), 1);
        assert_eq!(pool.allocate(), Some(1));
        pool.check_invariants();
    }

    #[test]
    fn ref_counts_keep_shared_block_in_use() {
        let mut pool = BlockPool::new(2, 4);
        let b = pool.allocate().unwrap(); // pool has 2 free blocks
        pool.retain(b);
        assert_eq!(pool.ref_count(b), 2);
        pool.release(b);
        assert_eq!((pool.ref_count(b), pool.n_free()), (1, 1));
        pool.release(b);
        assert_eq!((pool.ref_count(b), pool.n_free()), (0, 2));
        pool.check_invariants();
    }

    #[test]
    #[should_panic(expected = "release of free block")]
    fn double_release_panics() {
        let mut pool = BlockPool::new(2, 4);
        let b = pool.allocate().unwrap(); // pool has 2 free blocks
        pool.release(b);
        pool.release(b);
    }

    #[test]
    fn free_cached_blocks_are_evicted_in_lru_order() {
        let mut pool = BlockPool::new(4, 4);
        let ids: Vec<_> = (0..4).map(|_| pool.allocate().unwrap()).collect();
        for (i, &id) in ids.iter().enumerate() {
            assert!(pool.register_full_block(id, BlockHash(100 + i as u64)));
        }
        // Free order 2, 0, 3, 1: least recently freed is evicted first.
        for id in [2, 0, 3, 1] {
            pool.release(id);
        }
        assert_eq!(pool.free_list(), vec![2, 0, 3, 1]);
        // Reusing block 0 from the cache takes it out of the free list.
        assert_eq!(pool.lookup(BlockHash(100)), Some(0));
        pool.retain(0);
        assert_eq!(pool.n_free(), 3);
        pool.check_invariants();
        assert_eq!(pool.allocate(), Some(2));
        assert_eq!(
            pool.lookup(BlockHash(102)),
            None,
            "evicted hash must be forgotten"
        );
        assert_eq!(pool.allocate(), Some(3));
        // Block 0 freed again becomes most recently used: 1 goes before it.
        pool.release(0);
        assert_eq!(pool.free_list(), vec![1, 0]);
        assert_eq!(pool.allocate(), Some(1));
        assert_eq!(pool.allocate(), Some(0));
        assert_eq!(pool.n_cached(), 0);
        pool.check_invariants();
    }

    #[test]
    fn uncached_free_blocks_go_before_cached_ones() {
        let mut pool = BlockPool::new(3, 4);
        let a = pool.allocate().unwrap(); // pool has 3 free blocks
        let b = pool.allocate().unwrap(); // pool has 2 free blocks
        pool.register_full_block(a, BlockHash(7));
        pool.release(a);
        pool.release(b);
        assert_eq!(pool.free_list(), vec![b, 2, a]);
        pool.check_invariants();
    }

    #[test]
    fn duplicate_hash_keeps_first_block() {
        let mut pool = BlockPool::new(2, 4);
        let a = pool.allocate().unwrap(); // pool has 2 free blocks
        let b = pool.allocate().unwrap(); // pool has 1 free block
        assert!(pool.register_full_block(a, BlockHash(5)));
        assert!(!pool.register_full_block(b, BlockHash(5)));
        assert!(
            pool.register_full_block(a, BlockHash(5)),
            "re-registering is a no-op"
        );
        assert!(!pool.register_full_block(a, BlockHash(6)));
        assert_eq!(pool.lookup(BlockHash(5)), Some(a));
        assert_eq!(pool.block_hash(b), None);
        pool.check_invariants();
    }

    #[test]
    fn cached_prefix_len_counts_whole_blocks_and_spares_last_token() {
        let mut pool = BlockPool::new(4, 2);
        let tokens = [1, 2, 3, 4, 5, 6];
        let h0 = hash_block(None, &tokens[0..2]);
        let h1 = hash_block(Some(h0), &tokens[2..4]);
        let h2 = hash_block(Some(h1), &tokens[4..6]);
        for h in [h0, h1, h2] {
            let id = pool.allocate().unwrap(); // 4 blocks, 3 taken
            pool.register_full_block(id, h);
        }
        assert_eq!(
            pool.cached_prefix_len(&tokens),
            4,
            "last block holds the last token"
        );
        assert_eq!(pool.cached_prefix_len(&[1, 2, 3, 4, 5, 6, 7]), 6);
        assert_eq!(pool.cached_prefix_len(&[1, 2, 9, 4, 5, 6, 7]), 2);
        assert_eq!(pool.cached_prefix_len(&[2, 1, 3, 4, 5, 6, 7]), 0);
        assert_eq!(pool.cached_prefix_len(&[]), 0);
    }
}
