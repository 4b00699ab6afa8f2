//! hearth-kv
