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
    /// A checkpoint's tokenizer files are missing, unreadable or not what the text tower needs.
    #[error("{path}: {message}")]
    Tokenizer { path: String, message: String },
    #[error("{0}")]
    Usage(String),
}
