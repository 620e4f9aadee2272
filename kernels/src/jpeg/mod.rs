//! JPEG decoding from quantised DCT coefficients, bit for bit as libjpeg-turbo decodes (the
//! decoder Pillow uses, with its defaults): the host entropy-decodes a file into coefficient
//! blocks (model/src/preprocess/jpeg_coefficients.rs); these programs do the rest of libjpeg's
//! work for a whole batch of images.
//!
//! - [`gpu::decode`]: jpeg.cu's two programs: `jpeg_idct` (dequantisation and the accurate
//!   integer IDCT, jidctint.c's "islow") into one plane of samples per component, then
//!   `jpeg_colour` (jdsample.c's upsampling: the fancy triangle filters where libjpeg-turbo
//!   uses them, replication elsewhere; jdcolor.c's YCbCr to RGB; the EXIF orientation as PIL's
//!   `exif_transpose`) into upright HWC RGB.
//! - [`cpu::idct`] and [`cpu::colour`]: the CPU twins, in libjpeg's own 64-bit arithmetic.
//! - [`batch`]: the batch and the descriptor tables both read.
//!
//! Exactness: the kernels compute in 32 bits and clamp after the IDCT, where libjpeg's C code
//! sums in 64 bits and wraps through its range-limit table, and its SIMD code works in 16-bit
//! lanes. All three agree on every block whose coefficients pass [`cpu::block_is_exact`], a
//! weighted bound that every block of an ordinary photo passes; the host sends an image with a
//! block outside it to its own decoder. The unit tests prove the bound; the model crate's tests
//! compare the twins with libjpeg-turbo's output on a generated corpus.
//!
//! Tests: model/tests/jpeg_coefficients.rs (twins against libjpeg-turbo, in CI),
//! kernels/tests/gpu_jpeg.rs (kernels against twins, on a GPU). No bench case of its own: the
//! whole-job benchmark (`vitrt classify --decode gpu`) times it.

pub mod batch;
pub mod cpu;
pub mod gpu;

pub use batch::{
    upright_size, JpegBatch, JpegColour, JpegComponent, JpegData, JpegImage, Upsample,
};
