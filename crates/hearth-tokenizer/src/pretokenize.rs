//! Pre-tokenizers for byte-level BPE: split text into words before merges run, chosen by
//! `tokenizer.ggml.pre` the way llama.cpp chooses them.
//!
//! A pre-tokenizer is a list of splitters applied in turn; each one splits every piece the
//! previous one produced, and both the matches and the text between them become pieces
//! ("isolated" splitting). The two most common patterns (GPT-2's and Llama 3's) run as
//! hand-written scanners, as in llama.cpp, which both avoids regex backtracking on long inputs
//! and reproduces llama.cpp's exact behaviour; the rest run through `fancy-regex`.

use crate::unicode::{flags, LETTER, NUMBER, WHITESPACE};
use crate::TokenizerError;
use std::ops::Range;

/// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)` (run by [`split_gpt2`]).
const DIGIT: &str = r"\p{N}";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT2_PUNCT: &str = r"[\p{P}\$\+<=>\^~\|]+";
const FALCON_PUNCT: &str = r"[\p{P}\$\+<=>\^~\|`]+";
const DIGITS3: &str = "[0-9][0-9][0-9]";
const DIGIT_RUN: &str = r"\p{N}+";
const BLOOM: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";
const DEEPSEEK_CODER: [&str; 5] = [
    r"[\r\n]",
    r"\s?\p{L}+",
    r"\s?\p{P}+",
    r"[一-龥ࠀ-一가-퟿]+",
    r"\p{N}",
];
const DEEPSEEK_V3: [&str; 3] = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!\x22#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const BAILINGMOE: &str = r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
const SEED_CODER: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";

/// One splitting step.
#[derive(Debug)]
enum Splitter {
    /// The GPT-2 pattern, hand-written.
    Gpt2,
    /// The Llama 3 pattern (case-insensitive contractions, `\p{N}{1,3}`), hand-written.
    Llama3,
    /// Any other pattern.
    Regex(Box<fancy_regex::Regex>),
}

/// What a `tokenizer.ggml.pre` value implies besides the split patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreDefaults {
    /// A word that is itself a vocab token is not merged further (Llama 3, Tekken).
    pub ignore_merges: bool,
    /// Default of `add_bos` when the file does not set `tokenizer.ggml.add_bos_token`.
    pub add_bos: bool,
    /// The vocabulary has no BOS token unless the file names one (ChatGLM / GLM-4).
    pub no_default_bos: bool,
}

/// A configured pre-tokenizer.
#[derive(Debug)]
pub struct PreTokenizer {
    splitters: Vec<Splitter>,
    defaults: PreDefaults,
}

impl PreTokenizer {
    /// Builds the pre-tokenizer llama.cpp uses for a `tokenizer.ggml.pre` value.
    pub fn for_name(pre: &str) -> Result<PreTokenizer, TokenizerError> {
        use Splitter::{Gpt2, Llama3};
        let mut defaults = PreDefaults {
            ignore_merges: false,
            add_bos: false,
            no_default_bos: false,
        };
        let splitters = match pre {
            // NOTE: llama.cpp falls back to "default" (with a warning) when the key is absent.
            "" | "default" => vec![regex(GPT2_PUNCT)?, Gpt2, regex(DIGIT_RUN)?, regex(DIGITS3)?],
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" => {
                defaults.ignore_merges = true;
                defaults.add_bos = true;
                vec![Llama3]
            }
            "dbrx" | "smaug-bpe" => vec![Llama3],
            "glm4" | "chatglm-bpe" => {
                defaults.no_default_bos = true;
                vec![Llama3]
            }
            "deepseek-coder" => regexes(&DEEPSEEK_CODER)?,
            "deepseek-v3" | "hunyuan-dense" => regexes(&DEEPSEEK_V3)?,
            "falcon" => vec![regex(FALCON_PUNCT)?, Gpt2, regex(DIGITS3)?],
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "jina-v1-en" | "jina-v2-code"
            | "roberta-bpe" | "mpt" | "olmo" | "jais" | "trillion" | "exaone4" => vec![Gpt2],
            "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone"
            | "minerva-7b" => vec![regex(DIGIT)?, Gpt2],
            "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" | "hunyuan" => {
                vec![regex(QWEN2)?]
            }
            "poro-chat" | "bloom" | "gpt3-finnish" => vec![regex(BLOOM)?],
            "viking" => vec![regex(BLOOM)?, regex(DIGIT)?],
            "tekken" => {
                defaults.ignore_merges = true;
                defaults.add_bos = true;
                vec![regex(TEKKEN)?]
            }
            "gpt-4o" | "llama4" => vec![regex(GPT4O)?],
            "bailingmoe" => vec![regex(BAILINGMOE)?],
            "seed-coder" => vec![regex(SEED_CODER)?],
            other => return Err(TokenizerError::UnknownPreTokenizer(other.to_string())),
        };
        Ok(PreTokenizer {
            splitters,
            defaults,
        })
    }

    /// The defaults this pre-tokenizer type implies.
    pub fn defaults(&self) -> PreDefaults {
        self.defaults
    }

    /// Splits `text` into words, returned as byte ranges of `text` in order, covering all of it.
    pub fn split(&self, text: &str) -> Result<Vec<Range<usize>>, TokenizerError> {
        // One piece: the whole text as a byte range (not a list of its indices).
        #[allow(clippy::single_range_in_vec_init)]
        let mut pieces = vec![0..text.len()];
        for splitter in &self.splitters {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                let base = piece.start;
                let sub = &text[piece];
                match splitter {
                    Splitter::Gpt2 => split_gpt2(sub, base, &mut next),
                    Splitter::Llama3 => split_llama3(sub, base, &mut next),
                    Splitter::Regex(re) => split_regex(re, sub, base, &mut next)?,
                }
            }
            pieces = next;
        }
        Ok(pieces)
    }
}

fn regex(pattern: &str) -> Result<Splitter, TokenizerError> {
    let re = fancy_regex::Regex::new(pattern)
        .map_err(|e| TokenizerError::Bpe(format!("pre-tokenizer regex `{pattern}`: {e}")))?;
    Ok(Splitter::Regex(Box::new(re)))
}

fn regexes(patterns: &[&str]) -> Result<Vec<Splitter>, TokenizerError> {
    patterns.iter().map(|p| regex(p)).collect()
}

fn split_regex(
    re: &fancy_regex::Regex,
    text: &str,
    base: usize,
    out: &mut Vec<Range<usize>>,
) -> Result<(), TokenizerError> {
    let mut last = 0;
    for found in re.find_iter(text) {
        let found = found.map_err(|e| TokenizerError::Bpe(format!("pre-tokenizer regex: {e}")))?;
        if found.start() > last {
            out.push(base + last..base + found.start());
        }
        if found.end() > found.start() {
            out.push(base + found.start()..base + found.end());
        }
        last = found.end();
    }
    if last < text.len() {
        out.push(base + last..base + text.len());
    }
    Ok(())
}

/// Code points of one piece with class lookups that read "outside" past either end.
struct Cursor {
    chars: Vec<(usize, char)>,
    len_bytes: usize,
}

/// Set for every position inside the piece, so "no class" and "past the end" differ.
const INSIDE: u8 = 0x80;

impl Cursor {
    fn new(text: &str) -> Cursor {
        Cursor {
            chars: text.char_indices().collect(),
            len_bytes: text.len(),
        }
    }
    fn len(&self) -> usize {
        self.chars.len()
    }
    fn char_at(&self, pos: usize) -> Option<char> {
        self.chars.get(pos).map(|&(_, c)| c)
    }
    fn flags_at(&self, pos: usize) -> u8 {
        self.char_at(pos).map_or(0, |c| flags(c) | INSIDE)
    }
    fn byte_offset(&self, pos: usize) -> usize {
        self.chars.get(pos).map_or(self.len_bytes, |&(b, _)| b)
    }
    fn is(&self, pos: usize, class: u8) -> bool {
        self.flags_at(pos) & class != 0
    }
    /// Inside the piece and neither whitespace, letter nor number: `[^\s\p{L}\p{N}]`.
    fn is_other(&self, pos: usize) -> bool {
        let f = self.flags_at(pos);
        f & INSIDE != 0 && f & (WHITESPACE | LETTER | NUMBER) == 0
    }
    fn whitespace_run(&self, pos: usize) -> usize {
        (pos..self.len())
            .take_while(|&p| self.is(p, WHITESPACE))
            .count()
    }
}

/// Emits pieces as char-position ranges, converting to byte ranges of the whole text.
struct Emitter<'a> {
    cursor: &'a Cursor,
    base: usize,
    prev_end: usize,
    out: &'a mut Vec<Range<usize>>,
}

impl Emitter<'_> {
    fn emit(&mut self, end: usize) {
        if end > self.prev_end {
            let start = self.cursor.byte_offset(self.prev_end);
            let stop = self.cursor.byte_offset(end);
            self.out.push(self.base + start..self.base + stop);
        }
        self.prev_end = end;
    }
}

/// Length of a contraction (`'s 't 'm 'd 're 've 'll`) starting at `pos`, or 0.
fn contraction_len(cursor: &Cursor, pos: usize, ignore_case: bool) -> usize {
    if cursor.char_at(pos) != Some('\'') {
        return 0;
    }
    let lower = |p: usize| {
        cursor.char_at(p).map(|c| {
            if ignore_case {
                c.to_ascii_lowercase()
            } else {
                c
            }
        })
    };
    match (lower(pos + 1), lower(pos + 2)) {
        (Some('s' | 't' | 'm' | 'd'), _) => 2,
        (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l')) => 3,
        _ => 0,
    }
}

/// The whitespace alternatives shared by both patterns: `\s+(?!\S)` then `\s+`.
/// Returns the new position, or `None` when `pos` is not whitespace.
fn whitespace_end(cursor: &Cursor, pos: usize) -> Option<usize> {
    let n = cursor.whitespace_run(pos);
    if n > 1 && pos + n < cursor.len() {
        // Followed by non-space: leave the last space to prefix the next word.
        Some(pos + n - 1)
    } else if n > 0 {
        Some(pos + n)
    } else {
        None
    }
}

/// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`.
fn split_gpt2(text: &str, base: usize, out: &mut Vec<Range<usize>>) {
    let cursor = Cursor::new(text);
    let mut em = Emitter {
        cursor: &cursor,
        base,
        prev_end: 0,
        out,
    };
    let mut pos = 0;
    while pos < cursor.len() {
        let contraction = contraction_len(&cursor, pos, false);
        if contraction > 0 {
            pos += contraction;
            em.emit(pos);
            continue;
        }
        let space = usize::from(cursor.char_at(pos) == Some(' '));
        let head = pos + space;
        if cursor.is(head, LETTER) || cursor.is(head, NUMBER) {
            let class = if cursor.is(head, LETTER) {
                LETTER
            } else {
                NUMBER
            };
            pos = head;
            while cursor.is(pos, class) {
                pos += 1;
            }
            em.emit(pos);
            continue;
        }
        if cursor.is_other(head) {
            pos = head;
            while cursor.is_other(pos) {
                pos += 1;
            }
            em.emit(pos);
            continue;
        }
        pos = whitespace_end(&cursor, pos).unwrap_or(pos + 1);
        em.emit(pos);
    }
}

/// Llama 3: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
/// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
fn split_llama3(text: &str, base: usize, out: &mut Vec<Range<usize>>) {
    let cursor = Cursor::new(text);
    let mut em = Emitter {
        cursor: &cursor,
        base,
        prev_end: 0,
        out,
    };
    let is_newline = |p: usize| matches!(cursor.char_at(p), Some('\r' | '\n'));
    let mut pos = 0;
    while pos < cursor.len() {
        let contraction = contraction_len(&cursor, pos, true);
        if contraction > 0 {
            pos += contraction;
            em.emit(pos);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !is_newline(pos)
            && !cursor.is(pos, NUMBER)
            && (cursor.is(pos, LETTER) || cursor.is(pos + 1, LETTER))
        {
            pos += 1;
            while cursor.is(pos, LETTER) {
                pos += 1;
            }
            em.emit(pos);
            continue;
        }
        // \p{N}{1,3}
        if cursor.is(pos, NUMBER) {
            let mut start = pos;
            while cursor.is(pos, NUMBER) {
                pos += 1;
                if pos - start >= 3 {
                    em.emit(pos);
                    start = pos;
                }
            }
            em.emit(pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`; a lone trailing space also lands here, as in llama.cpp.
        let space = usize::from(cursor.char_at(pos) == Some(' '));
        let head_flags = cursor.flags_at(pos + space);
        if head_flags & (WHITESPACE | LETTER | NUMBER) == 0 {
            pos += space;
            while cursor.is_other(pos) {
                pos += 1;
            }
            while is_newline(pos) {
                pos += 1;
            }
            em.emit(pos);
            continue;
        }
        // \s*[\r\n]+
        let n = cursor.whitespace_run(pos);
        if let Some(last_newline) = (pos..pos + n).rev().find(|&p| is_newline(p)) {
            pos = last_newline + 1;
            em.emit(pos);
            continue;
        }
        pos = whitespace_end(&cursor, pos).unwrap_or(pos + 1);
        em.emit(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: &str, text: &str) -> Vec<String> {
        let pre = PreTokenizer::for_name(pre).unwrap();
        pre.split(text)
            .unwrap()
            .into_iter()
            .map(|r| text[r].to_string())
            .collect()
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(
            words("gpt-2", "Hello world's  end\n\n  x 42!!"),
            ["Hello", " world", "'s", " ", " end", "\n\n ", " x", " 42", "!!"]
        );
        assert_eq!(words("gpt-2", "a   "), ["a", "   "]);
        assert_eq!(words("gpt-2", "I'LL"), ["I", "'", "LL"]);
    }

    #[test]
    fn smollm_isolates_digits() {
        assert_eq!(
            words("smollm", "x 2024 y"),
            ["x", " ", "2", "0", "2", "4", " y"]
        );
    }

    #[test]
    fn llama3_words() {
        assert_eq!(
            words("llama-bpe", "I'LL pay 12345 now!\n\n  ok  "),
            ["I", "'LL", " pay", " ", "123", "45", " now", "!\n\n", " ", " ok", "  "]
        );
        assert_eq!(words("llama-bpe", "a \n b"), ["a", " \n", " b"]);
    }

    #[test]
    fn qwen2_single_digits() {
        assert_eq!(words("qwen2", "ab 123"), ["ab", " ", "1", "2", "3"]);
    }

    #[test]
    fn unknown_pre_is_an_error_naming_it() {
        let err = PreTokenizer::for_name("nonesuch").unwrap_err();
        assert!(err.to_string().contains("nonesuch"), "{err}");
    }
}
