//! The candidate list the processors narrow down.

use std::cmp::Ordering;

/// One candidate token and its (processed) logit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Token id.
    pub id: u32,
    /// Logit; never NaN (NaN logits enter as -inf).
    pub logit: f32,
}

/// "Better first": higher logit, then lower id. A total order, so every sort and
/// selection below has one answer regardless of algorithm or platform.
pub(crate) fn better(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// A reusable candidate buffer. Starts as the whole vocabulary in id order; processors
/// remove candidates and change logits.
///
/// Invariant: `items[..n_sorted]` is sorted by [`better`] and no later item is better
/// than `items[n_sorted - 1]`, so a processor that needs the best few tokens sorts only
/// as far as it needs.
#[derive(Clone, Debug, Default)]
pub struct Candidates {
    items: Vec<Candidate>,
    n_sorted: usize,
}

impl Candidates {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Refills with every token of `logits` in id order (NaN becomes -inf), reusing the
    /// allocation.
    pub fn fill(&mut self, logits: &[f32]) {
        self.items.clear();
        self.items
            .extend(logits.iter().enumerate().map(|(i, &l)| Candidate {
                id: i as u32,
                logit: if l.is_nan() { f32::NEG_INFINITY } else { l },
            }));
        self.n_sorted = 0;
    }

    /// Refills with the `k` best tokens of `logits` (ties to the lower id), sorted best
    /// first; every token when `k` is 0 or at least the vocabulary size (as [`Self::fill`]).
    ///
    /// NOTE: one pass over the logits that keeps only tokens beating the k-th best seen so
    /// far, compacting the buffer with a selection when it fills up. After the first few
    /// thousand tokens almost nothing passes, so this costs about as much as an argmax,
    /// instead of materializing and selecting over the whole vocabulary.
    pub fn fill_top_k(&mut self, logits: &[f32], k: usize) {
        if k == 0 || k >= logits.len() {
            self.fill(logits);
            return;
        }
        let cap = (4 * k).max(1024);
        self.items.clear();
        let push = |items: &mut Vec<Candidate>, i: usize, l: f32| {
            let logit = if l.is_nan() { f32::NEG_INFINITY } else { l };
            items.push(Candidate {
                id: i as u32,
                logit,
            });
        };
        // Phase 1: the first `cap` tokens unconditionally, then a first threshold.
        let head = cap.min(logits.len());
        for (i, &l) in logits[..head].iter().enumerate() {
            push(&mut self.items, i, l);
        }
        let mut threshold = self.compact(k);
        // Phase 2: only tokens beating the k-th best so far. A later token equal to the
        // threshold has a higher id than the k-th best and loses the tie, so `>` is
        // exact (and false for NaN), but for zeros: +0 beats a -0 threshold, so at a zero
        // threshold every zero passes (the compaction sorts them out). Whole chunks are
        // skipped with one vector compare.
        const CHUNK: usize = 16;
        let mut zero = threshold == 0.0;
        let passes = |l: f32, threshold: f32, zero: bool| (l > threshold) | (zero & (l == 0.0));
        for (c, chunk) in logits[head..].chunks(CHUNK).enumerate() {
            if !chunk
                .iter()
                .fold(false, |hit, &l| hit | passes(l, threshold, zero))
            {
                continue;
            }
            for (j, &l) in chunk.iter().enumerate() {
                if passes(l, threshold, zero) {
                    push(&mut self.items, head + c * CHUNK + j, l);
                }
            }
            if self.items.len() >= cap {
                threshold = self.compact(k);
                zero = threshold == 0.0;
            }
        }
        self.n_sorted = 0;
        self.sort_prefix(k);
        self.truncate(k);
    }

    /// Refills with candidates already sorted best first (as [`best_of_rows`] gives them).
    pub fn fill_sorted(&mut self, best: &[Candidate]) {
        debug_assert!(best.windows(2).all(|w| better(&w[0], &w[1]).is_lt()));
        self.items.clear();
        self.items.extend_from_slice(best);
        self.n_sorted = best.len();
    }

    /// Refills with candidates in any order.
    pub fn fill_unsorted(&mut self, items: &[Candidate]) {
        self.items.clear();
        self.items.extend_from_slice(items);
        self.n_sorted = 0;
    }

    /// Puts the candidates in id order, as [`Self::fill`] holds a whole row.
    pub fn sort_by_id(&mut self) {
        self.items.sort_unstable_by_key(|c| c.id);
        self.n_sorted = 0;
    }

    /// Keeps the `k` best items (unordered) and returns the k-th best logit, or -inf
    /// while fewer than `k` items are held.
    fn compact(&mut self, k: usize) -> f32 {
        if self.items.len() < k {
            return f32::NEG_INFINITY;
        }
        // After the selection the k-th best sits at index k - 1.
        self.items.select_nth_unstable_by(k - 1, better);
        self.items.truncate(k);
        self.items[k - 1].logit
    }

    /// Current candidates (the first `n_sorted()` are sorted best first).
    pub fn as_slice(&self) -> &[Candidate] {
        &self.items
    }

    /// Mutable access to the logits. Changing logits may break the sorted prefix, so it
    /// is forgotten.
    pub fn as_mut_slice(&mut self) -> &mut [Candidate] {
        self.n_sorted = 0;
        &mut self.items
    }

    /// Number of candidates.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no candidate is left.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Length of the sorted prefix.
    pub fn n_sorted(&self) -> usize {
        self.n_sorted
    }

    /// Sorts until the `k` best candidates come first, in order. Selection, not a full
    /// sort: O(n + k log k) for the first call.
    pub fn sort_prefix(&mut self, k: usize) {
        let k = k.min(self.items.len());
        if k <= self.n_sorted {
            return;
        }
        let rest = &mut self.items[self.n_sorted..];
        let m = k - self.n_sorted;
        if m < rest.len() {
            rest.select_nth_unstable_by(m - 1, better);
        }
        rest[..m].sort_unstable_by(better);
        self.n_sorted = k;
    }

    /// Keeps the first `k` candidates.
    pub fn truncate(&mut self, k: usize) {
        self.items.truncate(k);
        self.n_sorted = self.n_sorted.min(k);
    }

    /// Keeps the candidates with `logit >= threshold`, in their order. A threshold cut
    /// removes only the tail of the sorted prefix, so the prefix stays valid.
    pub(crate) fn retain_above(&mut self, threshold: f32) {
        let n_sorted_kept = self.items[..self.n_sorted]
            .iter()
            .filter(|c| c.logit >= threshold)
            .count();
        self.items.retain(|c| c.logit >= threshold);
        self.n_sorted = n_sorted_kept;
    }

    /// The highest logit (-inf when empty).
    pub fn max_logit(&self) -> f32 {
        if self.n_sorted > 0 {
            return self.items[0].logit;
        }
        self.items
            .iter()
            .fold(f32::NEG_INFINITY, |m, c| m.max(c.logit))
    }

    /// Divides every logit by `t`. Order-preserving for `t > 0` (ties may appear, which
    /// `better` breaks by id as before), so the sorted prefix stays valid.
    pub(crate) fn divide(&mut self, t: f32) {
        for c in &mut self.items {
            c.logit /= t;
        }
    }
}

/// The `k` best candidates of each `cols`-value row of `values`, best first, appended to `out`
/// (all of a row's when it has fewer): what a device's top-k selection must give
/// (`Backend::top_k_rows`), computed here.
pub fn best_of_rows(values: &[f32], cols: usize, k: usize, out: &mut Vec<Candidate>) {
    let mut c = Candidates::new();
    for row in values.chunks(cols.max(1)) {
        if k < row.len() {
            c.fill_top_k(row, k);
        } else {
            c.fill(row);
            c.sort_prefix(row.len());
        }
        out.extend_from_slice(c.as_slice());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(c: &Candidates) -> Vec<u32> {
        c.as_slice().iter().map(|c| c.id).collect()
    }

    #[test]
    fn fill_maps_nan_to_neg_inf_and_keeps_id_order() {
        let mut c = Candidates::new();
        c.fill(&[0.5, f32::NAN, -1.0]);
        assert_eq!(ids(&c), vec![0, 1, 2]);
        assert_eq!(c.as_slice()[1].logit, f32::NEG_INFINITY);
        assert_eq!(c.max_logit(), 0.5);
    }

    #[test]
    fn sort_prefix_is_incremental_and_breaks_ties_by_id() {
        let logits = [1.0, 3.0, 2.0, 3.0, 0.0, 2.0, -1.0, 5.0];
        let mut c = Candidates::new();
        c.fill(&logits);
        c.sort_prefix(2);
        assert_eq!(&ids(&c)[..2], &[7, 1]);
        c.sort_prefix(5);
        assert_eq!(&ids(&c)[..5], &[7, 1, 3, 2, 5]);
        c.sort_prefix(100);
        assert_eq!(ids(&c), vec![7, 1, 3, 2, 5, 0, 4, 6]);
        assert_eq!(c.n_sorted(), 8);
    }

    #[test]
    fn fill_top_k_equals_full_sort() {
        // Many ties, NaNs and infinities; sizes around the compaction capacity.
        for n in [10, 1023, 1024, 1025, 5000, 20_000] {
            let logits: Vec<f32> = (0..n as u32)
                .map(|i| match i.wrapping_mul(2_654_435_761) % 97 {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => f32::NEG_INFINITY,
                    3 => 0.0,
                    4 => -0.0,
                    r => (r % 23) as f32 * 0.5,
                })
                .collect();
            for k in [1, 3, 40, 300, n - 1].into_iter().filter(|&k| k < n) {
                let mut full = Candidates::new();
                full.fill(&logits);
                full.sort_prefix(k);
                full.truncate(k);
                let mut fast = Candidates::new();
                fast.fill_top_k(&logits, k);
                assert_eq!(ids(&fast), ids(&full), "n {n} k {k}");
                assert_eq!(fast.n_sorted(), k);
            }
        }
        let mut c = Candidates::new();
        c.fill_top_k(&[1.0, 2.0], 0);
        assert_eq!(ids(&c), vec![0, 1], "0 = everything, in id order");
    }

    #[test]
    fn retain_above_keeps_sorted_prefix_valid() {
        let mut c = Candidates::new();
        c.fill(&[1.0, 3.0, 2.0, 0.0, 2.5]);
        c.sort_prefix(3); // [1, 4, 2]
        c.retain_above(2.2);
        assert_eq!(ids(&c), vec![1, 4]);
        assert_eq!(c.n_sorted(), 2);
    }
}
