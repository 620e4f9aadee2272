//! The image pipeline behind `vitrt classify` and `vitrt embed`: many image files in, batches
//! of preprocessed 8-bit pixels out, in input order, with the host's decoding spread over a
//! pool of workers and overlapped with the consumer (the forward pass). An input may also be a
//! sample of a dataset shard (`datasets/`): its worker reads the sample's bytes from the shard
//! and decodes them as a file's.
//!
//! ```text
//! paths ─► workers (decode + resize, each with its own reusable loader)
//!            │ write each image straight into its place in a staging slot
//!            ▼
//!        staging ring: `depth` slots of `batch_size` images (page-locked on CUDA)
//!            │ a slot is handed to the consumer once every image of its batch is done
//!            ▼
//!        consumer (the calling thread): submit the batch, emit the previous one's results
//! ```
//!
//! Image `i` belongs to batch `i / batch_size`, held in slot `batch % depth` at position
//! `i % batch_size`, so order needs no reordering step and a worker never waits for another
//! image. Workers take indices in order; a worker whose batch's slot is still held by an older
//! batch waits for the consumer to release it. Images in flight (decoded and not yet consumed)
//! are therefore at most `depth * batch_size`, whatever the number of files, plus one decode
//! buffer per worker inside its loader.
//!
//! A file that cannot be read or decoded is reported with its batch (its bytes in the slot are
//! left as they were, and the consumer skips its result); with `fail_fast` no image after the
//! first failure (in input order) is loaded and the run ends with the batch holding it.

pub mod datasets;
mod inputs;
mod ring;

pub use inputs::{collect_inputs, collect_inputs_with, shown_path, DatasetOptions, InputList};
pub(crate) use ring::BumpArena;
pub use ring::{run, Batch, Consumer, Flow, ImageLoad, PipelineConfig, PipelineStats};
