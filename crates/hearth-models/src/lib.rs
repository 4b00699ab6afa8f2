//! Model definitions.
//!
//! Every supported architecture is a [`DecoderModel`] configured by a small file in [`arch`]
//! that reads its hyperparameters from GGUF metadata and sets the flags that make it differ from
//! its siblings (QK-norm, post-norms, sliding windows, ...). [`registry`] maps
//! `general.architecture` (and HF `architectures` names) to those files; [`hf`] reads
//! Hugging Face safetensors folders.

pub mod arch;
mod batch;
mod config;
mod decoder;
mod dynamic_ntk;
pub mod encoder;
mod error;
pub mod hf;
mod loader;
mod moe;
pub mod registry;
mod rope_scaling;

pub use batch::Batch;
pub use config::{DecoderConfig, LayerKind, LongRope};
pub use decoder::DecoderModel;
pub use dynamic_ntk::DynamicNtk;
pub use error::ModelError;
pub use loader::{GgufTensorBytes, TensorLoader, TensorSource};
pub use moe::MoeConfig;
