//! The start of a ViT: pixels `[B, C, H, W]` cut into patch rows `[B·N, C·P·P]` (the order of
//! a Conv2d weight flattened, so the patch projection is a plain matmul) and the S prefix rows
//! of every image (CLS, DeiT's distillation token, DINOv2's registers; none in SigLIP),
//! `tokens[b, j, :] = prefix[j, :] + pos[j, :]` for `j < S`.
//!
//! - [`gpu::patchify_with_prefix`]: patchify.cu, both in one launch.
//! - [`cpu::patchify`] and [`cpu::write_prefix_rows`]: the CPU twins, one each.
//!
//! Tests: kernels/tests/gpu_kernels/patchify.rs (`patchify_with_prefix_matches_its_twins_exactly`). Bench
//! case: `patch` in src/cli/bench/cases.rs.

pub mod cpu;
pub mod gpu;
