//! A strided row gather, `out[r, :cols] = src[r * src_row_stride + src_offset ..][..cols]`:
//! the CLS token of every sequence, ahead of the classifier.
//!
//! - [`gpu::gather_rows`]: gather.cu, one block per row. No CPU twin: the CPU backend copies
//!   the rows itself (runtime/src/backend/cpu.rs, `Op::SelectToken`).
//!
//! Tests: through the runtime's CUDA backend (runtime and model GPU tests). No bench case.

pub mod gpu;
