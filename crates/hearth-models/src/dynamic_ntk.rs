//! Dynamic NTK rope scaling (`rope_type: dynamic` in a Hugging Face config): the rope base
//! grows with the length of a sequence once it outgrows `max_position_embeddings`.
//!
//! transformers (`_compute_dynamic_ntk_parameters` under the `dynamic_rope_update` decorator)
//! recomputes the frequencies at the start of every forward pass from
//! `L = max(position_ids) + 1`:
//!
//! ```text
//!  L ≤ original:  base' = base                                   (plain rope)
//!  L > original:  base' = base · (factor · L / original − (factor − 1)) ^ (n_rot / (n_rot − 2))
//! ```
//!
//! and every query and key of that pass rotates with `base'`; keys already in the cache keep
//! the rotation they were written with. A hearth batch holds several sequences, so `L` is taken
//! per sequence (`first_pos + n_tokens` of its rows in this step) and each sequence gets what
//! transformers gives it run alone: a decode step computes `base'` from its own length, a
//! prompt from its whole length when it runs in one step.
//!
//! NOTE: transformers keeps the grown frequencies while later passes are shorter but still
//! past the original length (they only grow, or reset below it). For one sequence generating
//! token by token `L` only grows, so the two agree; hearth does not carry that state between
//! unrelated sequences.

use hearth_backend::{theta_scale_of, AttnSeq, RopeSpec};

/// See the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicNtk {
    /// The scaling's `factor`.
    pub factor: f64,
    /// `max_position_embeddings`: the longest sequence that runs plain rope.
    pub original_context: usize,
    /// Whether sliding-window layers scale too (they share the global rope everywhere but in
    /// Gemma 3, whose sliding layers keep a plain rope of their own).
    pub sliding_layers: bool,
}

impl DynamicNtk {
    /// The rope base of a forward pass over a sequence of `len` tokens.
    pub fn base(&self, base: f64, n_rot: usize, len: usize) -> f64 {
        let (len, old) = (
            len.max(self.original_context) as f64,
            self.original_context as f64,
        );
        let dim = n_rot as f64;
        base * (self.factor * len / old - (self.factor - 1.0)).powf(dim / (dim - 2.0))
    }

    /// Each row's `base'^(-2 / n_rot)` for a batch of `seqs`, `[n_tokens]`; `None` when no
    /// sequence is longer than the original context (every row then uses the plain base, and
    /// plain rope runs).
    pub fn theta_scales(
        &self,
        seqs: &[AttnSeq],
        n_tokens: usize,
        rope: &RopeSpec,
    ) -> Option<Vec<f32>> {
        let len = |s: &AttnSeq| s.first_pos + s.n_tokens;
        if seqs.iter().all(|s| len(s) <= self.original_context) {
            return None;
        }
        let plain = rope.theta_scale();
        let mut out = vec![plain; n_tokens];
        for s in seqs.iter().filter(|s| len(s) > self.original_context) {
            let base = self.base(rope.freq_base as f64, rope.n_rot, len(s));
            let scale = theta_scale_of(base as f32, rope.n_rot);
            out[s.token_start..s.token_start + s.n_tokens].fill(scale);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_backend::RopeKind;

    fn ntk() -> DynamicNtk {
        DynamicNtk {
            factor: 4.0,
            original_context: 256,
            sliding_layers: true,
        }
    }

    #[test]
    fn base_grows_only_past_the_original_context() {
        let n = ntk();
        assert_eq!(n.base(50_000.0, 16, 100), 50_000.0);
        assert_eq!(n.base(50_000.0, 16, 256), 50_000.0);
        // 4 · 512 / 256 − 3 = 5, to the power 16 / 14.
        let want = 50_000.0 * 5f64.powf(16.0 / 14.0);
        assert!((n.base(50_000.0, 16, 512) - want).abs() < 1e-6 * want);
    }

    #[test]
    fn each_sequence_takes_its_own_length() {
        let rope = RopeSpec {
            kind: RopeKind::Neox,
            n_rot: 16,
            freq_base: 50_000.0,
            freq_scale: 1.0,
            freq_factors: vec![],
        };
        let seq = |token_start, n_tokens, first_pos| AttnSeq {
            token_start,
            n_tokens,
            first_pos,
            block_table: &[],
        };
        let short = [seq(0, 3, 10), seq(3, 1, 255)];
        assert_eq!(ntk().theta_scales(&short, 4, &rope), None);
        let mixed = [seq(0, 3, 10), seq(3, 1, 299), seq(4, 2, 256)];
        let got = ntk()
            .theta_scales(&mixed, 6, &rope)
            .expect("a long sequence");
        let at = |len| theta_scale_of(ntk().base(50_000.0, 16, len) as f32, 16);
        let plain = rope.theta_scale();
        assert_eq!(got, [plain, plain, plain, at(300), at(258), at(258)]);
        // A larger base turns each frequency more slowly.
        assert!(at(300) < at(258) && at(258) < plain);
    }
}
