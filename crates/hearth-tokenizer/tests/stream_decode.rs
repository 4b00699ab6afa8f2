//! Streaming detokenization never emits broken UTF-8 and always adds up to `decode`.

mod common;

use hearth_tokenizer::{StreamDecoder, Tokenizer};

/// The longest prefix of `bytes` that is valid UTF-8, as text.
fn valid_prefix(bytes: &[u8]) -> &str {
    match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap(),
    }
}

/// Checks every prefix of `ids`: pushes so far equal the valid prefix of the decoded bytes
/// (when all bytes are valid UTF-8 so far), and pushes plus finish equal `decode`.
fn check_stream(tokenizer: &Tokenizer, ids: &[u32], all_valid: bool) {
    for end in 0..=ids.len() {
        let prefix = &ids[..end];
        let mut decoder = StreamDecoder::new(tokenizer);
        let mut streamed = String::new();
        for &id in prefix {
            streamed.push_str(&decoder.push(id));
        }
        let bytes: Vec<u8> = prefix
            .iter()
            .flat_map(|&id| tokenizer.token_bytes(id))
            .copied()
            .collect();
        if all_valid {
            assert_eq!(streamed, valid_prefix(&bytes), "prefix of {end} tokens");
        }
        streamed.push_str(&decoder.finish());
        assert_eq!(
            streamed,
            tokenizer.decode(prefix),
            "prefix of {end} tokens with finish"
        );
    }
}

const TEXT: &str = "Emoji 😀👍🏽👨‍👩‍👧 and 中文 日本語 한국어, ẞ and ꙮ.";

#[test]
fn smollm2_byte_level_tokens_split_characters() {
    let tokenizer = common::tokenizer(common::SMOLLM2);
    let ids = tokenizer.encode(TEXT, false).unwrap();
    // Byte-level BPE splits rare characters across tokens; make sure the test exercises that.
    assert!(ids
        .iter()
        .any(|&id| std::str::from_utf8(tokenizer.token_bytes(id)).is_err()));
    check_stream(&tokenizer, &ids, true);
}

#[test]
fn gemma3_byte_fallback_tokens_split_characters() {
    let tokenizer = common::tokenizer(common::GEMMA3);
    let mut ids = tokenizer.encode(TEXT, false).unwrap();
    // Spell one emoji and one CJK character as byte tokens, as byte fallback does.
    for byte in "🦀漢".bytes() {
        ids.push(tokenizer.token_to_id(&format!("<0x{byte:02X}>")).unwrap());
    }
    check_stream(&tokenizer, &ids, true);
    assert!(tokenizer.decode(&ids).ends_with("🦀漢"));
}

#[test]
fn invalid_bytes_stream_like_lossy_decode() {
    let tokenizer = common::tokenizer(common::GEMMA3);
    let byte = |b: u8| tokenizer.token_to_id(&format!("<0x{b:02X}>")).unwrap();
    let a = tokenizer.token_to_id("a").unwrap();
    // A lone continuation byte, a truncated 3-byte sequence, then text, then a dangling lead byte.
    let ids = [byte(0x80), a, byte(0xE4), byte(0xB8), a, byte(0xF0)];
    check_stream(&tokenizer, &ids, false);
    let mut decoder = StreamDecoder::new(&tokenizer);
    let pushed: Vec<String> = ids.iter().map(|&id| decoder.push(id)).collect();
    assert_eq!(pushed, ["\u{FFFD}", "a", "", "", "\u{FFFD}a", ""]);
    assert_eq!(decoder.pending_len(), 1);
    assert_eq!(decoder.finish(), "\u{FFFD}");
}
