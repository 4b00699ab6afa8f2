//! Behaviour of tokenizers built from small hand-written vocabularies.

use hearth_tokenizer::{TokenType, Tokenizer, VocabModel, VocabSpec};

/// A SentencePiece vocabulary: control tokens, the 256 byte tokens, then scored pieces.
fn spm_spec(add_space_prefix: bool) -> VocabSpec {
    let mut tokens = vec!["<unk>".to_string(), "<s>".to_string(), "</s>".to_string()];
    let mut types = vec![TokenType::Unknown, TokenType::Control, TokenType::Control];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(TokenType::Byte);
    }
    let pieces = [
        ("▁", -1.0),
        ("a", -2.0),
        ("b", -2.0),
        ("ab", -1.5),
        ("▁a", -0.5),
        ("▁ab", -3.0),
        ("ba", -0.1),
    ];
    let mut scores = vec![0.0; tokens.len()];
    for (piece, score) in pieces {
        tokens.push(piece.to_string());
        types.push(TokenType::Normal);
        scores.push(score);
    }
    tokens.push("<end_of_turn>".to_string());
    types.push(TokenType::Normal);
    scores.push(0.0);
    VocabSpec {
        model: VocabModel::SentencePiece,
        tokens,
        scores,
        token_types: types,
        bos_id: Some(1),
        eos_id: Some(2),
        eot_id: None,
        eom_id: None,
        unk_id: Some(0),
        pad_id: None,
        add_bos: true,
        add_eos: false,
        add_space_prefix,
        model_name: String::new(),
    }
}

fn pieces(tokenizer: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&id| tokenizer.token_text(id).unwrap().to_string())
        .collect()
}

#[test]
fn spm_merges_by_score_and_falls_back_to_bytes() {
    let tokenizer = Tokenizer::from_spec(spm_spec(true)).unwrap();
    // "▁aba": candidates ▁a (-0.5), ab (-1.5), ba (-0.1): "ba" wins first, then ▁a.
    let ids = tokenizer.encode("aba", false).unwrap();
    assert_eq!(pieces(&tokenizer, &ids), ["▁a", "ba"]);
    // 'é' is not a piece: its two UTF-8 bytes become byte tokens.
    let ids = tokenizer.encode("é", false).unwrap();
    assert_eq!(pieces(&tokenizer, &ids), ["▁", "<0xC3>", "<0xA9>"]);
    assert_eq!(tokenizer.decode(&ids), " é");
}

#[test]
fn spm_space_prefix_follows_special_tokens() {
    let tokenizer = Tokenizer::from_spec(spm_spec(true)).unwrap();
    let ids = tokenizer.encode("a</s>a", true).unwrap();
    assert_eq!(pieces(&tokenizer, &ids), ["▁a", "</s>", "▁a"]);
    // Without parse_special the control token is plain text.
    let ids = tokenizer.encode("a</s>", false).unwrap();
    assert!(!ids.contains(&2));
    assert_eq!(tokenizer.decode(&ids), " a</s>");

    let tokenizer = Tokenizer::from_spec(spm_spec(false)).unwrap();
    let ids = tokenizer.encode("a</s>a", true).unwrap();
    assert_eq!(pieces(&tokenizer, &ids), ["a", "</s>", "a"]);
}

#[test]
fn encode_prompt_adds_bos_once() {
    let tokenizer = Tokenizer::from_spec(spm_spec(false)).unwrap();
    assert_eq!(
        tokenizer.encode_prompt("a", true).unwrap(),
        [1, tokenizer.token_to_id("a").unwrap()]
    );
    // The text already starts with BOS: not doubled when special tokens are parsed.
    assert_eq!(
        tokenizer.encode_prompt("<s>a", true).unwrap()[..2],
        [1, tokenizer.token_to_id("a").unwrap()]
    );
    assert_eq!(tokenizer.encode_prompt("", false).unwrap(), [1]);
    assert_eq!(tokenizer.encode("", true).unwrap(), Vec::<u32>::new());
}

#[test]
fn end_of_generation_tokens_are_recognized_by_text() {
    let tokenizer = Tokenizer::from_spec(spm_spec(false)).unwrap();
    let eot = tokenizer.token_to_id("<end_of_turn>").unwrap();
    assert!(tokenizer.is_eog(2) && tokenizer.is_eog(eot));
    assert!(!tokenizer.is_eog(1));
    assert_eq!(tokenizer.eot_id(), Some(eot));
    // Recognized end-of-turn tokens become control tokens: matched only with parse_special,
    // rendered as nothing.
    assert_eq!(tokenizer.token_type(eot), Some(TokenType::Control));
    assert_eq!(tokenizer.token_bytes(eot), b"");
    assert_eq!(tokenizer.encode("<end_of_turn>", true).unwrap(), [eot]);
    assert_eq!(
        (tokenizer.bos_text(), tokenizer.eos_text()),
        ("<s>", "</s>")
    );
}

#[test]
fn invalid_specs_are_errors() {
    let mut spec = spm_spec(false);
    spec.scores.pop();
    assert!(Tokenizer::from_spec(spec)
        .unwrap_err()
        .to_string()
        .contains("scores"));
    let mut spec = spm_spec(false);
    spec.eos_id = Some(1_000_000);
    assert!(Tokenizer::from_spec(spec)
        .unwrap_err()
        .to_string()
        .contains("eos_token_id"));
    let mut spec = spm_spec(false);
    spec.model = VocabModel::BytePairGpt2 {
        merges: vec![],
        pre: "mystery-pre".into(),
    };
    assert!(Tokenizer::from_spec(spec)
        .unwrap_err()
        .to_string()
        .contains("mystery-pre"));
}

/// A byte-level BPE vocabulary: the 256 byte characters, a few merges and two control tokens.
fn bpe_spec() -> VocabSpec {
    let byte_chars: Vec<String> = (0..=255u8).map(gpt2_char).collect();
    let mut tokens = byte_chars.clone();
    let merges = [("Ġ", "h"), ("Ġh", "i"), ("h", "i")];
    for (a, b) in merges {
        tokens.push(format!("{a}{b}"));
    }
    tokens.push("<|im_end|>".into());
    tokens.push("<|endoftext|>".into());
    let mut types = vec![TokenType::Normal; tokens.len()];
    let n = types.len();
    types[n - 2] = TokenType::Control;
    types[n - 1] = TokenType::Control;
    VocabSpec {
        model: VocabModel::BytePairGpt2 {
            merges: merges
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            pre: "gpt-2".into(),
        },
        tokens,
        scores: vec![],
        token_types: types,
        bos_id: Some(n as u32 - 1),
        eos_id: Some(n as u32 - 1),
        eot_id: None,
        eom_id: None,
        unk_id: None,
        pad_id: None,
        add_bos: false,
        add_eos: false,
        add_space_prefix: false,
        model_name: String::new(),
    }
}

/// GPT-2's printable stand-in for a byte.
fn gpt2_char(byte: u8) -> String {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(byte) {
        return char::from(byte).to_string();
    }
    let rank = (0..byte).filter(|&b| !printable(b)).count() as u32;
    char::from_u32(256 + rank).unwrap().to_string()
}

#[test]
fn byte_level_bpe_round_trips_and_parses_specials() {
    let tokenizer = Tokenizer::from_spec(bpe_spec()).unwrap();
    let ids = tokenizer.encode("hi hi<|im_end|>", true).unwrap();
    assert_eq!(pieces(&tokenizer, &ids), ["hi", "Ġhi", "<|im_end|>"]);
    assert_eq!(tokenizer.decode(&ids), "hi hi");
    assert_eq!(tokenizer.decode_with_special(&ids), "hi hi<|im_end|>");
    let im_end = tokenizer.token_to_id("<|im_end|>").unwrap();
    assert!(tokenizer.is_eog(im_end));
    let text = "naïve 😀\n\tok";
    assert_eq!(
        tokenizer.decode(&tokenizer.encode(text, false).unwrap()),
        text
    );
}
