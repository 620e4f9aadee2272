//! Every way reading, writing or finding a checkpoint can fail, each naming what it was about.

use std::path::PathBuf;

/// Errors of this crate. Every variant names the file, tensor or repository concerned, so a
/// message read on its own says what to fix.
///
/// The project's rule for causes (every crate): a variant's message embeds its cause, and no
/// variant hands it out again as [`std::error::Error::source`] (no `#[source]`, `#[from]`
/// only with `#[error(transparent)]`, no field named `source`), so that a chain printed
/// whole (`{:#}`) says each cause once.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    #[error("file or folder not found: {}", path.display())]
    NotFound { path: PathBuf },

    #[error("cannot read {}: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },

    #[error("cannot write {}: {cause}", path.display())]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },

    /// The bytes of a `.safetensors` file do not form a valid file (truncated, bad header, ...).
    #[error("{} is not a valid safetensors file: {reason}", path.display())]
    CorruptFile { path: PathBuf, reason: String },

    #[error(
        "tensor `{tensor}` in {} is stored as {dtype}; only F32, F16 and BF16 can be loaded",
        path.display()
    )]
    UnsupportedDType {
        tensor: String,
        dtype: String,
        path: PathBuf,
    },

    #[error("tensor `{tensor}` not found in checkpoint {}", checkpoint.display())]
    TensorNotFound { tensor: String, checkpoint: PathBuf },

    /// The index says a shard holds a tensor, but the shard does not.
    #[error(
        "tensor `{tensor}` is listed by {} in shard {}, but that shard does not hold it",
        index.display(),
        shard.display()
    )]
    TensorNotInShard {
        tensor: String,
        shard: PathBuf,
        index: PathBuf,
    },

    #[error("tensor `{tensor}` has shape {found:?}, expected {expected:?}")]
    ShapeMismatch {
        tensor: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },

    #[error("broken checkpoint index {}: {reason}", path.display())]
    BrokenIndex { path: PathBuf, reason: String },

    #[error("shard {} listed in {} is missing", shard.display(), index.display())]
    ShardMissing { shard: PathBuf, index: PathBuf },

    /// A folder without `model.safetensors` or `model.safetensors.index.json`.
    #[error("no safetensors weights in {}: {hint}", dir.display())]
    NoSafetensorsWeights { dir: PathBuf, hint: String },

    /// A local model folder without `config.json` (or open_clip's `open_clip_config.json`).
    #[error("{} holds no config.json (nor open_clip's open_clip_config.json)", dir.display())]
    MissingConfig { dir: PathBuf },

    /// Bad arguments to the writer (length against shape, duplicate names, ...).
    #[error("cannot write tensors to {}: {reason}", path.display())]
    InvalidTensorData { path: PathBuf, reason: String },

    /// A model argument that is neither an existing folder nor a hub repository id.
    #[error("`{model}` is neither an existing folder nor a valid hub model id ({reason})")]
    InvalidModelSource { model: String, reason: String },

    #[error("invalid revision `{revision}`: {reason}")]
    InvalidRevision { revision: String, reason: String },

    /// Offline resolution found something absent from the local hub cache.
    #[error(
        "{file} of hub model `{repo}` at revision `{revision}` is not in the local cache {} \
         and offline mode is on (unset HF_HUB_OFFLINE / drop --offline to download it)",
        cache_dir.display()
    )]
    NotCached {
        repo: String,
        revision: String,
        file: String,
        cache_dir: PathBuf,
    },

    /// A hub repository whose files are not what we can load.
    #[error("hub model `{repo}` at revision `{revision}`: {reason}")]
    UnusableRepo {
        repo: String,
        revision: String,
        reason: String,
    },

    /// The hub could not be asked or a download failed.
    #[error(
        "hub request for `{repo}` at revision `{revision}` failed ({what}): {message}; \
         if the files are already cached, HF_HUB_OFFLINE=1 uses the cache without the network"
    )]
    Hub {
        repo: String,
        revision: String,
        what: String,
        message: String,
    },

    #[error("cannot locate the hub cache: {reason}")]
    NoHubCache { reason: String },
}
