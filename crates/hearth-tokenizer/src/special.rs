//! Splitting text around special tokens before the normal tokenizer runs, as llama.cpp's
//! `tokenizer_st_partition` does.
//!
//! Special tokens are tried one at a time, longest first; each one is cut out of every text
//! fragment that is still raw, leftmost occurrence first. Control and unknown tokens take part
//! only with `parse_special`; user-defined tokens always do. An Aho-Corasick pass first finds
//! which special tokens occur in the text at all, so the per-token passes only run for those and
//! the whole partition stays linear in the text length.

use aho_corasick::AhoCorasick;
use std::ops::Range;

use crate::TokenizerError;

/// A piece of input after partitioning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fragment {
    /// Text still to be tokenized: a byte range of the input.
    Text(Range<usize>),
    /// A special token matched literally.
    Token(u32),
}

/// One special token and how it matches.
#[derive(Debug, Clone)]
pub struct SpecialToken {
    /// Token id.
    pub id: u32,
    /// Matched only when parsing special tokens (control / unknown tokens).
    pub needs_parse_special: bool,
    /// Whitespace before the token is dropped.
    pub lstrip: bool,
    /// Whitespace after the token is dropped.
    pub rstrip: bool,
}

/// The special-token matcher of a vocabulary.
#[derive(Debug)]
pub struct SpecialMatcher {
    /// Sorted by text length, longest first (ties by id).
    tokens: Vec<SpecialToken>,
    texts: Vec<String>,
    finder: Option<AhoCorasick>,
}

impl SpecialMatcher {
    /// Builds the matcher; `tokens` pairs each special token with its text. Fails only when
    /// the texts are too large for the automaton (a hostile vocabulary).
    pub fn new(mut tokens: Vec<(SpecialToken, String)>) -> Result<SpecialMatcher, TokenizerError> {
        // NOTE: llama.cpp sorts by length only (unstable); ties are broken by id here.
        tokens.sort_by(|(a, at), (b, bt)| bt.len().cmp(&at.len()).then(a.id.cmp(&b.id)));
        tokens.retain(|(_, text)| !text.is_empty());
        let finder = if tokens.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::new(tokens.iter().map(|(_, t)| t.as_str()))
                    .map_err(|e| TokenizerError::InvalidVocab(format!("special tokens: {e}")))?,
            )
        };
        let (tokens, texts) = tokens.into_iter().unzip();
        Ok(SpecialMatcher {
            tokens,
            texts,
            finder,
        })
    }

    /// Splits `text` into fragments.
    pub fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut fragments = vec![Fragment::Text(0..text.len())];
        let Some(finder) = &self.finder else {
            return fragments;
        };
        if text.is_empty() {
            return Vec::new();
        }
        let mut present = vec![false; self.tokens.len()];
        for found in finder.find_overlapping_iter(text) {
            present[found.pattern().as_usize()] = true;
        }
        for (index, token) in self.tokens.iter().enumerate() {
            if !present[index] || (token.needs_parse_special && !parse_special) {
                continue;
            }
            fragments = cut_token(text, &self.texts[index], token, fragments);
        }
        fragments
    }
}

fn is_space(b: u8) -> bool {
    // C `isspace` in the "C" locale.
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

fn cut_token(
    text: &str,
    needle: &str,
    token: &SpecialToken,
    fragments: Vec<Fragment>,
) -> Vec<Fragment> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(fragments.len() + 2);
    for fragment in fragments {
        let Fragment::Text(range) = fragment else {
            out.push(fragment);
            continue;
        };
        let mut rest = range;
        while let Some(found) = text[rest.clone()].find(needle) {
            let start = rest.start + found;
            let mut left_end = start;
            if token.lstrip {
                while left_end > rest.start && is_space(bytes[left_end - 1]) {
                    left_end -= 1;
                }
            }
            if left_end > rest.start {
                out.push(Fragment::Text(rest.start..left_end));
            }
            out.push(Fragment::Token(token.id));
            let mut right_start = start + needle.len();
            if token.rstrip {
                while right_start < rest.end && is_space(bytes[right_start]) {
                    right_start += 1;
                }
            }
            rest = right_start..rest.end;
        }
        if !rest.is_empty() {
            out.push(Fragment::Text(rest));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: u32, needs_parse_special: bool) -> SpecialToken {
        SpecialToken {
            id,
            needs_parse_special,
            lstrip: false,
            rstrip: false,
        }
    }

    #[test]
    fn longest_token_is_cut_first() {
        let matcher = SpecialMatcher::new(vec![
            (token(1, true), "AB".to_string()),
            (token(2, true), "BCD".to_string()),
        ])
        .unwrap();
        // llama.cpp cuts "BCD" first, so "AB" no longer occurs.
        assert_eq!(
            matcher.partition("xABCDy", true),
            [
                Fragment::Text(0..2),
                Fragment::Token(2),
                Fragment::Text(5..6)
            ]
        );
        assert_eq!(matcher.partition("xABCDy", false), [Fragment::Text(0..6)]);
    }

    #[test]
    fn user_defined_tokens_match_without_parse_special() {
        let matcher = SpecialMatcher::new(vec![
            (token(7, false), "\n\n".to_string()),
            (token(8, true), "<eos>".to_string()),
        ])
        .unwrap();
        assert_eq!(
            matcher.partition("a\n\n<eos>\n\n", false),
            [
                Fragment::Text(0..1),
                Fragment::Token(7),
                Fragment::Text(3..8),
                Fragment::Token(7)
            ]
        );
    }

    #[test]
    fn strip_attributes_drop_adjacent_spaces() {
        let mut t = token(3, true);
        t.lstrip = true;
        t.rstrip = true;
        let matcher = SpecialMatcher::new(vec![(t, "<m>".to_string())]).unwrap();
        assert_eq!(
            matcher.partition("a  <m> \n b", true),
            [
                Fragment::Text(0..1),
                Fragment::Token(3),
                Fragment::Text(9..10)
            ]
        );
    }
}
