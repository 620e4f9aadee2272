//! Autotuning, as `triton.autotune(key=[...])`: a kernel lists candidate configs; for a key
//! (the problem's shape, dtype, the GPU's architecture and name) the tuner times every
//! candidate on random data and keeps the fastest in a table on disk, which every later
//! process loads once per [`Gpu`] and consults before the cost-model heuristic. A problem the
//! table does not know runs on the heuristic's choice.
//!
//! Only the matmul has real choices today: its tile shape ([`MatmulTile`]), picked by a cost
//! model that cannot see everything (L2 reuse, the epilogue, ragged last waves). The row
//! kernels (layernorm, softmax) and the element-wise ones derive their layout from the row
//! length and alignment (the fewest registers that hold a row); there is nothing to choose.
//!
//! # The file
//!
//! `tuning.json` in the kernel cache's folder (`VITRT_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/vitrt/kernels`, else `~/.cache/vitrt/kernels`):
//!
//! ```json
//! {"format": "vitrt-tuning/1", "entries": [{"kernel": "matmul",
//!   "problem": "b1h1_m197n2304k768_nk_none_bias_cf32", "dtype": "f16", "arch": "sm_90",
//!   "device": "NVIDIA H200", "source_hash": "…", "choice": "64x64x32_s4_w2x2",
//!   "median_ms": 0.0123}]}
//! ```
//!
//! Every entry carries the hash of the kernel's source and of its candidate list when it was
//! tuned; an entry with another hash (the kernel changed since) is ignored, as is a choice
//! that is no longer a candidate. A file that cannot be read as this format is reported once
//! on stderr and ignored, never trusted; the next `vitrt tune` replaces it.
//!
//! Writers may run at once (two `vitrt tune` on one machine): a save takes an exclusive lock
//! on `tuning.json.lock` beside the file, rereads the file, lays the entries this table
//! gained since its last save over what is there (so both writers' entries survive, and for
//! one key the later save wins), and writes the result to a temporary file that is synced
//! and renamed into place.

use crate::cuda::{cache_dir, fnv_checksum, write_atomically, Gpu, KernelError, COMMON_HEADER};
use crate::matmul::config::{ALL_SOURCES, HEADERS};
use crate::matmul::problem::{MatmulProblem, WeightLayout};
use crate::matmul::selection::{matmul_tile_for, tiles_for, MatmulTile};
use crate::types::DType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The `format` field of a tuning file this version reads and writes.
pub const TUNING_FORMAT: &str = "vitrt-tuning/1";
/// The tuning file's name in the kernel cache's folder.
pub const TUNING_FILE_NAME: &str = "tuning.json";
/// The lock file beside it, held while a save rereads, merges and replaces the file.
pub const TUNING_LOCK_NAME: &str = "tuning.json.lock";

/// The tiles the matmul tuner times for `dtype` on `gpu`. The one place that says which tiles
/// are candidates, so that tiles which need a newer architecture can be filtered here.
pub fn matmul_candidates(gpu: &Gpu, dtype: DType) -> Vec<MatmulTile> {
    let cc = gpu.compute_capability();
    tiles_for(dtype)
        .iter()
        .copied()
        .filter(|tile| tile.runs_on(cc))
        .collect()
}

/// The hash of the matmul's sources (with the shared headers) and of its candidates: a table
/// entry tuned with another is stale.
pub fn matmul_source_hash(candidates: &[MatmulTile]) -> String {
    static SOURCE_HASH: OnceLock<u64> = OnceLock::new();
    let source = *SOURCE_HASH.get_or_init(|| {
        let mut text = ALL_SOURCES.concat();
        for (_, header) in HEADERS {
            text.push_str(header);
        }
        text.push_str(COMMON_HEADER);
        fnv_checksum(text.as_bytes())
    });
    let names: Vec<String> = candidates.iter().map(MatmulTile::name).collect();
    let candidates = fnv_checksum(names.join(",").as_bytes());
    format!("{source:016x}{candidates:016x}")
}

/// What a tuned choice is valid for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TuningKey {
    /// The kernel family: `matmul`.
    pub kernel: String,
    /// The problem's signature (see [`matmul_signature`]).
    pub problem: String,
    /// The operands' storage type.
    pub dtype: String,
    /// `sm_90`.
    pub arch: String,
    /// The device's name, as the driver gives it.
    pub device: String,
}

impl TuningKey {
    pub fn matmul(
        problem: &MatmulProblem,
        dtype: DType,
        storage: MatmulStorage,
        compute_capability: (u32, u32),
        device: &str,
    ) -> TuningKey {
        TuningKey {
            kernel: "matmul".into(),
            problem: matmul_signature(problem, storage),
            dtype: dtype.name().into(),
            arch: format!("sm_{}{}", compute_capability.0, compute_capability.1),
            device: device.into(),
        }
    }
}

/// Storage types of a matmul's C and residual (the operands' own type, or f32 for a residual
/// stream kept in f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulStorage {
    pub output: DType,
    /// The residual's type, when the epilogue adds one.
    pub residual: Option<DType>,
}

/// A matmul problem as a key: its extents, B's layout, the epilogue and the storage of C and
/// the residual, e.g. `b2h12_m197n197k64_nk_none_cf16`. Strides and offsets are left out:
/// they decide only whether rows allow 16-byte copies, and operands that do not run on the
/// small tile whatever the table says.
pub fn matmul_signature(p: &MatmulProblem, storage: MatmulStorage) -> String {
    let layout = match p.b_layout {
        WeightLayout::NK => "nk",
        WeightLayout::KN => "kn",
    };
    let mut signature = format!(
        "b{}h{}_m{}n{}k{}_{layout}_{}",
        p.batch,
        p.heads,
        p.m,
        p.n,
        p.k,
        p.epilogue.activation.short_name()
    );
    if p.epilogue.bias {
        signature.push_str("_bias");
    }
    if p.epilogue.residual {
        let residual = storage.residual.unwrap_or(storage.output);
        signature.push_str(&format!("_r{}", residual.name()));
    }
    signature.push_str(&format!("_c{}", storage.output.name()));
    signature
}

/// One tuned choice.
#[derive(Clone, Debug, PartialEq)]
pub struct TunedChoice {
    /// The config's name ([`MatmulTile::name`]).
    pub choice: String,
    pub median_ms: f64,
}

#[derive(Serialize, Deserialize)]
struct StoredEntry {
    #[serde(flatten)]
    key: TuningKey,
    source_hash: String,
    choice: String,
    median_ms: f64,
}

#[derive(Serialize, Deserialize)]
struct StoredFile {
    format: String,
    entries: Vec<StoredEntry>,
}

/// The tuned choices, by key and source hash, and the file they live in.
#[derive(Debug, Default)]
pub struct TuningTable {
    path: Option<PathBuf>,
    entries: BTreeMap<(TuningKey, String), TunedChoice>,
    /// The entries inserted since the last save: what a save lays over the file's own.
    unsaved: BTreeMap<(TuningKey, String), TunedChoice>,
}

impl TuningTable {
    /// A table with no entries that saves to `path` (nowhere with `None`).
    pub fn empty(path: Option<PathBuf>) -> TuningTable {
        TuningTable {
            path,
            entries: BTreeMap::new(),
            unsaved: BTreeMap::new(),
        }
    }

    /// The default file: [`TUNING_FILE_NAME`] in the kernel cache's folder.
    pub fn default_path() -> Option<PathBuf> {
        cache_dir().map(|dir| dir.join(TUNING_FILE_NAME))
    }

    /// Reads the table at `path`. A missing file is an empty table; a file that is not a
    /// tuning file of this format is an empty table and a message saying why, for the caller
    /// to report. Entries with invalid fields are skipped.
    pub fn load(path: &Path) -> (TuningTable, Option<String>) {
        let mut table = TuningTable::empty(Some(path.to_path_buf()));
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (table, None),
            Err(e) => {
                return (
                    table,
                    Some(format!("ignoring tuning file {}: {e}", path.display())),
                )
            }
        };
        let file: StoredFile = match serde_json::from_str(&text) {
            Ok(file) => file,
            Err(e) => {
                return (
                    table,
                    Some(format!(
                        "ignoring tuning file {}: not a {TUNING_FORMAT} file ({e}); \
                         `vitrt tune` rewrites it",
                        path.display()
                    )),
                )
            }
        };
        if file.format != TUNING_FORMAT {
            return (
                table,
                Some(format!(
                    "ignoring tuning file {}: format \"{}\", this vitrt reads \"{TUNING_FORMAT}\"",
                    path.display(),
                    file.format
                )),
            );
        }
        for entry in file.entries {
            let valid = !entry.choice.is_empty()
                && entry.median_ms.is_finite()
                && entry.median_ms >= 0.0
                && !entry.source_hash.is_empty();
            if valid {
                table.entries.insert(
                    (entry.key, entry.source_hash),
                    TunedChoice {
                        choice: entry.choice,
                        median_ms: entry.median_ms,
                    },
                );
            }
        }
        (table, None)
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The choice tuned for `key` with the kernel at `source_hash`; entries tuned with another
    /// hash do not count.
    pub fn lookup(&self, key: &TuningKey, source_hash: &str) -> Option<&TunedChoice> {
        self.entries.get(&(key.clone(), source_hash.to_string()))
    }

    /// Keeps `choice` for `key` at `source_hash`, replacing what was there.
    /// The next [`TuningTable::save`] writes it, over what the file holds for `key` then.
    pub fn insert(&mut self, key: TuningKey, source_hash: &str, choice: TunedChoice) {
        let entry = (key, source_hash.to_string());
        self.unsaved.insert(entry.clone(), choice.clone());
        self.entries.insert(entry, choice);
    }

    /// Merges this table's unsaved entries into its file, whole or not at all, under the
    /// file's lock: the file is reread (a file that cannot be read as this format is
    /// replaced), the entries inserted since the last save are laid over its own, and the
    /// result is written to a synced temporary file renamed into place. Afterwards this table
    /// holds the merged entries, other writers' included.
    pub fn save(&mut self) -> Result<PathBuf, String> {
        let path = self
            .path
            .clone()
            .ok_or("no tuning file: set VITRT_CACHE_DIR or HOME")?;
        let fail = |e: std::io::Error| format!("writing {}: {e}", path.display());
        let folder = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&folder).map_err(fail)?;
        let lock_path = folder.join(TUNING_LOCK_NAME);
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
        // Released when `lock` is dropped (or the process ends).
        lock.lock()
            .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;

        let (on_disk, _unreadable) = TuningTable::load(&path);
        let mut merged = on_disk.entries;
        for (key, choice) in &self.unsaved {
            merged.insert(key.clone(), choice.clone());
        }
        let file = StoredFile {
            format: TUNING_FORMAT.into(),
            entries: merged
                .iter()
                .map(|((key, source_hash), choice)| StoredEntry {
                    key: key.clone(),
                    source_hash: source_hash.clone(),
                    choice: choice.choice.clone(),
                    median_ms: choice.median_ms,
                })
                .collect(),
        };
        let text = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())?;
        write_atomically(&path, (text + "\n").as_bytes()).map_err(fail)?;
        drop(lock);
        self.entries = merged;
        self.unsaved.clear();
        Ok(path)
    }
}

/// Where a matmul's tile came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileSource {
    Tuned,
    Heuristic,
}

/// The candidate `table` holds for `key`, tuned with today's source and candidates; `None`
/// when there is no such entry or its choice is no longer a candidate.
pub fn resolve_tuned_tile(
    table: &TuningTable,
    key: &TuningKey,
    candidates: &[MatmulTile],
) -> Option<MatmulTile> {
    let tuned = table.lookup(key, &matmul_source_hash(candidates))?;
    candidates
        .iter()
        .find(|t| t.name() == tuned.choice)
        .copied()
}

/// The tuning table of `gpu`, loaded from the default file on first use.
fn tuning_table(gpu: &Gpu) -> Arc<Mutex<TuningTable>> {
    gpu.family_state(|| {
        let table = match TuningTable::default_path() {
            Some(path) => {
                let (table, problem) = TuningTable::load(&path);
                if let Some(problem) = problem {
                    eprintln!("vitrt: {problem}");
                }
                table
            }
            None => TuningTable::empty(None),
        };
        Mutex::new(table)
    })
}

/// Runs `f` on `gpu`'s tuning table, locked.
pub(crate) fn with_tuning_table<T>(gpu: &Gpu, f: impl FnOnce(&mut TuningTable) -> T) -> T {
    let table = tuning_table(gpu);
    let mut table = table
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut table)
}

/// Uses the tuning file at `path` instead of the default one from now on for `gpu` (tests,
/// and callers with their own cache). Returns the reason when the file was ignored.
pub fn use_tuning_file(gpu: &Gpu, path: &Path) -> Option<String> {
    let (table, problem) = TuningTable::load(path);
    with_tuning_table(gpu, |current| *current = table);
    problem
}

/// The tuning file `gpu` reads and writes.
pub fn tuning_file(gpu: &Gpu) -> Option<PathBuf> {
    with_tuning_table(gpu, |table| table.path().map(Path::to_path_buf))
}

/// The tile [`crate::matmul::gpu::matmul`] runs `p` on (with C and the residual stored as
/// `storage`), and whether the tuning table or the heuristic chose it. (The small tile
/// instead when the operands turn out to need element loads.)
pub fn matmul_choice(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
    storage: MatmulStorage,
) -> Result<(MatmulTile, TileSource), KernelError> {
    // Batch-invariant selection ignores the tuning table, whose tiles are keyed by M.
    let tuned = (!gpu.batch_invariant())
        .then(|| tuned_matmul_tile(gpu, dtype, p, storage))
        .flatten();
    match tuned {
        Some(tile) => Ok((tile, TileSource::Tuned)),
        None => Ok((matmul_tile_for(gpu, dtype, p)?, TileSource::Heuristic)),
    }
}

/// The tuned tile for `p`, if the table holds one that is still a candidate.
fn tuned_matmul_tile(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
    storage: MatmulStorage,
) -> Option<MatmulTile> {
    with_tuning_table(gpu, |table| {
        if table.is_empty() {
            return None;
        }
        let key = TuningKey::matmul(p, dtype, storage, gpu.compute_capability(), gpu.name());
        resolve_tuned_tile(table, &key, &matmul_candidates(gpu, dtype))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::problem::Epilogue;
    use crate::types::Activation;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vitrt-tuning-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(TUNING_FILE_NAME)
    }

    fn qkv(batch: usize) -> MatmulProblem {
        MatmulProblem::linear(
            batch * 197,
            2304,
            768,
            Epilogue {
                bias: true,
                ..Epilogue::NONE
            },
        )
    }

    const HALF: MatmulStorage = MatmulStorage {
        output: DType::F16,
        residual: None,
    };

    fn key(batch: usize) -> TuningKey {
        TuningKey::matmul(&qkv(batch), DType::F16, HALF, (9, 0), "NVIDIA H200")
    }

    fn hash() -> String {
        matmul_source_hash(tiles_for(DType::F16))
    }

    #[test]
    fn keys_spell_the_problem_dtype_arch_and_device() {
        let k = key(1);
        assert_eq!(k.kernel, "matmul");
        assert_eq!(k.problem, "b1h1_m197n2304k768_nk_none_bias_cf16");
        assert_eq!((k.dtype.as_str(), k.arch.as_str()), ("f16", "sm_90"));
        assert_eq!(k.device, "NVIDIA H200");
        assert_ne!(key(1), key(8), "another M is another key");
        let on_h100 = TuningKey::matmul(&qkv(1), DType::F16, HALF, (9, 0), "NVIDIA H100");
        assert_ne!(key(1), on_h100);
        let on_sm80 = TuningKey::matmul(&qkv(1), DType::F16, HALF, (8, 0), "NVIDIA H200");
        assert_eq!(on_sm80.arch, "sm_80");
        let bf16 = TuningKey::matmul(&qkv(1), DType::BF16, HALF, (9, 0), "NVIDIA H200");
        assert_ne!(key(1), bf16);

        // The epilogue and the storage of C and the residual are part of the problem.
        let mut fc2 = MatmulProblem::linear(197, 768, 3072, Epilogue::NONE);
        fc2.epilogue.bias = true;
        fc2.epilogue.residual = true;
        let stream = MatmulStorage {
            output: DType::F32,
            residual: Some(DType::F32),
        };
        assert_eq!(
            matmul_signature(&fc2, stream),
            "b1h1_m197n768k3072_nk_none_bias_rf32_cf32"
        );
        let mut fc1 = MatmulProblem::linear(197, 3072, 768, Epilogue::NONE);
        fc1.epilogue.activation = Activation::Gelu;
        assert!(matmul_signature(&fc1, HALF).contains(Activation::Gelu.short_name()));
        let mut scores = qkv(1);
        scores.b_layout = WeightLayout::KN;
        assert!(matmul_signature(&scores, HALF).contains("_kn_"));
    }

    #[test]
    fn the_source_hash_changes_with_the_candidates() {
        let tiles = tiles_for(DType::F16);
        assert_eq!(matmul_source_hash(tiles), matmul_source_hash(tiles));
        assert_ne!(matmul_source_hash(tiles), matmul_source_hash(&tiles[..1]));
    }

    #[test]
    fn tables_round_trip_through_their_file() {
        let path = scratch("round-trip");
        let mut table = TuningTable::empty(Some(path.clone()));
        let choice = TunedChoice {
            choice: "64x64x32_s4_w2x2".into(),
            median_ms: 0.0125,
        };
        table.insert(key(1), &hash(), choice.clone());
        table.insert(
            key(8),
            &hash(),
            TunedChoice {
                choice: "128x128x32_s4_w2x2".into(),
                median_ms: 0.05,
            },
        );
        assert_eq!(table.save().unwrap(), path);
        let (loaded, problem) = TuningTable::load(&path);
        assert_eq!(problem, None);
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded.lookup(&key(1), &hash()), Some(&choice));
        assert_eq!(loaded.lookup(&key(64), &hash()), None);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(TUNING_FORMAT), "{text}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    fn tile(n: usize) -> TunedChoice {
        TunedChoice {
            choice: format!("tile{n}"),
            median_ms: 0.01 * (n + 1) as f64,
        }
    }

    #[test]
    fn concurrent_writers_keep_each_others_entries() {
        let path = scratch("concurrent");
        const SAVES: usize = 40;
        let writers: Vec<_> = [1usize, 1000]
            .into_iter()
            .map(|first_batch| {
                let path = path.clone();
                std::thread::spawn(move || {
                    // Each writer loads once, as a `vitrt tune` process does, then saves after
                    // every entry.
                    let (mut table, _) = TuningTable::load(&path);
                    for i in 0..SAVES {
                        table.insert(key(first_batch + i), &hash(), tile(i));
                        table.save().unwrap();
                    }
                    table.len()
                })
            })
            .collect();
        for writer in writers {
            let seen = writer.join().unwrap();
            assert!(
                seen >= SAVES,
                "a writer's table holds at least its own entries"
            );
        }
        let (table, problem) = TuningTable::load(&path);
        assert_eq!(problem, None);
        assert_eq!(table.len(), 2 * SAVES, "no entry lost");
        for i in 0..SAVES {
            assert_eq!(table.lookup(&key(1 + i), &hash()), Some(&tile(i)));
            assert_eq!(table.lookup(&key(1000 + i), &hash()), Some(&tile(i)));
        }
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn for_one_key_the_later_save_wins_and_older_entries_are_not_rewritten() {
        let path = scratch("newer-wins");
        let (mut first, _) = TuningTable::load(&path);
        let (mut second, _) = TuningTable::load(&path);
        first.insert(key(1), &hash(), tile(1));
        first.save().unwrap();
        second.insert(key(1), &hash(), tile(2));
        second.save().unwrap();
        // The first writer saves again, for another key: its older choice for key(1), saved
        // already, does not come back over the second's.
        first.insert(key(8), &hash(), tile(8));
        first.save().unwrap();
        let (table, _) = TuningTable::load(&path);
        assert_eq!(table.lookup(&key(1), &hash()), Some(&tile(2)));
        assert_eq!(table.lookup(&key(8), &hash()), Some(&tile(8)));
        assert_eq!(
            first.lookup(&key(1), &hash()),
            Some(&tile(2)),
            "merged in memory"
        );
        assert!(path.with_file_name(TUNING_LOCK_NAME).exists());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_missing_file_is_an_empty_table_without_a_message() {
        let path = scratch("missing");
        let (table, problem) = TuningTable::load(&path);
        assert!(table.is_empty());
        assert_eq!(problem, None);
        assert_eq!(table.path(), Some(path.as_path()));
    }

    #[test]
    fn corrupt_files_are_reported_and_ignored() {
        let path = scratch("corrupt");
        let mut table = TuningTable::empty(Some(path.clone()));
        table.insert(
            key(1),
            &hash(),
            TunedChoice {
                choice: "64x64x32_s4_w2x2".into(),
                median_ms: 0.01,
            },
        );
        table.save().unwrap();
        let good = std::fs::read_to_string(&path).unwrap();
        let truncated = &good[..good.len() / 2];
        let other_format = good.replace(TUNING_FORMAT, "vitrt-tuning/0");
        for bad in [truncated, "not json", "{}", "[1, 2]", other_format.as_str()] {
            std::fs::write(&path, bad).unwrap();
            let (table, problem) = TuningTable::load(&path);
            assert!(table.is_empty(), "{bad}");
            let problem = problem.unwrap_or_else(|| panic!("no message for {bad:?}"));
            assert!(problem.contains("ignoring tuning file"), "{problem}");
            assert!(problem.contains(&path.display().to_string()), "{problem}");
        }
        // Entries with impossible fields are skipped, the rest kept.
        let mixed = good.replace("\"median_ms\": 0.01", "\"median_ms\": -1.0");
        std::fs::write(&path, mixed).unwrap();
        let (table, problem) = TuningTable::load(&path);
        assert_eq!((table.len(), problem), (0, None));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn entries_of_another_source_hash_are_ignored() {
        let path = scratch("hash");
        let mut table = TuningTable::empty(Some(path.clone()));
        let stale = "0000000000000000ffffffffffffffff";
        table.insert(
            key(1),
            stale,
            TunedChoice {
                choice: "64x64x32_s4_w2x2".into(),
                median_ms: 0.01,
            },
        );
        table.save().unwrap();
        let (loaded, _) = TuningTable::load(&path);
        assert_eq!(loaded.len(), 1, "kept on disk for the version that made it");
        assert_eq!(loaded.lookup(&key(1), &hash()), None);
        assert!(loaded.lookup(&key(1), stale).is_some());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn stored_choices_resolve_only_to_current_candidates() {
        let candidates = tiles_for(DType::F16);
        let mut table = TuningTable::empty(None);
        let choose = |name: &str| TunedChoice {
            choice: name.into(),
            median_ms: 0.01,
        };
        table.insert(key(1), &hash(), choose(&candidates[1].name()));
        table.insert(key(8), &hash(), choose("256x256x64_s9_w4x4"));
        table.insert(key(64), "stale", choose(&candidates[0].name()));
        assert_eq!(
            resolve_tuned_tile(&table, &key(1), candidates),
            Some(candidates[1])
        );
        assert_eq!(
            resolve_tuned_tile(&table, &key(8), candidates),
            None,
            "a tile name that no longer exists"
        );
        assert_eq!(resolve_tuned_tile(&table, &key(64), candidates), None);
        assert_eq!(resolve_tuned_tile(&table, &key(256), candidates), None);
        // Once the candidate list changes, every entry tuned against the old one is stale.
        assert_eq!(resolve_tuned_tile(&table, &key(1), &candidates[1..]), None);
    }
}
