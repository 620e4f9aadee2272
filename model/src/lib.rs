//! ViT: config, preprocessing, graph builder, labels. The model knows nothing of CUDA: it
//! describes itself as a graph and the runtime runs it on whatever backend it is given.

pub mod config;
mod error;
pub mod labels;
pub mod parity;
pub mod preprocess;
pub mod runner;
pub mod vit;

pub use config::VitConfig;
pub use error::ModelError;
pub use runner::{ForwardTimes, Runner};
pub use vit::{GraphOptions, Head, VitModel};
