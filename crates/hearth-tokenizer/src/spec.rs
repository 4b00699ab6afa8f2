//! `VocabSpec`: everything a tokenizer is built from, independent of the file format it came from.
//!
//! `Tokenizer::from_spec` is the real constructor; `from_gguf` (and later an HF `tokenizer.json`
//! reader) only fill this struct.

/// The tokenization algorithm family (`tokenizer.ggml.model`).
#[derive(Debug, Clone, PartialEq)]
pub enum VocabModel {
    /// Byte-level BPE (`gpt2`): merges in rank order, text split by a pre-tokenizer first.
    BytePairGpt2 {
        /// Merge rules in rank order, each as the pair of token strings it joins.
        merges: Vec<(String, String)>,
        /// The pre-tokenizer name as stored in `tokenizer.ggml.pre` (`smollm`, `llama-bpe`, `qwen2`, ...).
        pre: String,
    },
    /// SentencePiece BPE as llama.cpp runs it (`llama`): greedy merges by token score.
    SentencePiece,
}

/// Token type as stored in `tokenizer.ggml.token_type` (the llama.cpp / gguf-py enumeration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0: no type given.
    Undefined,
    /// 1: an ordinary piece of text.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token (`<bos>`, `<|im_end|>`, ...): matched only with `parse_special`, decodes to nothing.
    Control,
    /// 4: a user-defined token: always matched literally before the text is split, decodes to its text.
    UserDefined,
    /// 5: an unused slot.
    Unused,
    /// 6: a byte token `<0xXX>` (SentencePiece byte fallback).
    Byte,
}

impl TokenType {
    /// Maps the stored integer; unknown values read as `Undefined`, as llama.cpp does.
    pub fn from_i32(value: i32) -> TokenType {
        match value {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// A complete description of a vocabulary and its special-token configuration.
#[derive(Debug, Clone)]
pub struct VocabSpec {
    /// Algorithm family and its data.
    pub model: VocabModel,
    /// Token strings by id (`tokenizer.ggml.tokens`).
    pub tokens: Vec<String>,
    /// Per-token scores (`tokenizer.ggml.scores`); SentencePiece merges by them. Empty means all 0.
    pub scores: Vec<f32>,
    /// Per-token types (`tokenizer.ggml.token_type`). Empty means all `Normal`.
    pub token_types: Vec<TokenType>,
    /// Beginning-of-sequence token.
    pub bos_id: Option<u32>,
    /// End-of-sequence token.
    pub eos_id: Option<u32>,
    /// End-of-turn token, when the file names one.
    pub eot_id: Option<u32>,
    /// End-of-message token, when the file names one.
    pub eom_id: Option<u32>,
    /// Unknown token.
    pub unk_id: Option<u32>,
    /// Padding token.
    pub pad_id: Option<u32>,
    /// Whether prompts start with BOS.
    pub add_bos: bool,
    /// Whether prompts end with EOS.
    pub add_eos: bool,
    /// SentencePiece: prepend a space to text that follows the start or a special token.
    pub add_space_prefix: bool,
    /// `general.name` lower-cased; llama.cpp derives strip attributes of special tokens from it (Phi-3).
    pub model_name: String,
}
