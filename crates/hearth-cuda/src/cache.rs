//! On-disk cache of compiled kernels (CUBIN), so NVRTC runs once per source, arch and driver.
//!
//! An entry is `MAGIC | payload length (u64 LE) | FNV-1a 64 of the payload (u64 LE) | payload`.
//! Anything that does not check out (missing, unreadable, short, wrong magic, wrong hash) is a
//! miss: the caller recompiles and overwrites it. Entries are written to a temporary file and
//! renamed, so a crash mid-write never leaves a half entry under the real name.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"HRTHCUBN";
const HEADER: usize = 8 + 8 + 8;

/// FNV-1a, 64-bit: stable across Rust versions and platforms (unlike `DefaultHasher`).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Identifies one compiled program: source hash, target arch, driver and compiler versions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheKey {
    file_name: String,
}

impl CacheKey {
    /// The key for `source` compiled for `arch` (e.g. "sm_90") under driver API version
    /// `driver_version` with NVRTC `nvrtc_version` (major, minor).
    pub fn new(source: &str, arch: &str, driver_version: u32, nvrtc_version: (i32, i32)) -> Self {
        let arch: String = arch
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let (major, minor) = nvrtc_version;
        CacheKey {
            file_name: format!(
                "kernels-{:016x}-{arch}-driver{driver_version}-nvrtc{major}.{minor}.cubin",
                fnv1a64(source.as_bytes())
            ),
        }
    }

    /// The entry's file name inside the cache directory.
    pub fn file_name(&self) -> &str {
        &self.file_name
    }
}

/// Why [`KernelCache::load`] found nothing usable.
#[derive(Debug)]
pub enum CacheMiss {
    /// No cache directory could be determined (no `XDG_CACHE_HOME` or `HOME`).
    Disabled,
    /// No entry for this key yet.
    Absent,
    /// The entry exists but could not be read.
    Unreadable(std::io::Error),
    /// The entry is damaged; the text says how.
    Corrupt(&'static str),
}

impl std::fmt::Display for CacheMiss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheMiss::Disabled => f.write_str("no cache directory"),
            CacheMiss::Absent => f.write_str("not cached yet"),
            CacheMiss::Unreadable(e) => write!(f, "cache entry unreadable: {e}"),
            CacheMiss::Corrupt(why) => write!(f, "cache entry corrupt: {why}"),
        }
    }
}

/// A directory of compiled kernels.
#[derive(Clone, Debug)]
pub struct KernelCache {
    dir: Option<PathBuf>,
}

impl KernelCache {
    /// `$XDG_CACHE_HOME/hearth/cuda`, else `$HOME/.cache/hearth/cuda`; disabled when neither
    /// variable is set.
    pub fn default_location() -> Self {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| PathBuf::from(h).join(".cache"))
            });
        KernelCache {
            dir: base.map(|b| b.join("hearth").join("cuda")),
        }
    }

    /// A cache in `dir` (created on first store).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        KernelCache {
            dir: Some(dir.into()),
        }
    }

    /// The cache directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The path of `key`'s entry, if the cache has a directory.
    pub fn path(&self, key: &CacheKey) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(&key.file_name))
    }

    /// The payload stored under `key`, verified against its length and hash.
    pub fn load(&self, key: &CacheKey) -> Result<Vec<u8>, CacheMiss> {
        let path = self.path(key).ok_or(CacheMiss::Disabled)?;
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(CacheMiss::Absent),
            Err(e) => return Err(CacheMiss::Unreadable(e)),
        };
        decode_entry(bytes)
    }

    /// Stores `payload` under `key`, creating the directory if needed. Failing to store is not
    /// fatal for the caller (it already has the payload), so this only reports it.
    pub fn store(&self, key: &CacheKey, payload: &[u8]) -> std::io::Result<PathBuf> {
        let path = self.path(key).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "no cache directory")
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".{}.{}.tmp", key.file_name, std::process::id()));
        let mut file = fs::File::create(&tmp)?;
        file.write_all(MAGIC)?;
        file.write_all(&(payload.len() as u64).to_le_bytes())?;
        file.write_all(&fnv1a64(payload).to_le_bytes())?;
        file.write_all(payload)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, &path).inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })?;
        Ok(path)
    }
}

fn decode_entry(mut bytes: Vec<u8>) -> Result<Vec<u8>, CacheMiss> {
    if bytes.len() < HEADER {
        return Err(CacheMiss::Corrupt("shorter than its header"));
    }
    if &bytes[..8] != MAGIC {
        return Err(CacheMiss::Corrupt("wrong magic"));
    }
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let (len, hash) = (word(8), word(16));
    if len != (bytes.len() - HEADER) as u64 {
        return Err(CacheMiss::Corrupt("length does not match the header"));
    }
    let payload = bytes.split_off(HEADER);
    if fnv1a64(&payload) != hash {
        return Err(CacheMiss::Corrupt("hash does not match the payload"));
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_cache(name: &str) -> KernelCache {
        let dir = std::env::temp_dir().join(format!("hearth-cuda-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        KernelCache::at(dir)
    }

    #[test]
    fn fnv_matches_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn key_changes_with_source_arch_driver_and_compiler() {
        let base = CacheKey::new("src", "sm_90", 13000, (13, 0));
        assert_ne!(base, CacheKey::new("src2", "sm_90", 13000, (13, 0)));
        assert_ne!(base, CacheKey::new("src", "sm_89", 13000, (13, 0)));
        assert_ne!(base, CacheKey::new("src", "sm_90", 13010, (13, 0)));
        assert_ne!(base, CacheKey::new("src", "sm_90", 13000, (13, 1)));
        assert_eq!(base, CacheKey::new("src", "sm_90", 13000, (13, 0)));
        assert!(!CacheKey::new("s", "../x", 1, (1, 0))
            .file_name()
            .contains('/'));
    }

    #[test]
    fn round_trip_then_every_kind_of_damage_is_a_miss() {
        let cache = temp_cache("damage");
        let key = CacheKey::new("src", "sm_90", 13000, (13, 0));
        assert!(matches!(cache.load(&key), Err(CacheMiss::Absent)));
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let path = cache.store(&key, &payload).unwrap();
        assert_eq!(cache.load(&key).unwrap(), payload);

        let good = fs::read(&path).unwrap();
        let mut flipped = good.clone();
        flipped[HEADER + 500] ^= 1;
        let damaged: [(Vec<u8>, &str); 4] = [
            (good[..10].to_vec(), "header"),
            (good[..good.len() - 1].to_vec(), "length"),
            (flipped, "hash"),
            ([b"XXXXXXXX", &good[8..]].concat(), "magic"),
        ];
        for (bytes, why) in damaged {
            fs::write(&path, bytes).unwrap();
            match cache.load(&key) {
                Err(CacheMiss::Corrupt(msg)) => assert!(msg.contains(why), "{msg} vs {why}"),
                other => panic!("expected a corrupt miss ({why}), got {other:?}"),
            }
        }
        // A store over a damaged entry repairs it.
        cache.store(&key, &payload).unwrap();
        assert_eq!(cache.load(&key).unwrap(), payload);
        let _ = fs::remove_dir_all(cache.dir().unwrap());
    }

    #[test]
    fn unreadable_entry_is_a_miss() {
        let cache = temp_cache("unreadable");
        let key = CacheKey::new("src", "sm_90", 13000, (13, 0));
        // A directory where the file should be cannot be read as a file.
        fs::create_dir_all(cache.path(&key).unwrap()).unwrap();
        assert!(matches!(cache.load(&key), Err(CacheMiss::Unreadable(_))));
        let _ = fs::remove_dir_all(cache.dir().unwrap());
    }
}
