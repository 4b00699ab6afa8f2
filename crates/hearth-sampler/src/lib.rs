//! Token sampling: a chain of logit processors ending in a picker.
//!
//! ```text
//!   logits [n_vocab] ──► penalties ──► top_k ──► top_p ──► min_p ──► temperature ──► softmax + draw
//!                         (history)                                                  (seeded ChaCha8)
//!   temperature == 0:  logits ──► penalties ──► argmax (ties to the lower id)
//! ```
//!
//! The order and the semantics of each stage follow llama.cpp's default sampler chain,
//! so the same parameters give the same candidate sets. Logprobs for the API are read
//! from the raw logits with [`log_softmax`] / [`top_logprobs`], before any processor.
//!
//! NOTE: built for large vocabularies (262k): with `top_k` set nothing is fully sorted
//! (`select_nth_unstable_by`), `top_p` sorts only as far as it needs, and the candidate
//! buffer is reused across calls.

mod candidates;
mod math;
mod params;
mod processors;
mod sampler;

pub use candidates::{best_of_rows, Candidate, Candidates};
pub use math::{argmax, log_softmax, top_logprobs};
pub use params::{SamplerError, SamplingParams};
pub use processors::{apply_penalties, apply_temperature, min_p, penalties_enabled, top_k, top_p};
pub use sampler::{sample_best_rows, sample_rows, Sampler, MAX_DEVICE_TOP_K};
