//! Pixel expansion: 8-bit HWC images into the model's f32 NCHW input through a per-channel
//! table, `dst[b, c, y, x] = table[c * 256 + src[b, y, x, c]]` (the table folds rescaling and
//! normalisation in).
//!
//! - [`gpu::expand_pixels`], from pixels.cu.
//! - [`cpu::expand_pixels`]: the CPU twin.
//!
//! Tests: model/tests/pixel_bytes_gpu.rs. No bench case: the whole-job benchmark
//! (`vitrt classify`) covers it.

mod batch;
pub mod cpu;
pub mod gpu;

pub use batch::PixelBatch;
