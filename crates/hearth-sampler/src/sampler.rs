//! The sampler: runs the processor chain and draws a token.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::candidates::{Candidate, Candidates};
use crate::math::argmax;
use crate::params::{SamplerError, SamplingParams};
use crate::processors::{
    apply_penalties, apply_temperature, min_p, penalize_candidates, penalties_enabled,
    penalties_only_lower, top_k, top_p,
};

/// One sequence's sampler: the parameters, a seeded RNG and reusable scratch.
///
/// Deterministic for a given seed: ChaCha8 produces the same stream on every platform,
/// and every sort in the chain is by a total order (logit, then id).
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplingParams,
    seed: u64,
    rng: ChaCha8Rng,
    /// [n_vocab] candidate buffer, reused across calls.
    cands: Candidates,
    /// [n_vocab] penalized copy of the logits, reused across calls (penalties only).
    penalized: Vec<f32>,
}

impl Sampler {
    /// Validates `params` and seeds the RNG (`seed: None` draws a seed from the OS).
    pub fn new(params: SamplingParams) -> Result<Self, SamplerError> {
        params.validate()?;
        let seed = params.seed.unwrap_or_else(rand::random);
        Ok(Self {
            params,
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            cands: Candidates::new(),
            penalized: Vec::new(),
        })
    }

    /// The parameters this sampler runs with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The seed in use (the drawn one when `params.seed` was `None`), for reproducing a run.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Whether [`Self::sample`] is the plain [`argmax`] of the logits (temperature 0 and no
    /// penalties), so that a caller may take the argmax from the device instead of the
    /// logits. The RNG is not used then, so skipping `sample` changes nothing.
    pub fn is_argmax(&self) -> bool {
        self.params.temperature == 0.0 && !penalties_enabled(&self.params)
    }

    /// How many of a row's best candidates [`Self::sample_best`] needs to pick exactly what
    /// [`Self::sample`] would from the whole row: 1 when greedy, `top_k` when sampling
    /// with a top-k stage (every later stage sees only those). Penalties that can only lower
    /// logits (repeat penalty at least 1, frequency and presence penalties at least 0) add
    /// `repeat_last_n`: they move at most that many tokens, and only down, so the best of the
    /// penalized row are among that many more of the raw row's best. `None` when the pick
    /// depends on the whole row: penalties that raise logits, and sampling without top-k (top-p
    /// and min-p then see every token). A device then selects the candidates and copies back
    /// this many per sequence instead of the row.
    pub fn best_needed(&self) -> Option<usize> {
        let p = &self.params;
        let k = if p.temperature == 0.0 {
            1
        } else if p.top_k > 0 {
            p.top_k
        } else {
            return None;
        };
        if !penalties_enabled(p) {
            return Some(k);
        }
        penalties_only_lower(p).then(|| k.saturating_add(p.repeat_last_n))
    }

    /// As [`Self::sample`], from the row's best candidates, sorted best first as
    /// [`crate::best_of_rows`] gives them, at least [`Self::best_needed`] of them (or the whole
    /// vocabulary, when smaller); later ones are ignored. `history` as for `sample`: the
    /// penalties are applied to the candidates. Callers check `best_needed` first.
    ///
    /// NOTE: when greedy this is the best candidate, which is `argmax` of the row except in a
    /// row whose largest value is -inf or NaN (there NaN counts as -inf, where `argmax` never
    /// picks it).
    pub fn sample_best(&mut self, best: &[Candidate], history: &[u32]) -> u32 {
        let Self {
            params: p,
            rng,
            cands,
            ..
        } = self;
        let k = if p.temperature == 0.0 { 1 } else { p.top_k };
        if penalties_enabled(p) {
            cands.fill_unsorted(best);
            penalize_candidates(cands.as_mut_slice(), history, p);
            if k >= cands.len() {
                // The whole vocabulary (a row no longer than `best_needed`): in id order, as
                // `sample` holds it when its top-k stage keeps everything.
                cands.sort_by_id();
            }
            top_k(cands, k);
        } else {
            cands.fill_sorted(&best[..k.min(best.len())]);
        }
        if p.temperature == 0.0 {
            return cands.as_slice().first().map_or(0, |c| c.id);
        }
        top_p(cands, p.top_p);
        min_p(cands, p.min_p);
        apply_temperature(cands, p.temperature);
        draw(cands, rng)
    }

    /// Picks the next token from `logits` (`[n_vocab]`). `history` = previous tokens of
    /// this sequence (prompt + generated), for the penalties. Returns 0 for empty logits.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let Self {
            params: p,
            rng,
            cands,
            penalized,
            ..
        } = self;
        let logits = if penalties_enabled(p) {
            penalized.clear();
            penalized.extend_from_slice(logits);
            apply_penalties(penalized, history, p);
            &penalized[..]
        } else {
            logits
        };
        if p.temperature == 0.0 {
            return argmax(logits);
        }
        // fill_top_k is the top_k stage: it leaves exactly the top_k best candidates.
        cands.fill_top_k(logits, p.top_k);
        top_p(cands, p.top_p);
        min_p(cands, p.min_p);
        apply_temperature(cands, p.temperature);
        draw(cands, rng)
    }
}

/// The largest `top_k` a GPU backend selects on the device (`Backend::top_k_rows`); larger
/// ones bring the logits back.
pub const MAX_DEVICE_TOP_K: usize = 128;

/// One draw for each of several sequences, rows in parallel: `work[i]` is a sequence's
/// sampler, its logits row and its history, as [`Sampler::sample`] takes them. Returns the
/// tokens in `work`'s order; each is what `sample` alone would draw, since every sampler keeps
/// its own RNG.
///
/// NOTE: a server step samples every running sequence; at the default settings one 152k-token
/// row takes 60-130 µs, so 64 rows one after the other would cost about as much as the GPU's
/// forward pass of the step.
pub fn sample_rows(work: &mut [(&mut Sampler, &[f32], &[u32])]) -> Vec<u32> {
    use rayon::prelude::*;
    work.par_iter_mut()
        .map(|(sampler, logits, history)| sampler.sample(logits, history))
        .collect()
}

/// [`sample_rows`] for rows of best candidates: `work[i]` is a sequence's sampler, its row's
/// best candidates and its history, as [`Sampler::sample_best`] takes them.
///
/// NOTE: with penalties a row's draw also sorts its window and penalizes and selects among up
/// to 128 candidates. On an H100 machine's 16 cores, 64 sequences of a 0.6B model decoded no
/// faster measurably with these draws in parallel than one after the other (within the runs'
/// spread, BENCHMARKS.md); they run like `sample_rows` so that a step's draws cost the same
/// either way.
pub fn sample_best_rows(work: &mut [(&mut Sampler, &[Candidate], &[u32])]) -> Vec<u32> {
    use rayon::prelude::*;
    work.par_iter_mut()
        .map(|(sampler, best, history)| sampler.sample_best(best, history))
        .collect()
}

/// Softmax over the candidates and one draw. Weights are `exp(logit - max)` summed in
/// f64; +inf candidates share all the mass; with no finite weight the best candidate
/// (lowest id among equals) is returned without using the RNG.
fn draw(cands: &Candidates, rng: &mut ChaCha8Rng) -> u32 {
    let items = cands.as_slice();
    match items {
        [] => return 0,
        [only] => return only.id,
        _ => {}
    }
    let max = cands.max_logit();
    let weight = |l: f32| -> f64 {
        if max == f32::INFINITY {
            f64::from(u8::from(l == f32::INFINITY))
        } else {
            f64::from((l - max).exp())
        }
    };
    if max == f32::NEG_INFINITY {
        return best_id(cands);
    }
    let total: f64 = items.iter().map(|c| weight(c.logit)).sum();
    let target = rng.gen::<f64>() * total;
    let mut cum = 0.0;
    let mut last_positive = None;
    for c in items {
        let w = weight(c.logit);
        if w > 0.0 {
            cum += w;
            last_positive = Some(c.id);
            if cum > target {
                return c.id;
            }
        }
    }
    // NOTE: reached only if rounding left `cum` a hair under `target`.
    last_positive.unwrap_or_else(|| best_id(cands))
}

fn best_id(cands: &Candidates) -> u32 {
    let items = cands.as_slice();
    let max = cands.max_logit();
    items
        .iter()
        .filter(|c| c.logit == max)
        .map(|c| c.id)
        .min()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
