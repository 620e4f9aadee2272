use thiserror::Error;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("{path}: {message}")]
    Config { path: String, message: String },
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    #[error(transparent)]
    Weights(#[from] vitrt_weights::WeightsError),
    #[error(transparent)]
    Runtime(#[from] vitrt_runtime::RuntimeError),
    #[error("{0}")]
    Usage(String),
}
