//! Why a call failed, and which Python exception says so: bad input or usage is a
//! `ValueError`, a device or runtime failure a `RuntimeError`, each with the Rust message.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::PyErr;
use vitrt_model::ModelError;

/// Why a call failed, and which Python exception says so.
#[derive(Debug)]
pub enum Failure {
    /// Bad input or usage: `ValueError`.
    Value(anyhow::Error),
    /// The device or the runtime failed: `RuntimeError`.
    Runtime(anyhow::Error),
}

pub type Result<T> = std::result::Result<T, Failure>;

impl From<Failure> for PyErr {
    fn from(failure: Failure) -> PyErr {
        // `{:#}`: the whole chain of causes on one line, as the CLI prints it.
        match failure {
            Failure::Value(e) => PyValueError::new_err(format!("{e:#}")),
            Failure::Runtime(e) => PyRuntimeError::new_err(format!("{e:#}")),
        }
    }
}

/// Files an error under the exception it becomes.
pub trait FailAs<T> {
    fn or_value(self) -> Result<T>;
    fn or_runtime(self) -> Result<T>;
}

impl<T, E: Into<anyhow::Error>> FailAs<T> for std::result::Result<T, E> {
    fn or_value(self) -> Result<T> {
        self.map_err(|e| Failure::Value(e.into()))
    }
    fn or_runtime(self) -> Result<T> {
        self.map_err(|e| Failure::Runtime(e.into()))
    }
}

/// A model error: its usage errors are the caller's (`ValueError`), the rest the runtime's.
pub fn model_failure(error: ModelError) -> Failure {
    match error {
        ModelError::Usage(_) => Failure::Value(error.into()),
        _ => Failure::Runtime(error.into()),
    }
}

/// An engine error: a model error inside it is filed as [`model_failure`] files it (a device
/// or runtime failure a `RuntimeError`); anything else is the caller's input (a checkpoint
/// without a text tower, towers that do not match): `ValueError`.
pub fn engine_failure(error: anyhow::Error) -> Failure {
    match error.downcast_ref::<ModelError>() {
        Some(ModelError::Usage(_)) | None => Failure::Value(error),
        Some(_) => Failure::Runtime(error),
    }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Failure {
        engine_failure(error)
    }
}
