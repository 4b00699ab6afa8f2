//! One request's scheduling state.

use hearth_kv::BlockTable;

/// A request's tokens and how far its KV cache has been computed.
#[derive(Debug)]
pub(super) struct Request {
    /// Prompt, then generated tokens.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    pub max_new_tokens: usize,
    /// Leading tokens whose KV is written (or adopted from the prefix cache).
    pub n_computed: usize,
    /// Tokens adopted from the prefix cache at the latest admission.
    pub cached_tokens: usize,
    /// Blocks held; empty while waiting.
    pub table: BlockTable,
}

impl Request {
    pub fn new(prompt: Vec<u32>, max_new_tokens: usize) -> Self {
        Self {
            prompt_len: prompt.len(),
            tokens: prompt,
            max_new_tokens,
            n_computed: 0,
            cached_tokens: 0,
            table: BlockTable::new(),
        }
    }

    /// Tokens not yet computed (at least 1 for a live request: its newest token).
    pub fn n_uncomputed(&self) -> usize {
        self.tokens.len() - self.n_computed
    }

    pub fn n_generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }
}
