//! PIL's `Image.resize` of 8-bit images followed by HF's center crop, for a batch of images of
//! any sizes: the GPU end of the image path whose host end is model/src/preprocess/resize.rs,
//! which builds the fixed-point taps both use.
//!
//! - [`gpu::resample`]: resample.cu's two programs, the first pass whole into an intermediate,
//!   the second only inside the crop window, zeros where the window leaves the image.
//! - [`cpu::resample`]: the CPU twin.
//! - [`batch`]: the batch's image records and tap tables.
//!
//! Tests: model/tests/jpeg_coefficients.rs (the twin against the host's resize and crop, in
//! CI), kernels/tests/gpu_jpeg.rs (the kernels against the twin, on a GPU).

pub mod batch;
pub mod cpu;
pub mod gpu;

pub use batch::{ResampleBatch, ResampleImage, TapTable};
