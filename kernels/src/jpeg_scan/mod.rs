//! Baseline JPEG entropy decoding on the GPU: Huffman-coded scans into the quantised DCT
//! coefficients libjpeg-turbo's jdhuff.c gives, in parallel within each image, written where
//! the `jpeg` family's IDCT reads them. The host only parses the markers, takes out the stuffed
//! bytes and splits the scan at its restart markers (model/src/preprocess/jpeg_coefficients.rs).
//!
//! - [`gpu::decode_scans`]: scan.cu's `jpeg_scan`, one CTA an image (the algorithm is at the
//!   top of scan.cu).
//! - [`cpu::decode`]: its twin, the same phases over the same chunks.
//! - [`batch`]: the batch and the descriptor tables both read.
//!
//! Exactness: the coefficients equal libjpeg's for every image whose status word the program
//! leaves clear; an image whose data libjpeg would warn about (a code no table holds, a
//! segment that ends inside its blocks) is marked, and the host decodes it again with its own
//! decoder, as it would have without the GPU.
//!
//! Tests: model/tests/jpeg_coefficients.rs (the twin against libjpeg-turbo's coefficients on
//! the generated corpus, in CI), model/tests/jpeg_gpu.rs (the program against the twin, on a
//! GPU). Timed by the whole-job benchmark (`vitrt classify --decode gpu`).

pub mod batch;
pub mod cpu;
pub mod gpu;

pub use batch::{McuBlock, ScanBatch, ScanImage, ScanSegment, ScanTables};
