//! The logit processors of the chain, each usable on its own.
//!
//! Semantics follow llama.cpp's samplers of the same names; each takes the candidates as
//! the previous stage left them.

use crate::candidates::{Candidate, Candidates};
use crate::params::SamplingParams;

/// Candidates looked at per round by [`top_p`] before it sorts further.
const TOP_P_FIRST_CHUNK: usize = 64;

/// Repetition, frequency and presence penalties over the last `repeat_last_n` tokens of
/// `history`, applied to `logits` (`[n_vocab]`, indexed by token id). For a token
/// occurring `count > 0` times in that window:
///
/// ```text
/// logit = logit <= 0 ? logit * repeat_penalty : logit / repeat_penalty
/// logit -= count * frequency_penalty + presence_penalty
/// ```
///
/// History tokens outside the vocabulary are ignored.
pub fn apply_penalties(logits: &mut [f32], history: &[u32], params: &SamplingParams) {
    if !penalties_enabled(params) {
        return;
    }
    for (id, count) in window_counts(history, params) {
        if let Some(l) = logits.get_mut(id as usize) {
            *l = penalized(*l, count, params);
        }
    }
}

/// [`apply_penalties`] on candidates of a row instead of the row: the same operations on the
/// logits of the candidates the window holds. Their order is no longer sorted.
pub fn penalize_candidates(cands: &mut [Candidate], history: &[u32], params: &SamplingParams) {
    if !penalties_enabled(params) {
        return;
    }
    for (id, count) in window_counts(history, params) {
        if let Some(c) = cands.iter_mut().find(|c| c.id == id) {
            c.logit = penalized(c.logit, count, params);
        }
    }
}

/// The distinct tokens of the penalty window (the last `repeat_last_n` of `history`), each
/// with its count, by id.
fn window_counts(history: &[u32], params: &SamplingParams) -> Vec<(u32, usize)> {
    let start = history.len().saturating_sub(params.repeat_last_n);
    let mut window = history[start..].to_vec();
    window.sort_unstable();
    window
        .chunk_by(|a, b| a == b)
        .map(|run| (run[0], run.len()))
        .collect()
}

/// One logit after the penalties of a token seen `count` times in the window.
fn penalized(mut l: f32, count: usize, params: &SamplingParams) -> f32 {
    if l <= 0.0 {
        l *= params.repeat_penalty;
    } else {
        l /= params.repeat_penalty;
    }
    l - (count as f32 * params.frequency_penalty + params.presence_penalty)
}

/// Whether the penalties can only lower a logit (or leave it): a repeat penalty of at least 1
/// (dividing a positive logit, multiplying a negative one), frequency and presence penalties
/// of at least 0 (subtracted).
pub fn penalties_only_lower(params: &SamplingParams) -> bool {
    params.repeat_penalty >= 1.0
        && params.frequency_penalty >= 0.0
        && params.presence_penalty >= 0.0
}

/// Whether [`apply_penalties`] changes anything with these parameters.
pub fn penalties_enabled(params: &SamplingParams) -> bool {
    params.repeat_last_n > 0
        && (params.repeat_penalty != 1.0
            || params.frequency_penalty != 0.0
            || params.presence_penalty != 0.0)
}

/// Keeps the `k` best candidates (ties to the lower id), sorted best first; 0 = off.
pub fn top_k(cands: &mut Candidates, k: usize) {
    if k == 0 || k >= cands.len() {
        return;
    }
    cands.sort_prefix(k);
    cands.truncate(k);
}

/// Keeps the smallest set of best candidates whose softmax probability (over the current
/// candidates) sums to at least `p`, the token that crosses `p` included; `p >= 1` = off.
///
/// NOTE: sorts in growing chunks instead of sorting the whole vocabulary: the mass is
/// usually in the first few dozen tokens.
pub fn top_p(cands: &mut Candidates, p: f32) {
    if p >= 1.0 || cands.len() <= 1 {
        return;
    }
    let max = cands.max_logit();
    if max == f32::INFINITY {
        // All the probability sits on the +inf candidates.
        cands.retain_above(f32::INFINITY);
        return;
    }
    if max == f32::NEG_INFINITY {
        return; // no distribution to cut
    }
    let weight = |l: f32| f64::from((l - max).exp());
    let total: f64 = cands.as_slice().iter().map(|c| weight(c.logit)).sum();
    let target = f64::from(p) * total;
    let (mut cum, mut done, mut chunk) = (0.0f64, 0, TOP_P_FIRST_CHUNK);
    while done < cands.len() {
        let end = (done + chunk).min(cands.len());
        cands.sort_prefix(end);
        for i in done..end {
            cum += weight(cands.as_slice()[i].logit);
            if cum >= target {
                cands.truncate(i + 1);
                return;
            }
        }
        done = end;
        chunk *= 2;
    }
}

/// Drops candidates whose probability is below `p` times the best one's, i.e. with
/// `logit < max_logit + ln(p)`; 0 = off. The best candidate always stays.
pub fn min_p(cands: &mut Candidates, p: f32) {
    if p <= 0.0 || cands.is_empty() {
        return;
    }
    let max = cands.max_logit();
    if max == f32::NEG_INFINITY {
        return;
    }
    cands.retain_above(max + p.ln());
}

/// Divides every logit by `t`. `t <= 0` keeps only the best candidate (greedy).
pub fn apply_temperature(cands: &mut Candidates, t: f32) {
    if t <= 0.0 {
        top_k(cands, 1);
    } else if t != 1.0 {
        cands.divide(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(logits: &[f32]) -> Candidates {
        let mut c = Candidates::new();
        c.fill(logits);
        c
    }

    fn ids(c: &Candidates) -> Vec<u32> {
        c.as_slice().iter().map(|c| c.id).collect()
    }

    fn logits(c: &Candidates) -> Vec<f32> {
        c.as_slice().iter().map(|c| c.logit).collect()
    }

    fn penalties(repeat: f32, freq: f32, presence: f32, last_n: usize) -> SamplingParams {
        SamplingParams {
            repeat_penalty: repeat,
            frequency_penalty: freq,
            presence_penalty: presence,
            repeat_last_n: last_n,
            ..SamplingParams::default()
        }
    }

    #[test]
    fn repeat_penalty_divides_positive_and_multiplies_negative() {
        let mut l: Vec<f32> = vec![2.0, -2.0, 3.0, 0.0, 1.0];
        apply_penalties(&mut l, &[0, 1, 1, 3, 99], &penalties(2.0, 0.0, 0.0, 64));
        assert_eq!(l, [1.0, -4.0, 3.0, 0.0, 1.0]);
    }

    #[test]
    fn frequency_and_presence_penalties_count_occurrences() {
        let mut l: Vec<f32> = vec![2.0, -2.0, 3.0, 0.0];
        apply_penalties(&mut l, &[0, 1, 1, 1], &penalties(1.0, 0.5, 0.25, 64));
        // token 0: 2 - (1*0.5 + 0.25); token 1: -2 - (3*0.5 + 0.25)
        assert_eq!(l, [1.25, -3.75, 3.0, 0.0]);
    }

    #[test]
    fn penalties_only_see_the_last_n_tokens() {
        let mut l: Vec<f32> = vec![4.0, 4.0, 4.0];
        apply_penalties(&mut l, &[0, 0, 1, 2, 2], &penalties(2.0, 1.0, 0.0, 3));
        // window [1, 2, 2]: token 1 -> 4/2 - 1, token 2 -> 4/2 - 2, token 0 untouched
        assert_eq!(l, [4.0, 1.0, 0.0]);
        let mut l: Vec<f32> = vec![4.0, 4.0, 4.0];
        apply_penalties(&mut l, &[0, 1, 2], &penalties(2.0, 1.0, 0.0, 0));
        assert_eq!(l, [4.0, 4.0, 4.0], "repeat_last_n = 0 disables");
        assert!(!penalties_enabled(&penalties(2.0, 1.0, 0.0, 0)));
        assert!(!penalties_enabled(&penalties(1.0, 0.0, 0.0, 64)));
        let mut l: Vec<f32> = vec![4.0, 4.0, 4.0];
        apply_penalties(&mut l, &[0, 1, 2], &penalties(2.0, 0.0, 0.0, usize::MAX));
        assert_eq!(l, [2.0, 2.0, 2.0], "usize::MAX = whole history");
    }

    #[test]
    fn top_k_keeps_k_best_sorted_with_ties_to_lower_id() {
        let mut c = cands(&[1.0, 5.0, 3.0, 5.0, 3.0, 0.0]);
        top_k(&mut c, 3);
        assert_eq!(ids(&c), vec![1, 3, 2]);
        let mut c = cands(&[1.0, 2.0]);
        top_k(&mut c, 0);
        assert_eq!(ids(&c), vec![0, 1], "0 = off");
        top_k(&mut c, 5);
        assert_eq!(ids(&c), vec![0, 1], "k >= n keeps all");
    }

    /// Probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 (logits ln of them).
    fn halving() -> Candidates {
        let p: [f32; 5] = [0.0625, 0.5, 0.125, 0.25, 0.0625];
        cands(&p.map(f32::ln))
    }

    #[test]
    fn top_p_cuts_at_the_token_that_crosses_p() {
        for (p, want) in [
            (0.4, vec![1]),
            (0.49, vec![1]),
            (0.51, vec![1, 3]),
            (0.74, vec![1, 3]),
            (0.76, vec![1, 3, 2]),
            (0.8, vec![1, 3, 2]),
            (0.9, vec![1, 3, 2, 0]),
            (0.99, vec![1, 3, 2, 0, 4]),
        ] {
            let mut c = halving();
            top_p(&mut c, p);
            assert_eq!(ids(&c), want, "top_p {p}");
        }
        let mut c = halving();
        top_p(&mut c, 1.0);
        assert_eq!(ids(&c), vec![0, 1, 2, 3, 4], "1 = off, order untouched");
    }

    #[test]
    fn top_p_is_relative_to_the_surviving_candidates() {
        let mut c = halving();
        top_k(&mut c, 2); // 0.5 and 0.25 -> renormalized 2/3 and 1/3
        top_p(&mut c, 0.66);
        assert_eq!(ids(&c), vec![1]);
        let mut c = halving();
        top_k(&mut c, 2);
        top_p(&mut c, 0.67);
        assert_eq!(ids(&c), vec![1, 3]);
    }

    #[test]
    fn top_p_over_a_large_vocabulary_sorts_in_chunks() {
        // 1000 tokens with equal logits but one: p = 0.5 needs many chunks.
        let mut l = vec![0.0f32; 1000];
        l[500] = 1.0;
        let mut c = cands(&l);
        top_p(&mut c, 0.5);
        // Weights 1 for token 500 and w = 1/e for the rest; the n-th kept token brings
        // the sum to 1 + (n - 1) w, which first reaches 0.5 (1 + 999 w) at n = 500.
        let need = 500;
        assert_eq!(c.len(), need);
        assert_eq!(c.as_slice()[0].id, 500);
        assert_eq!(c.as_slice()[1].id, 0, "ties by id");
        assert_eq!(c.as_slice()[need - 1].id, need as u32 - 2);
    }

    #[test]
    fn min_p_cuts_below_p_times_the_best() {
        for (p, want) in [
            (0.1, vec![0, 1, 2, 3, 4]),
            (0.12, vec![0, 1, 2, 3, 4]),
            (0.13, vec![1, 2, 3]),
            (0.2, vec![1, 2, 3]),
            (0.4, vec![1, 3]),
            (0.6, vec![1]),
            (1.0, vec![1]),
        ] {
            let mut c = halving();
            min_p(&mut c, p);
            assert_eq!(ids(&c), want, "min_p {p}");
        }
    }

    #[test]
    fn temperature_divides_logits() {
        let mut c = cands(&[1.0, -2.0, 0.5]);
        apply_temperature(&mut c, 0.5);
        assert_eq!(logits(&c), vec![2.0, -4.0, 1.0]);
        apply_temperature(&mut c, 0.0);
        assert_eq!(ids(&c), vec![0]);
    }

    #[test]
    fn infinities_survive_the_processors() {
        let inf = f32::INFINITY;
        let mut c = cands(&[1.0, inf, f32::NAN, inf, -inf]);
        top_p(&mut c, 0.9);
        assert_eq!(ids(&c), vec![1, 3]);
        let mut c = cands(&[1.0, inf, f32::NAN, 0.0]);
        min_p(&mut c, 0.5);
        assert_eq!(ids(&c), vec![1]);
        let mut c = cands(&[f32::NAN, -inf]);
        min_p(&mut c, 0.5);
        top_p(&mut c, 0.5);
        assert_eq!(ids(&c), vec![0, 1], "no distribution: nothing cut");
    }
}
