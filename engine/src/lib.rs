//! The engine under every vitrt front door (the `vitrt` CLI, the Python `vitrt.Model`, `vitrt
//! serve`): opening a model on a device with warm start ([`open`]), the image pipeline over
//! files ([`pipeline`], driven by [`batched`]), batches of images already in memory
//! ([`memory`]), and typed results ([`results`]). Front doors parse their inputs and format
//! these results; nothing else.

pub mod batched;
pub mod devices;
pub mod memory;
pub mod naflex;
pub mod open;
pub mod pipeline;
pub mod results;
pub mod startup;

pub use open::{device_name, ModelOptions, OpenError, OpenedModel};
