//! The `Tokenizer`: encoding text to ids and decoding ids to bytes.

use crate::bpe::ByteLevelBpe;
use crate::pretokenize::PreTokenizer;
use crate::spec::{TokenType, VocabModel, VocabSpec};
use crate::special::{Fragment, SpecialMatcher, SpecialToken};
use crate::unicode::char_to_byte;
use crate::vocab_rules::{derive_special_ids, strip_attributes};
use crate::{spm, TokenizerError};
use std::collections::BTreeSet;

/// U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's visible space.
const SPM_SPACE: &str = "\u{2581}";

enum Algorithm {
    Bpe(Box<ByteLevelBpe>),
    SentencePiece {
        byte_tokens: Box<[Option<u32>; 256]>,
    },
    /// A Hugging Face `tokenizer.json`, run by the `tokenizers` crate.
    Hf(Box<crate::hf::HfEncoder>),
}

/// A tokenizer: text <-> token ids, matching llama.cpp's tokenizer on the same vocabulary.
pub struct Tokenizer {
    algorithm: Algorithm,
    tokens: Vec<String>,
    types: Vec<TokenType>,
    scores: Vec<f32>,
    token_to_id: crate::TokenMap,
    /// Decoded bytes of every token, concatenated; token `i` is `pieces[offsets[i]..offsets[i + 1]]`.
    pieces: Vec<u8>,
    offsets: Vec<usize>,
    special: SpecialMatcher,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    eot_id: Option<u32>,
    eom_id: Option<u32>,
    unk_id: Option<u32>,
    pad_id: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    eog: BTreeSet<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind_name())
            .field("vocab_size", &self.tokens.len())
            .field("bos_id", &self.bos_id)
            .field("eos_id", &self.eos_id)
            .field("eog", &self.eog)
            .finish_non_exhaustive()
    }
}

fn check_id(field: &str, id: Option<u32>, n_tokens: usize) -> Result<(), TokenizerError> {
    match id {
        Some(id) if id as usize >= n_tokens => Err(TokenizerError::InvalidVocab(format!(
            "{field} = {id} is outside the vocabulary of {n_tokens} tokens"
        ))),
        _ => Ok(()),
    }
}

impl Tokenizer {
    /// Builds a tokenizer from a vocabulary description. This is the real constructor;
    /// [`Tokenizer::from_gguf`] fills a [`VocabSpec`] and calls it.
    pub fn from_spec(spec: VocabSpec) -> Result<Tokenizer, TokenizerError> {
        let n = spec.tokens.len();
        if n == 0 {
            return Err(TokenizerError::InvalidVocab(
                "the token list is empty".into(),
            ));
        }
        if !spec.scores.is_empty() && spec.scores.len() != n {
            return Err(TokenizerError::InvalidVocab(format!(
                "{} scores for {n} tokens",
                spec.scores.len()
            )));
        }
        if !spec.token_types.is_empty() && spec.token_types.len() != n {
            return Err(TokenizerError::InvalidVocab(format!(
                "{} token types for {n} tokens",
                spec.token_types.len()
            )));
        }
        for (field, id) in [
            ("bos_token_id", spec.bos_id),
            ("eos_token_id", spec.eos_id),
            ("eot_token_id", spec.eot_id),
            ("eom_token_id", spec.eom_id),
            ("unknown_token_id", spec.unk_id),
            ("padding_token_id", spec.pad_id),
        ] {
            check_id(field, id, n)?;
        }
        let mut tokens = spec.tokens;
        for (i, text) in tokens.iter_mut().enumerate() {
            if text.is_empty() {
                // NOTE: llama.cpp renames empty tokens so that they stay addressable by text.
                *text = format!("[EMPTY_{i}]");
            }
        }
        let mut types = if spec.token_types.is_empty() {
            vec![TokenType::Normal; n]
        } else {
            spec.token_types
        };
        let mut token_to_id = crate::TokenMap::with_capacity_and_hasher(n, Default::default());
        for (i, text) in tokens.iter().enumerate() {
            token_to_id.insert(text.clone(), i as u32);
        }
        let ids = derive_special_ids(
            &token_to_id,
            &mut types,
            spec.eos_id,
            spec.eot_id,
            spec.eom_id,
        );

        let (algorithm, pre_name) = match spec.model {
            VocabModel::BytePairGpt2 { merges, pre } => {
                let pre_tokenizer = PreTokenizer::for_name(&pre)?;
                let bpe = ByteLevelBpe::new(&tokens, &merges, pre_tokenizer)?;
                (Algorithm::Bpe(Box::new(bpe)), pre)
            }
            VocabModel::SentencePiece => {
                let byte_tokens = spm_byte_tokens(&token_to_id, spec.unk_id);
                (Algorithm::SentencePiece { byte_tokens }, String::new())
            }
        };
        let is_bpe = matches!(algorithm, Algorithm::Bpe(_));
        let (pieces, offsets) = build_pieces(&tokens, &types, is_bpe);
        let special = build_special_matcher(&tokens, &types, &spec.model_name, &pre_name)?;
        Ok(Tokenizer {
            algorithm,
            scores: if spec.scores.is_empty() {
                vec![0.0; n]
            } else {
                spec.scores
            },
            tokens,
            types,
            token_to_id,
            pieces,
            offsets,
            special,
            bos_id: spec.bos_id,
            eos_id: spec.eos_id,
            eot_id: ids.eot,
            eom_id: ids.eom,
            unk_id: spec.unk_id,
            pad_id: spec.pad_id,
            add_bos: spec.add_bos,
            add_eos: spec.add_eos,
            add_space_prefix: spec.add_space_prefix,
            eog: ids.eog,
        })
    }

    /// Tokenizes `text`. With `parse_special`, control tokens written literally in the text
    /// become their ids; user-defined tokens always do. Never adds BOS/EOS.
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>, TokenizerError> {
        let fragments = self.special.partition(text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        match &self.algorithm {
            Algorithm::Bpe(bpe) => {
                for fragment in fragments {
                    match fragment {
                        Fragment::Text(range) => bpe.encode(&text[range], &mut out)?,
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            Algorithm::Hf(hf) => {
                for fragment in fragments {
                    match fragment {
                        Fragment::Text(range) => {
                            hf.encode(&text[range.clone()], range.start, &mut out)?
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            Algorithm::SentencePiece { byte_tokens } => {
                let vocab = spm::SpmVocab {
                    token_to_id: &self.token_to_id,
                    scores: &self.scores,
                    byte_tokens,
                };
                // NOTE: llama.cpp prefixes a space to the first text fragment and to every text
                // fragment that follows a special token (when add_space_prefix is set).
                let mut prev_special = true;
                let mut buffer = String::new();
                for fragment in fragments {
                    match fragment {
                        Fragment::Text(range) => {
                            buffer.clear();
                            if self.add_space_prefix && prev_special {
                                buffer.push_str(SPM_SPACE);
                            }
                            buffer.push_str(&text[range].replace(' ', SPM_SPACE));
                            spm::encode(&vocab, &buffer, &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// This tokenizer with HF's encoder in place of its own; `extra_eog` also end generation.
    pub(crate) fn with_hf_encoder(mut self, hf: crate::hf::HfEncoder, extra_eog: &[u32]) -> Self {
        self.algorithm = Algorithm::Hf(Box::new(hf));
        let n = self.tokens.len() as u32;
        self.eog
            .extend(extra_eog.iter().copied().filter(|&id| id < n));
        self
    }

    /// Prompt encoding as llama.cpp does with `add_special = true`: BOS first when `add_bos`
    /// (unless `parse_special` and the text already starts with the BOS token), EOS last when
    /// `add_eos`.
    pub fn encode_prompt(
        &self,
        text: &str,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = self.encode(text, parse_special)?;
        if let (true, Some(bos)) = (self.add_bos, self.bos_id) {
            if !(parse_special && ids.first() == Some(&bos)) {
                ids.insert(0, bos);
            }
        }
        if let (true, Some(eos)) = (self.add_eos, self.eos_id) {
            ids.push(eos);
        }
        Ok(ids)
    }

    /// The raw bytes token `id` decodes to: byte-level BPE tokens through the GPT-2 byte table,
    /// SentencePiece tokens with U+2581 as space and `<0xXX>` as that byte, user-defined tokens
    /// as their text. Control, unknown and unused tokens and out-of-range ids decode to nothing.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&start), Some(&end)) => &self.pieces[start..end],
            _ => &[],
        }
    }

    /// The token's string as stored in the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The token's type (after llama.cpp's retyping of end-of-turn-like tokens).
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// Decodes ids to text: the concatenated [`Tokenizer::token_bytes`], invalid UTF-8 replaced
    /// by U+FFFD. Control tokens render as nothing.
    ///
    /// NOTE: unlike llama.cpp's `detokenize`, this neither drops the leading space of a
    /// SentencePiece text after BOS nor applies `clean_up_tokenization_spaces`; it is the exact
    /// inverse of `encode` for text without control tokens (plus the space prefix, if any).
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&id| self.token_bytes(id))
            .copied()
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Like [`Tokenizer::decode`], but control and unknown tokens render as their stored text
    /// (llama.cpp's `special = true`), e.g. to show a prompt as the model sees it.
    pub fn decode_with_special(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            match self.token_type(id) {
                Some(TokenType::Control | TokenType::Unknown) => {
                    bytes.extend_from_slice(self.tokens[id as usize].as_bytes())
                }
                _ => bytes.extend_from_slice(self.token_bytes(id)),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// Beginning-of-sequence token.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }
    /// End-of-sequence token.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos_id
    }
    /// End-of-turn token (from the file, else recognized by its text).
    pub fn eot_id(&self) -> Option<u32> {
        self.eot_id
    }
    /// End-of-message token (from the file, else `<|eom_id|>`).
    pub fn eom_id(&self) -> Option<u32> {
        self.eom_id
    }
    /// Unknown token.
    pub fn unk_id(&self) -> Option<u32> {
        self.unk_id
    }
    /// Padding token.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad_id
    }
    /// Whether prompts start with BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
    /// Whether prompts end with EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }
    /// SentencePiece only: whether text gets a leading space.
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// Whether `id` ends generation: EOS, EOT, EOM and the tokens llama.cpp recognizes by text
    /// (`<|im_end|>`, `<end_of_turn>`, `<|eot_id|>`, `<|endoftext|>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// All end-of-generation tokens, ascending.
    pub fn eog_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.eog.iter().copied()
    }

    /// The id of the token whose stored string is `text`.
    pub fn token_to_id(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }

    /// The BOS token's text, for chat templates (empty when there is none).
    pub fn bos_text(&self) -> &str {
        self.bos_id.and_then(|id| self.token_text(id)).unwrap_or("")
    }

    /// The EOS token's text, for chat templates (empty when there is none).
    pub fn eos_text(&self) -> &str {
        self.eos_id.and_then(|id| self.token_text(id)).unwrap_or("")
    }

    fn kind_name(&self) -> &'static str {
        match self.algorithm {
            Algorithm::Bpe(_) => "byte-level BPE",
            Algorithm::SentencePiece { .. } => "SentencePiece",
            Algorithm::Hf(_) => "HF tokenizer.json",
        }
    }
}

/// Byte -> token for SentencePiece byte fallback: `<0xXX>`, else the one-byte string (as
/// llama.cpp tries), else the unknown token.
fn spm_byte_tokens(token_to_id: &crate::TokenMap, unk: Option<u32>) -> Box<[Option<u32>; 256]> {
    let mut table = Box::new([None; 256]);
    for byte in 0..=255u8 {
        let hex = format!("<0x{byte:02X}>");
        let plain = if byte.is_ascii() {
            Some((byte as char).to_string())
        } else {
            None
        };
        table[byte as usize] = token_to_id
            .get(&hex)
            .or_else(|| plain.and_then(|p| token_to_id.get(&p)))
            .copied()
            .or(unk);
    }
    table
}

fn build_pieces(tokens: &[String], types: &[TokenType], is_bpe: bool) -> (Vec<u8>, Vec<usize>) {
    let mut pieces = Vec::with_capacity(tokens.iter().map(String::len).sum());
    let mut offsets = Vec::with_capacity(tokens.len() + 1);
    offsets.push(0);
    for (text, ty) in tokens.iter().zip(types) {
        match ty {
            TokenType::UserDefined => pieces.extend_from_slice(text.as_bytes()),
            TokenType::Normal if is_bpe => {
                for c in text.chars() {
                    match char_to_byte(c) {
                        Some(b) => pieces.push(b),
                        // Not in the byte alphabet: keep the character itself.
                        None => pieces.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
            }
            TokenType::Normal => pieces.extend_from_slice(text.replace(SPM_SPACE, " ").as_bytes()),
            TokenType::Byte if !is_bpe => {
                if let Some(b) = parse_byte_token(text) {
                    pieces.push(b);
                }
            }
            // NOTE: llama.cpp renders control / unknown tokens only when asked to (special=true);
            // unused, undefined and BPE byte tokens render as nothing.
            _ => {}
        }
        offsets.push(pieces.len());
    }
    (pieces, offsets)
}

/// `<0xAB>` -> 0xAB.
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}

fn build_special_matcher(
    tokens: &[String],
    types: &[TokenType],
    model_name: &str,
    pre: &str,
) -> Result<SpecialMatcher, TokenizerError> {
    let special = tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter(|(_, (_, ty))| {
            matches!(
                ty,
                TokenType::Control | TokenType::UserDefined | TokenType::Unknown
            )
        })
        .map(|(id, (text, ty))| {
            let (lstrip, rstrip) = strip_attributes(model_name, pre, text);
            let token = SpecialToken {
                id: id as u32,
                needs_parse_special: *ty != TokenType::UserDefined,
                lstrip,
                rstrip,
            };
            (token, text.clone())
        })
        .collect();
    SpecialMatcher::new(special)
}
