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
        // NOTE: llama.cpp skips a merge whose parts or result are not tokens (a merge can
        // never produce them); `tokenizers` refuses the whole vocabulary, so drop them here.
        let usable: Vec<(String, String)> = merges
            .iter()
            .filter(|(a, b)| {
                vocab.contains_key(a)
                    && vocab.contains_key(b)
                    && vocab.contains_key(&format!("{a}{b}"))
            })
            .cloned()
            .collect();
        let model = BPE::builder()
            .vocab_and_merges(vocab, usable)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A merge whose result is no token (as in some generated vocabularies) is skipped, as
    /// llama.cpp skips it, instead of making the whole vocabulary unusable.
    #[test]
    fn merges_that_make_no_token_are_skipped() {
        let byte_chars = byte_to_char_table();
        let mut tokens: Vec<String> = (0..=255u8)
            .map(|b| byte_chars[b as usize].to_string())
            .collect();
        tokens.push("ab".into());
        let merges = vec![
            ("t".to_string(), "k".to_string()), // "tk" is not a token
            ("a".to_string(), "b".to_string()),
        ];
        let pre = PreTokenizer::for_name("qwen2").expect("known pre-tokenizer");
        let bpe = ByteLevelBpe::new(&tokens, &merges, pre).expect("vocabulary loads");
        let mut ids = Vec::new();
        bpe.encode("abtk", &mut ids).expect("encodes");
        let tk: Vec<u32> = "tk".bytes().map(|b| b as u32).collect();
        assert_eq!(ids, [vec![256], tk].concat());
    }
}
