//! Softmax-family helpers over raw logits: log-probabilities and argmax.

use crate::candidates::{better, Candidate};

/// Above this many requested logprobs [`top_logprobs`] selects over a copy of the logits
/// instead of keeping a small sorted list.
const SMALL_TOP_N: usize = 32;

/// How to turn a logit into a log-probability: `logit - log_z`, with the special
/// cases of +inf logits and of no finite distribution.
#[derive(Clone, Copy)]
enum Normalizer {
    /// `logprob = logit - log_z`.
    Finite(f32),
    /// `n` logits are +inf: each has probability 1/n, everything else 0.
    Infinite(usize),
    /// Every logit is -inf or NaN: no distribution; every logprob is -inf.
    Empty,
}

impl Normalizer {
    fn of(logits: &[f32]) -> Self {
        let max = max_logit(logits);
        if max == f32::INFINITY {
            return Self::Infinite(logits.iter().filter(|&&l| l == f32::INFINITY).count());
        }
        if max == f32::NEG_INFINITY {
            return Self::Empty;
        }
        let sum: f64 = logits
            .iter()
            .filter(|l| !l.is_nan())
            .map(|&l| f64::from((l - max).exp()))
            .sum();
        Self::Finite(max + sum.ln() as f32)
    }

    fn logprob(self, logit: f32) -> f32 {
        match self {
            _ if logit.is_nan() => f32::NEG_INFINITY,
            Self::Finite(log_z) => logit - log_z,
            Self::Infinite(n) if logit == f32::INFINITY => -(n as f32).ln(),
            Self::Infinite(_) | Self::Empty => f32::NEG_INFINITY,
        }
    }
}

/// Log-probabilities of `logits` (a numerically stable log-softmax, accumulated in f64).
/// NaN logits get -inf; if some logits are +inf they share all the probability; if all
/// are -inf or NaN every entry is -inf.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let norm = Normalizer::of(logits);
    logits.iter().map(|&l| norm.logprob(l)).collect()
}

/// The `n` most likely tokens and their log-probabilities, most likely first (ties to
/// the lower id). Fewer when the vocabulary is smaller than `n`.
pub fn top_logprobs(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    let n = n.min(logits.len());
    if n == 0 {
        return Vec::new();
    }
    let norm = Normalizer::of(logits);
    let cand = |(i, &l): (usize, &f32)| Candidate {
        id: i as u32,
        logit: if l.is_nan() { f32::NEG_INFINITY } else { l },
    };
    let best: Vec<Candidate> = if n <= SMALL_TOP_N {
        // NOTE: one pass keeping a sorted list of n; a new token rarely beats the n-th.
        let mut best: Vec<Candidate> = Vec::with_capacity(n + 1);
        for c in logits.iter().enumerate().map(cand) {
            if best.len() == n && better(&c, &best[n - 1]).is_ge() {
                continue;
            }
            let at = best.partition_point(|b| better(b, &c).is_lt());
            best.insert(at, c);
            best.truncate(n);
        }
        best
    } else {
        let mut all: Vec<Candidate> = logits.iter().enumerate().map(cand).collect();
        if n < all.len() {
            all.select_nth_unstable_by(n - 1, better);
        }
        all.truncate(n);
        all.sort_unstable_by(better);
        all
    };
    best.into_iter()
        .map(|c| (c.id, norm.logprob(logits[c.id as usize])))
        .collect()
}

/// Index of the largest logit; ties go to the lower id and NaN never wins. 0 when
/// `logits` is empty or all NaN.
pub fn argmax(logits: &[f32]) -> u32 {
    let max = max_logit(logits);
    // NOTE: NaN == max is false, so NaN never wins. Whole chunks are tested first (a
    // vectorized compare) and only the chunk holding the maximum is searched.
    let chunk = logits
        .chunks(LANES)
        .position(|c| c.iter().fold(false, |hit, &l| hit | (l == max)))
        .unwrap_or(0);
    let start = chunk * LANES;
    let offset = logits[start..].iter().position(|&l| l == max).unwrap_or(0);
    (start + offset) as u32
}

/// Independent accumulators in [`max_logit`] and chunk size in [`argmax`].
const LANES: usize = 16;

/// Largest non-NaN logit (-inf when there is none).
pub(crate) fn max_logit(logits: &[f32]) -> f32 {
    // NOTE: independent lanes with a plain `>` (false for NaN, so NaN is skipped)
    // compile to vector compare-and-select; a single running max does not vectorize.
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (m, &l) in lanes.iter_mut().zip(chunk) {
            *m = if l > *m { l } else { *m };
        }
    }
    let mut max = f32::NEG_INFINITY;
    for &l in lanes.iter().chain(tail) {
        if l > max {
            max = l;
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f32 = f32::INFINITY;

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y || (x - y).abs() < 1e-6)
    }

    #[test]
    fn log_softmax_matches_hand_computation() {
        // ln(e^0 + e^1 + e^2) = 2.4076059644
        let out = log_softmax(&[0.0, 1.0, 2.0]);
        assert!(
            close(&out, &[-2.407_606, -1.407_606, -0.407_606]),
            "{out:?}"
        );
        // Shift invariance and no overflow at large logits.
        // (f32 spacing near 1000 is 6e-5, so compare loosely.)
        let big = log_softmax(&[1000.0, 1001.0, 1002.0]);
        assert!(
            big.iter().zip(&out).all(|(b, o)| (b - o).abs() < 2e-4),
            "{big:?}"
        );
        let sum: f64 = log_softmax(&[3.0, -1.0, 0.5, 7.0])
            .iter()
            .map(|&l| f64::from(l).exp())
            .sum();
        assert!((sum - 1.0).abs() < 1e-6);
    }

    #[test]
    fn log_softmax_handles_nan_and_infinities() {
        let out = log_softmax(&[f32::NAN, 0.0, -INF, 0.0]);
        assert!(close(
            &out,
            &[-INF, -std::f32::consts::LN_2, -INF, -std::f32::consts::LN_2]
        ));
        let out = log_softmax(&[1.0, INF, INF, f32::NAN]);
        assert!(close(
            &out,
            &[-INF, -std::f32::consts::LN_2, -std::f32::consts::LN_2, -INF]
        ));
        assert_eq!(log_softmax(&[-INF, f32::NAN]), vec![-INF, -INF]);
        assert!(log_softmax(&[]).is_empty());
    }

    #[test]
    fn top_logprobs_sorted_desc_ties_to_lower_id() {
        let logits = [1.0, 3.0, f32::NAN, 3.0, 2.0, -1.0];
        let lp = log_softmax(&logits);
        let top = top_logprobs(&logits, 3);
        assert_eq!(top, vec![(1, lp[1]), (3, lp[3]), (4, lp[4])]);
        assert_eq!(top_logprobs(&logits, 0), vec![]);
        let all = top_logprobs(&logits, 100);
        let ids: Vec<u32> = all.iter().map(|&(id, _)| id).collect();
        assert_eq!(ids, vec![1, 3, 4, 0, 5, 2]);
        assert_eq!(all[5].1, -INF);
    }

    #[test]
    fn top_logprobs_small_and_large_paths_agree() {
        let logits: Vec<f32> = (0..5000u32)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.01)
            .collect();
        let small = top_logprobs(&logits, SMALL_TOP_N);
        let large = top_logprobs(&logits, SMALL_TOP_N + 1);
        assert_eq!(&large[..SMALL_TOP_N], &small[..]);
        // Reference: full sort.
        let lp = log_softmax(&logits);
        let mut idx: Vec<u32> = (0..5000).collect();
        idx.sort_by(|&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
        let want: Vec<(u32, f32)> = idx[..SMALL_TOP_N + 1]
            .iter()
            .map(|&i| (i, lp[i as usize]))
            .collect();
        assert_eq!(large, want);
    }

    #[test]
    fn argmax_ties_nan_and_infinities() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0, f32::NAN]), 1);
        assert_eq!(argmax(&[f32::NAN, -INF]), 1);
        assert_eq!(argmax(&[0.0, INF, INF]), 1);
        assert_eq!(argmax(&[-INF, -INF]), 0);
        assert_eq!(argmax(&[f32::NAN]), 0);
        assert_eq!(argmax(&[]), 0);
        // Longer than one chunk: the maximum in a later chunk, ties across chunks.
        let mut l = vec![0.5f32; 100];
        l[37] = 2.0;
        l[90] = 2.0;
        l[3] = f32::NAN;
        assert_eq!(argmax(&l), 37);
        assert_eq!(max_logit(&l), 2.0);
        l[99] = INF;
        assert_eq!(argmax(&l), 99);
    }
}
