//! ViT-family models: configs, preprocessing, graph builders, labels. The model knows nothing
//! of CUDA: it describes itself as a graph and the runtime runs it on whatever backend it is
//! given.

pub mod config;
mod encoder;
mod error;
mod families;
mod family;
pub mod fp8_choice;
pub mod fp8_scales;
pub mod labels;
pub mod limits;
pub mod model;
pub mod naflex;
mod names;
mod params;
pub mod parity;
pub mod pool;
pub mod positions;
pub mod preprocess;
mod read_config;
mod rules;
pub mod runner;
mod sequence;
pub mod text;

pub use config::{Family, ModelConfig};
pub use error::ModelError;
pub use model::{
    ClassifierInput, GraphOptions, Head, Output, OutputSet, VisionModel, ZeroShotLabels,
};
pub use pool::{Pool, PoolUnavailable};
pub use runner::{ForwardTimes, Runner};
pub use text::{TextFamily, TextTokenizer, TokenBatch};
