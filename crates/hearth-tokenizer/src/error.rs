//! Errors of tokenizer construction, encoding and chat template rendering.

/// Everything that can go wrong while building a tokenizer, encoding text or rendering a template.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// Reading a metadata key failed (wrong type, malformed array, ...).
    #[error("GGUF metadata: {0}")]
    Gguf(#[from] hearth_gguf::GgufError),
    /// A required metadata key is absent.
    #[error("GGUF metadata key `{0}` is missing")]
    MissingKey(&'static str),
    /// `tokenizer.ggml.model` names a tokenizer family this crate does not implement.
    #[error("unsupported tokenizer model `{0}` (tokenizer.ggml.model); supported: gpt2, llama")]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not know.
    #[error("unknown pre-tokenizer type `{0}` (tokenizer.ggml.pre)")]
    UnknownPreTokenizer(String),
    /// The vocabulary is inconsistent (array lengths, token ids out of range, bad merges, ...).
    #[error("invalid vocabulary: {0}")]
    InvalidVocab(String),
    /// The BPE model rejected its input.
    #[error("BPE model: {0}")]
    Bpe(String),
    /// A chat template failed to compile or to render; the message names the template.
    #[error("chat template `{name}`: {message}")]
    Template { name: String, message: String },
    /// The template called `raise_exception(msg)`.
    #[error("chat template `{name}` raised an exception: {message}")]
    TemplateException { name: String, message: String },
    /// `ChatTemplate::builtin` was asked for a name it does not have.
    #[error("unknown built-in chat template `{0}` (known: chatml, llama3, gemma, mistral)")]
    UnknownTemplate(String),
}
