//! The on-disk cache of compiled cubins, so a process skips NVRTC for every instantiation
//! an earlier process compiled with the same source, options, arch and NVRTC version.
//!
//! Location: `VITRT_CACHE_DIR`, else `$XDG_CACHE_HOME/vitrt/kernels`, else
//! `~/.cache/vitrt/kernels`. One file per instantiation and key:
//! `<wrapper name>-<key>.cubin` holding a magic, the payload length, an FNV-1a checksum of the
//! payload, then the payload. An entry that is short, foreign or fails its checksum is
//! ignored and rewritten; writes go to a temporary file renamed into place, so a reader never
//! sees half an entry. The cache is an optimisation: when it cannot be read or written,
//! kernels are compiled as if it were empty.

use super::compile::fnv_checksum;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"VITRTKC1";
const HEADER_LEN: usize = 8 + 8 + 8;

#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    /// The cache at the default location, or `None` when no location can be named.
    pub fn from_env() -> Option<DiskCache> {
        default_dir().map(DiskCache::at)
    }

    pub fn at(dir: PathBuf) -> DiskCache {
        DiskCache { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry_path(&self, name: &str, key: &str) -> PathBuf {
        self.dir.join(format!("{name}-{key}.cubin"))
    }

    /// The cached cubin, if a whole, intact entry exists.
    pub fn load(&self, name: &str, key: &str) -> Option<Vec<u8>> {
        let bytes = fs::read(self.entry_path(name, key)).ok()?;
        decode_entry(&bytes)
    }

    /// Stores a cubin; failures are ignored (the next process compiles again).
    pub fn store(&self, name: &str, key: &str, cubin: &[u8]) {
        let _ = self.try_store(name, key, cubin);
    }

    fn try_store(&self, name: &str, key: &str, cubin: &[u8]) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let path = self.entry_path(name, key);
        let temporary = self
            .dir
            .join(format!(".{name}-{key}.{}.tmp", std::process::id()));
        let result = (|| {
            let mut file = fs::File::create(&temporary)?;
            file.write_all(&encode_entry(cubin))?;
            file.sync_all()?;
            fs::rename(&temporary, &path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&temporary);
        }
        result
    }
}

fn default_dir() -> Option<PathBuf> {
    let non_empty = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = non_empty("VITRT_CACHE_DIR") {
        return Some(dir);
    }
    let cache_root =
        non_empty("XDG_CACHE_HOME").or_else(|| non_empty("HOME").map(|h| h.join(".cache")))?;
    Some(cache_root.join("vitrt").join("kernels"))
}

fn encode_entry(payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&fnv_checksum(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

fn decode_entry(bytes: &[u8]) -> Option<Vec<u8>> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return None;
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().ok()?) as usize;
    let checksum = u64::from_le_bytes(bytes[16..24].try_into().ok()?);
    let payload = &bytes[HEADER_LEN..];
    (payload.len() == len && len > 0 && fnv_checksum(payload) == checksum).then(|| payload.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("vitrt-cache-test-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn entries_round_trip() {
        let cache = DiskCache::at(scratch_dir("round-trip"));
        assert_eq!(cache.load("k", "abc"), None);
        cache.store("k", "abc", b"cubin bytes");
        assert_eq!(cache.load("k", "abc").as_deref(), Some(&b"cubin bytes"[..]));
        assert_eq!(cache.load("k", "abd"), None, "another key is another entry");
        let _ = fs::remove_dir_all(cache.dir());
    }

    #[test]
    fn corrupt_or_truncated_entries_are_not_trusted() {
        let cache = DiskCache::at(scratch_dir("corrupt"));
        cache.store("k", "key", b"0123456789");
        let path = cache.entry_path("k", "key");
        let good = fs::read(&path).unwrap();

        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        fs::write(&path, &flipped).unwrap();
        assert_eq!(
            cache.load("k", "key"),
            None,
            "a flipped bit fails the checksum"
        );

        fs::write(&path, &good[..good.len() - 3]).unwrap();
        assert_eq!(
            cache.load("k", "key"),
            None,
            "a truncated entry is rejected"
        );

        fs::write(&path, b"garbage").unwrap();
        assert_eq!(cache.load("k", "key"), None);

        cache.store("k", "key", b"0123456789");
        assert_eq!(
            cache.load("k", "key").as_deref(),
            Some(&b"0123456789"[..]),
            "rewritten"
        );
        let _ = fs::remove_dir_all(cache.dir());
    }
}
