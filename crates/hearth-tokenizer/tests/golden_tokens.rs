//! Token ids equal to llama.cpp's on the real GGUF vocabularies.
//!
//! The goldens (`tests/goldens/<model>/tokens.json` at the repository root) are written by
//! `scripts/make_goldens.py`, which runs llama.cpp's tokenizer with `add_bos = false` and
//! `special = true`. `HEARTH_GOLDENS_DIR` points the test at another goldens directory.

mod common;

use hearth_tokenizer::{TokenType, Tokenizer};
use std::path::PathBuf;

#[derive(serde::Deserialize)]
struct Goldens {
    model_file: String,
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
}

fn goldens_dir() -> PathBuf {
    match std::env::var_os("HEARTH_GOLDENS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/goldens"),
    }
}

fn load_goldens(model: &str) -> Goldens {
    let path = goldens_dir().join(model).join("tokens.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e} (generate it with scripts/make_goldens.py)",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

fn has_control(tokenizer: &Tokenizer, ids: &[u32]) -> bool {
    ids.iter().any(|&id| {
        matches!(
            tokenizer.token_type(id),
            Some(TokenType::Control | TokenType::Unknown)
        )
    })
}

fn check_model(model: &str) {
    let goldens = load_goldens(model);
    assert!(!goldens.cases.is_empty(), "{model}: no golden cases");
    let tokenizer = common::tokenizer(&goldens.model_file);
    let mut failures = Vec::new();
    for case in &goldens.cases {
        let ids = tokenizer
            .encode(&case.text, true)
            .unwrap_or_else(|e| panic!("{model}: encoding {:?}: {e}", case.text));
        if ids != case.ids {
            failures.push(format!(
                "{:?}\n  expected {:?}\n  got      {:?}",
                case.text, case.ids, ids
            ));
            continue;
        }
        // Control tokens decode to nothing, so the plain round trip holds only without them;
        // rendering them as their text must always give the input back.
        if !has_control(&tokenizer, &ids) {
            assert_eq!(tokenizer.decode(&ids), case.text, "{model}: decode");
        }
        assert_eq!(
            tokenizer.decode_with_special(&ids),
            case.text,
            "{model}: decode_with_special"
        );
    }
    assert!(
        failures.is_empty(),
        "{model}: {} of {} cases differ from llama.cpp:\n{}",
        failures.len(),
        goldens.cases.len(),
        failures.join("\n")
    );
}

#[test]
fn smollm2_matches_llama_cpp() {
    check_model("smollm2");
}

#[test]
fn gemma3_matches_llama_cpp() {
    check_model("gemma3");
}

/// Special ids, end-of-generation sets and BOS handling as llama.cpp reports them for the
/// test models (`llama_vocab_bos / eos / eot / is_eog / get_add_bos`).
#[test]
fn special_tokens_match_llama_cpp() {
    let smollm = common::tokenizer(common::SMOLLM2);
    assert_eq!(
        (smollm.bos_id(), smollm.eos_id(), smollm.eot_id()),
        (Some(1), Some(2), Some(0))
    );
    assert_eq!(smollm.eog_ids().collect::<Vec<_>>(), [0, 2, 4]);
    assert!(!smollm.add_bos() && !smollm.add_eos());
    assert_eq!(
        (smollm.bos_text(), smollm.eos_text()),
        ("<|im_start|>", "<|im_end|>")
    );
    assert_eq!(smollm.encode_prompt("hi", true).unwrap(), [6004]);
    assert_eq!(smollm.vocab_size(), 49152);

    let gemma = common::tokenizer(common::GEMMA3);
    assert_eq!(
        (gemma.bos_id(), gemma.eos_id(), gemma.eot_id()),
        (Some(2), Some(1), Some(106))
    );
    assert_eq!(gemma.eog_ids().collect::<Vec<_>>(), [1, 106]);
    assert!(gemma.is_eog(gemma.token_to_id("<end_of_turn>").unwrap()));
    assert!(gemma.add_bos() && !gemma.add_eos());
    assert_eq!(gemma.encode_prompt("hi", true).unwrap(), [2, 2202]);
    // llama.cpp would add a second BOS here; encode_prompt does not.
    assert_eq!(gemma.encode_prompt("<bos>hi", true).unwrap(), [2, 2202]);
    assert_eq!(gemma.vocab_size(), 262_144);
}
