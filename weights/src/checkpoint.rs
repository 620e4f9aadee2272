//! A checkpoint: one `.safetensors` file, or the shards named by `model.safetensors.index.json`,
//! each memory-mapped; tensors are decoded to f32 on request.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use memmap2::Mmap;
use serde::Deserialize;

use crate::dtype::{decode_into_f32, FileDType, StoredDType};
use crate::error::WeightsError;
use crate::header::parse_header;
use crate::unique_keys::UniqueKeys;

/// The single-file checkpoint name the Hugging Face tools write.
pub const SINGLE_FILE_NAME: &str = "model.safetensors";
/// The index of a sharded checkpoint.
pub const INDEX_FILE_NAME: &str = "model.safetensors.index.json";
/// The PyTorch pickle checkpoint, which we do not load; named in errors.
pub const PYTORCH_FILE_NAME: &str = "pytorch_model.bin";
/// The single-file checkpoint open_clip's `save_for_hf` writes (`HF_SAFE_WEIGHTS_NAME`),
/// beside `open_clip_config.json`.
pub const OPEN_CLIP_FILE_NAME: &str = "open_clip_model.safetensors";
/// open_clip's PyTorch pickle checkpoint (`HF_WEIGHTS_NAME`), which we do not load; named in
/// errors.
pub const OPEN_CLIP_PYTORCH_FILE_NAME: &str = "open_clip_pytorch_model.bin";

/// A set of named tensors backed by memory-mapped safetensors files.
#[derive(Debug)]
pub struct Checkpoint {
    /// What was opened: a file, an index, or the folder given to `open`.
    location: PathBuf,
    files: Vec<MappedFile>,
    tensors: BTreeMap<String, TensorRecord>,
}

#[derive(Debug)]
struct MappedFile {
    path: PathBuf,
    mmap: Mmap,
}

#[derive(Debug)]
struct TensorRecord {
    file_index: usize,
    dtype: FileDType,
    shape: Vec<usize>,
    file_range: Range<usize>,
}

#[derive(Deserialize)]
struct IndexFile {
    /// Each tensor at most once: a second line would silently move it to another shard.
    weight_map: UniqueKeys<String>,
}

impl Checkpoint {
    /// Opens a folder (holding `model.safetensors`, or `model.safetensors.index.json` and its
    /// shards, or open_clip's `open_clip_model.safetensors`), a single `.safetensors` file, or
    /// an index file directly.
    pub fn open(path: &Path) -> Result<Checkpoint, WeightsError> {
        let metadata = std::fs::metadata(path).map_err(|e| io_error(path, e))?;
        if metadata.is_dir() {
            let single = path.join(SINGLE_FILE_NAME);
            if single.is_file() {
                return Self::open_single(&single, path);
            }
            let index = path.join(INDEX_FILE_NAME);
            if index.is_file() {
                return Self::open_sharded(&index, path);
            }
            let open_clip = path.join(OPEN_CLIP_FILE_NAME);
            if open_clip.is_file() {
                return Self::open_single(&open_clip, path);
            }
            return Err(no_safetensors_in(path));
        }
        let is_index = path
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.ends_with(".json"));
        if is_index {
            Self::open_sharded(path, path)
        } else {
            Self::open_single(path, path)
        }
    }

    fn open_single(file: &Path, location: &Path) -> Result<Checkpoint, WeightsError> {
        let mapped = map_file(file)?;
        let entries = parse_header(file, &mapped.mmap)?;
        let tensors = entries
            .into_iter()
            .map(|entry| {
                let record = TensorRecord {
                    file_index: 0,
                    dtype: entry.dtype,
                    shape: entry.shape,
                    file_range: entry.file_range,
                };
                (entry.name, record)
            })
            .collect();
        Ok(Checkpoint {
            location: location.to_path_buf(),
            files: vec![mapped],
            tensors,
        })
    }

    fn open_sharded(index_path: &Path, location: &Path) -> Result<Checkpoint, WeightsError> {
        let weight_map = read_weight_map(index_path)?;
        let folder = index_path.parent().unwrap_or(Path::new("."));

        // Shards in name order, so that the mapping from tensors to files is deterministic.
        let mut shard_names: Vec<&str> = weight_map.values().map(String::as_str).collect();
        shard_names.sort_unstable();
        shard_names.dedup();

        let mut files = Vec::with_capacity(shard_names.len());
        let mut tensors = BTreeMap::new();
        for (file_index, shard_name) in shard_names.iter().enumerate() {
            let shard_path = folder.join(shard_name);
            if !shard_path.is_file() {
                return Err(WeightsError::ShardMissing {
                    shard: shard_path,
                    index: index_path.to_path_buf(),
                });
            }
            let mapped = map_file(&shard_path)?;
            for entry in parse_header(&shard_path, &mapped.mmap)? {
                // The index decides which shard a tensor comes from; a copy elsewhere is ignored.
                let listed_here = weight_map
                    .get(&entry.name)
                    .is_none_or(|listed| listed == shard_name);
                if listed_here {
                    let record = TensorRecord {
                        file_index,
                        dtype: entry.dtype,
                        shape: entry.shape,
                        file_range: entry.file_range,
                    };
                    tensors.entry(entry.name).or_insert(record);
                }
            }
            files.push(mapped);
        }

        // Report the first listed-but-absent tensor in name order, so the message is stable.
        let mut listed: Vec<(&String, &String)> = weight_map.iter().collect();
        listed.sort_unstable();
        for (tensor, shard_name) in listed {
            if !tensors.contains_key(tensor) {
                return Err(WeightsError::TensorNotInShard {
                    tensor: tensor.clone(),
                    shard: folder.join(shard_name),
                    index: index_path.to_path_buf(),
                });
            }
        }
        Ok(Checkpoint {
            location: location.to_path_buf(),
            files,
            tensors,
        })
    }

    /// The path given to [`Checkpoint::open`].
    pub fn location(&self) -> &Path {
        &self.location
    }

    /// The memory-mapped files, in the order tensors refer to them.
    pub fn files(&self) -> Vec<&Path> {
        self.files.iter().map(|file| file.path.as_path()).collect()
    }

    /// All tensor names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.tensors.keys().map(String::as_str).collect()
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.tensors.get(name).map(|record| record.shape.as_slice())
    }

    /// The stored element type; `None` when the tensor is absent or stored in a type this crate
    /// does not load (see [`Checkpoint::stored_dtype_name`]).
    pub fn dtype(&self, name: &str) -> Option<StoredDType> {
        match self.tensors.get(name)?.dtype {
            FileDType::Supported(dtype) => Some(dtype),
            FileDType::Other(_) => None,
        }
    }

    /// The element type exactly as the file names it ("F32", "I64", ...), for any tensor present.
    pub fn stored_dtype_name(&self, name: &str) -> Option<&str> {
        self.tensors.get(name).map(|record| record.dtype.name())
    }

    /// The file holding a tensor (a shard, for a sharded checkpoint).
    pub fn file_of(&self, name: &str) -> Option<&Path> {
        let record = self.tensors.get(name)?;
        Some(self.files[record.file_index].path.as_path())
    }

    /// The tensor's bytes as stored (little-endian elements of its stored dtype), straight from
    /// the mapping; no alignment is guaranteed.
    pub fn stored_bytes(&self, name: &str) -> Result<&[u8], WeightsError> {
        let record = self.record(name)?;
        Ok(&self.files[record.file_index].mmap[record.file_range.clone()])
    }

    /// The tensor converted to f32; error if absent or stored in a type other than F32/F16/BF16.
    pub fn load_f32(&self, name: &str) -> Result<Vec<f32>, WeightsError> {
        let record = self.record(name)?;
        let dtype = self.loadable_dtype(name, record)?;
        let bytes = &self.files[record.file_index].mmap[record.file_range.clone()];
        let mut values = vec![0f32; bytes.len() / dtype.size_in_bytes()];
        decode_into_f32(dtype, bytes, &mut values);
        Ok(values)
    }

    /// Same as [`Checkpoint::load_f32`], but first checks the shape is `expected`.
    pub fn load_f32_shaped(
        &self,
        name: &str,
        expected: &[usize],
    ) -> Result<Vec<f32>, WeightsError> {
        let record = self.record(name)?;
        if record.shape != expected {
            return Err(WeightsError::ShapeMismatch {
                tensor: name.to_string(),
                expected: expected.to_vec(),
                found: record.shape.clone(),
            });
        }
        self.load_f32(name)
    }

    fn record(&self, name: &str) -> Result<&TensorRecord, WeightsError> {
        self.tensors
            .get(name)
            .ok_or_else(|| WeightsError::TensorNotFound {
                tensor: name.to_string(),
                checkpoint: self.location.clone(),
            })
    }

    fn loadable_dtype(
        &self,
        name: &str,
        record: &TensorRecord,
    ) -> Result<StoredDType, WeightsError> {
        match &record.dtype {
            FileDType::Supported(dtype) => Ok(*dtype),
            FileDType::Other(other) => Err(WeightsError::UnsupportedDType {
                tensor: name.to_string(),
                dtype: other.clone(),
                path: self.files[record.file_index].path.clone(),
            }),
        }
    }
}

fn io_error(path: &Path, source: std::io::Error) -> WeightsError {
    if source.kind() == std::io::ErrorKind::NotFound {
        WeightsError::NotFound {
            path: path.to_path_buf(),
        }
    } else {
        WeightsError::Io {
            path: path.to_path_buf(),
            cause: source,
        }
    }
}

/// The error for a folder without safetensors weights, pointing at a PyTorch file if there is one.
pub(crate) fn no_safetensors_in(dir: &Path) -> WeightsError {
    let hint = if dir.join(PYTORCH_FILE_NAME).is_file() {
        format!(
            "it holds only {PYTORCH_FILE_NAME}; safetensors weights are needed \
             ({SINGLE_FILE_NAME} or {INDEX_FILE_NAME} with its shards)"
        )
    } else if dir.join(OPEN_CLIP_PYTORCH_FILE_NAME).is_file() {
        format!(
            "it holds only {OPEN_CLIP_PYTORCH_FILE_NAME}, open_clip's PyTorch pickle, which \
             vitrt does not read; safetensors weights are needed ({OPEN_CLIP_FILE_NAME}, as \
             open_clip's save_for_hf writes them)"
        )
    } else {
        format!(
            "expected {SINGLE_FILE_NAME} or {INDEX_FILE_NAME} with its shards (or \
             {OPEN_CLIP_FILE_NAME} beside open_clip_config.json)"
        )
    };
    WeightsError::NoSafetensorsWeights {
        dir: dir.to_path_buf(),
        hint,
    }
}

/// A shard name from an index, accepted only as a plain relative path inside the index's folder:
/// an index is data from the internet, and must not point the loader (or a download) elsewhere.
pub(crate) fn checked_shard_path(shard_name: &str) -> Result<PathBuf, String> {
    let path = Path::new(shard_name);
    let plain = !shard_name.is_empty()
        && path
            .components()
            .all(|component| matches!(component, Component::Normal(_)));
    if plain {
        Ok(path.to_path_buf())
    } else {
        Err(format!(
            "shard name `{shard_name}` is not a plain file name inside the checkpoint folder"
        ))
    }
}

/// The tensor-to-shard map of an index, checked: not empty, every shard a plain relative path.
fn read_weight_map(index_path: &Path) -> Result<HashMap<String, String>, WeightsError> {
    let broken = |reason: String| WeightsError::BrokenIndex {
        path: index_path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(index_path).map_err(|e| io_error(index_path, e))?;
    let index: IndexFile = serde_json::from_str(&text)
        .map_err(|e| broken(format!("expected a JSON object with a `weight_map`: {e}")))?;
    let weight_map: HashMap<String, String> = index.weight_map.0.into_iter().collect();
    if weight_map.is_empty() {
        return Err(broken("its `weight_map` lists no tensors".to_string()));
    }
    for shard_name in weight_map.values() {
        checked_shard_path(shard_name).map_err(&broken)?;
    }
    Ok(weight_map)
}

/// The shard file names an index lists, sorted and without repeats.
pub(crate) fn read_shard_names(index_path: &Path) -> Result<Vec<String>, WeightsError> {
    let mut names: Vec<String> = read_weight_map(index_path)?.into_values().collect();
    names.sort_unstable();
    names.dedup();
    Ok(names)
}

fn map_file(path: &Path) -> Result<MappedFile, WeightsError> {
    let file = crate::open_regular_file(path).map_err(|e| io_error(path, e))?;
    // SAFETY: the mapping is read-only and private to this process. Like every reader of
    // memory-mapped checkpoints, we rely on nobody truncating or rewriting the file while it is
    // open; the bytes are only ever read through bounds-checked slices.
    let mmap = unsafe { Mmap::map(&file) }.map_err(|e| io_error(path, e))?;
    Ok(MappedFile {
        path: path.to_path_buf(),
        mmap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_paths_must_stay_inside_the_folder() {
        assert!(checked_shard_path("model-00001-of-00002.safetensors").is_ok());
        assert!(checked_shard_path("sub/model.safetensors").is_ok());
        assert!(checked_shard_path("../model.safetensors").is_err());
        assert!(checked_shard_path("/etc/passwd").is_err());
        assert!(checked_shard_path("a/../../b").is_err());
        assert!(checked_shard_path("./a").is_err());
        assert!(checked_shard_path("").is_err());
    }

    #[test]
    fn checkpoint_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Checkpoint>();
    }
}
