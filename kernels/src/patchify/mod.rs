//! The start of a ViT: pixels `[B, C, H, W]` cut into patch rows `[B·N, C·P·P]` (the order of
//! a Conv2d weight flattened, so the patch projection is a plain matmul) and the CLS row of
//! every image, `tokens[b, 0, :] = cls + pos[0, :]`.
//!
//! - [`gpu::patchify_with_cls`]: patchify.cu, both in one launch.
//! - [`cpu::patchify`] and [`cpu::write_cls_rows`]: the CPU twins, one each.
//!
//! Tests: kernels/tests/gpu_kernels.rs (`patchify_with_cls_matches_its_twins_exactly`). Bench
//! case: `patch` in src/cli/bench/cases.rs.

pub mod cpu;
pub mod gpu;
