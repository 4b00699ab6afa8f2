//! hearth-gguf
