//! Streaming detokenization that never splits a UTF-8 character across outputs.

use crate::Tokenizer;

/// Turns a stream of token ids into text pieces. Bytes of a character split across tokens
/// (emoji, CJK through byte tokens) are held until the character is complete; bytes that can
/// never become valid UTF-8 are emitted as U+FFFD exactly as [`Tokenizer::decode`] would.
///
/// Invariant: the concatenation of all `push` results followed by `finish` equals
/// `tokenizer.decode(all_ids)`.
#[derive(Debug)]
pub struct StreamDecoder<'t> {
    tokenizer: &'t Tokenizer,
    text: Utf8Assembler,
}

impl<'t> StreamDecoder<'t> {
    /// A decoder with nothing pending.
    pub fn new(tokenizer: &'t Tokenizer) -> StreamDecoder<'t> {
        StreamDecoder {
            tokenizer,
            text: Utf8Assembler::default(),
        }
    }

    /// Adds one token; returns the text that became complete (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        self.text.push(self.tokenizer.token_bytes(id))
    }

    /// Flushes what is pending (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        self.text.finish()
    }

    /// Bytes held back, waiting for the rest of a character.
    pub fn pending_len(&self) -> usize {
        self.text.pending_len()
    }
}

/// Assembles UTF-8 text from byte pieces, holding an incomplete trailing character until its
/// remaining bytes arrive. [`StreamDecoder`] without the tokenizer borrow, for owners that
/// keep the tokenizer elsewhere (one per server request).
#[derive(Debug, Default, Clone)]
pub struct Utf8Assembler {
    pending: Vec<u8>,
}

impl Utf8Assembler {
    /// Adds bytes; returns the text that became complete (possibly empty).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    // `valid` is valid UTF-8 by construction.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        // Definitely invalid: render as `from_utf8_lossy` does and go on.
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &tail[bad..];
                        }
                        // An incomplete character at the end: keep it for the next token.
                        None => {
                            rest = tail;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let start = self.pending.len() - keep;
        self.pending.drain(..start);
        out
    }

    /// Flushes what is pending (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    /// Bytes held back, waiting for the rest of a character.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}
