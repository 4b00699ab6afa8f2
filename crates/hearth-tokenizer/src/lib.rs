//! hearth-tokenizer: tokenizers built from GGUF metadata (byte-level BPE and SentencePiece, both
//! matching llama.cpp token for token), streaming detokenization, and chat templates.
//!
//! ```text
//! GGUF metadata ──► VocabSpec ──► Tokenizer::from_spec ──► encode / decode / StreamDecoder
//! tokenizer.chat_template ──► ChatTemplate::render(messages) ──► prompt text ──► encode_prompt
//! ```

mod bpe;
mod error;
mod gguf;
mod pretokenize;
mod spec;
mod special;
mod spm;
mod stream;
mod template;
mod tokenizer;
mod unicode;
mod vocab_rules;

pub use error::TokenizerError;
pub use spec::{TokenType, VocabModel, VocabSpec};
pub use stream::StreamDecoder;
pub use template::{ChatMessage, ChatTemplate};
pub use tokenizer::Tokenizer;
