//! Whole-file reading and writing of small f32 tensor sets (CLI outputs, test fixtures).

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use safetensors::tensor::TensorView;
use safetensors::Dtype;

use crate::checkpoint::Checkpoint;
use crate::error::WeightsError;

/// One named tensor: name, shape, row-major values.
pub type NamedTensor = (String, Vec<usize>, Vec<f32>);

/// Writes `tensors` as an F32 safetensors file at `path`, atomically: the bytes go to a fresh
/// temporary file in the same folder, which is renamed over `path` only once complete, so a
/// failure leaves no half-written file (and an existing file at `path` untouched).
pub fn write_f32_tensors(path: &Path, tensors: &[NamedTensor]) -> Result<(), WeightsError> {
    let file_bytes = f32_tensors_bytes(path, tensors)?;
    write_atomically(path, &file_bytes)
}

/// The bytes of the F32 safetensors file [`write_f32_tensors`] would write, for callers that
/// write them elsewhere (stdout, their own file). `path` only names the target in errors.
pub fn f32_tensors_bytes(path: &Path, tensors: &[NamedTensor]) -> Result<Vec<u8>, WeightsError> {
    let invalid = |reason: String| WeightsError::InvalidTensorData {
        path: path.to_path_buf(),
        reason,
    };
    let mut seen = HashSet::with_capacity(tensors.len());
    for (name, shape, values) in tensors {
        if name.is_empty() {
            return Err(invalid("a tensor has an empty name".to_string()));
        }
        if name == "__metadata__" {
            return Err(invalid(
                "`__metadata__` is reserved by the format".to_string(),
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(invalid(format!("tensor `{name}` appears twice")));
        }
        let elements = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if elements != Some(values.len()) {
            return Err(invalid(format!(
                "tensor `{name}` has shape {shape:?} but {} values",
                values.len()
            )));
        }
    }

    let byte_buffers: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, values)| values.iter().flat_map(|v| v.to_le_bytes()).collect())
        .collect();
    let mut views = Vec::with_capacity(tensors.len());
    for ((name, shape, _), bytes) in tensors.iter().zip(&byte_buffers) {
        let view = TensorView::new(Dtype::F32, shape.clone(), bytes)
            .map_err(|e| invalid(format!("tensor `{name}`: {e}")))?;
        views.push((name.as_str(), view));
    }
    safetensors::serialize(views, None).map_err(|e| invalid(format!("serialization failed: {e}")))
}

/// Reads every tensor of a safetensors file (F32, F16 or BF16), converted to f32, sorted by name.
pub fn read_f32_tensors(path: &Path) -> Result<Vec<NamedTensor>, WeightsError> {
    let checkpoint = Checkpoint::open(path)?;
    checkpoint
        .names()
        .into_iter()
        .map(|name| {
            let values = checkpoint.load_f32(name)?;
            let shape = checkpoint.shape(name).unwrap_or_default().to_vec();
            Ok((name.to_string(), shape, values))
        })
        .collect()
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), WeightsError> {
    let write_error = |cause: std::io::Error| WeightsError::Write {
        path: path.to_path_buf(),
        cause,
    };
    let Some(file_name) = path.file_name() else {
        return Err(WeightsError::InvalidTensorData {
            path: path.to_path_buf(),
            reason: "the path names no file".to_string(),
        });
    };
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let (temp_path, mut temp_file) = create_temp_file(folder, file_name).map_err(write_error)?;
    let mut guard = RemoveOnDrop(Some(temp_path.clone()));
    temp_file.write_all(bytes).map_err(write_error)?;
    temp_file.sync_all().map_err(write_error)?;
    drop(temp_file);
    std::fs::rename(&temp_path, path).map_err(write_error)?;
    guard.0 = None;
    Ok(())
}

/// Creates a new file next to the target, named so that concurrent writers never collide.
fn create_temp_file(
    folder: &Path,
    file_name: &std::ffi::OsStr,
) -> std::io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    loop {
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(file_name);
        temp_name.push(format!(
            ".{}.{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let temp_path = folder.join(temp_name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp_path)
        {
            Ok(file) => return Ok((temp_path, file)),
            // A leftover from a crashed process with the same id: try the next number.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}
