//! Checkpoint files: safetensors through mmap (single and sharded), stored dtypes, hub resolution.
//!
//! - [`Checkpoint`] opens a model folder, a `.safetensors` file or a sharded index, memory-maps
//!   the files and decodes tensors (F32, F16, BF16) to f32 on request.
//! - [`write_f32_tensors`] / [`read_f32_tensors`] write and read whole small tensor files.
//! - [`resolve_model`] turns a folder or a hub id into the files of a model, through the
//!   standard Hugging Face cache.
//! - [`open_regular_file`] opens a file to read whole, refusing a FIFO, a device or a socket
//!   without blocking on it.

mod checkpoint;
mod dtype;
mod error;
mod header;
mod hub;
mod regular_file;
mod tensor_file;
mod unique_keys;

pub use checkpoint::{
    Checkpoint, INDEX_FILE_NAME, OPEN_CLIP_FILE_NAME, OPEN_CLIP_PYTORCH_FILE_NAME,
    PYTORCH_FILE_NAME, SINGLE_FILE_NAME,
};
pub use dtype::StoredDType;
pub use error::WeightsError;
pub use hub::{
    resolve_model, resolve_model_with, HubSettings, ModelFiles, ModelOrigin, ResolveOptions,
    CONFIG_FILE_NAME, OPEN_CLIP_CONFIG_FILE_NAME, PREPROCESSOR_CONFIG_FILE_NAME,
    TOKENIZER_FILE_NAMES,
};
pub use regular_file::{describe as describe_file_type, open_regular_file};
pub use tensor_file::{f32_tensors_bytes, read_f32_tensors, write_f32_tensors, NamedTensor};
