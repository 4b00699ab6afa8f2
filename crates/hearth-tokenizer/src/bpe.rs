//! Byte-level BPE: llama.cpp's pre-tokenizer split, the GPT-2 byte alphabet, then HF
//! `tokenizers`' BPE model for the merges.

use crate::pretokenize::PreTokenizer;
use crate::unicode::byte_to_char_table;
use crate::TokenizerError;
use tokenizers::models::bpe::BPE;
use tokenizers::Model;

/// The merge stage of a byte-level BPE tokenizer.
pub struct ByteLevelBpe {
    model: BPE,
    pre: PreTokenizer,
    byte_chars: [char; 256],
}

impl std::fmt::Debug for ByteLevelBpe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteLevelBpe")
            .field("pre", &self.pre)
            .finish()
    }
}

impl ByteLevelBpe {
    /// Builds the model from token strings (by id) and merges in rank order.
    ///
    /// `ignore_merges` is OR-ed with what the pre-tokenizer type implies.
    pub fn new(
        tokens: &[String],
        merges: &[(String, String)],
        pre: PreTokenizer,
    ) -> Result<ByteLevelBpe, TokenizerError> {
        let mut vocab = tokenizers::models::bpe::Vocab::with_capacity(tokens.len());
        for (id, text) in tokens.iter().enumerate() {
            // NOTE: a repeated string keeps the last id, as llama.cpp's map does.
            vocab.insert(text.clone(), id as u32);
        }
        let model = BPE::builder()
            .vocab_and_merges(vocab, merges.to_vec())
            .ignore_merges(pre.defaults().ignore_merges)
            .build()
            .map_err(|e| TokenizerError::InvalidVocab(format!("tokenizer.ggml.merges: {e}")))?;
        Ok(ByteLevelBpe {
            model,
            pre,
            byte_chars: byte_to_char_table(),
        })
    }

    /// Tokenizes plain text (no special tokens) and appends the ids to `out`.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        let mut word = String::new();
        for range in self.pre.split(text)? {
            word.clear();
            word.extend(text[range].bytes().map(|b| self.byte_chars[b as usize]));
            let tokens = self
                .model
                .tokenize(&word)
                .map_err(|e| TokenizerError::Bpe(e.to_string()))?;
            out.extend(tokens.iter().map(|t| t.id));
        }
        Ok(())
    }
}
