//! The engine: a model, its tokenizer and chat template, a paged KV cache, and sequences that
//! run through them.
//!
//! One step is one batched forward over the tokens of the sequences it is given. The CLI runs
//! one sequence at a time; the server's scheduler hands several to the same step. Models come
//! from a GGUF file or a Hugging Face folder (`source.rs`).

mod batch_step;
pub mod embed;
mod engine;
mod error;
mod generate;
mod greedy;
mod plan_step;
mod prompt;
mod runner;
pub mod scheduler;
mod sequence;
mod source;

pub use batch_step::SeqStep;
pub use engine::{Engine, EngineOptions, ModelInfo};
pub use error::EngineError;
pub use generate::{FinishReason, GenerationReport};
pub use hearth_backend::KvType;
pub use plan_step::{NextToken, PlanOutput};
pub use prompt::PromptBuilder;
pub use runner::Device;
pub use sequence::Sequence;
