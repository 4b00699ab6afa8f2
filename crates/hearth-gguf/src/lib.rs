//! GGUF files: a zero-copy, memory-mapped reader for versions 2 and 3, and a writer.
//!
//! ```no_run
//! # fn main() -> Result<(), hearth_gguf::GgufError> {
//! let file = hearth_gguf::GgufFile::open("model.gguf")?;
//! let arch = file.metadata().require_str("general.architecture")?;
//! for t in file.tensors() {
//!     let bytes: &[u8] = file.tensor_data(t); // a slice of the mapping, never a copy
//!     println!("{arch} {} {} {:?} {}", t.name, t.ty, t.dims, bytes.len());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The reader treats the file as hostile: every count and length is checked against the bytes
//! remaining before anything is allocated, every tensor is checked to lie inside the file, and
//! errors name the metadata key or tensor at fault and the byte offset.

mod cursor;
mod error;
mod file;
mod metadata;
mod parse;
mod tensor;
mod value;
pub mod writer;

pub use error::GgufError;
pub use file::GgufFile;
pub use hearth_quant::GgmlType;
pub use metadata::Metadata;
pub use parse::{DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_METADATA_ELEMENTS};
pub use tensor::TensorInfo;
pub use value::Value;
pub use writer::{GgufStream, GgufWriter, StreamedTensor};

/// The metadata key that sets the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
