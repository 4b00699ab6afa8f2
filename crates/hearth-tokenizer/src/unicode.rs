//! Unicode facts the pre-tokenizers need: letter / number / whitespace classes and the GPT-2
//! byte <-> unicode table.

use std::sync::OnceLock;

/// `\p{L}`.
pub const LETTER: u8 = 1;
/// `\p{N}`.
pub const NUMBER: u8 = 2;
/// `\s` (the Unicode `White_Space` property).
pub const WHITESPACE: u8 = 4;

const N_CODEPOINTS: usize = 0x11_0000;

/// Class flags of a code point (`LETTER | NUMBER | WHITESPACE` bits).
pub fn flags(c: char) -> u8 {
    class_table()[c as usize]
}

/// NOTE: the classes come from `regex-syntax`'s Unicode tables, the same ones the regex-based
/// pre-tokenizers use, so the hand-written splitters and the regex ones agree with each other.
fn class_table() -> &'static [u8] {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = vec![0u8; N_CODEPOINTS];
        for (pattern, bit) in [(r"\p{L}", LETTER), (r"\p{N}", NUMBER)] {
            for (start, end) in unicode_class_ranges(pattern) {
                for slot in &mut table[start as usize..=end as usize] {
                    *slot |= bit;
                }
            }
        }
        for (cp, slot) in table.iter_mut().enumerate() {
            if char::from_u32(cp as u32).is_some_and(char::is_whitespace) {
                *slot |= WHITESPACE;
            }
        }
        table
    })
}

fn unicode_class_ranges(pattern: &str) -> Vec<(u32, u32)> {
    use regex_syntax::hir::{Class, HirKind};
    // The patterns are constants of this file, so parsing cannot fail.
    let hir = regex_syntax::parse(pattern).expect("constant unicode class pattern parses");
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => class
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect(),
        // A `\p{..}` pattern always parses to a Unicode class.
        other => unreachable!("unicode class pattern parsed to {other:?}"),
    }
}

/// The GPT-2 byte-level alphabet: byte -> the char that stands for it in vocab strings.
pub fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next_extra = 256u32;
    for byte in 0..=255u8 {
        let printable = matches!(byte, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let cp = if printable {
            u32::from(byte)
        } else {
            let cp = next_extra;
            next_extra += 1;
            cp
        };
        // All values are below 0x200, valid scalar values.
        table[byte as usize] = char::from_u32(cp).expect("byte-level code point is valid");
    }
    table
}

/// Inverse of [`byte_to_char_table`]: char -> byte, `None` for chars outside the alphabet.
pub fn char_to_byte(c: char) -> Option<u8> {
    static TABLE: OnceLock<[i16; 0x200]> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut inverse = [-1i16; 0x200];
        for (byte, c) in byte_to_char_table().iter().enumerate() {
            inverse[*c as usize] = byte as i16;
        }
        inverse
    });
    let value = *table.get(c as usize)?;
    u8::try_from(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_table_matches_gpt2() {
        let table = byte_to_char_table();
        assert_eq!(table[b' ' as usize], 'Ġ');
        assert_eq!(table[b'\n' as usize], 'Ċ');
        assert_eq!(table[b'a' as usize], 'a');
        assert_eq!(table[0], 'Ā');
        assert_eq!(table[0xAD], 'Ń');
        for byte in 0..=255u8 {
            assert_eq!(char_to_byte(table[byte as usize]), Some(byte));
        }
        assert_eq!(char_to_byte('€'), None);
    }

    #[test]
    fn classes() {
        assert_eq!(flags('a'), LETTER);
        assert_eq!(flags('中'), LETTER);
        assert_eq!(flags('7'), NUMBER);
        assert_eq!(flags('½'), NUMBER);
        assert_eq!(flags('\u{3000}'), WHITESPACE);
        assert_eq!(flags('\u{85}'), WHITESPACE);
        assert_eq!(flags('!'), 0);
        assert_eq!(flags('😀'), 0);
    }
}
