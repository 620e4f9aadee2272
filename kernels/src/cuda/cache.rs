//! The on-disk cache of compiled cubins, so a process skips NVRTC for every instantiation
//! an earlier process compiled with the same source, options, arch and NVRTC version.
//!
//! Location: `VITRT_CACHE_DIR`, else `$XDG_CACHE_HOME/vitrt/kernels`, else
//! `~/.cache/vitrt/kernels`. One file per instantiation and key:
//! `<wrapper name>-<key>.cubin` holding a magic, the payload length, an FNV-1a checksum of the
//! payload, then the payload. An entry that is short, foreign or fails its checksum is
//! ignored and rewritten; writes go to a temporary file renamed into place, so a reader never
//! sees half an entry. The cache is an optimisation: when it cannot be read or written,
//! kernels are compiled as if it were empty, and the first failed write of a process says so
//! on stderr, with the folder and the reason (every run would otherwise compile again without
//! a word). Temporary files more than an hour old, left by killed runs, are removed when the
//! cache opens ([`DiskCache::from_env`], [`DiskCache::open`]).

use super::compile::fnv_checksum;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 8] = b"VITRTKC1";
const HEADER_LEN: usize = 8 + 8 + 8;

/// Temporary files older than this are a killed run's and are removed when the cache opens.
pub const STALE_TEMPORARY_AGE: Duration = Duration::from_secs(3600);

/// Whether this process has said that its cache cannot be written.
static WRITE_FAILURE_REPORTED: AtomicBool = AtomicBool::new(false);

#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
    /// Set once a failed write has been reported: the process's flag, or a test's own.
    reported: &'static AtomicBool,
}

impl DiskCache {
    /// The cache at the default location, opened, or `None` when no location can be named.
    pub fn from_env() -> Option<DiskCache> {
        default_dir().map(DiskCache::open)
    }

    /// The cache in `dir`, without touching the disk.
    pub fn at(dir: PathBuf) -> DiskCache {
        DiskCache {
            dir,
            reported: &WRITE_FAILURE_REPORTED,
        }
    }

    /// The cache in `dir`, after removing the temporary files that killed runs left there
    /// more than `STALE_TEMPORARY_AGE` (an hour) ago.
    pub fn open(dir: PathBuf) -> DiskCache {
        let cache = DiskCache::at(dir);
        cache.remove_stale_temporaries(STALE_TEMPORARY_AGE);
        cache
    }

    /// Removes this cache's temporary files (`.<name>.<...>.tmp`) last modified more than
    /// `age` ago; returns how many went. Errors are ignored: another process may be removing
    /// the same files.
    pub fn remove_stale_temporaries(&self, age: Duration) -> usize {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return 0;
        };
        let now = SystemTime::now();
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !(name.starts_with('.') && name.ends_with(".tmp")) {
                continue;
            }
            let old = entry
                .metadata()
                .ok()
                .filter(|m| m.is_file())
                .and_then(|m| m.modified().ok())
                .and_then(|modified| now.duration_since(modified).ok())
                .is_some_and(|elapsed| elapsed > age);
            if old && fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
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

    /// Stores a cubin. A failure costs only a compilation in the next process, so it is not
    /// an error; the first of a process is reported on stderr, and returned (the message
    /// printed), the rest are silent.
    pub fn store(&self, name: &str, key: &str, cubin: &[u8]) -> Option<String> {
        let error = self.try_store(name, key, cubin).err()?;
        if self.reported.swap(true, Ordering::Relaxed) {
            return None;
        }
        let message = format!(
            "vitrt: cannot write the kernel cache {}: {error}; every run compiles its kernels \
             again (set VITRT_CACHE_DIR to a writable folder)",
            self.dir.display()
        );
        eprintln!("{message}");
        Some(message)
    }

    fn try_store(&self, name: &str, key: &str, cubin: &[u8]) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        write_atomically(&self.entry_path(name, key), &encode_entry(cubin))
    }
}

/// Writes `bytes` to `path` whole or not at all: a new temporary file beside it
/// (`.<name>.<pid>.<n>.tmp`), synced, renamed over `path`, and the folder synced (best
/// effort). On failure the temporary file is removed.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let folder = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let (temporary, mut file) = loop {
        let temporary = folder.join(format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)
        {
            Ok(file) => break (temporary, file),
            // A leftover of a killed process with the same id: take the next number.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    };
    let result = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::rename(&temporary, path));
    drop(file);
    if result.is_err() {
        let _ = fs::remove_file(&temporary);
    } else if let Ok(dir) = fs::File::open(folder) {
        let _ = dir.sync_all();
    }
    result
}

/// `VITRT_CACHE_DIR`, else `$XDG_CACHE_HOME/vitrt/kernels`, else `~/.cache/vitrt/kernels`.
pub(crate) fn default_dir() -> Option<PathBuf> {
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

    /// A cache whose report flag is its own, so tests do not depend on each other.
    fn with_own_flag(dir: PathBuf) -> DiskCache {
        DiskCache {
            dir,
            reported: Box::leak(Box::new(AtomicBool::new(false))),
        }
    }

    #[test]
    fn a_cache_that_cannot_be_written_is_reported_once() {
        let base = scratch_dir("unwritable");
        fs::create_dir_all(&base).unwrap();
        // A folder under a regular file cannot be made, whoever runs the test (root too).
        let blocker = base.join("a-file");
        fs::write(&blocker, "not a folder").unwrap();
        let cache = with_own_flag(blocker.join("kernels"));
        let first = cache
            .store("k", "one", b"cubin")
            .expect("the first failure is reported");
        assert!(
            first.contains(&cache.dir().display().to_string()),
            "{first}"
        );
        assert!(first.contains("Not a directory"), "{first}");
        assert_eq!(cache.store("k", "two", b"cubin"), None, "reported once");
        assert_eq!(cache.store("k", "one", b"cubin"), None);
        assert_eq!(cache.load("k", "one"), None);
        let _ = fs::remove_dir_all(&base);
    }

    #[cfg(unix)]
    #[test]
    fn a_read_only_cache_folder_is_reported_once() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch_dir("read-only");
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o555)).unwrap();
        // Root writes anyway: then there is nothing to report, and nothing to test.
        let probe = dir.join("probe");
        if fs::write(&probe, "x").is_ok() {
            let _ = fs::remove_file(&probe);
        } else {
            let cache = with_own_flag(dir.clone());
            let first = cache.store("k", "one", b"cubin").expect("reported");
            assert!(first.contains("Permission denied"), "{first}");
            assert_eq!(cache.store("k", "two", b"cubin"), None);
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn stale_temporaries_go_when_the_cache_opens() {
        let dir = scratch_dir("stale");
        let cache = with_own_flag(dir.clone());
        cache.store("k", "kept", b"cubin");
        let old = dir.join(".k-gone.123.0.tmp");
        let fresh = dir.join(".k-fresh.456.0.tmp");
        fs::write(&old, "half").unwrap();
        fs::write(&fresh, "half").unwrap();
        let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
        fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(two_hours_ago)
            .unwrap();
        let opened = DiskCache::open(dir.clone());
        assert!(!old.exists(), "a killed run's leftover is removed");
        assert!(fresh.exists(), "a running writer's file is left alone");
        assert_eq!(opened.load("k", "kept").as_deref(), Some(&b"cubin"[..]));
        let _ = fs::remove_dir_all(&dir);
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
