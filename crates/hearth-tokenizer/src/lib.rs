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
mod hf;
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

/// Token string -> id. NOTE: aHash instead of SipHash: lookups of candidate pieces dominate
/// SentencePiece encoding, and the keys are not attacker-chosen in a way that matters here
/// (aHash is still randomly seeded).
pub(crate) type TokenMap = std::collections::HashMap<String, u32, ahash::RandomState>;
pub use spec::{TokenType, VocabModel, VocabSpec};
pub use stream::{StreamDecoder, Utf8Assembler};
pub use template::{ChatMessage, ChatTemplate};
pub use tokenizer::Tokenizer;

#[cfg(test)]
mod tests {
    /// Tokenizers and templates are shared between request handlers.
    #[test]
    fn shared_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::Tokenizer>();
        assert_send_sync::<super::ChatTemplate>();
        assert_send_sync::<super::StreamDecoder<'static>>();
    }
}
