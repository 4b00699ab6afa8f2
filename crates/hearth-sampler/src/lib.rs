//! hearth-sampler
