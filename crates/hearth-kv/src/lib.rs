//! Paged KV-cache bookkeeping: which physical block holds which tokens.
//!
//! The device-side KV storage (owned by a backend, one tensor per layer) is a pool of
//! `n_blocks` blocks of `block_size` token slots each. This crate never touches that
//! storage; it only decides which block a token of which sequence lives in, so it is
//! pure logic and unit-tested with plain data.
//!
//! ```text
//!   block_size = 4                      physical pool (n_blocks = 8)
//!                                       ┌────┬────┬────┬────┬────┬────┬────┬────┐
//!   sequence A: 10 tokens               │ b0 │ b1 │ b2 │ b3 │ b4 │ b5 │ b6 │ b7 │
//!   ┌──────────────────────────┐        └────┴────┴────┴────┴────┴────┴────┴────┘
//!   │ logical 0 │ 1  │ 2        │          ref: 2    1    0    1    1    0    1    0
//!   │ blocks[i]:  3  │ 1  │ 6   │                (b2, b5, b7 are free)
//!   └──────────────────────────┘
//!     tokens 0..4 -> b3 (full, hashed, shared with B)
//!     tokens 4..8 -> b1 (full)
//!     tokens 8..10 -> b6, offsets 0..2 (partial: only A writes here)
//!
//!   sequence B: 6 tokens, same first 4 prompt tokens as A
//!     blocks = [3, 4]    b3 adopted from the prefix cache (ref 2), b4 its own
//!
//!   slot_index(pos) = blocks[pos / block_size] * block_size + pos % block_size
//!   A, pos 9 -> blocks[2] = 6 -> 6 * 4 + 1 = 25
//! ```
//!
//! - [`BlockPool`] owns the ref counts, an O(1) free list in eviction order and the
//!   prefix cache (a map from chained block hash to block).
//! - [`BlockTable`] is one sequence's list of blocks; it grows with
//!   [`BlockTable::reserve`], shrinks with [`BlockTable::truncate`], and reuses cached
//!   prompt prefixes with [`BlockTable::adopt_cached_prefix`].
//! - Only *full* blocks are ever hashed or shared, and a sequence only writes into its
//!   last, partial block, so shared blocks are never written and no copy-on-write is needed.

mod hash;
mod pool;
mod table;

#[cfg(test)]
mod random_tests;

pub use hash::{hash_block, BlockHash};
pub use pool::{BlockId, BlockPool};
pub use table::{BlockTable, OutOfBlocks};
