use thiserror::Error;

#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error("invalid graph: {0}")]
    Graph(String),
    #[error("parameter {name}: {message}")]
    Param { name: String, message: String },
    #[error("input {name}: {message}")]
    Input { name: String, message: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("{backend} backend failed in node {node}: {message}")]
    Node {
        backend: String,
        node: String,
        message: String,
    },
    #[error("{0}")]
    Backend(String),
    #[error("out of device memory: {requested} bytes asked for, {free} free")]
    OutOfMemory { requested: usize, free: usize },
}
