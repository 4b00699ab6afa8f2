//! Rules llama.cpp applies to a vocabulary after loading it: which tokens end generation, which
//! special tokens are recognized by their text, and per-token strip attributes.

use crate::spec::TokenType;
use std::collections::BTreeSet;

/// Texts that mark an end-of-turn token when the file names none.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "_<EOT>",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
/// Fill-in-the-middle pad / repo / file-separator tokens: llama.cpp treats them as end of generation.
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Other FIM tokens: recognized (and made control tokens), but not end of generation.
const FIM_OTHER_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
];
/// Texts that are end of generation whatever the file says.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

/// Special-token ids and the end-of-generation set derived from a vocabulary.
#[derive(Debug, Clone)]
pub struct SpecialIds {
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub eog: BTreeSet<u32>,
}

/// Lowest id among the tokens whose text is in `texts`.
fn first_with_text(token_to_id: &crate::TokenMap, texts: &[&str]) -> Option<u32> {
    texts
        .iter()
        .filter_map(|t| token_to_id.get(*t).copied())
        .min()
}

/// Computes EOT / EOM (when the file gave none) and the EOG set, turning every token that is
/// recognized by its text into a control token, as llama.cpp does.
///
/// NOTE: llama.cpp picks the first match in hash-map order when several texts qualify as EOT;
/// the lowest id is chosen here so the result does not depend on hashing. The EOG set is the same.
pub fn derive_special_ids(
    token_to_id: &crate::TokenMap,
    types: &mut [TokenType],
    eos: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
) -> SpecialIds {
    let mut make_control = |id: u32| types[id as usize] = TokenType::Control;
    let eot = eot.or_else(|| first_with_text(token_to_id, EOT_TEXTS));
    let eom = eom.or_else(|| first_with_text(token_to_id, EOM_TEXTS));
    let mut eog = BTreeSet::new();
    for texts in [FIM_PAD_TEXTS, FIM_REP_TEXTS, FIM_SEP_TEXTS] {
        if let Some(id) = first_with_text(token_to_id, texts) {
            make_control(id);
            eog.insert(id);
        }
    }
    for texts in [EOT_TEXTS, EOM_TEXTS, FIM_OTHER_TEXTS] {
        for text in texts {
            if let Some(&id) = token_to_id.get(*text) {
                // Only the chosen EOT / EOM / FIM tokens are retyped by llama.cpp.
                if Some(id) == eot || Some(id) == eom || FIM_OTHER_TEXTS.contains(text) {
                    make_control(id);
                }
            }
        }
    }
    for text in EOG_TEXTS {
        if let Some(&id) = token_to_id.get(*text) {
            make_control(id);
            eog.insert(id);
        }
    }
    // gpt-oss ("harmony") formatting tokens always render.
    for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(&id) = token_to_id.get(text) {
            types[id as usize] = TokenType::UserDefined;
        }
    }
    eog.extend(eos);
    eog.extend(eot);
    eog.extend(eom);
    // Harmony: with both <|return|> and <|call|>, <|end|> ends a message, not the generation.
    let has = |text: &str| token_to_id.get(text).is_some_and(|id| eog.contains(id));
    if has("<|return|>") && has("<|call|>") {
        if let Some(&end) = token_to_id.get("<|end|>") {
            eog.remove(&end);
            types[end as usize] = TokenType::UserDefined;
        }
    }
    SpecialIds { eot, eom, eog }
}

/// Strip attributes (lstrip, rstrip) of a special token, from the model name / pre-tokenizer
/// as llama.cpp hard-codes them (GGUF files do not store them).
pub fn strip_attributes(model_name: &str, pre: &str, text: &str) -> (bool, bool) {
    if ["jina-v2-de", "jina-v2-es", "jina-v2-code"]
        .iter()
        .any(|p| pre.contains(p))
    {
        return (text == "<mask>", false);
    }
    if model_name.contains("phi-3") || model_name.contains("phi3") {
        let rstrip = !matches!(text, "<unk>" | "<s>" | "<|endoftext|>");
        return (false, rstrip);
    }
    (false, false)
}
