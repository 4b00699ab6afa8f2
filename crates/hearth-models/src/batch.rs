use hearth_backend::AttnSeq;

/// One forward step's input: a flat batch of tokens from one or more sequences.
///
/// ```text
///  tokens:    [ a5 a6 a7 | b2 | c0 c1 ]      three sequences, chunked prefill and decode mixed
///  positions: [  5  6  7 |  2 |  0  1 ]
///  seqs:      A{start 0, n 3, first_pos 5}, B{start 3, n 1, first_pos 2}, C{start 4, n 2, first_pos 0}
///  logits_rows: [2, 3, 5]                  the last token of each sequence
/// ```
#[derive(Clone, Debug)]
pub struct Batch<'a> {
    /// `[n_tokens]`
    pub tokens: &'a [u32],
    /// `[n_tokens]`: each token's position in its sequence.
    pub positions: &'a [u32],
    /// Which rows belong to which sequence, and where its KV blocks are.
    pub seqs: &'a [AttnSeq<'a>],
    /// Rows whose logits are wanted, in output order.
    pub logits_rows: &'a [usize],
}

impl Batch<'_> {
    /// Check that the parts agree with each other, so that a bad plan fails with a message
    /// rather than an index panic deep in a kernel.
    pub fn validate(&self, block_size: usize) -> Result<(), String> {
        let n = self.tokens.len();
        if self.positions.len() != n {
            return Err(format!("{} positions for {n} tokens", self.positions.len()));
        }
        let mut covered = 0;
        for (i, s) in self.seqs.iter().enumerate() {
            if s.token_start != covered {
                return Err(format!(
                    "sequence {i} starts at row {}, expected {covered}",
                    s.token_start
                ));
            }
            covered += s.n_tokens;
            if covered > n {
                return Err(format!("sequence {i} runs past the batch"));
            }
            let needed = (s.first_pos + s.n_tokens).div_ceil(block_size);
            if s.block_table.len() < needed {
                return Err(format!(
                    "sequence {i} needs {needed} KV blocks, its table has {}",
                    s.block_table.len()
                ));
            }
            for t in 0..s.n_tokens {
                if self.positions[s.token_start + t] as usize != s.first_pos + t {
                    return Err(format!("sequence {i}: positions are not consecutive"));
                }
            }
        }
        if covered != n {
            return Err(format!("sequences cover {covered} of {n} tokens"));
        }
        if let Some(&r) = self.logits_rows.iter().find(|&&r| r >= n) {
            return Err(format!("logits wanted for row {r} of {n}"));
        }
        Ok(())
    }
}
