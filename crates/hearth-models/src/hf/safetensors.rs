//! A folder of memory-mapped safetensors files (one file, or shards listed by
//! `model.safetensors.index.json`), read without copying where the bytes are aligned.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hearth_backend::ByteSource;
use hearth_quant::GgmlType;
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use crate::ModelError;

/// One memory-mapped shard.
struct Shard {
    path: PathBuf,
    map: Mmap,
}

/// Where one tensor's bytes are: shard, byte range in the mapping, dtype and shape.
#[derive(Clone, Debug)]
pub struct TensorEntry {
    shard: usize,
    start: usize,
    end: usize,
    pub dtype: Dtype,
    /// `[rows, cols]` for a matrix (row-major, as torch stores it), `[n]` for a vector.
    pub shape: Vec<usize>,
}

/// All tensors of a checkpoint folder, by their HF names.
pub struct SafetensorsFolder {
    shards: Vec<Shard>,
    tensors: HashMap<String, TensorEntry>,
}

const INDEX: &str = "model.safetensors.index.json";
const SINGLE: &str = "model.safetensors";

fn bad_file(path: &Path, reason: impl Into<String>) -> ModelError {
    ModelError::BadFile {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

impl SafetensorsFolder {
    /// Map `dir/model.safetensors`, or every shard that `dir/model.safetensors.index.json` names.
    pub fn open(dir: &Path) -> Result<Self, ModelError> {
        let index = dir.join(INDEX);
        let (files, weight_map) = if index.is_file() {
            let (files, map, total) = read_index(&index)?;
            (files, Some((map, total)))
        } else if dir.join(SINGLE).is_file() {
            (vec![SINGLE.to_string()], None)
        } else {
            return Err(bad_file(dir, format!("has neither {SINGLE} nor {INDEX}")));
        };
        let mut folder = SafetensorsFolder {
            shards: Vec::new(),
            tensors: HashMap::new(),
        };
        for name in files {
            folder.add_shard(&dir.join(name))?;
        }
        if let Some((map, total_size)) = weight_map {
            let sum = folder.total_bytes();
            if total_size.is_some_and(|t| t != sum) {
                return Err(bad_file(
                    &index,
                    format!("metadata.total_size is {total_size:?} but the shards hold {sum} bytes of tensors"),
                ));
            }
            for (tensor, file) in map {
                let found = folder.tensors.get(&tensor).map(|e| &folder.shards[e.shard]);
                if found.and_then(|s| s.path.file_name()) != Some(file.as_ref()) {
                    return Err(bad_file(
                        &dir.join(&file),
                        format!("{INDEX} places tensor '{tensor}' here, but the file lacks it"),
                    ));
                }
            }
        }
        Ok(folder)
    }

    fn add_shard(&mut self, path: &Path) -> Result<(), ModelError> {
        let file = File::open(path).map_err(|e| bad_file(path, e.to_string()))?;
        // SAFETY: the mapping is read-only; as with every memory-mapped model file, the file
        // must not be truncated while it is in use.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| bad_file(path, e.to_string()))?;
        let (header_len, meta) =
            SafeTensors::read_metadata(&map).map_err(|e| bad_file(path, e.to_string()))?;
        let base = 8 + header_len;
        let shard = self.shards.len();
        for (name, info) in meta.tensors() {
            let (start, end) = info.data_offsets;
            let entry = TensorEntry {
                shard,
                start: base + start,
                end: base + end,
                dtype: info.dtype,
                shape: info.shape.clone(),
            };
            if self.tensors.insert(name.clone(), entry).is_some() {
                return Err(bad_file(path, format!("tensor '{name}' is in two shards")));
            }
        }
        self.shards.push(Shard {
            path: path.to_path_buf(),
            map,
        });
        Ok(())
    }

    /// The entry of tensor `name`, if the folder has it.
    pub fn get(&self, name: &str) -> Option<&TensorEntry> {
        self.tensors.get(name)
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.tensors.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// The stored bytes of `entry`.
    pub fn bytes(&self, entry: &TensorEntry) -> &[u8] {
        &self.shards[entry.shard].map[entry.start..entry.end]
    }

    /// Sum of all tensors' bytes.
    pub fn total_bytes(&self) -> u64 {
        self.tensors
            .values()
            .map(|e| (e.end - e.start) as u64)
            .sum()
    }

    /// Sum of all tensors' element counts.
    pub fn total_elements(&self) -> u64 {
        let n = |e: &TensorEntry| e.shape.iter().product::<usize>() as u64;
        self.tensors.values().map(n).sum()
    }
}

/// `(tensor, shard file)` pairs of an index.
type WeightMap = Vec<(String, String)>;

/// The shard files `index` names (in order of first mention), its tensor → file map and its
/// `metadata.total_size`.
fn read_index(index: &Path) -> Result<(Vec<String>, WeightMap, Option<u64>), ModelError> {
    let text = std::fs::read_to_string(index).map_err(|e| bad_file(index, e.to_string()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad_file(index, e.to_string()))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad_file(index, "'weight_map' is missing or not an object"))?;
    let mut files = Vec::new();
    let mut seen = BTreeSet::new();
    let mut pairs = Vec::with_capacity(map.len());
    for (tensor, file) in map {
        let file = file
            .as_str()
            .filter(|f| !f.is_empty() && !f.contains(['/', '\\']) && *f != "..")
            .ok_or_else(|| bad_file(index, format!("weight_map['{tensor}'] is not a file name")))?;
        if seen.insert(file.to_string()) {
            files.push(file.to_string());
        }
        pairs.push((tensor.clone(), file.to_string()));
    }
    let total = json
        .pointer("/metadata/total_size")
        .and_then(|v| v.as_u64());
    Ok((files, pairs, total))
}

/// The hearth weight type of a safetensors dtype, where hearth runs it.
pub fn ggml_type(dtype: Dtype) -> Option<GgmlType> {
    match dtype {
        Dtype::F32 => Some(GgmlType::F32),
        Dtype::F16 => Some(GgmlType::F16),
        Dtype::BF16 => Some(GgmlType::BF16),
        _ => None,
    }
}

/// The bytes of one tensor of a mapped folder; keeps the mapping alive.
pub struct SafetensorsBytes {
    pub(crate) folder: Arc<SafetensorsFolder>,
    pub(crate) entry: TensorEntry,
}

impl ByteSource for SafetensorsBytes {
    fn bytes(&self) -> &[u8] {
        self.folder.bytes(&self.entry)
    }
}

/// A copy of bytes whose mapped address was not aligned to their element size; stored as
/// `u64`s so that the copy is aligned for every float type.
pub struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    /// Copy `bytes` into aligned storage.
    pub fn copy_of(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Self {
            words,
            len: bytes.len(),
        }
    }
}

impl ByteSource for AlignedBytes {
    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }
}
