//! hearth-tokenizer
