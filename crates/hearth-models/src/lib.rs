//! hearth-models
