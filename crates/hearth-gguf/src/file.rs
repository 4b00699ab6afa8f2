//! `GgufFile`: an opened (memory-mapped) or in-memory GGUF file.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::parse::{parse, Layout};
use crate::{GgufError, Metadata, TensorInfo};

/// A parsed GGUF file. Tensor data is never copied: [`GgufFile::tensor_data`] returns slices
/// of the mapping (or of the owned buffer for [`GgufFile::from_bytes`]).
///
/// Everything is validated when the file is opened, so every tensor's bytes lie inside the file.
pub struct GgufFile {
    storage: Storage,
    path: Option<PathBuf>,
    version: u32,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

/// Where the bytes live.
enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
    /// A copy of a buffer whose start was not 64-byte aligned.
    Aligned {
        chunks: Vec<Chunk>,
        len: usize,
    },
}

/// NOTE: tensor offsets are multiples of the file's alignment (32 by default), so data slices
/// are suitably aligned for casting to `f32`/`u16`/block types as long as the buffer start is.
/// A mapping starts on a page boundary; an owned buffer is copied into 64-byte chunks if its
/// allocation does not already start on a 64-byte boundary.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Chunk([u8; 64]);

const BUFFER_ALIGN: usize = std::mem::align_of::<Chunk>();

impl Storage {
    fn owned(bytes: Vec<u8>) -> Self {
        if (bytes.as_ptr() as usize) & (BUFFER_ALIGN - 1) == 0 {
            return Storage::Owned(bytes);
        }
        let mut chunks = vec![Chunk([0; 64]); bytes.len().div_ceil(64)];
        bytemuck::cast_slice_mut::<Chunk, u8>(&mut chunks)[..bytes.len()].copy_from_slice(&bytes);
        Storage::Aligned {
            chunks,
            len: bytes.len(),
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(map) => map,
            Storage::Owned(bytes) => bytes,
            Storage::Aligned { chunks, len } => &bytemuck::cast_slice::<Chunk, u8>(chunks)[..*len],
        }
    }
}

impl GgufFile {
    /// Memory-maps the file at `path` and parses it.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let io_err = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        // SAFETY: the mapping is read-only and private to this process. As with every
        // memory-mapped loader, truncating or rewriting the file while it is mapped is undefined
        // behaviour; model files are treated as immutable while loaded.
        let map = unsafe { Mmap::map(&file) }.map_err(io_err)?;
        Self::from_storage(Storage::Mapped(map), Some(path.to_path_buf()))
    }

    /// Parses a GGUF file held in memory (tests, fuzzing, downloads in flight).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_storage(Storage::owned(bytes), None)
    }

    fn from_storage(storage: Storage, path: Option<PathBuf>) -> Result<GgufFile, GgufError> {
        let Layout {
            version,
            metadata,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        } = parse(storage.bytes())?;
        Ok(GgufFile {
            storage,
            path,
            version,
            metadata,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The key/value metadata, in file order.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// All tensors, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor of this file: a zero-copy slice of the mapping, `info.n_bytes` long.
    ///
    /// # Panics
    /// If `info` does not describe a tensor inside this file (for instance one taken from
    /// another file). Infos returned by [`GgufFile::tensors`] and [`GgufFile::tensor`] were
    /// checked when the file was parsed and never panic.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        self.tensor_range(info).unwrap_or_else(|| {
            panic!(
                "tensor '{}' (offset {}, {} bytes) lies outside this {}-byte GGUF file",
                info.name,
                info.offset,
                info.n_bytes,
                self.file_size()
            )
        })
    }

    /// The bytes of the tensor named `name`, if there is one.
    pub fn tensor_bytes(&self, name: &str) -> Option<&[u8]> {
        self.tensor(name).and_then(|info| self.tensor_range(info))
    }

    fn tensor_range(&self, info: &TensorInfo) -> Option<&[u8]> {
        let start = self.data_offset.checked_add(info.offset)?;
        let end = start.checked_add(info.n_bytes)?;
        let range = usize::try_from(start).ok()?..usize::try_from(end).ok()?;
        self.storage.bytes().get(range)
    }

    /// The path this file was opened from (`None` for [`GgufFile::from_bytes`]).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Size of the whole file in bytes.
    pub fn file_size(&self) -> u64 {
        self.storage.bytes().len() as u64
    }

    /// Alignment of the data section and of tensor offsets (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset where the data section (tensor offset 0) starts.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Total bytes of tensor data (the sum of every tensor's `n_bytes`).
    pub fn tensor_data_size(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_bytes).sum()
    }
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("file_size", &self.file_size())
            .field("n_kv", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_storage_is_64_byte_aligned_and_unchanged() {
        let mut n_copied = 0;
        let mut keep = Vec::new();
        for len in [1usize, 63, 64, 65, 1000] {
            // NOTE: the allocator decides where each buffer starts; trying several buffers of
            // each size exercises both the keep-as-is and the copy path.
            for attempt in 0..16u8 {
                let bytes: Vec<u8> = (0..len).map(|i| (i as u8) ^ attempt).collect();
                let misaligned = !(bytes.as_ptr() as usize).is_multiple_of(BUFFER_ALIGN);
                let expected = bytes.clone();
                let storage = Storage::owned(bytes);
                assert_eq!(storage.bytes(), &expected[..]);
                assert_eq!(storage.bytes().as_ptr() as usize % BUFFER_ALIGN, 0);
                assert_eq!(matches!(storage, Storage::Aligned { .. }), misaligned);
                n_copied += usize::from(misaligned);
                keep.push(expected);
            }
        }
        assert!(n_copied > 0, "no misaligned buffer was seen");
        assert!(matches!(Storage::owned(Vec::new()).bytes(), []));
    }
}
