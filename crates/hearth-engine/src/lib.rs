//! hearth-engine
