use hearth_kv::BlockTable;

/// One conversation's state in the engine: the tokens whose keys and values are in the cache,
/// and the blocks that hold them.
#[derive(Debug, Default)]
pub struct Sequence {
    pub(crate) table: BlockTable,
    /// Tokens already run through the model, in order; `table` covers exactly these.
    pub(crate) tokens: Vec<u32>,
}

impl Sequence {
    pub fn new() -> Self {
        Self::default()
    }

    /// Tokens whose keys and values are in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}
