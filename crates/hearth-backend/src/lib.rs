//! hearth-backend
