//! The one error type of this crate.

use std::path::PathBuf;

/// Everything that can go wrong reading, querying or writing a GGUF file.
///
/// Parse errors name the metadata key or tensor they are about and, where it helps, the byte
/// offset in the file at which the problem was found.
#[derive(thiserror::Error, Debug)]
pub enum GgufError {
    /// Opening or mapping or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file does not start with the bytes `GGUF`.
    #[error("not a GGUF file: magic is {magic:02x?} ({}), expected \"GGUF\"", String::from_utf8_lossy(.magic))]
    NotGguf { magic: [u8; 4] },

    /// A GGUF version this reader does not handle (only 2 and 3 are).
    #[error("unsupported GGUF version {0} (supported: 2 and 3)")]
    UnsupportedVersion(u32),

    /// The file ended (or a claimed length runs past its end) while reading `what`.
    #[error("truncated GGUF file: {what} at offset {offset}")]
    Truncated { what: String, offset: u64 },

    /// The file is structurally readable but breaks a rule of the format.
    #[error("invalid GGUF file: {0}")]
    Invalid(String),

    /// A metadata value type id that is not one of the 13 GGUF value types.
    #[error("invalid GGUF file: metadata key '{key}': unknown value type {id} at offset {offset}")]
    UnknownValueType { key: String, id: u32, offset: u64 },

    /// A tensor whose GGML type id this build does not know.
    #[error("tensor '{tensor}': unknown GGML tensor type id {id}")]
    UnknownTensorType { tensor: String, id: u32 },

    /// A metadata key that was required is absent.
    #[error("missing metadata key '{0}'")]
    MissingKey(String),

    /// A metadata key is present but holds a value of an incompatible type (or an integer out of
    /// the requested range).
    #[error("metadata key '{key}': expected {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
}
